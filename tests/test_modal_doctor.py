"""`prover doctor --backend modal`: every step, end to end, against the stand-ins; `--dry-run` starts nothing.

What stands in for Modal here (none of these results is a Modal result): the images are "built"
by tests/modal_standin.py's build stand-in (BUILDS: an id, or ImageBuildError for an image the
test makes fail), and each app's `run()` builds every image of the app first, as Modal's does
(`apps_running`); the Lean Sandbox is tests/modal_standin.py's SandboxStandIn running
tests/fake_repl.py for the image's REPL (so the canary's verdicts are the REPL stand-in's, not
Lean's); the GPU step is `doctor_gpu.local()` on the offline tiny model with the transformers
sampler (no GPU, no vLLM); the Volumes are VolumeStandIns, each call in a fresh "container".
"""

import contextlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from modal_standin import BUILDS, SANDBOXES, VolumeStandIn, app_of_function, apps_running, is_running, sandboxes_running
from prover_cli.cli import app
from prover_cli.on_modal import calibration, doctor, functions, images, plan, remote, sandbox

REPO = Path(__file__).resolve().parents[1]
FAKE_REPL = REPO / "tests" / "fake_repl.py"
runner = CliRunner()
pytestmark = pytest.mark.filterwarnings("ignore:.*executing locally.*:UserWarning")


@pytest.fixture
def standins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-standin")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-standin")
    monkeypatch.setenv(calibration.DIR_ENV, str(tmp_path / "calibration"))   # never the user's cache
    runs, models = VolumeStandIn(tmp_path / "runs-volume"), VolumeStandIn(tmp_path / "models-volume", "prover-models")
    monkeypatch.setattr(functions, "RUNS_MOUNT", str(runs._mount))
    monkeypatch.setattr(functions, "MODELS_MOUNT", str(models._mount))
    for module in (functions, remote):
        monkeypatch.setattr(module, "runs_volume", runs)
    monkeypatch.setattr(functions, "models_volume", models)
    calls = []

    def call(function, *args):  # each remote call in a fresh container, as Modal runs separate Functions
        assert is_running(app_of_function(function)), "a Function called while its app does not run"
        calls.append(args)
        with runs._container(f"call-{len(calls)}"), models._container(f"call-{len(calls)}"):
            return function.local(*args)

    monkeypatch.setattr(doctor, "call", call)
    gen = sandboxes_running(monkeypatch, FAKE_REPL)
    next(gen)
    apps_running(monkeypatch)   # Sandboxes from your machine need a running app (the Lean one)
    yield {"built": BUILDS.built, "calls": calls, "runs": runs, "models": models}
    with contextlib.suppress(StopIteration):
        next(gen)


ARGS = ["doctor", "--backend", "modal", "--set", "model.name=tiny", "--set", "model.device=cpu",
        "--set", "model.dtype=float32", "--set", "generate.backend=transformers",
        "--set", "generate.max_tokens=16", "--set", "es.problems_per_iteration=2"]


