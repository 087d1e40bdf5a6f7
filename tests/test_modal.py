"""`--backend modal`: declarations, in-process (`.local()`) runs of every wrapper, the CLI seam, the plan.

No Modal credentials and no network: the declared objects are read back from the installed SDK
(modal 1.6); every test runs with the Volumes replaced by tests/modal_standin.py's VolumeStandIn,
which enforces Modal's reload/commit rules (what a no-op Volume would hide); the wrappers run in
this process with `.local()`, and the CLI's remote calls go to a fake runner. Verification in
Sandboxes has its own file, tests/test_modal_sandbox.py.
"""

import contextlib
import json
import subprocess
import sys
import types
from pathlib import Path

import modal
import pytest
from typer.testing import CliRunner

from conftest import PATIENCE_S
from modal_standin import VolumeStandIn, sandboxes_running
from prover_cli import backends
from prover_cli.on_modal import functions, images, remote, sandbox
from prover_cli.on_modal import plan as modal_plan
from prover_cli.cli import app
from prover_cli.config import Config, config_from_dict, load_config
from prover_cli.verify.kernel.pins import PINS
from prover_cli.errors import BackendError, InputError

REPO = Path(__file__).resolve().parents[1]
FAKE_REPL = REPO / "tests" / "fake_repl.py"
runner = CliRunner()
# `.local()` warns that a function with Volumes runs without them: that is the point here.
pytestmark = pytest.mark.filterwarnings("ignore:.*executing locally.*:UserWarning")


def install_volumes(mp, root):
    """The Volume stand-ins in place of Modal's, with the runs Volume mounted at `root`."""
    runs = VolumeStandIn(root, "prover-ledgers")
    models = VolumeStandIn(root.parent / (root.name + "-models"), "prover-models")
    mp.setattr(functions, "RUNS_MOUNT", str(root))
    for module in (functions, remote):
        mp.setattr(module, "runs_volume", runs)
    mp.setattr(functions, "models_volume", models)
    return runs


@pytest.fixture(autouse=True)
def volume_rules(request, tmp_path_factory):
    """Every test runs under the Volume stand-ins (the module-scoped `volume` fixture installs its own)."""
    if "volume" in request.fixturenames:
        yield None
        return
    with pytest.MonkeyPatch.context() as mp:
        yield install_volumes(mp, tmp_path_factory.mktemp("runs-volume"))


@pytest.fixture(autouse=True)
def sandbox_standin(monkeypatch):
    """Lean verification goes to Sandboxes; here, to the stand-in running tests/fake_repl.py."""
    yield from sandboxes_running(monkeypatch, FAKE_REPL)


# --------------------------------------------------------------------------------------------
# Declarations: what each function asks Modal for, read from the objects the decorators built
# --------------------------------------------------------------------------------------------

def declared(obj):
    """image, gpu, cpu, memory, timeout, retries, max_containers, scaledown and volumes of a Function or Cls.

    gpu/cpu/memory/volumes/image sit on the function spec; timeout, retries, max_containers and
    scaledown_window only in the closure modal 1.6 builds the function definition from (hence
    the pinned minor).
    """
    from modal._utils.async_utils import synchronizer

    if isinstance(obj, modal.Cls):
        obj = obj._get_class_service_function()
    impl = synchronizer._translate_in(obj)
    cells = dict(zip(impl._load.__code__.co_freevars, (c.cell_contents for c in impl._load.__closure__)))
    by_image = {name: synchronizer._translate_in(image) for name, image in images.IMAGES.items()}
    volumes = {synchronizer._translate_in(images.models_volume): "models",
               synchronizer._translate_in(images.runs_volume): "runs"}
    spec = impl._spec
    return {
        "image": next(name for name, image in by_image.items() if image is spec.image),
        "gpu": spec.gpus,
        "cpu": spec.cpu,
        "memory_mb": spec.memory,
        "timeout_s": cells["timeout"],
        "retries": cells["retry_policy"].retries if cells["retry_policy"] else 0,
        "max_containers": cells["max_containers"],
        "scaledown_window_s": cells["scaledown_window"],
        "volumes": {path: volumes[volume] for path, volume in spec.volumes.items()},
    }


BOTH = {"/models": "models", "/runs": "runs"}
RUNS = {"/runs": "runs"}
INTENDED = {
    # name: (image, gpu, cpu, memory MiB, timeout s, retries, max containers, scaledown s, volumes)
    "download_model": ("gpu", None, 2.0, 8192, 2 * 3600, 2, 1, None, BOTH),
    "prepare_data": ("orchestrator", None, 2.0, 8192, 2 * 3600, 2, 1, None, RUNS),
    "verify": ("orchestrator", None, 2.0, 4096, 24 * 3600, 2, 1, None, RUNS),
    "lean_image_check": ("lean", None, 1.0, 4096, 600, 0, 1, None, {}),
    "Generator": ("gpu", "H100:1", 8.0, 65536, 3600, 2, 1, None, BOTH),
    # warm through the longest legitimate gap: one verification wave at the Sandbox timeout
    # (600 s header + 16 rounds x 65 s + 120 s = 1760 s) + the kernel stage's estimate (every
    # proof passes: 16 rounds x 4.5 s of `lean -o` and check, + 2 checker processes x 5 s of header
    # import = 82 s) + 120 s for the update
    "ESMember": ("gpu", "H100:1", 8.0, 65536, 3600, 2, 30, 1962, BOTH),
    "train_es": ("gpu", "H100:1", 8.0, 65536, 24 * 3600, 2, 1, None, BOTH),
    "train_grpo": ("trl", "H100:1", 8.0, 65536, 24 * 3600, 0, 1, None, BOTH),
    "replay_seeds": ("gpu", None, 8.0, 65536, 3600, 2, 1, None, BOTH),
    "evaluate": ("gpu", None, 8.0, 65536, 24 * 3600, 2, 1, None, BOTH),
    # `prover doctor --backend modal`: one GPU for one prompt; two small containers for the Volumes
    "doctor_gpu": ("gpu", "H100:1", 8.0, 65536, 1800, 0, 1, None, BOTH),
    "doctor_volume_write": ("orchestrator", None, 1.0, 1024, 600, 0, 1, None, BOTH),
    "doctor_volume_read": ("orchestrator", None, 1.0, 1024, 600, 0, 1, None, BOTH),
}
FIELDS = ("image", "gpu", "cpu", "memory_mb", "timeout_s", "retries", "max_containers", "scaledown_window_s", "volumes")


