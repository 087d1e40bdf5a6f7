# # Calling it from your machine
#
#     prover train es --config configs/kimina-es.toml --backend modal --dry-run   # plan/, no Modal
#     prover train es --config configs/kimina-es.toml --backend modal --detach
#     modal run -m prover_cli.on_modal.remote --command train_es --config configs/kimina-es.toml --detach
#     modal deploy -m prover_cli.on_modal.functions::gpu_app                   # optional: a persistent app
#
# `run_remote` is what `prover <command> --backend modal` calls (through `backends.MODAL_RUNNER`).
# It uploads the inputs that exist on your machine to the runs Volume (same relative path),
# runs the function in an ephemeral app, and downloads the small outputs back. With `--detach`
# it spawns the call in a detached app and returns at once; the outputs stay on the Volume.
# The app is the one the function is in (`APP_OF`, images.py: one per role), so a command builds
# only its own images: `verify` the orchestrator one (and the Lean one at its first Sandbox),
# `generate`, `train es`, `eval` and `replay-seeds` the GPU one, `train grpo` the TRL one.

import contextlib
import dataclasses
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import modal

from prover_cli.config import Config, load_config
from prover_cli.errors import BackendError, ConfigError, InputError
from prover_cli.fsio.jsonl import write_text_atomic
from prover_cli.on_modal.functions import LEDGER_FILE, REMOTE_FUNCTIONS, Generator, options
from prover_cli.on_modal.images import APP_NAME, APPS, DEFAULTS, SETTINGS, deploy_settings, runs_volume
from prover_cli.on_modal.plan import MODAL_TRACKERS, es_schedule_problem, gpu_memory_problem, kernel_memory_problem
from prover_cli.training.tracking import parse_report_to

REMOTE_NAMES = (*REMOTE_FUNCTIONS, "generate")
# The role (images.APPS) whose app holds each command's function and every function it calls.
APP_OF = {"prepare_data": "data", "verify": "data", "generate": "gpu", "train_es": "gpu", "replay_seeds": "gpu",
          "eval": "gpu", "train_grpo": "grpo"}


def app_of(name: str) -> Any:
    """The app to run for library function `name`: the one its Modal function is registered on."""
    return APPS[APP_OF[name]]

# Arguments that name inputs (uploaded when they exist here) and outputs (downloaded when small).
_INPUT_ARGS = ("source", "proofs_path", "problems_path", "ledger_path", "ledger", "verdicts", "model")
_OUTPUT_ARGS = ("out_path", "out_dir")


def volume_path(path: str | Path) -> str:
    """Where a path of your machine lives on the runs Volume: the same path, relative to here."""
    p = Path(path)
    if p.is_absolute():
        try:
            p = p.resolve().relative_to(Path.cwd().resolve())
        except ValueError:
            raise InputError(f"{path}: --backend modal maps paths onto the runs Volume relative to the current "
                             f"directory; use a path inside {Path.cwd()}") from None
    if ".." in p.parts:
        raise InputError(f"{path}: --backend modal cannot map a path outside the current directory")
    return p.as_posix()


