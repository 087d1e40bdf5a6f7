"""The calibration file (prover_cli/on_modal/calibration.py): written by the doctor, used or refused by the plan.

No figure here is a GPU or Lean measurement: the files are written by the tests (or by the doctor
on stand-ins) with made-up values, to check what the plan does with them.
"""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prover_cli.cli import app
from prover_cli.config import load_config
from prover_cli.errors import ConfigError
from prover_cli.on_modal import calibration, plan

REPO = Path(__file__).resolve().parents[1]
KIMINA_ES = REPO / "configs" / "kimina-es.toml"
runner = CliRunner()
pytestmark = pytest.mark.filterwarnings("ignore:.*executing locally.*:UserWarning")

FIGURES = {  # made-up values, chosen unlike the estimates so that a test sees which one the plan used
    "decode_tokens_per_s": calibration.figure(80.0, 8, "test"),
    "header_s": calibration.figure(40.0, 1, "test"),
    "verify_s_per_proof": calibration.figure(3.0, 4, "test"),
    "kernel_check_s_per_proof": calibration.figure(2.0, 4, "test"),
    "kernel_import_s": calibration.figure(6.0, 1, "test"),
    "kernel_peak_memory_gib": calibration.figure(3.5, 9, "test"),
}


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """The doctor's default folder, empty, under this test's tmp_path (never the user's cache)."""
    folder = tmp_path / "calibration"
    monkeypatch.setenv(calibration.DIR_ENV, str(folder))
    return folder


def es(*sets):
    return load_config(KIMINA_ES, list(sets))


def written(config, path=None, figures=FIGURES):
    return calibration.write(path or calibration.default_path(config), config, figures, "2026-12-02T03:00:00Z")


def test_the_plan_uses_a_matching_calibration_and_says_so_per_figure():
    config = es()
    before = plan.plan(config, command="train_es", backend="modal")
    assert all(f["source"] == "default (assumption)" for f in before["figures"].values())
    assert before["calibration"] is None
    path = written(config)
    after = plan.plan(config, command="train_es", backend="modal")
    assert after["calibration"] == str(path)
    assert after["figures"]["verify_s_per_proof"] == {"value": 3.0, "source": "measured (doctor, 2026-12-02, n = 4)"}
    assert after["figures"]["decode_tokens_per_s"]["value"] == 80.0
    assert after["figures"]["kernel_peak_memory_gib"]["value"] == 3.5
    # the measured figures priced: the same plan as with the keys set to those values
    same = plan.plan(es("modal.calibration=none", "modal.est_decode_tokens_per_s=80", "modal.est_header_s=40",
                        "modal.est_verify_s_per_proof=3", "modal.est_kernel_check_s_per_proof=2",
                        "modal.est_kernel_import_s=6"), command="train_es", backend="modal")
    for key in ("est_usd_per_iteration", "est_wall_s_per_iteration", "est_usd_per_heldout_evaluation", "est_usd_total"):
        assert after[key] == same[key] != before[key], key
    human = runner.invoke(app, ["train", "es", "--config", str(KIMINA_ES), "--backend", "modal", "--dry-run"],
                          env={"COLUMNS": "250"})
    assert human.exit_code == 0
    assert "measured (doctor, 2026-12-02, n = 4)" in human.stderr and f"calibrated: {path}" in human.stderr


def test_a_key_set_in_the_config_wins_over_the_calibration():
    written(es())
    p = plan.plan(es("modal.est_verify_s_per_proof=7"), command="train_es", backend="modal")
    assert p["figures"]["verify_s_per_proof"] == {"value": 7.0, "source": "set (--set modal.est_verify_s_per_proof=7)"}
    assert p["figures"]["header_s"]["source"].startswith("measured")


def test_a_calibration_for_another_gpu_or_model_is_refused_naming_the_file(tmp_path):
    path = written(es(), tmp_path / "h100.json")
    for setting in ("modal.gpu=L4", "model.name=other/model"):
        with pytest.raises(ConfigError) as err:
            plan.plan(es(f"modal.calibration={path}", setting), command="train_es", backend="modal")
        assert str(err.value).startswith(f"{path}: this calibration was measured on another GPU or model")
    result = runner.invoke(app, ["train", "es", "--config", str(KIMINA_ES), "--backend", "modal", "--dry-run",
                                 "--set", f"modal.calibration={path}", "--set", "modal.gpu=L4"])
    assert result.exit_code == 2   # a config error, as any bad key value is
    assert f"Error: {path}: this calibration was measured on another GPU or model" in result.stderr
    assert "modal.gpu = 'H100' there, 'L4' here" in result.stderr