def test_module_imports_without_credentials_or_network(tmp_path):
    probe = ("import prover_cli.on_modal.remote as m; "
             "print(sorted(n for a in m.APPS.values() for n in a.registered_functions))")
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=REPO)
    assert out.returncode == 0, out.stderr
    names = eval(out.stdout)  # a printed list of str
    assert {"train_es", "ESMember.*", "Generator.*", "verify", "evaluate"} <= set(names)


@pytest.mark.parametrize("name", sorted(INTENDED))
def test_each_function_declares_its_intended_resources(name):
    got = declared(getattr(functions, name))
    assert {f: got[f] for f in FIELDS} == dict(zip(FIELDS, INTENDED[name]))


@pytest.mark.parametrize("name,key", [("Generator", "generate"), ("ESMember", "es_member"), ("evaluate", "eval"),
                                      ("doctor_volume_write", "doctor_volumes"), ("doctor_volume_read", "doctor_volumes")]
                         + [(n, n) for n in INTENDED if n not in ("Generator", "ESMember", "evaluate",
                                                                 "doctor_volume_write", "doctor_volume_read")])
def test_declarations_are_the_plan_table(name, key):
    """The decorators receive `modal_plan.resources`, so the dry-run plan describes what deploys."""
    table = modal_plan.resources(Config())[key]
    got = declared(getattr(functions, name))
    assert (got["image"], got["gpu"], got["cpu"], got["memory_mb"], got["timeout_s"], got["retries"],
            got["max_containers"]) == (table.image, table.gpu, table.cpu, table.memory_mb, table.timeout_s,
                                       table.retries, table.max_containers)
    assert set(got["volumes"]) == set(table.volumes)


def test_with_options_applies_the_callers_modal_section():
    config = config_from_dict({"modal": {"gpu": "A100", "gpus_per_container": 2, "max_containers": 7,
                                         "timeout_min": 5, "retries": 1, "verify_cpus": 4.0}})
    assert functions.options("es_member", config) == dict(
        gpu="A100:2", cpu=8.0, memory=65536, timeout=300, retries=1, max_containers=7,
        scaledown_window=modal_plan.es_member_scaledown_window_s(config))
    # the Lean Sandboxes follow [modal] too: one REPL's share of modal.verify_cpus (verify.workers = 4)
    assert sandbox.sandbox_arguments(config)["cpu"] == (1.0, 1.0)
    # eval and replay_seeds are CPU functions that get the GPU only when they need it
    assert "gpu" not in functions.options("eval", config)
    assert functions.options("eval", config, gpu=True)["gpu"] == "A100:2"


def test_lean_image_pins_toolchain_repl_and_mathlib_and_fetches_the_cache():
    assert "--default-toolchain leanprover/lean4:v4.15.0" in images.ELAN_STEPS[1]
    assert images.PINS["elan"] in images.ELAN_STEPS[0]
    assert "--branch v4.15.0 https://github.com/leanprover-community/repl" in images.REPL_STEPS[0]
    assert 'rev = "v4.15.0"' in images.LEAN_PROJECT_LAKEFILE
    assert any("lake exe cache get" in step for step in images.MATHLIB_STEPS)
    # no step builds Mathlib itself: only `lake update`, the cache, and one `import Mathlib` check
    assert not any("lake build" in step for step in images.MATHLIB_STEPS)


def test_config_values_shape_the_declarations_through_the_environment(tmp_path):
    config = config_from_dict({"modal": {"runs_volume": "my-runs"},
                               "verify": {"lean_toolchain": "leanprover/lean4:v4.16.0", "mathlib_rev": "v4.16.0"}})
    settings = images.deploy_settings(config)
    probe = ("import prover_cli.on_modal.images as m; "
             "print(repr(m.runs_volume)); print(m.REPL_STEPS[0]); print(m.LEAN_PROJECT_LAKEFILE)")
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", **settings}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert "'my-runs'" in out.stdout and "--branch v4.16.0" in out.stdout and 'rev = "v4.16.0"' in out.stdout
    assert images.deploy_settings(Config()) == images.SETTINGS  # this process: the defaults


def test_config_paths_become_absolute_on_the_runs_volume(tmp_path, monkeypatch):
    """Nothing chdirs into a Volume: every relative path of the wire config is made absolute."""
    monkeypatch.setattr(functions, "RUNS_MOUNT", str(tmp_path))
    (tmp_path / "uploaded-model").mkdir()
    config = functions._config({"run": {"dir": "runs/a"}, "data": {"problems": "data/p.jsonl", "source": "org/set"},
                                "model": {"name": "uploaded-model", "cache_dir": ".cache/m"}})
    assert config.run.dir == str(tmp_path / "runs/a") and config.data.problems == str(tmp_path / "data/p.jsonl")
    assert config.model.cache_dir == str(tmp_path / ".cache/m")
    assert config.model.name == str(tmp_path / "uploaded-model")  # a file on the Volume
    assert config.data.source == "org/set"                           # a hub id stays an id
    assert functions._paths_in({"proofs_path": "p.jsonl", "resume": False}) == {
        "proofs_path": tmp_path / "p.jsonl", "resume": False}


