"""Which images each command builds: one app per role (images.py), run by `remote.run_remote`.

The rule is Modal's, modelled by tests/modal_standin.py (`apps_running`, BUILDS) from the client's
source (modal 1.6.4; modal-labs/modal-client@69519aef, py/modal/runner.py `_create_all_objects`,
_functions.py `_deps`, sandbox.py `_Sandbox._create`): `app.run()` builds the image of every
function and class registered on the app; a Sandbox's image is built when the Sandbox is created.
No image is built here and nothing reaches Modal: the builds are the stand-in's records.
"""

import ast
import json
from pathlib import Path

import modal
import pytest

from modal_standin import FunctionStandIn, SandboxStandIn, VolumeStandIn, _impl, app_of_function, apps_running
from prover_cli.config import config_from_dict
from prover_cli.on_modal import functions, images, remote, sandbox

pytestmark = pytest.mark.filterwarnings("ignore:.*registered_functions.*")


@pytest.fixture
def builds(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(remote, "runs_volume", VolumeStandIn(tmp_path / "runs-volume"))
    monkeypatch.setattr(functions.sandbox, "Sandbox", SandboxStandIn)
    return apps_running(monkeypatch)


def test_each_app_builds_its_own_role_image_only(builds):
    expected = {"gpu": {"gpu"}, "data": {"orchestrator"}, "grpo": {"trl"}, "lean": {"lean"}}
    for role, app in images.APPS.items():
        builds.built.clear()
        with app.run():
            assert set(builds.built) == expected[role], role
    # no app holds the kernel image: only a kernel-stage Sandbox builds it, at its creation
    assert set(images.IMAGES) == {"orchestrator", "gpu", "trl", "lean", "kernel"}


def test_a_failing_build_fails_the_run_of_the_app_that_holds_it_only(builds):
    builds.failing = {"trl"}
    with pytest.raises(modal.exception.ImageBuildError, match="Image build for im-standin-trl failed"):
        with images.grpo_app.run():
            pytest.fail("the block of an app whose image did not build must not run")
    with images.gpu_app.run(), images.data_app.run():
        assert set(builds.built) == {"gpu", "orchestrator"}


COMMANDS = {   # command: (library function, keyword arguments, images its app builds)
    "prepare-data": ("prepare_data", {"source": None, "out_path": None, "limit": None, "preset": None}, {"orchestrator"}),
    "verify": ("verify", {"proofs_path": Path("samples.jsonl"), "out_path": Path("verdicts.jsonl")}, {"orchestrator"}),
    "generate": ("generate", {"problems_path": None, "out_path": Path("samples.jsonl"), "model": None}, {"gpu"}),
    "train es": ("train_es", {"resume": False}, {"gpu"}),
    "eval": ("eval", {"model": None, "ledger": None, "verdicts": None, "k": None}, {"gpu"}),
    "replay-seeds": ("replay_seeds", {"ledger": None, "out_dir": None, "device": "cpu"}, {"gpu"}),
    "train grpo": ("train_grpo", {"resume": False}, {"trl"}),
}


def install_function(monkeypatch, name):
    """The command's Modal function replaced by a stand-in that only runs while the app it is
    really registered on runs (the client refuses a call to a Function whose app is not running)."""
    real = functions.Generator if name == "generate" else functions.REMOTE_FUNCTIONS[name]
    stand_in = FunctionStandIn(app_of_function(real), {"ok": True})
    if name == "generate":
        monkeypatch.setattr(remote, "Generator", stand_in)
    else:
        monkeypatch.setitem(remote.REMOTE_FUNCTIONS, name, stand_in)
    return stand_in


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_command_builds_only_the_images_it_uses(builds, monkeypatch, command):
    name, kwargs, expected = COMMANDS[command]
    Path("samples.jsonl").write_text('{"id": "a"}\n')
    stand_in = install_function(monkeypatch, name)
    # the images this command does not use fail to build: the command must not wait for them
    builds.failing = set(images.IMAGES) - expected
    result = remote.run_remote(name, config_from_dict({}), kwargs)
    assert result["ok"] is True and [kind for kind, _ in stand_in._calls] == ["remote"]
    assert set(builds.built) == expected
    assert "lean" not in builds.built and "kernel" not in builds.built   # no Sandbox was created
    assert builds.ran == [remote.app_of(name).name]


def test_train_grpo_builds_the_trl_image_and_fails_with_it(builds, monkeypatch):
    install_function(monkeypatch, "train_grpo")
    builds.failing = {"trl"}
    with pytest.raises(modal.exception.ImageBuildError, match="im-standin-trl"):
        remote.run_remote("train_grpo", config_from_dict({}), {"resume": False})
    builds.failing = set()
    assert remote.run_remote("train_grpo", config_from_dict({}), {"resume": False})["ok"] is True
    assert set(builds.built) == {"trl"}


def test_a_detached_command_runs_its_app_detached_and_spawns(builds, monkeypatch):
    stand_in = install_function(monkeypatch, "train_es")
    result = remote.run_remote("train_es", config_from_dict({"run": {"dir": "runs/d"}}), {"resume": False, "detach": True})
    assert builds.detached == [True] and [kind for kind, _ in stand_in._calls] == ["spawn"]
    assert result["app_id"] == f"ap-standin-{images.gpu_app.name}"


def test_the_lean_image_is_built_at_the_first_sandbox(builds):
    """From your machine (the doctor) a Sandbox attaches to the Lean app, which must run; inside a
    container it attaches to the container's own app (`app=None`, which Modal resolves there)."""
    config = config_from_dict({})
    box = sandbox.SandboxBox(config)
    with pytest.raises(Exception, match="App has not been initialized"):   # the Lean app is not running
        box.ensure()
    assert builds.built == []
    with images.lean_app.run():
        builds.built.clear()
        box.ensure()
        assert builds.built == ["lean"]            # the Sandbox's own image, built at its creation
        kernel = SandboxStandIn.create(**sandbox.kernel_sandbox_arguments(config))
        assert builds.built == ["lean", "kernel"]
    box.terminate()
    kernel.terminate()


def test_inside_a_container_a_sandbox_attaches_to_the_containers_app(monkeypatch):
    monkeypatch.setattr(modal, "is_local", lambda: False)
    config = config_from_dict({})
    assert sandbox.sandbox_arguments(config)["app"] is None
    assert sandbox.kernel_sandbox_arguments(config)["app"] is None
    monkeypatch.setattr(modal, "is_local", lambda: True)
    assert sandbox.sandbox_arguments(config)["app"] is images.lean_app


# Every call from one container to another Function, and the Functions whose bodies make it
# (functions.py): a container initialises only its own app, so callee and caller share one.
CALLS_BETWEEN_CONTAINERS = {
    "train_es": ["download_model", "ESMember", "es_heldout"],
    "replay_seeds": ["download_model"],
    "evaluate": ["download_model"],
    "Generator": ["download_model"],
    "doctor_gpu": ["download_model"],
    "train_grpo": ["download_model_grpo"],
}


def test_every_function_called_from_a_container_is_in_the_callers_app():
    for caller, callees in CALLS_BETWEEN_CONTAINERS.items():
        for callee in callees:
            assert app_of_function(getattr(functions, callee)) is app_of_function(getattr(functions, caller)), \
                f"{caller} calls {callee} from its container, but they are in different apps"
    assert functions.DOWNLOADS == {"trl": functions.download_model_grpo}   # train_grpo's container: the TRL image


def test_the_calls_between_containers_are_the_ones_listed():
    """A new `.remote(`/`.spawn(`/`.map(`/`.starmap(` in functions.py must be added above (and
    its callee put in its caller's app): the call sites are pinned by the function they are in."""
    tree = ast.parse(Path(functions.__file__).read_text(encoding="utf-8"))
    sites = set()
    for top in tree.body:
        if not isinstance(top, (ast.FunctionDef, ast.ClassDef)):
            continue
        for node in ast.walk(top):
            if isinstance(node, ast.Attribute) and node.attr in ("remote", "spawn", "map", "starmap"):
                sites.add(top.name)
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "fan_out":
                sites.add(top.name)
    # _ensure_model: download_model (every caller above); ModalPopulation: ESMember and es_heldout
    # (train_es); fan_out itself; study_runs: from your machine
    assert sites == {"fan_out", "_ensure_model", "ModalPopulation", "study_runs"}


def test_grpo_downloads_with_its_own_apps_function(monkeypatch, tmp_path):
    """In train_grpo's container (the TRL image) the model download is the GRPO app's."""
    monkeypatch.setattr(modal, "is_local", lambda: False)
    monkeypatch.setenv("PROVER_IMAGE", "trl")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    for name in ("models_volume", "runs_volume"):
        monkeypatch.setattr(functions, name, VolumeStandIn(tmp_path / name))
    grpo = FunctionStandIn(images.grpo_app, {"path": "x"})
    monkeypatch.setitem(functions.DOWNLOADS, "trl", grpo)
    monkeypatch.setattr(_impl(images.grpo_app), "_app_id", "ap-standin-grpo")   # as inside its container
    functions._ensure_model(json.loads(json.dumps(config_from_dict({}).to_dict())))
    assert [kind for kind, _ in grpo._calls] == ["remote"]


def test_modal_runs_entrypoint_runs_the_commands_app_only(builds, monkeypatch, capsys):
    """`modal run -m prover_cli.on_modal.remote --command ...`: the entrypoint's app holds no
    function (so `modal run` builds nothing); the entrypoint runs the command's app, detached
    when asked, and spawns the call in it."""
    stand_in = install_function(monkeypatch, "prepare_data")
    with remote.entry_app.run():
        assert builds.built == []
        remote.main.info.raw_f(command="prepare_data", detach=True)
    assert builds.ran == [remote.entry_app.name, images.data_app.name] and builds.detached == [False, True]
    assert set(builds.built) == {"orchestrator"} and [kind for kind, _ in stand_in._calls] == ["spawn"]
    assert json.loads(capsys.readouterr().out) == {"ok": True}
