"""Experiment tracking: the metrics.jsonl records of ES and GRPO streamed to TensorBoard, W&B, Trackio.

    tracker = open_tracker(config.run, hyperparameters=config.to_dict(), resumed_from=0)  # run.report_to
    tracker.log(record)                              # one metrics.jsonl line, step = record["iteration"]
    tracker.close()                                  # "none": all three do nothing

It takes the `[run]` section (run.dir, run.report_to) and the hyperparameters W&B and Trackio
record beside the run, not the whole config: what it reads is in its signature.

One logger for both methods, so both stream exactly the same keys (`reward/mean`,
`verify/verified`, `eval/verified_rate`, ...) on the same step axis (`iteration`). GRPO also passes
`run.report_to` to TRL, whose own curves (loss, KL, completion lengths) land beside ours under
`train/`. metrics.jsonl stays the source of truth: a tracker is a view of it.

- `tensorboard`: event files in `<run.dir>/tensorboard/` (TRL's in `<run.dir>/tensorboard/trl/`).
  On resume, events at and after the resumed step are purged (`purge_step`), as metrics.jsonl
  drops the lines after the checkpoint.
- `wandb`: project `$WANDB_PROJECT` (default `prover`), run name = the run directory's name, run id
  kept in `<run.dir>/wandb-run-id` so `--resume` continues the same W&B run; `WANDB_MODE=offline`
  works without an account. Our keys are plotted against `iteration` (`define_metric`).
- `trackio`: project `$TRACKIO_PROJECT` (default `prover`), same run name, `resume="allow"`
  (TRL's callback opens the same project and name, so GRPO's curves land in one run); stored
  locally under `$TRACKIO_DIR` (default `~/.cache/huggingface/trackio`) unless a Space is set.

wandb and trackio are optional extras (`pip install 'prover-cli[tracking]'`), imported only when
asked for; a missing one is a clear error before training starts.

On a Modal Volume (`--backend modal`), a `Volume.commit()` reloads the Volume afterwards, and a
reload fails while any file in it is open (modal/volume.py). So `release_files()`, which the
Modal functions call before every commit, closes the TensorBoard event file (TensorBoard keeps
it open when TensorFlow is installed: `tf.io.gfile.GFile(..., "wb")` in its EventFileWriter);
the next `log` opens a new one in the same directory, which TensorBoard reads as one run.
W&B's local files (written by its own `wandb-core` process) go to `$WANDB_DIR` when it is set,
which the Modal functions point outside the Volume.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import sys
import weakref
from pathlib import Path
from typing import Any, Iterator

from prover_cli.errors import BackendError, ConfigError
from prover_cli.fsio.jsonl import write_text_atomic

TRACKERS = ("tensorboard", "wandb", "trackio")
DEFAULT_PROJECT = "prover"
TENSORBOARD_DIR = "tensorboard"
_INSTALL = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio"}


def parse_report_to(value: str | list[str], where: str = "run.report_to") -> list[str]:
    """`"tensorboard,wandb"` or `["tensorboard", "wandb"]` -> the tracker names; `"none"` -> []."""
    items = value.split(",") if isinstance(value, str) else list(value)
    names = [str(item).strip().lower() for item in items if str(item).strip()]
    unknown = [n for n in names if n not in (*TRACKERS, "none")]
    if unknown:
        raise ConfigError(f"{where} = {value!r}: unknown tracker {unknown[0]!r}; allowed: none, {', '.join(TRACKERS)}")
    if "none" in names and len(names) > 1:
        raise ConfigError(f"{where} = {value!r}: `none` cannot be combined with a tracker")
    return list(dict.fromkeys(n for n in names if n != "none"))  # in order, once each


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """The record's finite numbers (booleans as 0/1); strings such as `method` are not curves."""
    out = {}
    for key, value in record.items():
        if isinstance(value, bool):
            out[key] = float(value)
        elif isinstance(value, (int, float)) and math.isfinite(value):
            out[key] = float(value)
    return out


_OPEN_TRACKERS: "weakref.WeakSet[Tracker]" = weakref.WeakSet()


def release_files() -> None:
    """Close the files every open tracker keeps in the run directory; each reopens on its next
    `log`. Called before a Modal `Volume.commit()` (see the module docstring)."""
    for tracker in list(_OPEN_TRACKERS):
        tracker.release_files()


class Tracker:
    """Streams metrics records to every tracker of `run.report_to` (none: does nothing)."""

    def __init__(self, run_dir: Path, names: list[str], *, hyperparameters: dict[str, Any], resumed_from: int = 0):
        self.names = names
        self._sinks: list[Any] = []
        try:
            for name in names:
                with _quiet(fd=True):
                    self._sinks.append(_OPENERS[name](run_dir, hyperparameters, resumed_from))
        except BaseException:
            self.close()
            raise
        _OPEN_TRACKERS.add(self)

    def release_files(self) -> None:
        for sink in self._sinks:
            release = getattr(sink, "release_files", None)
            if release is not None:
                with _quiet():
                    release()

    def log(self, record: dict[str, Any]) -> None:
        step = int(record["iteration"])
        values = scalars(record)
        for sink in self._sinks:
            with _quiet():
                sink.log(values, step)

    def close(self) -> None:
        _OPEN_TRACKERS.discard(self)
        sinks, self._sinks = self._sinks, []
        for sink in sinks:
            with _quiet():
                sink.close()

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@contextlib.contextmanager
def _quiet(fd: bool = False) -> Iterator[None]:
    """Trackers print banners on stdout (trackio's run URL; wandb-core, a child process started at
    init, its offline notice): send them to stderr, so that with `--json` stdout carries the result
    only. `fd=True` also points file descriptor 1 at stderr, which a child started meanwhile keeps."""
    saved = None
    if fd:
        sys.stdout.flush()
        saved = os.dup(1)
        os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)


