"""Backends: where a library function runs. Neither changes what it computes.

- `local` imports the library function and calls it in this process.
- `modal` calls the same function, declared as a Modal function in `prover_cli/on_modal/`,
  remotely. The call goes through `MODAL_RUNNER`, a seam that tests replace with a fake.

Every command names its work by a key of `FUNCTIONS`; the value is "module:function", imported
only when the command runs, so `prover --help` never imports torch, vLLM or Modal.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from prover_cli.errors import BackendError

if TYPE_CHECKING:
    from prover_cli.config import Config


FUNCTIONS: dict[str, str] = {
    "prepare_data": "prover_cli.tasks.datasets:prepare_data",
    "verify": "prover_cli.verify:verify_file",
    "generate": "prover_cli.generate:generate_file",
    "train_es": "prover_cli.es.train:train_es",
    "probe_es": "prover_cli.es.probe:probe_es",
    "train_grpo": "prover_cli.grpo.train:train_grpo",
    "replay_seeds": "prover_cli.es.replay:replay_seeds",
    "eval": "prover_cli.evaluate:run_eval",
    "report": "prover_cli.comparison.report:report_runs",
    "plan": "prover_cli.on_modal.plan:plan",
}

BACKENDS = ("local", "modal")


def check_backend(value: str) -> str:
    """The `--backend` option's check, run before anything else (`--dry-run` included): a typo is
    a usage error (exit 2) with the closest name, never a plan or a run somewhere unintended."""
    if value in BACKENDS:
        return value
    import difflib

    import typer

    close = difflib.get_close_matches(value, BACKENDS, n=1, cutoff=0.5)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise typer.BadParameter(f"unknown backend {value!r}; {hint}use one of {', '.join(BACKENDS)}")


def resolve_function(name: str) -> Callable[..., Any]:
    """The library function of command `name`, imported now (lazily: heavy imports wait for a run)."""
    module_name, _, attr = FUNCTIONS[name].partition(":")
    return getattr(importlib.import_module(module_name), attr)


def run(backend: str, name: str, config: Config, /, **kwargs: Any) -> Any:
    """Run library function `name` on `backend` with the config and keyword arguments."""
    if backend == "local":
        return resolve_function(name)(config, **kwargs)
    if backend == "modal":
        kwargs.pop("reporter", None)  # progress does not cross the wire; Modal shows its own logs
        return MODAL_RUNNER(name, config, kwargs)
    raise BackendError(f"--backend {backend!r}: unknown backend; use one of {', '.join(BACKENDS)}")


def modal_credentials_present() -> bool:
    """Modal reads a token from MODAL_TOKEN_ID/MODAL_TOKEN_SECRET or from ~/.modal.toml."""
    if os.environ.get("MODAL_TOKEN_ID") and os.environ.get("MODAL_TOKEN_SECRET"):
        return True
    config_path = Path(os.environ.get("MODAL_CONFIG_PATH", Path.home() / ".modal.toml"))
    try:
        return "token_id" in config_path.read_text(encoding="utf-8")
    except OSError:
        return False


def modal_module(module_name: str) -> Any:
    """A module of prover_cli/on_modal/, once Modal credentials and the `modal` package are there."""
    if not modal_credentials_present():
        raise BackendError(
            "--backend modal needs Modal credentials, and none were found "
            "(no MODAL_TOKEN_ID/MODAL_TOKEN_SECRET and no ~/.modal.toml)",
            hint="run `modal token new`, or use --backend local",
        )
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == "modal":
            raise BackendError("--backend modal needs the `modal` package: pip install 'modal==1.6.*'") from None
        raise


def _run_on_modal(name: str, config: Config, kwargs: dict[str, Any]) -> Any:
    return modal_module("prover_cli.on_modal.remote").run_remote(name, config, kwargs)


# Tests replace this with a fake runner: `monkeypatch.setattr(backends, "MODAL_RUNNER", fake)`.
MODAL_RUNNER: Callable[[str, Any, dict[str, Any]], Any] = _run_on_modal