# --------------------------------------------------------------------------------------------
# `.local()`: every wrapper, in this process, on the tiny model and countdown
# --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def volume(tmp_path_factory):
    """A temp directory standing in for the runs Volume, shared by the in-process runs below."""
    root = tmp_path_factory.mktemp("runs-volume")
    with pytest.MonkeyPatch.context() as mp:
        install_volumes(mp, root)
        yield root


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The config dict a remote call receives: tiny model, countdown, paths relative to the Volume."""
    cache = tmp_path_factory.mktemp("model-cache")
    return config_from_dict({
        "model": {"name": "tiny", "cache_dir": str(cache), "device": "cpu", "dtype": "float32"},
        "task": {"countdown": {"problems": 24}}, "data": {"task": "countdown", "preset": "countdown",
                 "problems": "data/problems.jsonl", "valid_fraction": 0.5},
        "generate": {"n": 1, "max_tokens": 6, "temperature": 1.0, "top_p": 1.0, "batch_size": 8},
        "es": {"population": 2, "iterations": 1, "problems_per_iteration": 2, "sigma": 0.01, "learning_rate": 0.01},
        "grpo": {"steps": 1, "num_generations": 2, "per_device_train_batch_size": 2, "max_completion_length": 6},
        "eval": {"split": "valid", "n": 2, "k": [1, 2], "plot": False},
        "run": {"dir": "runs/tiny"},
    }).to_dict()


def lines(path):
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def prepared(volume, tiny):
    result = functions.prepare_data.local(tiny, {"source": None, "out_path": None, "limit": None, "preset": None})
    return result


@pytest.mark.slow
def test_prepare_data_local_writes_problems_on_the_volume(volume, prepared):
    problems = lines(volume / "data/problems.jsonl")
    assert len(problems) == 24 and {p["split"] for p in problems} <= {"train", "valid"}
    assert prepared["ok"] is not False


@pytest.mark.slow
def test_generator_local_writes_samples_on_the_volume(volume, tiny, prepared):
    generator = functions.Generator(config_json=json.dumps(tiny))
    result = generator.generate_file.local({"problems_path": "data/problems.jsonl",
                                            "out_path": "runs/tiny/samples.jsonl"})
    samples = lines(volume / "runs/tiny/samples.jsonl")
    assert result["samples_written"] == len(samples) == 24
    assert {s["problem_id"] for s in samples} == {p["id"] for p in lines(volume / "data/problems.jsonl")}


@pytest.mark.slow
def test_train_es_then_replay_seeds_local(volume, tiny, prepared):
    result = functions.train_es.local(tiny, {"resume": False})
    assert result["ok"] and result["iterations"] == 1
    ledger = volume / "runs/tiny/ledger.json"
    assert ledger.exists() and (volume / "runs/tiny/metrics.jsonl").exists()

    replayed = functions.replay_seeds.local(tiny, {"ledger_path": "runs/tiny/ledger.json",
                                                   "out_dir": "runs/tiny/replayed", "upto": None, "device": "cpu"})
    assert replayed["ok"] and (volume / "runs/tiny/replayed/config.json").exists()


@pytest.mark.slow
def test_es_member_local_gives_one_completion_per_problem(volume, tiny, prepared):
    member = functions.ESMember(config_json=json.dumps(tiny))
    problems = lines(volume / "data/problems.jsonl")[:2]
    completions = member.completions.local(1, 0, problems)
    assert len(completions) == len(problems) * 1 and all(isinstance(c, str) for c in completions)


@pytest.mark.slow
def test_evaluate_local_scores_countdown(volume, tiny, prepared):
    result = functions.evaluate.local(tiny, {"model": None, "ledger": None, "verdicts": None, "k": None})
    valid = [p for p in lines(volume / "data/problems.jsonl") if p["split"] == "valid"]
    assert result["ok"] and result["problems"] == len(valid) and result["samples"] == 2 * len(valid)
    assert 0.0 <= result["pass@1"] <= result["pass@2"] <= 1.0
    assert (volume / result["verdicts"]).exists()  # relative to the Volume, where the remote call writes


@pytest.mark.slow
def test_train_grpo_local(volume, tiny, prepared):
    config = {**tiny, "run": {**tiny["run"], "dir": "runs/tiny-grpo"}}  # runs/tiny holds the ES run
    result = functions.train_grpo.local(config, {"resume": False})
    assert result["ok"] and (volume / "runs/tiny-grpo/metrics.jsonl").exists()


@pytest.mark.slow
def test_verify_local_runs_the_real_library_with_the_repl_stand_in(volume, tiny):
    config = json.loads(json.dumps(tiny))
    config["verify"] = {"repl_command": [sys.executable, str(FAKE_REPL)], "workers": 1, "timeout_s": PATIENCE_S,
                        "header_timeout_s": PATIENCE_S, "memory_limit_gb": 0.0}  # the hang guard: nothing hangs
    config["modal"] = {"verify_batch_size": 2}
    config["data"]["task"] = "lean"
    statement = "theorem t{i} : 1 + 1 = 2 := by"
    proofs = [{"id": f"p{i}", "problem_id": f"t{i}", "formal_statement": statement.format(i=i), "proof": "  norm_num"}
              for i in range(3)]
    (volume / "proofs").mkdir(exist_ok=True)
    (volume / "proofs/in.jsonl").write_text("".join(json.dumps(p) + "\n" for p in proofs), encoding="utf-8")
    result = functions.verify.local(config, {"proofs_path": "proofs/in.jsonl", "out_path": "proofs/out.jsonl"})
    verdicts = lines(volume / "proofs/out.jsonl")
    assert sorted(v["id"] for v in verdicts) == ["p0", "p1", "p2"] and result["proofs"] == 3
    assert {v["verdict"] for v in verdicts} == {"verified"} and result["ok"] and result["verified"] == 3


def test_fan_out_on_modal_uses_starmap_with_the_requested_exception_policy(monkeypatch):
    seen = {}

    class FakeFunction:
        def starmap(self, inputs, order_outputs, return_exceptions):
            seen.update(inputs=list(inputs), order_outputs=order_outputs, return_exceptions=return_exceptions)
            return iter(["r1", "r2"])

    monkeypatch.setattr(functions.modal, "is_local", lambda: False)
    assert functions.fan_out(FakeFunction(), [(1,), (2,)], return_exceptions=True) == ["r1", "r2"]
    assert seen == {"inputs": [(1,), (2,)], "order_outputs": True, "return_exceptions": True}


def test_es_members_fail_the_iteration_instead_of_returning_exceptions(monkeypatch):
    """A missing member would bias the update: the ES fan-out never uses return_exceptions."""
    seen = {}

    class FakeMembers:
        def __init__(self, **parameters):
            self.completions = self

        def starmap(self, inputs, order_outputs, return_exceptions):
            seen.update(inputs=list(inputs), return_exceptions=return_exceptions)
            return iter([["x"], ["y"]])

        def update_autoscaler(self, **settings):  # modal.Cls instances have it (modal/cls.py)
            seen["autoscaler"] = settings

    class FakeCls:
        def with_options(self, **options):
            seen["options"] = options
            return FakeMembers

    monkeypatch.setattr(functions, "ESMember", FakeCls())
    monkeypatch.setattr(functions.modal, "is_local", lambda: False)
    monkeypatch.setattr(functions, "_commit", lambda volume: seen.setdefault("committed", True))
    config = config_from_dict({"es": {"population": 2}})
    population = functions.ModalPopulation(config, config.to_dict())
    assert population.members(3, [{"id": "p"}]) == [["x"], ["y"]]
    assert seen["return_exceptions"] is False and seen["committed"]
    assert seen["inputs"] == [(3, 0, [{"id": "p"}]), (3, 1, [{"id": "p"}])]
    assert seen["options"]["max_containers"] == config.modal.max_containers
    assert "autoscaler" not in seen
    population.close()  # after the run: the warm members' long window is lowered to Modal's minimum
    assert seen["autoscaler"] == {"scaledown_window": 2}


def test_routing_places_lean_verification_in_sandboxes_and_restores():
    """The library's own functions stay in place (no attribute of prover_cli.verify is swapped);
    only the placement, where their processes run, changes inside the block."""
    import prover_cli.verify as verify_module
    from prover_cli.verify import placement

    library = (verify_module.verify_records, verify_module.verify_file)
    lean = config_from_dict({"data": {"task": "lean"}})
    with functions.verification_in_sandboxes(lean):
        here = placement.current()
        assert here.where == "modal sandboxes" and here.transport_factory and here.kernel_runner
        assert (verify_module.verify_records, verify_module.verify_file) == library
    assert placement.current() is placement.LOCAL
    with functions.verification_in_sandboxes(config_from_dict({"data": {"task": "countdown"}})):
        assert placement.current() is placement.LOCAL  # Python-checked tasks never reach Lean
    with functions.verification_in_sandboxes(config_from_dict({"data": {"task": "lean"},
                                                               "verify": {"backend": "kimina",
                                                                          "kernel_check": False}})):
        assert placement.current() is placement.LOCAL  # a Kimina server is its own sandbox
    with functions.verification_in_sandboxes(config_from_dict({"data": {"task": "lean"},
                                                               "verify": {"backend": "kimina"}})):
        # ...but the kernel stage's steps need Lean, which only the Lean image has: Sandboxes
        here = placement.current()
        assert here.where == "modal kernel sandboxes" and here.kernel_runner and here.transport_factory is None
    assert placement.current() is placement.LOCAL
    assert (verify_module.verify_records, verify_module.verify_file) == library


def test_a_retried_training_call_resumes_from_the_ledger(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(functions.modal, "current_function_call_id", lambda: "fc-1")
    config = config_from_dict({"run": {"dir": "runs/x"}})
    assert functions.resume_after_retry(config, {"resume": False}) == {"resume": False}  # first attempt
    assert (tmp_path / "runs/x/.modal-call").read_text() == "fc-1"
    # the retry comes before any iteration finished: nothing to resume from yet
    assert functions.resume_after_retry(config, {"resume": False}) == {"resume": False}
    (tmp_path / "runs/x/ledger.json").write_text("{}")
    assert functions.resume_after_retry(config, {"resume": False}) == {"resume": True}
    monkeypatch.setattr(functions.modal, "current_function_call_id", lambda: "fc-2")  # a new command
    assert functions.resume_after_retry(config, {"resume": False}) == {"resume": False}


# --------------------------------------------------------------------------------------------
# From your machine: paths onto the Volume, uploads, outputs
# --------------------------------------------------------------------------------------------

def test_to_wire_maps_paths_onto_the_volume_and_lists_uploads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("samples.jsonl").write_text("{}\n")
    config = config_from_dict({"run": {"dir": str(tmp_path / "runs/a")}})
    config_dict, kwargs, uploads = remote.to_wire(
        "verify", config, {"proofs_path": tmp_path / "samples.jsonl", "out_path": Path("out/v.jsonl")})
    assert kwargs == {"proofs_path": "samples.jsonl", "out_path": "out/v.jsonl"}
    assert uploads == [(tmp_path / "samples.jsonl", "samples.jsonl")]
    assert config_dict["run"]["dir"] == "runs/a" and config_dict["model"]["name"] == config.model.name

    # a hub id stays an id; a ledger only on the Volume (from an earlier Modal run) passes through
    _, kwargs, uploads = remote.to_wire("eval", config, {"model": "AI-MO/x", "ledger": Path("runs/a/ledger.json"),
                                                            "verdicts": None, "k": [1]})
    assert kwargs == {"model": "AI-MO/x", "ledger": "runs/a/ledger.json", "verdicts": None, "k": [1]} and uploads == []

    with pytest.raises(InputError, match="inside"):
        remote.to_wire("verify", config, {"proofs_path": Path("/etc/hosts"), "out_path": None})
    with pytest.raises(BackendError, match="no Modal function"):
        remote.to_wire("report", config, {})


def test_a_tracker_the_images_do_not_have_is_refused_before_anything_starts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for tracker in ("wandb", "trackio", "tensorboard,wandb"):
        config = config_from_dict({"run": {"dir": "runs/a", "report_to": tracker}})
        with pytest.raises(BackendError, match="Modal images have no"):
            remote.to_wire("train_es", config, {"resume": False})
    config = config_from_dict({"run": {"dir": "runs/a", "report_to": "tensorboard"}})
    remote.to_wire("train_grpo", config, {"resume": False})  # in the GPU and TRL images
    assert modal_plan.TENSORBOARD in modal_plan.image_specs("leanprover/lean4:v4.15.0", "v4.15.0")["trl"].python_packages


def test_outputs_brought_back_are_small_files_only():
    config_dict = config_from_dict({"run": {"dir": "runs/a"}}).to_dict()
    assert remote._outputs("train_es", config_dict, {}) == ["runs/a/ledger.json", "runs/a/metrics.jsonl",
                                                               "runs/a/config.toml"]
    assert remote._outputs("verify", config_dict, {"out_path": "v.jsonl"}) == ["v.jsonl"]
    assert remote._outputs("replay_seeds", config_dict, {"out_dir": "w"}) == []  # weights stay on the Volume


# --------------------------------------------------------------------------------------------
# The CLI: `--backend modal` goes through the MODAL_RUNNER seam
# --------------------------------------------------------------------------------------------

@pytest.fixture
def fake_runner(monkeypatch):
    calls = []

    def fake(name, config, kwargs):
        calls.append((name, config, kwargs))
        return {"ok": True, "ran": name}

    monkeypatch.setattr(backends, "MODAL_RUNNER", fake)
    return calls


@pytest.mark.parametrize("argv,name,expected", [
    (["prepare-data", "examples", "--out", "p.jsonl"], "prepare_data", {"source": "examples", "out_path": Path("p.jsonl")}),
    (["verify", "s.jsonl", "--out", "v.jsonl"], "verify", {"proofs_path": Path("s.jsonl"), "out_path": Path("v.jsonl")}),
    (["generate", "--out", "s.jsonl"], "generate", {"out_path": Path("s.jsonl"), "problems_path": None, "model": None}),
    (["train", "es", "--detach"], "train_es", {"resume": False, "detach": True}),
    (["train", "es", "--resume"], "train_es", {"resume": True, "detach": False}),
    (["train", "grpo", "--detach"], "train_grpo", {"detach": True}),
    (["replay-seeds", "l.json", "--out", "w", "--device", "cuda"], "replay_seeds",
     {"ledger_path": Path("l.json"), "out_dir": Path("w"), "device": "cuda", "upto": None}),
    (["eval", "--verdicts", "v.jsonl", "--k", "1,2"], "eval", {"verdicts": Path("v.jsonl"), "k": [1, 2]}),
])
def test_cli_routes_backend_modal_through_the_runner_seam(fake_runner, argv, name, expected):
    result = runner.invoke(app, [*argv, "--backend", "modal", "--json", "--set", "run.dir=runs/z"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {"ok": True, "ran": name}
    [(got_name, config, kwargs)] = fake_runner
    assert got_name == name and config.run.dir == "runs/z"
    assert "reporter" not in kwargs  # progress does not cross the wire
    assert {k: kwargs[k] for k in expected} == expected


@pytest.mark.parametrize("argv", [["train", "es"], ["verify", "s.jsonl"], ["eval"]])
def test_cli_without_credentials_fails_with_one_sentence(no_modal_token, monkeypatch, argv):
    monkeypatch.setattr(remote, "run_remote", lambda *a: pytest.fail("must not reach Modal"))
    result = runner.invoke(app, [*argv, "--backend", "modal"])
    assert result.exit_code == 1 and result.stdout == ""
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Modal credentials" in errors[0]
    assert "Traceback" not in result.stderr and "modal token new" in result.stderr


# --------------------------------------------------------------------------------------------
# `--dry-run`: the plan for the Kimina-1.5B configs, figures checked by hand
# --------------------------------------------------------------------------------------------

def test_dry_run_kimina_es_on_modal(fake_runner):
    # the barrier schedule (modal.es_member_gpus = 0), worked by hand; kimina-es.toml's pipelined
    # one is checked in tests/test_modal_plan_fixes.py
    result = runner.invoke(app, ["train", "es", "--config", str(REPO / "configs/kimina-es.toml"),
                                 "--backend", "modal", "--dry-run", "--json", "--set", "modal.es_member_gpus=0"])
    assert result.exit_code == 0, result.stderr
    plan = json.loads(result.stdout)
    assert fake_runner == []  # a plan runs nothing remotely
    # 30 members x 8 problems x 1 sample; 240 proofs in ceil(240 / 64) = 4 Lean batches
    assert plan["samples_per_iteration"] == 240 and plan["iterations"] == 100
    generation_s = 8192 / 100                 # max_tokens at 100 tokens/s: 81.92 s
    # the verification of the 240 proofs (8 problems) in one call, counted event by event as the code
    # runs it (plan/verification.py; the same keys as kimina-es-lowrank.toml, whose count
    # tests/test_modal_lowrank_cost.py works by hand): 16 REPL Sandboxes (2 cores, 16 GiB) side by
    # side, each 60 s header + 15 proofs of 5 s and ended after its last (135 s); the 4 batches'
    # kernel stages beside each other: 240 + 8 targets' `lean -o` (4 s) and 22 checker processes
    # (5 s import + 0.5 s per pass) = 1222 kernel-Sandbox-seconds; the last verdict 156 s in
    verify_s, repl_s, kernel_sandbox_s = 156.0, 16 * 135.0, 240 * 4.0 + 8 * 4.0 + 22 * 5.0 + 240 * 0.5
    # one wave of 30 members (30 containers), the call's verification, then the update (modal.est_update_s = 30 s)
    wall_s = generation_s + verify_s + 30
    # Billed container-seconds: the loop and 30 warm members are up the whole iteration (the
    # members idle while Lean runs), each with 1 GPU, 8 cores, 64 GiB; the REPL and kernel Sandboxes
    # each one REPL's share (2 cores, 16 GiB).
    gpu_container_s = 31 * wall_s
    sandbox_s = repl_s + kernel_sandbox_s
    breakdown = plan["est_usd_breakdown"]
    assert breakdown["gpu"]["gpu_s"] == round(gpu_container_s, 1)
    assert breakdown["cpu"]["core_s"] == round(gpu_container_s * 8 + sandbox_s * 2, 1)
    assert breakdown["memory"]["gib_s"] == round(gpu_container_s * 64 + sandbox_s * 16, 1)
    assert breakdown["cpu"]["container_s"] == round(gpu_container_s + sandbox_s, 1)
    # Sandboxes' CPU and memory at their own prices (0.142 per core-hour, 0.024 per GiB-hour); the H100
    # at Modal's list price (0.001097 USD/s = 3.9492 USD/h)
    usd = (gpu_container_s * (3.9492 + 8 * 0.047 + 64 * 0.008) + sandbox_s * (2 * 0.142 + 16 * 0.024)) / 3600
    assert plan["est_wall_s_per_iteration"] == round(wall_s, 1)
    assert plan["est_gpu_hours_per_iteration"] == pytest.approx(gpu_container_s / 3600, abs=1e-4)
    assert plan["est_usd_per_iteration"] == pytest.approx(usd, abs=2e-4)
    assert plan["kernel_check"] is True and plan["est_kernel_check_core_s_per_proof"] == round(1.0 * (4.5 + 5 / 32) * 2, 1)
    # once per run: the 30 members idle out their 1908 s window at most (1880 s + a batch's kernel
    # stage with its 64 passes at once: 4 rounds of 4.5 s + 2 checker imports of 5 s = 28 s)
    once = 30 * 1908 * (3.9492 + 8 * 0.047 + 64 * 0.008) / 3600
    assert plan["est_usd_once"] == pytest.approx(once, abs=2e-4)
    # Held-out evaluation (run.eval_*): the base, every 10 iterations and the last = 11 evaluations of
    # 64 problems x (4 sampled + 1 greedy) = 320 proofs, on one GPU container of its own: it replays
    # at most 10 iterations from the newest snapshot (250 s), makes two generation calls in KV rounds (its
    # engine, 0.70 of the H100, holds 215 sequences of 512 + 8,192 tokens: 256 sampled in 2 rounds, 64
    # greedy in 1: 3 x 81.92 s; gpu_memory.py),
    # then its proofs go to the Sandbox placement sized as 5 batches of 64 (sandbox_concurrency): 20
    # REPL Sandboxes (2 cores, 16 GiB), each up to its last proof, the header and 16 proofs
    # (60 + 80 s); the 5 batches' kernel stages beside each other, as plan.verification_as_run
    # counts them (320 proofs of 64 problems): the last verdict 160 s in; the loop and its 30 warm
    # members wait with it.
    run = modal_plan.verification_as_run(load_config(REPO / "configs/kimina-es.toml"), 320, 64)
    assert (run.repls, run.repl_sandbox_s, run.wall_s) == (20, 20 * 140.0, 160.0)
    assert run.kernel_sandbox_s == 320 * 4.0 + 64 * 4.0 + run.checker_processes * 5.0 + 320 * 0.5
    eval_s = 250 + 3 * 8192 / 100 + run.wall_s
    eval_usd = (32 * eval_s * (3.9492 + 8 * 0.047 + 64 * 0.008)
                + (run.repl_sandbox_s + run.kernel_sandbox_s) * (2 * 0.142 + 16 * 0.024)) / 3600
    assert plan["heldout_evaluations"] == 11 and plan["heldout_samples_per_evaluation"] == 320
    assert plan["est_usd_per_heldout_evaluation"] == pytest.approx(eval_usd, abs=2e-4)
    assert plan["est_usd_total"] == pytest.approx(usd * 100 + once + eval_usd * 11, abs=0.05)
    # a cold member replays at most es.snapshot_every = 10 iterations at 25 s each
    assert (plan["cold_member_replay_iterations"], plan["cold_member_replay_s"]) == (10, 250.0)
    assert plan["es_gap_bound_s"] == 1880.0 + 28
    # every image it uses, with the exact requirement strings it installs
    assert plan["images"]["gpu"]["python_packages"] == list(modal_plan.image_specs(
        "leanprover/lean4:v4.15.0", "v4.15.0")["gpu"].python_packages)
    assert "vllm==0.31.0" in plan["images"]["gpu"]["python_packages"]
    assert plan["images"]["lean"]["toolchain"]["lean_toolchain"] == "leanprover/lean4:v4.15.0"
    assert plan["images"]["lean"]["apt_packages"] == ["curl", "git", "ca-certificates"]

    human = runner.invoke(app, ["train", "es", "--config", str(REPO / "configs/kimina-es.toml"),
                                "--backend", "modal", "--dry-run", "--set", "modal.es_member_gpus=0"],
                          env={"COLUMNS": "160"})
    assert human.exit_code == 0 and human.stdout == ""
    for text in ("ESMember", "verify Sandbox", "kernel Sandbox", "H100 x 1", "leanprover/lean4:v4.15.0",
                 "mathlib4 v4.15.0", "vllm==0.31.0", "est_usd_per_iteration", "scaledown_window", "kernel stage",
                 f"prover_check {PINS['v4.15.0'].commit[:12]}"):
        assert text in human.stderr


def test_dry_run_shows_the_kernel_stage_off_and_costs_nothing_for_it():
    args = ["train", "grpo", "--config", str(REPO / "configs/kimina-grpo.toml"), "--backend", "modal", "--dry-run",
            "--set", "verify.kernel_check=false"]
    plan = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert plan["kernel_check"] is False and plan["est_kernel_check_core_s_per_proof"] == 0.0
    # 240 proofs per step (the kimina-es budget, 24,000 samples) in Sandboxes of modal.verify_batch_size = 64, 4 workers each
    # (16 REPLs side by side: 15 proofs each after the header);
    # the 240 completions in 4 KV rounds (0.3 of the H100 holds 79 sequences of 512 + 8,192 tokens), then the
    # optimizer step: 6 x 1.777 B parameters x 240 x 8,704 tokens at 0.3 of 989 TFLOP/s (gpu_memory.py)
    train_s = 6 * 1_777_088_000 * 240 * (512 + 8192) / (989e12 * 0.3)
    assert plan["est_wall_s_per_step"] == round(4 * 8192 / 100 + train_s + 60 + 240 / 16 * 5, 1)
    human = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert "off: verify.kernel_check = false" in human.stderr and "kernel Sandbox" not in human.stderr
    local = runner.invoke(app, ["train", "grpo", "--config", str(REPO / "configs/kimina-grpo.toml"), "--dry-run"],
                          env={"COLUMNS": "400"})
    assert "then the kernel stage on each pass: `lean -o` in a fresh process, then the pinned checker" in local.stderr


def test_dry_run_kimina_grpo_on_modal_and_es_locally():
    # One step of 8 samples (1 prompt x 8; the shipped config accumulates 30 of them, 240 per step, for
    # kimina-es's budget: tests/test_budgets.py), so the arithmetic below stays small.
    grpo = runner.invoke(app, ["train", "grpo", "--config", str(REPO / "configs/kimina-grpo.toml"),
                               "--backend", "modal", "--dry-run", "--json", "--set", "grpo.gradient_accumulation_steps=1"])
    assert grpo.exit_code == 0, grpo.stderr
    plan = json.loads(grpo.stdout)
    # generation + one Lean batch of 8 proofs (one problem x 8) on 4 REPL Sandboxes (2 cores, 16 GiB),
    # 2 proofs each after the header (65 s, 70 s), each ended after its last; the kernel stage, one
    # checker batch at a time: the first pass at once (its target and its `lean -o`, 8 s, then a
    # checker of 5 + 0.5 s: 78.5 s), the other 7 together after it (`lean -o` side by side, 4 s, then
    # 5 + 7 x 0.5 s): the last verdict 91 s in; 8 + 5.5 + 7 x 4 + 8.5 = 50 kernel-Sandbox-seconds
    # (and the optimizer step's forward and backward: 6 x 1.777 B parameters x 8 x 8,704 tokens at 0.3 of the
    # H100's 989 TFLOP/s; gpu_memory.py)
    step_s = 8192 / 100 + 6 * 1_777_088_000 * 8 * (512 + 8192) / (989e12 * 0.3) + 91
    assert plan["samples_per_step"] == 8 and plan["est_wall_s_per_step"] == round(step_s, 1)
    # the trainer: 1 GPU, 8 cores, 64 GiB for the whole step; 4 REPL Sandboxes for 70 s each and the
    # kernel stage's 50 s, in Sandboxes of 2 cores, 16 GiB
    usd = (step_s * (3.9492 + 8 * 0.047 + 64 * 0.008) + (4 * 70 + 50) * (2 * 0.142 + 16 * 0.024)) / 3600
    assert plan["est_usd_per_step"] == pytest.approx(usd, abs=2e-4)
    # the same held-out evaluation as kimina-es: 11 x 320 samples, the trainer's GPU held through it
    run = modal_plan.verification_as_run(load_config(REPO / "configs/kimina-grpo.toml"), 320, 64)  # 160 s
    # its generation in KV rounds: 256 sampled, 79 at a time (4 rounds), 64 greedy (1)
    eval_usd = ((5 * 8192 / 100 + run.wall_s) * (3.9492 + 8 * 0.047 + 64 * 0.008)
                + (run.repl_sandbox_s + run.kernel_sandbox_s) * (2 * 0.142 + 16 * 0.024)) / 3600
    assert plan["heldout_evaluations"] == 11 and plan["heldout_samples_per_evaluation"] == 320
    assert plan["est_usd_total"] == pytest.approx(usd * 100 + eval_usd * 11, abs=0.05)
    assert set(plan["images"]) == {"orchestrator", "gpu", "trl", "lean"}
    assert "trl==1.16.*" in plan["images"]["trl"]["python_packages"]

    local = runner.invoke(app, ["train", "es", "--config", str(REPO / "configs/kimina-es.toml"), "--dry-run", "--json"])
    assert local.exit_code == 0
    plan = json.loads(local.stdout)
    assert plan["backend"] == "local" and plan["samples_total"] == 24000
    assert plan["heldout_evaluations"] == 11 and plan["heldout_samples_total"] == 11 * 320
    assert not any(key.startswith("est_usd") for key in plan)


def test_plan_warns_when_repls_outgrow_the_verification_container():
    config = load_config(REPO / "configs/kimina-es.toml", ["verify.workers=16", "verify.memory_limit_gb=8.0", "modal.verify_memory_gb=32"])
    notes = modal_plan.plan(config, command="train_es", backend="modal")["tables"][-1]["rows"]
    warnings = [text for kind, text in notes if kind == "warning"]
    assert any("16 REPLs share" in w for w in warnings) and any("128 GiB" in w for w in warnings)


def test_countdown_plan_has_no_verification_containers():
    config = config_from_dict({"data": {"task": "countdown"}})
    tables = modal_plan.plan(config, command="train_es", backend="modal")["tables"]
    rows = next(t for t in tables if t["title"].startswith("plan:"))["rows"]
    assert [r[0] for r in rows] == ["train_es", "ESMember", "download_model", "ESMember idle after the run"]


def test_es_arguments_hand_the_population_to_members_when_the_loop_takes_the_hook(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def train_with_population(config, *, resume=False, reporter=None, population=None):
        raise AssertionError("not called here")

    monkeypatch.setattr(functions, "resolve_function", lambda name: train_with_population)
    config = config_from_dict({"run": {"dir": "runs/h"}})
    arguments = functions.es_arguments(config.to_dict())(config, {"resume": False})
    assert isinstance(arguments["population"], functions.ModalPopulation) and arguments["resume"] is False
    assert sorted(arguments) == ["population", "resume"]


# --------------------------------------------------------------------------------------------
# run_remote with Modal's client objects replaced: uploads, the call, downloads, --detach
# --------------------------------------------------------------------------------------------

class FakeApp:
    app_id = "ap-123"

    def __init__(self):
        self.detach = None

    @contextlib.contextmanager
    def run(self, detach=False):
        self.detach = detach
        yield self


class FakeRemote:
    def __init__(self, result):
        self.result, self.calls, self.options = result, [], None

    def with_options(self, **options):
        self.options = options
        return self

    def remote(self, *args):
        self.calls.append(("remote", args))
        return self.result

    def spawn(self, *args):
        self.calls.append(("spawn", args))
        return types.SimpleNamespace(object_id="fc-9")


@pytest.fixture
def fake_modal(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    volume, fake_app = VolumeStandIn(tmp_path / "mnt"), FakeApp()
    monkeypatch.setattr(remote, "runs_volume", volume)
    monkeypatch.setattr(remote, "APPS", {role: fake_app for role in remote.APPS})   # every role's app
    return types.SimpleNamespace(volume=volume, app=fake_app)


def test_run_remote_uploads_inputs_calls_and_pulls_outputs(fake_modal, monkeypatch):
    Path("samples.jsonl").write_text('{"id": "a"}\n')
    function = FakeRemote({"ok": True, "verified": 1})
    monkeypatch.setitem(remote.REMOTE_FUNCTIONS, "verify", function)
    fake_modal.volume._committed["out/v.jsonl"] = b'{"id": "a", "verdict": "verified"}\n'
    config = config_from_dict({"modal": {"verify_batch_size": 8}})

    result = remote.run_remote("verify", config, {"proofs_path": Path("samples.jsonl"),
                                                     "out_path": Path("out/v.jsonl")})
    assert fake_modal.volume._uploaded == [(Path("samples.jsonl"), "/samples.jsonl")]
    [(kind, (config_dict, kwargs))] = function.calls
    assert kind == "remote" and fake_modal.app.detach is False
    assert kwargs == {"proofs_path": "samples.jsonl", "out_path": "out/v.jsonl"}
    assert config_from_dict(config_dict).modal.verify_batch_size == 8  # the config crosses as a dict
    assert function.options["max_containers"] == 1 and "gpu" not in function.options
    assert Path("out/v.jsonl").read_bytes() == fake_modal.volume._committed["out/v.jsonl"]
    assert result["verified"] == 1 and result["modal_pulled"] == "out/v.jsonl"


def test_run_remote_detach_spawns_and_returns_how_to_watch(fake_modal, monkeypatch):
    function = FakeRemote({"ok": True})
    monkeypatch.setitem(remote.REMOTE_FUNCTIONS, "train_es", function)
    result = remote.run_remote("train_es", config_from_dict({"run": {"dir": "runs/d"}}),
                                  {"resume": False, "detach": True})
    [(kind, (config_dict, kwargs))] = function.calls
    assert kind == "spawn" and kwargs == {"resume": False} and fake_modal.app.detach is True
    assert result["detached"] and result["function_call_id"] == "fc-9"
    assert result["watch"] == "modal app logs ap-123" and "runs/d" in result["results"]
    assert function.options["gpu"] == "H100:1"


def test_run_remote_gives_eval_a_gpu_only_when_it_generates(fake_modal, monkeypatch):
    function = FakeRemote({"ok": True})
    monkeypatch.setitem(remote.REMOTE_FUNCTIONS, "eval", function)
    Path("v.jsonl").write_text("")
    remote.run_remote("eval", Config(), {"model": None, "ledger": None, "verdicts": Path("v.jsonl"), "k": None})
    assert "gpu" not in function.options
    remote.run_remote("eval", Config(), {"model": None, "ledger": None, "verdicts": None, "k": None})
    assert function.options["gpu"] == "H100:1"


def test_to_wire_rebuilds_an_outside_model_cache_on_the_volume(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = config_from_dict({"model": {"cache_dir": "/var/cache/elsewhere"}})
    config_dict, _, _ = remote.to_wire("train_es", config, {"resume": False})
    assert config_dict["model"]["cache_dir"] == Config().model.cache_dir


@pytest.mark.slow
def test_eval_of_the_lean_task_verifies_in_sandboxes(volume, tiny, sandbox_standin):
    """In a GPU function, Lean verification runs in Sandboxes (here: the stand-in running the REPL stand-in)."""
    config = json.loads(json.dumps(tiny))
    config["data"].update({"task": "lean", "source": "examples", "preset": "auto", "problems": "data/lean.jsonl"})
    config["verify"] = {"workers": 1, "timeout_s": PATIENCE_S, "header_timeout_s": PATIENCE_S, "memory_limit_gb": 0.0}
    config["modal"] = {"verify_batch_size": 3}
    config["eval"].update({"split": "test"})
    config["run"]["dir"] = "runs/lean-eval"
    functions.prepare_data.local(config, {"source": None, "out_path": None, "limit": None, "preset": None})

    from prover_cli.verify.engine import RULES_VERSION

    result = functions.evaluate.local(config, {"model": None, "ledger": None, "verdicts": None, "k": None})
    verdicts = lines(volume / result["verdicts"])
    assert result["problems"] == 2 and len(verdicts) == result["samples"] == 4
    # a verdict names only what ran: the text checks refuse the tiny model's garbled ones before any REPL
    lean_ran = [v for v in verdicts if "backend" in v["verifier"]]
    assert lean_ran and all(v["verifier"] == {"ran": "text checks", "rules": RULES_VERSION}
                            for v in verdicts if "backend" not in v["verifier"])
    assert all(v["verifier"]["lean_toolchain"] == "leanprover/lean4:v4.15.0" for v in lean_ran)
    assert all(v["verifier"]["repl_command"] == images.REPL_COMMAND for v in lean_ran)  # the image's REPL
    from prover_cli.verify import placement

    assert placement.current() is placement.LOCAL  # the placement is left when the function returns


@pytest.mark.slow
def test_train_es_on_the_lean_task_scores_rewards_in_sandboxes(volume, tiny, monkeypatch):
    pools = []
    real_concurrency = sandbox.sandbox_concurrency

    def counting_pools(config, verify_config, proofs):
        placed = real_concurrency(config, verify_config, proofs)
        pools.append((proofs, placed.workers))
        return placed

    monkeypatch.setattr(sandbox, "sandbox_concurrency", counting_pools)
    config = json.loads(json.dumps(tiny))
    config["data"].update({"task": "lean", "source": "examples", "preset": "auto", "problems": "data/lean.jsonl",
                           "train_split": "train"})
    config["verify"] = {"workers": 1, "timeout_s": PATIENCE_S, "header_timeout_s": PATIENCE_S, "memory_limit_gb": 0.0}
    config["modal"] = {"verify_batch_size": 3}
    config["run"]["dir"] = "runs/lean-es"
    functions.prepare_data.local(config, {"source": None, "out_path": None, "limit": None, "preset": None})

    result = functions.train_es.local(config, {"resume": False})
    # 2 members x 2 problems x 1 sample = 4 proofs through the library's verify_records, its pool
    # sized as 2 batches of 3 x verify.workers = 1 (a REPL's Sandbox is created only when a proof
    # reaches Lean: the tiny model's text rarely gets past the checks)
    assert result["ok"] and pools == [(4, 2)]
    metrics = lines(volume / "runs/lean-es/metrics.jsonl")
    assert metrics[0]["samples"] == 4 and metrics[0]["task"] == "lean"


@pytest.mark.parametrize("argv", [["train", "es", "--dry-run"], ["train", "grpo", "--dry-run", "--json"],
                                  ["train", "es"], ["verify", "s.jsonl"], ["eval"]])
def test_a_backend_typo_is_a_usage_error_with_did_you_mean(fake_runner, argv):
    result = runner.invoke(app, [*argv, "--backend", "modall"], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and result.stdout == ""
    assert "unknown backend 'modall'; did you mean 'modal'?" in result.stderr
    assert fake_runner == []  # nothing planned, nothing run
    far = runner.invoke(app, [*argv, "--backend", "kubernetes"], env={"COLUMNS": "200"})
    assert far.exit_code == 2 and "did you mean" not in far.stderr and "use one of local, modal" in far.stderr


def test_no_library_module_imports_the_modal_package():
    """Only backends.py (lazily, for --backend modal) reaches prover_cli.on_modal's Modal layers."""
    import re

    for path in (REPO / "prover_cli").rglob("*.py"):
        if "on_modal" in path.parts:
            continue
        text = path.read_text(encoding="utf-8")
        imports = re.findall(r"^\s*(?:from|import) prover_cli\.on_modal(?:\.(\w+))?", text, re.M)
        assert set(imports) <= {"plan"}, f"{path} imports prover_cli.on_modal.{imports}"


def test_reload_package_redeclares_every_layer_from_the_environment(tmp_path):
    probe = ("import os; import prover_cli.on_modal.remote as r; os.environ['PROVER_RUNS_VOLUME'] = 'other-runs'; "
             "os.environ['PROVER_LEAN_TOOLCHAIN'] = 'leanprover/lean4:v4.16.0'; r = r.reload_package(); "
             "import prover_cli.on_modal.images as i, prover_cli.on_modal.functions as f, prover_cli.on_modal.sandbox as s; "
             "print(repr(r.runs_volume), f.runs_volume is i.runs_volume, s.LEAN_TOOLCHAIN, s.lean_image is i.lean_image)")
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert "'other-runs'" in out.stdout and out.stdout.split()[-3:] == ["True", "leanprover/lean4:v4.16.0", "True"]
