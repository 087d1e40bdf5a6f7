"""tracking.py: run.report_to parsing, TensorBoard event files written offline, resume purge, missing extras."""

import builtins
import importlib.util

import pytest

from conftest import PATIENCE_S
from prover_cli.config import load_config
from prover_cli.errors import BackendError, ConfigError
from prover_cli.training.tracking import open_tracker, parse_report_to, scalars


@pytest.mark.parametrize("value, names", [
    ("none", []), ("", []), ("tensorboard", ["tensorboard"]), ("TensorBoard, wandb", ["tensorboard", "wandb"]),
    (["trackio", "tensorboard", "trackio"], ["trackio", "tensorboard"]), (["none"], []),
])
def test_report_to_accepts_a_comma_separated_string_or_a_list(value, names):
    assert parse_report_to(value) == names


@pytest.mark.parametrize("override, message", [
    ("run.report_to=mlflow", r"run.report_to = 'mlflow': unknown tracker 'mlflow'; allowed: none, tensorboard"),
    ('run.report_to=["none", "wandb"]', r"`none` cannot be combined"),
    ("run.report_to=3", r"run.report_to.{0,3}3: expected a string or a list of strings"),
])
def test_bad_report_to_is_a_config_error_naming_the_key(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_scalars_keep_numbers_and_booleans_only():
    record = {"iteration": 2, "method": "es", "reward/mean": 0.5, "es/skipped": True, "x": float("nan")}
    assert scalars(record) == {"iteration": 2.0, "reward/mean": 0.5, "es/skipped": 1.0}


def records(steps):
    return [{"iteration": i, "method": "es", "reward/mean": i / 10, "es/skipped": False} for i in steps]


def read_scalars(log_dir, key):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    return [(e.step, round(e.value, 6)) for e in EventAccumulator(str(log_dir)).Reload().Scalars(key)]


def test_tensorboard_events_hold_every_record_and_a_resume_purges_redone_steps(tmp_path):
    config = load_config(None, ["run.report_to=tensorboard", f"run.dir={tmp_path}"])
    with open_tracker(config.run, hyperparameters=config.to_dict()) as tracker:
        for record in records([1, 2, 3]):
            tracker.log(record)
    assert read_scalars(tmp_path / "tensorboard", "reward/mean") == [(1, 0.1), (2, 0.2), (3, 0.3)]
    assert "method" not in str(read_scalars(tmp_path / "tensorboard", "es/skipped"))

    # Killed after step 3 with only 2 kept (metrics.jsonl cut back): steps 3.. are logged again.
    with open_tracker(config.run, hyperparameters=config.to_dict(), resumed_from=2) as tracker:
        for record in records([3, 4]):
            tracker.log({**record, "reward/mean": record["reward/mean"] + 1})
    assert read_scalars(tmp_path / "tensorboard", "reward/mean") == [(1, 0.1), (2, 0.2), (3, 1.3), (4, 1.4)]


def test_none_writes_nothing(tmp_path):
    config = load_config(None, [f"run.dir={tmp_path}"])
    with open_tracker(config.run, hyperparameters=config.to_dict()) as tracker:
        tracker.log(records([1])[0])
    assert list(tmp_path.iterdir()) == []


def test_a_missing_tracker_package_is_a_clear_error(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_trackio(name, *args, **kwargs):
        if name == "trackio":
            raise ImportError("No module named 'trackio'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_trackio)
    monkeypatch.setattr(importlib, "import_module", lambda name: no_trackio(name), raising=False)
    config = load_config(None, ["run.report_to=trackio", f"run.dir={tmp_path}"])
    with pytest.raises(BackendError, match="run.report_to asks for trackio, but `trackio` is not installed") as error:
        open_tracker(config.run, hyperparameters=config.to_dict())
    assert "pip install trackio" in error.value.hint


def test_the_tracker_reads_the_run_section_and_hands_wandb_the_hyperparameters_it_is_given(tmp_path, monkeypatch):
    """open_tracker takes config.run and the hyperparameters, not the whole config. What reaches
    `wandb.init` is recorded by a recorder, not by W&B (the offline test below runs the real one)."""
    import prover_cli.training.tracking as tracking

    calls = []

    class Recorder:  # only the attributes _Wandb touches; nothing is answered beyond `run`
        run = None

        def init(self, **kwargs):
            calls.append(("init", kwargs))

        def define_metric(self, *args, **kwargs):
            calls.append(("define_metric", args))

    monkeypatch.setattr(tracking, "_import", lambda name, module: Recorder())
    config = load_config(None, ["run.report_to=wandb", f"run.dir={tmp_path / 'run-b'}", "run.seed=7"])
    tracker = open_tracker(config.run, hyperparameters=config.to_dict())
    tracker.close()
    init = calls[0][1]
    assert init["name"] == "run-b" and init["config"] == config.to_dict() and init["config"]["run"]["seed"] == 7
    assert init["resume"] == "allow" and len(init["id"]) == 16
    assert (tmp_path / "run-b" / "wandb-run-id").read_text().strip() == init["id"]


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb (optional extra) not installed")
def test_wandb_offline_run_logs_locally_and_resume_reuses_the_run_id(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    config = load_config(None, ["run.report_to=wandb", f"run.dir={tmp_path / 'run'}"])
    with open_tracker(config.run, hyperparameters=config.to_dict()) as tracker:
        for record in records([1, 2]):
            tracker.log(record)
    run_id = (tmp_path / "run" / "wandb-run-id").read_text().strip()
    offline = list((tmp_path / "run" / "wandb").glob(f"offline-run-*-{run_id}"))
    assert len(offline) == 1 and list(offline[0].glob("*.wandb"))
    with open_tracker(config.run, hyperparameters=config.to_dict(), resumed_from=2) as tracker:
        tracker.log(records([3])[0])
    assert (tmp_path / "run" / "wandb-run-id").read_text().strip() == run_id


TRACKIO_SCRIPT = """
import json, sys
from prover_cli.config import load_config
from prover_cli.training.tracking import open_tracker
config = load_config(None, ["run.report_to=trackio", "run.dir=" + sys.argv[1]])
with open_tracker(config.run, hyperparameters=config.to_dict()) as tracker:
    for i in (1, 2):
        tracker.log({"iteration": i, "method": "es", "reward/mean": i / 10, "es/skipped": i == 2})
from trackio.sqlite_storage import SQLiteStorage
print(json.dumps(SQLiteStorage.get_logs("prover", "run-a")))
"""


@pytest.mark.skipif(importlib.util.find_spec("trackio") is None, reason="trackio (optional extra) not installed")
def test_trackio_local_run_holds_every_record_and_stdout_stays_clean(tmp_path):
    import json
    import os
    import subprocess
    import sys

    # TRACKIO_DIR is read when trackio is imported: a fresh process keeps the store in tmp_path.
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "store"), "TRACKIO_PROJECT": "prover"}
    done = subprocess.run([sys.executable, "-c", TRACKIO_SCRIPT, str(tmp_path / "run-a")], capture_output=True,
                          text=True, env=env, timeout=PATIENCE_S)
    assert done.returncode == 0, done.stderr
    logs = json.loads(done.stdout)  # trackio's banner went to stderr, so stdout is only our JSON
    assert [(row["step"], row["reward/mean"], row["es/skipped"]) for row in logs] == [(1, 0.1, 0.0), (2, 0.2, 1.0)]