def test_every_step_runs_and_reports_its_result_time_and_cost(standins):
    result = runner.invoke(app, [*ARGS, "--json"])
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    steps = {s["name"]: s for s in out["steps"]}
    assert list(steps) == ["images", "lean sandbox", "gpu model", "volumes"]
    assert all(s["result"] == "ok" for s in steps.values()) and out["ok"] is True
    assert set(standins["built"]) == set(images.IMAGES) and {"gpu", "lean", "orchestrator", "trl"} <= set(images.IMAGES)
    assert all(out["images"][name]["ok"] for name in images.IMAGES)
    assert "lean im-standin-lean" in steps["images"]["detail"] and steps["images"]["usd"] == "not priced"
    # one Sandbox, created exactly as verification creates them, terminated after the canary; then
    # the kernel canary, each step in a fresh Sandbox as the kernel stage creates them
    from prover_cli.config import load_config

    config = load_config(None, [a for a in ARGS if "=" in a])
    box, *later = SANDBOXES.created
    assert box._kwargs == sandbox.sandbox_arguments(config) and box.poll() == 137
    # the kernel canary: its fooled case through one more REPL Sandbox, every step in its own; the
    # calibration's warm-REPL measurement in one more
    kernel_boxes = [k for k in later if k._kwargs == sandbox.kernel_sandbox_arguments(config)]
    repl_boxes = [k for k in later if k._kwargs == sandbox.sandbox_arguments(config)]
    assert kernel_boxes and len(repl_boxes) == 2 and len(kernel_boxes) + 2 == len(later)
    assert all(k.poll() == 137 for k in later)
    assert "canaries as expected" in steps["lean sandbox"]["detail"]
    # 5 kernel canaries and the 5 public attacks (kernel.KERNEL_ATTACKS) the default pin is held to
    assert "kernel stage: 13 canaries as expected" in steps["lean sandbox"]["detail"]
    assert any(b"theorem" in data for data in SANDBOXES.sent)
    # the model on the "GPU" container, with the sampler the config names
    assert "tiny with transformers" in steps["gpu model"]["detail"]
    # the probe crossed from one container to another through commit + reload, on both Volumes
    assert "NOT seen" not in steps["volumes"]["detail"] and steps["volumes"]["detail"].count("read back") == 2
    # each priced step: its measured seconds x its containers' resources x the [modal] prices
    for name, key, sandboxed, containers in (("lean sandbox", "verify_sandbox", True, 1),
                                             ("gpu model", "doctor_gpu", False, 1),
                                             ("volumes", "doctor_volumes", False, 2)):
        r, prices = plan.resources(config)[key], plan.unit_prices(config, sandbox=sandboxed)
        seconds = steps[name]["seconds"]
        expected = containers * seconds * (r.gpu_count * prices["gpu"] + r.cpu * prices["cpu"]
                                           + r.memory_mb / 1024 * prices["memory"]) / 3600
        assert steps[name]["usd"] == pytest.approx(expected, rel=0.02, abs=1e-4)
    # the calibration: the Lean figures measured on the stand-ins (the REPL and kernel stand-ins'
    # seconds and memory, not Lean's), written where the plan looks; no decode speed, because the
    # "GPU" container's device was no GPU at all
    written = out["calibration"]["path"]
    assert written == str(calibration.default_path(config)) and Path(written).is_file()
    assert set(out["calibration"]["figures"]) == {"header_s", "verify_s_per_proof", "kernel_check_s_per_proof",
                                                  "kernel_import_s", "kernel_peak_memory_gib"}
    assert out["calibration"]["figures"]["verify_s_per_proof"]["samples"] >= doctor.WARM_PROOFS_MIN
    assert out["calibration"]["figures"]["kernel_check_s_per_proof"]["samples"] == doctor.KERNEL_PROOFS
    assert out["calibration"]["figures"]["kernel_peak_memory_gib"]["value"] > 0   # a real ru_maxrss, of a stand-in
    assert "decode speed not recorded" in steps["gpu model"]["detail"] and "no CUDA device" in steps["gpu model"]["detail"]
    body = json.loads(Path(written).read_text(encoding="utf-8"))
    assert body["fingerprint"] == calibration.fingerprint(config)
    assert all(item["measured"] is True for item in body["figures"].values())
    p = plan.plan(config, command="train_es", backend="modal")
    assert p["figures"]["verify_s_per_proof"]["source"].startswith("measured (doctor, ")
    assert p["figures"]["verify_s_per_proof"]["value"] == body["figures"]["verify_s_per_proof"]["value"]
    assert p["figures"]["decode_tokens_per_s"]["source"] == "default (assumption)"
    human = runner.invoke(app, ARGS, env={"COLUMNS": "200"})
    assert human.exit_code == 0
    for text in ("lean sandbox", "gpu model", "volumes", "seconds", "USD", "not priced", "calibration"):
        assert text in human.stderr


def test_a_write_that_is_not_committed_fails_the_round_trip(standins, monkeypatch):
    monkeypatch.setattr(functions, "_commit", lambda volume: None)  # what a lost commit looks like
    result = runner.invoke(app, [*ARGS, "--json"])
    assert result.exit_code == 1
    steps = {s["name"]: s for s in json.loads(result.stdout)["steps"]}
    assert steps["volumes"]["result"] == "FAILED" and "NOT seen" in steps["volumes"]["detail"]
    assert steps["lean sandbox"]["result"] == "ok"  # the other steps still ran


