"""scripts/gpu_first_contact.py without a GPU: its arguments, its model lookup, its problems, the
calibration it writes from a measured dict and the plan reading it, and its stop at the first failure.

The measured dicts below are made up (shaped as the script's steps return them); no figure here was
measured on a GPU.
"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from prover_cli.config import load_config
from prover_cli.on_modal import calibration
from prover_cli.on_modal import plan as modal_plan

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_first_contact.py"
KIMINA_ES = REPO / "configs" / "kimina-es.toml"
pytestmark = pytest.mark.filterwarnings("ignore:.*executing locally.*:UserWarning")


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("gpu_first_contact", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def calibration_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(calibration.DIR_ENV, str(tmp_path / "calibration"))
    return tmp_path / "calibration"


def measured_dict(**changes):
    """What the five steps return, in shape (made-up numbers)."""
    body = {
        "device": "1 x NVIDIA H100 80GB HBM3", "total_gib": 79.19,
        "engine": {"ok": True, "share": 0.7, "budget_gib": 55.43, "free_before_gib": 78.6, "started_gib": 56.9,
                   "es_init_gib": 7.4, "free_after_gib": 14.3},
        "member_batch": {"ok": True, "seconds": 64.0, "sequence_tokens": [812, 8192, 4000, 90, 30, 5000, 7000, 8192]},
        "two_engines": {"ok": True, "seconds": 80.0},
        "configured_engines": {"ok": True, "engines": 1},
        "heldout": {"ok": True, "seconds": 300.0},
    }
    body.update(changes)
    return body


def test_arguments_need_a_config_and_a_model(script):
    args = script.parse_args(["--config", "kimina-es", "--model", "/m"])
    assert (args.config, args.model, args.out, args.set) == ("kimina-es", "/m", None, [])
    with pytest.raises(SystemExit) as err:
        script.parse_args(["--config", "kimina-es"])
    assert err.value.code == 2
    help_text = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, cwd=REPO,
                               check=True).stdout
    assert "--model" in help_text and "--out" in help_text


def test_the_model_is_a_local_directory_or_in_the_local_cache_never_downloaded(script, tmp_path, monkeypatch):
    model = tmp_path / "model"
    model.mkdir()
    with pytest.raises(SystemExit, match="no \\*.safetensors"):
        script.model_directory(str(model))
    (model / "model.safetensors").write_bytes(b"")
    assert script.model_directory(str(model)) == model
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SystemExit, match="not in the local Hugging Face cache"):
        script.model_directory("someone/not-cached-model")


def test_the_prompts_are_real_lean_workbook_statements_that_verify_accepts(script):
    from prover_cli.tasks import problem_defect

    eight = script.problems(8)
    assert len({p["id"] for p in eight}) == 8 and all(p["id"].startswith("lean_workbook_") for p in eight)
    assert all(problem_defect(p, "lean") is None for p in eight)
    held = script.problems(64)
    assert len(held) == 64 and len({p["id"] for p in held}) == 64
    assert [p["formal_statement"] for p in held[8:16]] == [p["formal_statement"] for p in eight]


def test_the_prompts_are_the_shared_fixtures_statements(script, shared):
    """The script's copy is the fixture's statements, character for character (../shared, through
    conftest's fixture: skipped on a clone without it)."""
    eight = script.problems(8)
    fixture = shared("data", "proofs", "lean_workbook_goedel_kimina_fixtures.jsonl")
    rows = {r["id"]: r for r in map(json.loads, fixture.read_text(encoding="utf-8").splitlines())}
    assert all(rows[p["id"]]["formal_statement"] == p["formal_statement"] for p in eight)


def test_the_calibration_it_writes_from_what_it_measured_is_what_the_plan_prices_with(script, calibration_dir):
    config = load_config(KIMINA_ES)
    figures = script.figures_from(measured_dict(), gpu_matches=True)
    assert figures["decode_tokens_per_s"]["value"] == pytest.approx(8192 / 64.0)     # the longest over the call
    assert figures["decode_tokens_per_s"]["samples"] == 8
    assert figures["resident_slowdown"]["value"] == pytest.approx(80.0 / 64.0 - 1)   # 0.25
    assert figures["engine_overhead_gib"]["value"] == pytest.approx(56.9 - 55.43)
    assert figures["es_init_gib"]["value"] == pytest.approx(7.4)
    path = script.write_calibration(calibration.default_path(config), config, measured_dict(), "2026-12-07T05:00:00Z")
    assert path == calibration.default_path(config) and path.parent == calibration_dir
    body = calibration.load(path)
    assert body["by"] == "scripts/gpu_first_contact.py" and body["fingerprint"] == calibration.fingerprint(config)
    p = modal_plan.plan(config, command="train_es", backend="modal")
    assert p["calibration"] == str(path)
    assert p["figures"]["decode_tokens_per_s"] == {"value": 128.0,
                                                   "source": "measured (gpu_first_contact, 2026-12-07, n = 8)"}
    assert p["figures"]["resident_slowdown"]["source"].startswith("measured (gpu_first_contact")
    held = p["gpu_memory"]["gpus"][0]["held"]
    assert held["fp32 masters and transients"] == 7.4
    # priced as the same config with those figures set by hand
    same = modal_plan.plan(load_config(KIMINA_ES, ["modal.calibration=none", "modal.est_decode_tokens_per_s=128",
                                                   "modal.est_resident_slowdown=0.25"]),
                           command="train_es", backend="modal")
    assert p["est_wall_s_per_iteration"] == same["est_wall_s_per_iteration"] != modal_plan.plan(
        load_config(KIMINA_ES, ["modal.calibration=none"]), command="train_es", backend="modal")["est_wall_s_per_iteration"]


def test_no_decode_speed_from_another_gpu_and_nothing_written_when_nothing_was_measured(script, tmp_path):
    config = load_config(KIMINA_ES)
    on_l4 = script.figures_from(measured_dict(device="1 x NVIDIA L4"), gpu_matches=False)
    assert "decode_tokens_per_s" not in on_l4 and "resident_slowdown" in on_l4
    failed = {"device": "1 x NVIDIA H100 80GB HBM3", "engine": {"ok": False, "error": "ValueError: Free memory ..."}}
    assert script.figures_from(failed, gpu_matches=True) == {}
    assert script.write_calibration(tmp_path / "c.json", config, failed, "2026-12-07T05:00:00Z") is None
    assert not (tmp_path / "c.json").exists()


def test_a_run_without_a_gpu_stops_at_the_first_step_and_writes_its_report(script, tmp_path, monkeypatch):
    """On this machine (no CUDA) the first step fails: the script stops there, reports why, writes no calibration."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"")
    report = tmp_path / "report.json"
    called = []
    monkeypatch.setattr(script, "STEPS", [("engine", lambda *a: (_ for _ in ()).throw(RuntimeError("no CUDA here"))),
                                          ("member_batch", lambda *a: called.append("member") or {"ok": True})])
    code = script.main(["--config", str(KIMINA_ES), "--model", str(model), "--report", str(report),
                        "--out", str(tmp_path / "c.json")])
    body = json.loads(report.read_text(encoding="utf-8"))
    assert code == 1 and called == [] and body["stopped_at"] == "engine"
    assert body["engine"]["error"] == "RuntimeError: no CUDA here" and body["calibration"] is None
    assert not (tmp_path / "c.json").exists()


def test_the_configured_engines_step_records_its_failure_and_the_script_goes_on(script, tmp_path, monkeypatch):
    config = load_config(KIMINA_ES, ["modal.es_members_per_gpu=2"])
    started = []

    def start(config, model_dir, share):
        if started:
            raise ValueError("Free memory on device (10.0/79.19 GiB) on startup is less than desired GPU memory "
                             "utilization (0.35, 27.72 GiB)")
        started.append(share)
        return type("Engine", (), {"es_weights": lambda self: None, "llm": None})()

    monkeypatch.setattr(script, "start_engine", start)
    monkeypatch.setattr(script, "free_gib", lambda: 40.0)
    monkeypatch.setattr(script, "close_engine", lambda engine, settle_s=60.0: None)
    result = script.step_configured_engines(config, tmp_path, {}, {})
    assert result["ok"] is False and result["recorded"] is True and result["engines_started"] == 1
    assert "less than desired GPU memory utilization" in result["error"] and started == [0.35]