def test_a_named_calibration_of_another_config_is_refused_and_a_default_one_is_left_unused(tmp_path):
    path = written(es(), tmp_path / "x.json")
    with pytest.raises(ConfigError, match="measured on another configuration.*generate.max_tokens = 8192 there, 4096 here"):
        plan.plan(es(f"modal.calibration={path}", "generate.max_tokens=4096"), command="train_es", backend="modal")
    written(es())   # the default file: same GPU and model, other lengths: not used, and the plan says why
    p = plan.plan(es("generate.max_tokens=4096"), command="train_es", backend="modal")
    assert p["calibration"] is None and all(f["source"] == "default (assumption)" for f in p["figures"].values())
    note = next(text for kind, text in p["tables"][-1]["rows"] if kind == "figures")
    assert "not used: measured for another configuration" in note and "generate.max_tokens" in note


def test_a_default_file_that_names_another_gpu_is_refused():
    config = es()
    path = written(es("modal.gpu=L4"), calibration.default_path(config))   # an L4 file under the H100's name
    with pytest.raises(ConfigError, match=f"{path}: this calibration was measured on another GPU or model"):
        plan.plan(config, command="train_es", backend="modal")


def test_none_never_uses_a_calibration():
    written(es())
    p = plan.plan(es("modal.calibration=none"), command="train_es", backend="modal")
    assert p["calibration"] is None and p["figures"]["header_s"]["source"] == "default (assumption)"


