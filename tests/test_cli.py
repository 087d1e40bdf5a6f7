"""The `prover` command layer: help, lazy imports, error mapping, exit codes, backend seam."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prover_cli import backends
from prover_cli.cli import app

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()

SUBCOMMANDS = ["prepare-data", "verify", "generate", "train", "replay-seeds", "eval", "doctor", "report"]


def test_help_lists_subcommands():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for name in SUBCOMMANDS:
        assert name in result.stdout
    train = runner.invoke(app, ["train", "--help"])
    assert train.exit_code == 0 and " es " in train.stdout and " grpo " in train.stdout


def test_help_and_cli_import_do_not_import_heavy_packages():
    probe = (
        "import sys; from typer.testing import CliRunner; import prover_cli.cli as c;"
        "r = CliRunner().invoke(c.app, ['--help']); assert r.exit_code == 0;"
        "r = CliRunner().invoke(c.app, ['train', 'es', '--help']); assert r.exit_code == 0;"
        "heavy = [m for m in ('torch', 'vllm', 'modal', 'transformers', 'trl', 'datasets') if m in sys.modules];"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    importtime = subprocess.run([sys.executable, "-X", "importtime", "-c", "import prover_cli.cli"],
                                capture_output=True, text=True, check=True)
    imported = {line.split("|")[-1].strip().split(".")[0] for line in importtime.stderr.splitlines()}
    assert not imported & {"torch", "vllm", "modal", "transformers", "trl"}


def test_config_error_is_one_line_naming_file_and_key(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[es]\npopulation = -4\n", encoding="utf-8")
    result = runner.invoke(app, ["train", "es", "--config", str(bad)])
    assert result.exit_code == 1
    assert "Error:" in result.stderr and "bad.toml" in result.stderr and "es.population" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_bad_set_override_is_an_error(tmp_path):
    result = runner.invoke(app, ["doctor", "--set", "es.populaton=8"])
    assert result.exit_code == 1 and "es.populaton" in result.stderr and "did you mean" in result.stderr


def test_usage_error_exits_2():
    assert runner.invoke(app, ["verify"]).exit_code == 2          # missing argument
    assert runner.invoke(app, ["no-such-command"]).exit_code == 2


def test_doctor_reports_no_gpu_no_lean_no_modal(no_modal_token, monkeypatch):
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + "/usr/bin:/bin")
    result = runner.invoke(app, ["doctor", "--json"])
    assert result.exit_code == 0
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["python"]["ok"] and checks["torch"]["ok"]
    assert checks["cuda"]["ok"] is False
    assert checks["lean repl"]["ok"] is False and "lake" in checks["lean repl"]["detail"]
    assert checks["modal token"]["ok"] is False and "modal token new" in checks["modal token"]["fix"]
    human = runner.invoke(app, ["doctor"])
    assert human.exit_code == 0 and "missing" in human.stderr and "prover-cli[gpu]" in human.stderr


def test_doctor_finds_a_repl_that_answers(tmp_path):
    fake = tmp_path / "repl"
    fake.write_text("#!/bin/sh\ncat > /dev/null\nprintf '{\"env\": 0}\\n\\n'\n", encoding="utf-8")
    fake.chmod(0o755)
    result = runner.invoke(app, ["doctor", "--json", "--set", f'verify.repl_command=["{fake}"]'])
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["lean repl"]["ok"] is True


def test_modal_backend_without_credentials_is_one_sentence(no_modal_token, tmp_path):
    proofs = tmp_path / "p.jsonl"
    proofs.write_text("", encoding="utf-8")
    result = runner.invoke(app, ["verify", str(proofs), "--backend", "modal"])
    assert result.exit_code == 1
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(error_lines) == 1 and "Modal credentials" in error_lines[0]
    assert "Traceback" not in result.stderr


def test_modal_backend_routes_through_the_seam(monkeypatch, tmp_path):
    calls = []

    def fake_runner(name, config, kwargs):
        calls.append((name, config.run.dir, sorted(kwargs)))
        return {"ok": True, "ran": name}

    monkeypatch.setattr(backends, "MODAL_RUNNER", fake_runner)
    result = runner.invoke(app, ["replay-seeds", "ledger.json", "--out", str(tmp_path / "m"),
                                 "--backend", "modal", "--set", "run.dir=runs/x", "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {"ok": True, "ran": "replay_seeds"}
    assert calls == [("replay_seeds", "runs/x", ["device", "ledger_path", "out_dir", "upto"])]


def test_unknown_backend_is_an_error():
    result = runner.invoke(app, ["eval", "--verdicts", "v.jsonl", "--backend", "cloud"])
    assert result.exit_code == 1 and "unknown backend" in result.stderr


def test_stage_not_built_fails_honestly(monkeypatch, tmp_path):
    monkeypatch.setitem(backends.FUNCTIONS, "generate", "prover_cli.not_there:generate_file")
    result = runner.invoke(app, ["generate", "--out", str(tmp_path / "s.jsonl")])
    assert result.exit_code == 1
    assert "is not built in this version of prover" in result.stderr


def test_result_ok_false_gives_exit_1(monkeypatch):
    monkeypatch.setattr(backends, "MODAL_RUNNER", lambda name, config, kwargs: {"ok": False, "failed": 2})
    result = runner.invoke(app, ["eval", "--verdicts", "v.jsonl", "--backend", "modal"])
    assert result.exit_code == 1 and "failed" in result.stderr


def test_unexpected_error_is_one_line_unless_debugging(monkeypatch):
    def boom(name, config, kwargs):
        raise RuntimeError("kaput")

    monkeypatch.setattr(backends, "MODAL_RUNNER", boom)
    result = runner.invoke(app, ["eval", "--verdicts", "v.jsonl", "--backend", "modal"])
    assert result.exit_code == 1 and "unexpected RuntimeError: kaput" in result.stderr
    monkeypatch.setenv("PROVER_DEBUG", "1")
    result = runner.invoke(app, ["eval", "--verdicts", "v.jsonl", "--backend", "modal"])
    assert isinstance(result.exception, RuntimeError)


def test_bad_k_is_a_usage_error():
    result = runner.invoke(app, ["eval", "--verdicts", "v.jsonl", "--k", "1,x"])
    assert result.exit_code == 2
