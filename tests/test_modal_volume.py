"""Modal's Volume rules, as tests/modal_standin.py enforces them, and our functions under them.

The rules come from the modal 1.6 client (modal/volume.py): `reload()` fails while a process of
the container has its cwd or an open file inside the Volume (the error names which), and a
container sees another's writes only after their `commit()` and its own `reload()`.
"""

import json
import os
import subprocess
import sys

import pytest

from modal_standin import OPEN_FILES, VolumeStandIn
from prover_cli.config import config_from_dict
from prover_cli.on_modal import functions

pytestmark = pytest.mark.filterwarnings("ignore:.*executing locally.*:UserWarning")


@pytest.fixture
def volume(tmp_path):
    return VolumeStandIn(tmp_path / "runs")


# --------------------------------------------------------------------------------------------
# The rules
# --------------------------------------------------------------------------------------------

def test_reload_refuses_while_this_process_works_inside_the_volume(volume, monkeypatch):
    (volume._mount / "d").mkdir()
    monkeypatch.chdir(volume._mount / "d")
    with pytest.raises(RuntimeError, match=f"^{OPEN_FILES}: cwd is inside volume$"):
        volume.reload()
    monkeypatch.chdir(volume._mount.parent)
    volume.reload()


def test_reload_refuses_while_a_started_process_works_inside_the_volume(volume):
    # children that outlive any test (killed at its end): one that ended by itself would flip the check
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], cwd=volume._mount)
    try:
        with pytest.raises(RuntimeError, match=r"cwd of '.*time.sleep\(3600\)' is inside volume"):
            volume.reload()
    finally:
        child.kill()
        child.wait()
    volume.reload()


def test_reload_refuses_while_a_file_on_the_volume_is_open(volume):
    (volume._mount / "ledger.json").write_text("{}")
    with open(volume._mount / "ledger.json"):
        with pytest.raises(RuntimeError, match=f"{OPEN_FILES}: path ledger.json is open"):
            volume.reload()
    volume.reload()


def test_writes_cross_containers_only_after_commit_and_reload(volume):
    with volume._container("writer"):
        (volume._mount / "ledger.json").write_text("1")
    with volume._container("reader"):
        assert not (volume._mount / "ledger.json").exists()
    with volume._container("writer"):
        assert (volume._mount / "ledger.json").read_text() == "1"  # its own write stays visible to it
        volume.commit()
    with volume._container("reader"):
        assert not (volume._mount / "ledger.json").exists()  # committed, but not reloaded yet
        volume.reload()
        assert (volume._mount / "ledger.json").read_text() == "1"
    with volume._container("writer"):
        (volume._mount / "ledger.json").write_text("2")
    with volume._container("reader"):
        volume.reload()
        assert (volume._mount / "ledger.json").read_text() == "1"  # not committed: still the old one
    with volume._container("late"):  # a new container mounts the committed state
        assert (volume._mount / "ledger.json").read_text() == "1"


# --------------------------------------------------------------------------------------------
# Our functions under the rules
# --------------------------------------------------------------------------------------------

def test_no_function_changes_the_working_directory(tmp_path, monkeypatch):
    """The bug Modal would have hit: a library call running with cwd inside /runs (and a vLLM or
    REPL child inheriting it) makes the next reload() fail. Bodies now use absolute paths."""
    volume = VolumeStandIn(tmp_path / "runs")
    monkeypatch.setattr(functions, "RUNS_MOUNT", str(volume._mount))
    monkeypatch.setattr(functions, "runs_volume", volume)
    seen = {}

    def library(config, **kwargs):
        seen["cwd"] = os.getcwd()
        seen["run_dir"] = config.run.dir
        seen["kwargs"] = kwargs
        functions._reload(volume)  # what a library call that waits on other containers does
        return {"ok": True}

    monkeypatch.setattr(functions, "resolve_function", lambda name: library)
    config = config_from_dict({"run": {"dir": "runs/x"}, "data": {"task": "countdown"}}).to_dict()
    assert functions.prepare_data.local(config, {"out_path": "data/p.jsonl"}) == {"ok": True}
    assert seen["cwd"] == os.getcwd() and str(volume._mount) not in seen["cwd"]
    assert seen["run_dir"] == str(volume._mount / "runs/x")
    assert seen["kwargs"]["out_path"] == volume._mount / "data/p.jsonl"
    assert volume._reloads == 2 and volume._commits == 1