@pytest.mark.parametrize("change, expected", [
    (lambda b: b["figures"]["header_s"].update(measured=False), "figures.header_s: measured must be true"),
    (lambda b: b["figures"]["header_s"].update(samples=0), r"figures.header_s.samples = 0: must be an integer >= 1"),
    (lambda b: b["figures"]["verify_s_per_proof"].update(value=0), "figures.verify_s_per_proof.value = 0: must be a finite number > 0"),
    (lambda b: b["figures"]["header_s"].update(value=-1), "figures.header_s.value = -1: must be a finite number >= 0"),
    (lambda b: b["figures"].update(prefill_slowdown={"value": 0.1, "measured": True, "samples": 1}),
     "figures.prefill_slowdown: not a calibrated figure"),
    (lambda b: b["figures"]["decode_tokens_per_s"].update(value=1e308),
     "figures.decode_tokens_per_s.value = 1e+308: outside the physical range [0.5, 20000]"),
    (lambda b: b["figures"]["decode_tokens_per_s"].update(value=1e-308),
     "figures.decode_tokens_per_s.value = 1e-308: outside the physical range"),
    (lambda b: b["figures"]["header_s"].update(value=1e308), "figures.header_s.value = 1e+308: outside the physical range"),
    (lambda b: b["figures"]["decode_tokens_per_s"].update(value=float("nan")),
     "figures.decode_tokens_per_s.value = nan: must be a finite number"),
    (lambda b: b.update(format="prover-calibration/0"), "format = 'prover-calibration/0': expected 'prover-calibration/1'"),
])
def test_a_malformed_calibration_is_refused_naming_the_file_and_key(tmp_path, change, expected):
    path = written(es(), tmp_path / "c.json")
    body = json.loads(path.read_text(encoding="utf-8"))
    change(body)
    path.write_text(json.dumps(body), encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        plan.plan(es(f"modal.calibration={path}"), command="train_es", backend="modal")
    assert str(err.value).startswith(f"{path}: ") and expected in str(err.value)


def test_a_named_file_that_does_not_exist_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        plan.plan(es(f"modal.calibration={tmp_path / 'missing.json'}"), command="train_es", backend="modal")


def test_the_measured_kernel_peak_warns_when_the_kernel_sandbox_is_smaller():
    figures = {**FIGURES, "kernel_peak_memory_gib": calibration.figure(20.0, 9, "test")}
    written(es(), figures=figures)
    p = plan.plan(es(), command="train_es", backend="modal")
    warnings = [text for kind, text in p["tables"][-1]["rows"] if kind == "warning"]
    assert any("measured peak memory, 20.0 GiB" in w and "16 GiB" in w for w in warnings), warnings
    # sized by the key the warning names, the Sandbox holds the peak: no warning, and the plan bills it
    sized = plan.plan(es("modal.kernel_sandbox_memory_gb=20"), command="train_es", backend="modal")
    assert not [text for kind, text in sized["tables"][-1]["rows"] if kind == "warning" and "peak memory" in text]
    assert plan.kernel_step_size(es("modal.kernel_sandbox_memory_gb=20"))[1] == 20 * 1024
    written(es())   # 3.5 GiB fits the 16 GiB Sandbox
    p = plan.plan(es(), command="train_es", backend="modal")
    assert not [text for kind, text in p["tables"][-1]["rows"] if kind == "warning" and "peak memory" in text]


def test_a_run_whose_kernel_sandbox_is_below_the_measured_peak_refuses_to_start(monkeypatch):
    """Every kernel step would end in `error` (nothing verifies): refused before the app runs."""
    from prover_cli.on_modal import remote

    written(es(), figures={**FIGURES, "kernel_peak_memory_gib": calibration.figure(20.0, 9, "test")})
    monkeypatch.setattr(remote, "to_wire", lambda *a: pytest.fail("the run went on to its call"))
    with pytest.raises(ConfigError, match="modal.kernel_sandbox_memory_gb to at least 20"):
        remote.run_remote("train_es", es(), {})
    assert plan.kernel_memory_problem(es("modal.kernel_sandbox_memory_gb=20")) is None


def test_the_doctor_never_writes_a_figure_the_plan_would_refuse(tmp_path):
    with pytest.raises(ConfigError, match="measured must be true"):
        calibration.write(tmp_path / "c.json", es(), {"header_s": {"value": 1.0, "measured": False, "samples": 1}},
                          "2026-12-02T03:00:00Z")
    assert not (tmp_path / "c.json").exists()


# -- the doctor's GPU step: the decode speed only from the configured GPU ----------------------

@pytest.mark.parametrize("seen, recorded", [("1 x NVIDIA H100 80GB HBM3", True), ("1 x NVIDIA L4", False),
                                            ("no CUDA device", False)])
def test_the_doctor_records_decode_speed_only_on_the_configured_gpu(monkeypatch, seen, recorded):
    from prover_cli.on_modal import doctor, functions, remote

    class Declared:
        def with_options(self, **options):
            return "doctor_gpu"

    monkeypatch.setattr(functions, "doctor_gpu", Declared())
    monkeypatch.setattr(remote, "upload", lambda uploads: None)
    # what doctor_gpu returns (its shape, not a GPU's numbers): 8 sequences, the longest 4096 tokens in 40 s
    monkeypatch.setattr(doctor, "call", lambda function, *args: {
        "model": "m", "sampler": "vllm", "gpu": seen, "load_s": 1.0, "generate_s": 40.0, "completion_tokens": 100,
        "sequence_tokens": [100, 4096, 800, 20, 5, 9, 3000, 7], "max_tokens": 8192, "text": "x"})
    measured: dict = {}
    ok, detail = doctor._gpu_model(es(), measured)
    assert ok
    if recorded:
        assert measured["decode_tokens_per_s"]["value"] == pytest.approx(4096 / 40)
        assert measured["decode_tokens_per_s"]["samples"] == 8 and "102.4 tokens/s" in detail
    else:
        assert measured == {} and "decode speed not recorded" in detail


# -- physics bounds: a figure no one measured is refused, never priced (issue #40) -------------

@pytest.mark.parametrize("setting, key", [("modal.est_decode_tokens_per_s=1e308", "est_decode_tokens_per_s"),
                                          ("modal.est_decode_tokens_per_s=1e-308", "est_decode_tokens_per_s"),
                                          ("modal.est_header_s=1e308", "est_header_s"),
                                          ("modal.est_verify_s_per_proof=1e-308", "est_verify_s_per_proof"),
                                          ("modal.est_update_s=1e308", "est_update_s"),
                                          ("modal.est_resident_slowdown=1e308", "est_resident_slowdown"),
                                          ("modal.gpu_price_per_hour=1e308", "gpu_price_per_hour")])
def test_a_set_figure_outside_its_physical_range_is_refused_naming_the_key(setting, key):
    with pytest.raises(ConfigError) as err:
        plan.plan(es(setting), command="train_es", backend="modal")
    assert str(err.value).startswith(f"--set {setting}: ") and "physical range" in str(err.value)
    result = runner.invoke(app, ["train", "es", "--config", str(KIMINA_ES), "--backend", "modal", "--dry-run",
                                 "--set", setting])
    assert result.exit_code == 2 and "unexpected" not in result.stderr and f"--set {setting}" in result.stderr


def test_a_config_file_figure_outside_its_physical_range_names_the_file(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text(KIMINA_ES.read_text(encoding="utf-8").replace("[modal]\n", "[modal]\nest_header_s = 1e308\n"),
                    encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"^{path}: modal.est_header_s = 1e\+308: outside the physical range"):
        plan.plan(load_config(path), command="train_es", backend="modal")


def test_zero_keeps_meaning_the_gpu_tables_figure():
    p = plan.plan(es("modal.est_decode_tokens_per_s=0", "modal.gpu_price_per_hour=0"), command="train_es", backend="modal")
    assert p["figures"]["decode_tokens_per_s"]["value"] == 100.0


def test_a_measured_decode_speed_of_1e308_is_never_priced_as_measured(tmp_path):
    """The issue's case: 1e308 tokens/s in a calibration was used silently, labelled measured."""
    path = written(es(), tmp_path / "c.json")
    body = json.loads(path.read_text(encoding="utf-8"))
    body["figures"]["decode_tokens_per_s"]["value"] = 1e308
    path.write_text(json.dumps(body), encoding="utf-8")
    result = runner.invoke(app, ["train", "es", "--config", str(KIMINA_ES), "--backend", "modal", "--dry-run",
                                 "--json", "--set", f"modal.calibration={path}"])
    assert result.exit_code == 2
    error = json.loads(result.stdout)
    assert error["ok"] is False and error["kind"] == "config" and "est_usd_total" not in error
    assert error["error"].startswith(f"{path}: figures.decode_tokens_per_s.value = 1e+308: outside the physical range")


# -- the doctor and scripts/gpu_first_contact.py share one file --------------------------------

def test_a_write_keeps_the_other_writers_figures_measured_on_the_same_fingerprint(tmp_path):
    config = es()
    path = tmp_path / "c.json"
    calibration.write(path, config, {"header_s": calibration.figure(40.0, 1, "lean")}, "2026-12-01T00:00:00Z")
    calibration.write(path, config, {"resident_slowdown": calibration.figure(0.6, 3, "two engines")},
                      "2026-12-07T00:00:00Z", by="scripts/gpu_first_contact.py")
    body = calibration.load(path)
    assert set(body["figures"]) == {"header_s", "resident_slowdown"}
    p = plan.plan(es(f"modal.calibration={path}"), command="train_es", backend="modal")
    assert p["figures"]["header_s"]["source"] == "measured (doctor, 2026-12-01, n = 1)"
    assert p["figures"]["resident_slowdown"] == {"value": 0.6, "source": "measured (gpu_first_contact, 2026-12-07, n = 3)"}
    # another fingerprint: replaced whole
    calibration.write(path, es("generate.max_tokens=4096"), {"header_s": calibration.figure(41.0, 1, "x")},
                      "2026-12-08T00:00:00Z")
    assert set(calibration.load(path)["figures"]) == {"header_s"}


def test_the_doctors_dry_run_refuses_an_unphysical_figure_too():
    for args in (["doctor", "--config", str(KIMINA_ES), "--backend", "modal", "--dry-run"],):
        result = runner.invoke(app, [*args, "--set", "modal.est_decode_tokens_per_s=1e-308"])
        assert result.exit_code == 2, (args, result.stderr)
        assert "--set modal.est_decode_tokens_per_s=1e-308: outside the physical range" in " ".join(result.stderr.split())