def open_tracker(run: Any, *, hyperparameters: dict[str, Any], resumed_from: int = 0) -> Tracker:
    """The tracker of the run `run` (the `[run]` section, config.RunConfig: run.dir, run.report_to;
    typed Any because config.py imports this module); `hyperparameters` (the resolved config as a
    dict) go to W&B and Trackio; `resumed_from` is the last iteration kept (events after it are redone)."""
    return Tracker(Path(run.dir), parse_report_to(run.report_to), hyperparameters=hyperparameters,
                   resumed_from=resumed_from)


def _import(name: str, module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise BackendError(f"run.report_to asks for {name}, but `{module}` is not installed",
                           hint=f"pip install {_INSTALL[name]} (or `pip install 'prover-cli[tracking]'`), "
                                "or drop it from run.report_to") from None


# --------------------------------------------------------------------------------------------
# One sink per tracker: log(values, step), close()
# --------------------------------------------------------------------------------------------

def summary_writer(log_dir: str, purge_step: int | None) -> Any:
    """torch's SummaryWriter (a seam: tests hold the event file open, as TensorFlow's GFile does)."""
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(log_dir=log_dir, purge_step=purge_step)


class _TensorBoard:
    def __init__(self, run_dir: Path, hyperparameters: dict[str, Any], resumed_from: int):
        _import("tensorboard", "tensorboard")  # torch's SummaryWriter needs the package
        self.log_dir = str(run_dir / TENSORBOARD_DIR)
        # purge_step hides events of steps > resumed_from written before a kill: they are redone.
        self.writer: Any = summary_writer(self.log_dir, resumed_from + 1 if resumed_from else None)

    def log(self, values: dict[str, float], step: int) -> None:
        if self.writer is None:  # released for a commit: a new event file, nothing purged
            self.writer = summary_writer(self.log_dir, None)
        for key, value in values.items():
            if key != "iteration":
                self.writer.add_scalar(key, value, step)
        self.writer.flush()  # a killed run keeps its curves, as metrics.jsonl keeps its lines

    def release_files(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def close(self) -> None:
        self.release_files()


class _Wandb:
    def __init__(self, run_dir: Path, hyperparameters: dict[str, Any], resumed_from: int):
        self.wandb = _import("wandb", "wandb")
        id_path = run_dir / "wandb-run-id"
        if resumed_from and id_path.exists():
            run_id = id_path.read_text(encoding="utf-8").strip()
        else:
            run_id = secrets.token_hex(8)
            write_text_atomic(id_path, run_id + "\n")  # whole or not at all: a resume reads it back
        if self.wandb.run is None:
            # $WANDB_DIR when set (outside a Modal Volume: wandb-core keeps its files open there)
            self.wandb.init(project=project_name("wandb"), name=run_name(run_dir), id=run_id, resume="allow",
                            dir=os.environ.get("WANDB_DIR") or str(run_dir), config=hyperparameters)
        self.wandb.define_metric("iteration")
        self.defined: set[str] = set()

    def log(self, values: dict[str, float], step: int) -> None:
        for key in values.keys() - self.defined - {"iteration"}:
            self.wandb.define_metric(key, step_metric="iteration")  # not TRL's train/global_step axis
            self.defined.add(key)
        self.wandb.log({**values, "iteration": step})

    def close(self) -> None:
        if self.wandb.run is not None:
            self.wandb.finish()


class _Trackio:
    def __init__(self, run_dir: Path, hyperparameters: dict[str, Any], resumed_from: int):
        self.trackio = _import("trackio", "trackio")
        self.name, self.config = run_name(run_dir), hyperparameters
        self._open()

    def _open(self) -> None:
        self.trackio.init(project=project_name("trackio"), name=self.name, resume="allow", config=self.config)

    def _active(self) -> bool:
        return self.trackio.context_vars.current_run.get() is not None

    def log(self, values: dict[str, float], step: int) -> None:
        if not self._active():  # TRL's TrackioCallback finishes the run at train end; reopen the same one
            self._open()
        self.trackio.log(values, step=step)

    def close(self) -> None:
        if self._active():  # finished already by TRL's callback, for GRPO
            self.trackio.finish()


_OPENERS = {"tensorboard": _TensorBoard, "wandb": _Wandb, "trackio": _Trackio}


def run_name(run_dir: str | Path) -> str:
    """The tracker run name: the name of the run directory `run_dir` (what `prover report` calls the run)."""
    return Path(run_dir).resolve().name


def project_name(name: str) -> str:
    """The project a tracker files the run under (what TRL's `project` must match for trackio)."""
    env = {"wandb": "WANDB_PROJECT", "trackio": "TRACKIO_PROJECT"}.get(name)
    return os.environ.get(env, DEFAULT_PROJECT) if env else DEFAULT_PROJECT