def test_a_step_whose_image_does_not_build_is_not_run(standins):
    BUILDS.failing = {"lean"}
    result = runner.invoke(app, [*ARGS, "--json"])
    assert result.exit_code == 1
    steps = {s["name"]: s for s in json.loads(result.stdout)["steps"]}
    assert steps["images"]["result"] == "FAILED" and "lean FAILED: ImageBuildError" in steps["images"]["detail"]
    assert steps["lean sandbox"]["result"] == "not run" and SANDBOXES.created == []
    assert steps["gpu model"]["result"] == "ok" and steps["volumes"]["result"] == "ok"


def test_a_failing_trl_image_is_reported_as_its_own_and_every_step_still_runs(standins):
    """Before one app per role, `app.run()` built the TRL image for every step and its failure
    ended the doctor before any report; now the TRL image fails alone."""
    BUILDS.failing = {"trl"}
    result = runner.invoke(app, [*ARGS, "--json"])
    assert result.exit_code == 1
    out = json.loads(result.stdout)
    steps = {s["name"]: s for s in out["steps"]}
    assert steps["images"]["result"] == "FAILED"
    assert "trl FAILED: ImageBuildError: Image build for im-standin-trl failed" in steps["images"]["detail"]
    for name in ("gpu", "lean", "kernel", "orchestrator"):
        assert out["images"][name] == {"ok": True, "detail": f"im-standin-{name}"}
        assert f"{name} im-standin-{name}" in steps["images"]["detail"]
    assert out["images"]["trl"]["ok"] is False and "trl" not in standins["built"]
    assert all(steps[name]["result"] == "ok" for name in ("lean sandbox", "gpu model", "volumes"))


def test_dry_run_lists_the_steps_and_their_cost_and_starts_nothing(tmp_path):
    probe = ("import sys; from prover_cli.cli import main; sys.argv = ['prover', 'doctor', '--config', "
             "'configs/kimina-es.toml', '--backend', 'modal', '--dry-run', '--json']\n"
             "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
             "print('MODAL IMPORTED' if 'modal' in sys.modules else 'no modal', file=sys.stderr)")
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}  # no credentials either
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, env=env)
    assert out.returncode == 0, out.stderr
    assert "no modal" in out.stderr
    result = json.loads(out.stdout)
    assert [s["name"] for s in result["steps"]] == ["images", "lean sandbox", "gpu model", "volumes"]
    steps = {s["name"]: s for s in result["steps"]}
    assert "H100:1" in steps["gpu model"]["where"] and "Kimina-Prover-Preview-Distill-1.5B" in steps["gpu model"]["what"]
    # the GPU step generates one ES member's call at the configured lengths (8 x up to 8192 tokens), not 16 tokens
    assert "8 sequences of up to 8192 tokens" in steps["gpu model"]["what"]
    assert steps["gpu model"]["est"] == f"~{180 + 8192 / 100:.0f} s"
    # the Sandbox: 60 s header + 5 s per canary on 8 cores, 64 GiB (4 REPLs x 16 GiB) at the Sandbox prices,
    # twice: the canary, then the calibration's warm-REPL run (and the kernel stage's measurement)
    from prover_cli.verify.lean.canary import CANARIES

    seconds = 2 * (60 + 5 * len(CANARIES))
    assert steps["lean sandbox"]["est"] == f"~{seconds} s"
    assert steps["lean sandbox"]["est_usd"] == pytest.approx(seconds * (8 * 0.142 + 64 * 0.024) / 3600, abs=1e-4)
    assert steps["images"]["est_usd"] == "not priced"
    assert result["est_usd_total"] == pytest.approx(sum(s["est_usd"] for s in result["steps"]
                                                        if s["est_usd"] != "not priced"), abs=1e-3)


def test_dry_run_is_for_the_modal_backend_only():
    result = runner.invoke(app, ["doctor", "--dry-run"])
    assert result.exit_code == 2 and "--backend modal" in result.stderr


def test_without_credentials_the_doctor_starts_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("MODAL_TOKEN_ID", raising=False)
    monkeypatch.delenv("MODAL_TOKEN_SECRET", raising=False)
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(tmp_path / "none.toml"))
    monkeypatch.setattr(doctor, "run_doctor", lambda config: pytest.fail("must not start anything"))
    result = runner.invoke(app, ["doctor", "--backend", "modal"])
    assert result.exit_code == 1 and "Modal credentials" in result.stderr