@pytest.mark.slow
def test_es_members_in_their_own_containers_see_each_committed_ledger(tmp_path, monkeypatch):
    """train_es and each ES member are separate containers: the member reads theta_{t-1} from the
    ledger only because the loop commits before the fan-out and the member reloads."""
    volume = VolumeStandIn(tmp_path / "runs")
    models = VolumeStandIn(tmp_path / "models")
    monkeypatch.setattr(functions, "RUNS_MOUNT", str(volume._mount))
    monkeypatch.setattr(functions, "runs_volume", volume)
    monkeypatch.setattr(functions, "models_volume", models)
    real_fan_out = functions.fan_out
    containers = []

    def fan_out_in_containers(function, inputs, *, return_exceptions):
        results = []
        for args in inputs:
            name = f"member-{args[1]}"
            containers.append(name)
            with volume._container(name):
                results.extend(real_fan_out(function, [args], return_exceptions=return_exceptions))
        return results

    monkeypatch.setattr(functions, "fan_out", fan_out_in_containers)
    config = config_from_dict({
        "model": {"name": "tiny", "cache_dir": str(tmp_path / "cache"), "device": "cpu", "dtype": "float32"},
        "data": {"task": "countdown", "preset": "countdown", "problems": "data/p.jsonl"}, "task": {"countdown": {"problems": 8}},
        "generate": {"n": 1, "max_tokens": 4, "batch_size": 8},
        "es": {"population": 2, "iterations": 2, "problems_per_iteration": 2, "sigma": 0.01, "learning_rate": 0.01},
        "run": {"dir": "runs/es"},
    }).to_dict()
    with volume._container("loop"):
        functions.prepare_data.local(config, {"source": None, "out_path": None, "limit": None, "preset": None})
        result = functions.train_es.local(config, {"resume": False})
    assert result["ok"] and result["iterations"] == 2
    assert containers == ["member-0", "member-1", "member-0", "member-1"]
    assert len(json.loads(volume._committed["runs/es/ledger.json"])["iterations"]) == 2  # committed at the end


@pytest.mark.slow
def test_members_fail_when_the_loop_does_not_commit_before_the_fan_out(tmp_path, monkeypatch):
    """The same run with the pre-fan-out commit removed: the member container cannot see the
    ledger. This is what makes the test above worth something."""
    volume = VolumeStandIn(tmp_path / "runs")
    monkeypatch.setattr(functions, "RUNS_MOUNT", str(volume._mount))
    monkeypatch.setattr(functions, "runs_volume", volume)
    monkeypatch.setattr(functions, "models_volume", VolumeStandIn(tmp_path / "models"))
    real_fan_out = functions.fan_out

    def fan_out_in_containers(function, inputs, *, return_exceptions):
        with volume._container(f"member-{inputs[0][1]}"):
            return real_fan_out(function, inputs, return_exceptions=return_exceptions)

    monkeypatch.setattr(functions, "fan_out", fan_out_in_containers)
    real_members = functions.ModalPopulation.members

    def members_without_commit(self, iteration, problems):
        monkeypatch.setattr(functions, "_commit", lambda v: None)
        return real_members(self, iteration, problems)

    monkeypatch.setattr(functions.ModalPopulation, "members", members_without_commit)
    config = config_from_dict({
        "model": {"name": "tiny", "cache_dir": str(tmp_path / "cache"), "device": "cpu", "dtype": "float32"},
        "data": {"task": "countdown", "preset": "countdown", "problems": "data/p.jsonl"}, "task": {"countdown": {"problems": 8}},
        "generate": {"n": 1, "max_tokens": 4, "batch_size": 8},
        "es": {"population": 2, "iterations": 1, "problems_per_iteration": 2},
        "run": {"dir": "runs/es"},
    }).to_dict()
    with volume._container("loop"):
        functions.prepare_data.local(config, {"source": None, "out_path": None, "limit": None, "preset": None})
        with pytest.raises(Exception, match="ledger not found"):
            functions.train_es.local(config, {"resume": False})