def to_wire(name: str, config: Config, kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], list[tuple[Path, str]]]:
    """(config dict, keyword arguments, uploads) for a remote call: every path relative to the runs Volume."""
    if name not in REMOTE_NAMES:
        raise BackendError(f"`{name}` has no Modal function; --backend modal runs {', '.join(REMOTE_NAMES)}")
    missing = [t for t in parse_report_to(config.run.report_to) if t not in MODAL_TRACKERS]
    if missing and name in ("train_es", "train_grpo"):  # refused here, not after a GPU container started
        raise BackendError(f"run.report_to = {config.run.report_to!r}: the Modal images have no {', '.join(missing)}",
                           hint=f"use {' or '.join(MODAL_TRACKERS)} on Modal (its event files land in the run "
                                "directory on the runs Volume), or run locally")
    uploads: list[tuple[Path, str]] = []

    def local_input(value: Any, *, may_be_id: bool) -> Any:
        if value is None:
            return None
        if Path(str(value)).exists():
            uploads.append((Path(str(value)), volume_path(value)))
            return volume_path(value)
        return str(value) if may_be_id else volume_path(value)  # a hub id, or already on the Volume

    remote_kwargs: dict[str, Any] = {}
    for key, value in kwargs.items():
        if key in _INPUT_ARGS:
            remote_kwargs[key] = local_input(value, may_be_id=key in ("source", "model"))
        elif key in _OUTPUT_ARGS:
            remote_kwargs[key] = None if value is None else volume_path(value)
        else:
            remote_kwargs[key] = value

    config_dict = config.to_dict()
    config_dict["run"]["dir"] = volume_path(config.run.dir)
    try:
        config_dict["model"]["cache_dir"] = volume_path(config.model.cache_dir)
    except InputError:  # only a cache (the tiny model): rebuild it on the Volume rather than refuse
        config_dict["model"]["cache_dir"] = DEFAULTS.model.cache_dir
    config_dict["model"]["name"] = local_input(config.model.name, may_be_id=True)
    for section, key in (("data", "problems"), ("data", "source"), ("eval", "problems")):
        value = config_dict[section][key]
        if value:
            config_dict[section][key] = local_input(value, may_be_id=key == "source")
    if not config.data.problems and config.problems_path.exists():
        uploads.append((config.problems_path, volume_path(config.problems_path)))
    return config_dict, remote_kwargs, uploads


def _outputs(name: str, config_dict: dict[str, Any], remote_kwargs: dict[str, Any]) -> list[str]:
    """Small files worth bringing back after a call (weights stay on the Volume: `modal volume get`)."""
    run_dir = Path(config_dict["run"]["dir"])
    out = remote_kwargs.get("out_path")
    if name == "prepare_data":
        return [out or config_dict["data"]["problems"] or str(run_dir / "problems.jsonl")]
    if name in ("verify", "generate"):
        return [out or str(run_dir / "samples.jsonl")]
    if name == "train_es":
        return [str(run_dir / f) for f in (LEDGER_FILE, "metrics.jsonl", "config.toml")]
    if name == "train_grpo":
        return [str(run_dir / f) for f in ("metrics.jsonl", "config.toml")]
    return []


