"""`generate` of a model that must come from the Hugging Face hub fails within seconds, naming the
model and the hub, when the hub cannot be reached (issue #38); huggingface_hub alone retried for
about 100 s first. No test here reaches a real hub: the endpoints are local addresses."""

from __future__ import annotations

import json
import socket
import time
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from prover_cli import generate
from prover_cli.cli import app

runner = CliRunner()
MODEL = "prover-tests/no-such-model-38"


@pytest.fixture
def nothing_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    import prover_cli.policy.samplers as samplers

    def never(*args, **kwargs):
        raise AssertionError("the model was loaded although the hub is unreachable")

    monkeypatch.setattr(samplers, "load_sampler", never)
    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"id": "c1", "numbers": [1, 2, 3], "target": 6, "split": "valid"}) + "\n",
                        encoding="utf-8")
    return problems


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def generate_args(problems, tmp_path):
    return ["generate", "--config", "demo", "--problems", str(problems), "--out", str(tmp_path / "samples.jsonl"),
            "--set", f"model.name={MODEL}"]


def test_hf_hub_offline_and_not_cached_is_an_error_at_once(nothing_cached, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = runner.invoke(app, generate_args(nothing_cached, tmp_path))
    assert result.exit_code == 1, result.output
    assert f"Error: model '{MODEL}'" in result.stderr and "HF_HUB_OFFLINE is set" in result.stderr
    assert not (tmp_path / "samples.jsonl").exists()


def test_an_unreachable_hub_is_named_before_any_download(nothing_cached, tmp_path, monkeypatch):
    endpoint = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    result = runner.invoke(app, generate_args(nothing_cached, tmp_path))
    assert result.exit_code == 1, result.output
    text = " ".join(result.stderr.split())
    assert f"must be downloaded from {endpoint}, which cannot be reached" in text and "Hint: connect" in text
    assert not (tmp_path / "samples.jsonl").exists()


def test_the_probe_is_bounded_even_when_the_connection_hangs(monkeypatch):
    def hang(*args, **kwargs):
        time.sleep(30)
        return SimpleNamespace(close=lambda: None)  # the probe thread outlives the test: let it end quietly

    monkeypatch.setattr(socket, "create_connection", hang)
    started = time.monotonic()
    assert "no answer within 0.2 s" in generate._unreachable("https://hub.invalid", 0.2)
    assert time.monotonic() - started < 20   # the probe's bound, not the 30 s hang (a loaded machine is slow)


def test_a_reachable_endpoint_passes_and_built_or_local_models_are_not_probed(tmp_path, monkeypatch):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert generate._unreachable(f"http://127.0.0.1:{server.getsockname()[1]}", 5.0) is None
    monkeypatch.setattr(generate, "_unreachable", lambda *a: pytest.fail("probed"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    generate.check_hub_reachable("tiny-countdown")
    generate.check_hub_reachable(str(tmp_path))