def test_a_generator_engine_child_process_does_not_block_the_next_reload(tmp_path, monkeypatch):
    """vLLM starts worker processes when the engine loads; they keep the cwd of that moment for
    their lifetime. Loaded outside the Volume, the next `reload()` (in generate_file) succeeds."""
    volume = VolumeStandIn(tmp_path / "runs")
    monkeypatch.setattr(functions, "RUNS_MOUNT", str(volume._mount))
    monkeypatch.setattr(functions, "runs_volume", volume)
    monkeypatch.setattr(functions, "models_volume", VolumeStandIn(tmp_path / "models"))
    monkeypatch.setattr(functions, "_ensure_model", lambda config: None)
    children = []

    class EngineLikeSampler:
        def __init__(self):  # a worker process, as vLLM's engine core is
            children.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"]))

    def generate_file(config, *, sampler=None, **kwargs):
        return {"ok": True, "sampler": type(sampler).__name__, "out": str(kwargs["out_path"])}

    import prover_cli.policy.samplers as samplers

    monkeypatch.setattr(samplers, "load_sampler", lambda model_config, generate_config, model_path=None: EngineLikeSampler())
    monkeypatch.setattr(functions, "resolve_function", lambda name: generate_file)
    config = config_from_dict({"run": {"dir": "runs/g"}}).to_dict()
    try:
        generator = functions.Generator(config_json=json.dumps(config))
        result = generator.generate_file.local({"out_path": "runs/g/samples.jsonl", "problems_path": None})
        assert result == {"ok": True, "sampler": "EngineLikeSampler", "out": "runs/g/samples.jsonl"}
        # the same child started from inside the Volume is what Modal refuses
        children.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], cwd=volume._mount))
        with pytest.raises(RuntimeError, match="inside volume"):
            generator.generate_file.local({"out_path": "runs/g/samples.jsonl", "problems_path": None})
    finally:
        for child in children:
            child.kill()
            child.wait()


@pytest.mark.slow
def test_tensorboard_curves_of_an_es_run_on_the_volume_do_not_block_its_commits(tmp_path, monkeypatch):
    """`run.report_to = "tensorboard"` writes event files under the run directory, on the runs
    Volume. The loop commits before every fan-out, and a commit reloads (modal/volume.py), which
    an open file in the Volume refuses: the tracker closes its event file around each commit.
    With TensorFlow installed TensorBoard keeps the event file open from its first write to
    close() (`tf.io.gfile.GFile(path, "wb")` in its EventFileWriter); without it (here) it
    reopens the file per write, so the writer below keeps a handle open as TensorFlow's would."""
    pytest.importorskip("tensorboard")
    from prover_cli.training import tracking

    real_writer = tracking.summary_writer

    def writer_holding_its_file(log_dir, purge_step):
        writer = real_writer(log_dir, purge_step)
        handle = open(writer.file_writer.event_writer._file_name, "ab")  # noqa: SIM115 - held, as GFile does
        close = writer.close
        writer.close = lambda: (handle.close(), close())
        return writer

    monkeypatch.setattr(tracking, "summary_writer", writer_holding_its_file)
    volume = VolumeStandIn(tmp_path / "runs")
    monkeypatch.setattr(functions, "RUNS_MOUNT", str(volume._mount))
    monkeypatch.setattr(functions, "runs_volume", volume)
    monkeypatch.setattr(functions, "models_volume", VolumeStandIn(tmp_path / "models"))
    config = config_from_dict({
        "model": {"name": "tiny", "cache_dir": str(tmp_path / "cache"), "device": "cpu", "dtype": "float32"},
        "data": {"task": "countdown", "preset": "countdown", "problems": "data/p.jsonl"}, "task": {"countdown": {"problems": 8}},
        "generate": {"n": 1, "max_tokens": 4, "batch_size": 8},
        "es": {"population": 2, "iterations": 3, "problems_per_iteration": 2, "sigma": 0.01, "learning_rate": 0.01},
        "run": {"dir": "runs/es", "report_to": "tensorboard"},
    }).to_dict()
    functions.prepare_data.local(config, {"source": None, "out_path": None, "limit": None, "preset": None})
    result = functions.train_es.local(config, {"resume": False})
    assert result["ok"] and result["iterations"] == 3
    events = sorted(p for p in volume._committed if p.startswith("runs/es/tensorboard/events.out.tfevents"))
    assert events, "the curves reach the Volume"
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    steps = []
    for name in events:
        path = tmp_path / "event-copy" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(volume._committed[name])
    accumulator = EventAccumulator(str(tmp_path / "event-copy" / "runs/es/tensorboard"))
    accumulator.Reload()
    steps = sorted({event.step for event in accumulator.Scalars("reward/mean")})
    assert steps == [1, 2, 3]  # every iteration's curve point, across the reopened event files