def run_remote(name: str, config: Config, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Run library function `name` on Modal and return its result dict (what the local backend returns)."""
    if deploy_settings(config) != SETTINGS:
        # Your config names other Volumes, app or Lean versions than this import declared.
        os.environ.update(deploy_settings(config))
        return reload_package().run_remote(name, config, kwargs)
    if name == "train_es":
        schedule_problem = es_schedule_problem(config)
        if schedule_problem:   # es.noise = "lora" split over member containers: what --dry-run refuses
            raise ConfigError(schedule_problem, hint="set modal.es_member_gpus = 0, or es.noise = \"full\" "
                                                     "for member containers")
    memory_problem = kernel_memory_problem(config)
    if memory_problem:   # every kernel step would end in `error`: refuse before anything is billed
        raise ConfigError(memory_problem)
    memory_problem = gpu_memory_problem(config, name)
    if memory_problem:   # the engines would not start (or es_init would run out): what --dry-run refuses
        raise ConfigError(memory_problem)
    kwargs = dict(kwargs)
    detach = bool(kwargs.pop("detach", False))
    config_dict, remote_kwargs, uploads = to_wire(name, config, kwargs)
    with contextlib.redirect_stdout(sys.stderr), modal.enable_output():  # stdout carries only --json
        app = app_of(name)
        with app.run(detach=detach):
            upload(uploads)
            call = _remote_call(name, config, config_dict, remote_kwargs)
            if detach:
                handle = call.spawn()
                return {
                    "ok": True,
                    "detached": True,
                    "function_call_id": handle.object_id,
                    "app_id": app.app_id,
                    "watch": f"modal app logs {app.app_id}",
                    "results": f"on Volume {config.modal.runs_volume} under {config_dict['run']['dir']}: "
                               f"modal volume get {config.modal.runs_volume} {config_dict['run']['dir']}",
                }
            result = call.remote()
    pulled = _pull(_outputs(name, config_dict, remote_kwargs))
    return {**result, "modal_volume": config.modal.runs_volume, "modal_pulled": ", ".join(pulled) or "-"}


def upload(uploads: list[tuple[Path, str]]) -> None:
    """Inputs from this machine onto the runs Volume, at the same relative paths (`to_wire`)."""
    if uploads:
        with runs_volume.batch_upload(force=True) as batch:
            for local, remote in uploads:
                (batch.put_directory if local.is_dir() else batch.put_file)(local, "/" + remote)


def reload_package() -> Any:
    """Re-declare the app from the environment (PROVER_* settings), layer by layer."""
    for name in ("images", "sandbox", "functions", "remote", "doctor"):
        if f"prover_cli.on_modal.{name}" in sys.modules:
            importlib.reload(sys.modules[f"prover_cli.on_modal.{name}"])
    return sys.modules["prover_cli.on_modal.remote"]


@dataclasses.dataclass
class _Call:
    """One remote call, ready to `.remote()` (wait) or `.spawn()` (detach)."""

    target: Any
    args: tuple[Any, ...]

    def remote(self) -> Any:
        return self.target.remote(*self.args)

    def spawn(self) -> Any:
        return self.target.spawn(*self.args)


def _remote_call(name: str, config: Config, config_dict: dict[str, Any], remote_kwargs: dict[str, Any]) -> _Call:
    if name == "generate":
        model = remote_kwargs.pop("model", None) or ""
        cls = Generator.with_options(**options("generate", config))  # type: ignore[attr-defined]  # modal.cls adds it
        return _Call(cls(config_json=json.dumps(config_dict), model=model).generate_file, (remote_kwargs,))
    needs_gpu = ((name == "eval" and remote_kwargs.get("verdicts") is None)
                 or (name == "replay_seeds" and remote_kwargs.get("device") == "cuda"))
    function = REMOTE_FUNCTIONS[name].with_options(**options(name, config, gpu=needs_gpu))
    return _Call(function, (config_dict, remote_kwargs))


def _pull(paths: list[str]) -> list[str]:
    pulled = []
    for remote in paths:
        try:
            data = b"".join(runs_volume.read_file(remote))
        except modal.exception.NotFoundError:
            continue
        write_text_atomic(Path(remote), data)
        pulled.append(remote)
    return pulled


# `modal run -m prover_cli.on_modal.remote --command train_es --config configs/kimina-es.toml [--detach]`:
# the same call from Modal's own CLI. The entrypoint's app holds no function (`modal run` builds
# nothing); it runs the command's own app, spawns the call and awaits it. With this `--detach`
# (not `modal run --detach`, which would detach only the empty entrypoint app) the command's app is
# detached, so the call keeps running when this terminal closes (`modal app logs` to watch,
# `modal volume get` for results).

entry_app = modal.App(f"{APP_NAME}-entrypoint")

ENTRYPOINT_COMMANDS = ("prepare_data", "generate", "train_es", "train_grpo", "eval")


@entry_app.local_entrypoint()
def main(command: str, config: str = "", overrides: str = "", resume: bool = False, detach: bool = False) -> None:
    if command not in ENTRYPOINT_COMMANDS:
        raise SystemExit(f"--command {command!r}: use one of {', '.join(ENTRYPOINT_COMMANDS)}; "
                         "commands that take files run as `prover <command> ... --backend modal`")
    cfg = load_config(config or None, [o for o in overrides.split(",") if o])
    kwargs: dict[str, Any] = {"resume": resume} if command in ("train_es", "train_grpo") else {}
    config_dict, remote_kwargs, uploads = to_wire(command, cfg, kwargs)
    with app_of(command).run(detach=detach):
        upload(uploads)
        handle = _remote_call(command, cfg, config_dict, remote_kwargs).spawn()
        print(f"function call {handle.object_id}", file=sys.stderr)
        result = handle.get()
    print(json.dumps({k: v for k, v in result.items() if k != "tables"}, indent=2, default=str))
