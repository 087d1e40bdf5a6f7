"""The `prover` command: parse, load the config, call one library function, render.

No work happens here. Each command loads the config (`--config`, `--set`), then calls a library
function through a backend (`--backend local|modal`) and renders the dict it returns: the
`tables` entry as rich tables on stderr, everything else as a key/value table, or the whole
result as JSON on stdout with `--json`. Library errors (`ProverError`) become one `Error:` line
and exit 1; usage errors exit 2. Heavy imports (torch, vllm, modal) happen inside the library.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, List, Optional

import typer
from typer.exceptions import TyperException

from prover_cli.errors import ProverError

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

# -- shared options -------------------------------------------------------------------------
ConfigOpt = typer.Option(None, "--config", "-c", help="TOML config file (see docs/config.md).")
SetOpt = typer.Option(None, "--set", help="Override a key: --set section.key=value (repeatable).")
JsonOpt = typer.Option(False, "--json", help="Print the result as JSON on stdout.")
BackendOpt = typer.Option("local", "--backend", help="Where the work runs: local or modal.")


def _command(fn):
    """Map library errors to one `Error:` line and exit 1; keep tracebacks behind PROVER_DEBUG."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from prover_cli.out import Out

        try:
            return fn(*args, **kwargs)
        except ProverError as exc:
            Out().error(str(exc), getattr(exc, "hint", None))
            raise typer.Exit(1) from None
        except (typer.Exit, typer.Abort, TyperException, KeyboardInterrupt):
            raise  # usage errors keep click's exit code 2
        except Exception as exc:  # an unexpected failure: say so in one line unless debugging
            if os.environ.get("PROVER_DEBUG"):
                raise
            Out().error(f"unexpected {type(exc).__name__}: {exc}",
                        "set PROVER_DEBUG=1 to see the traceback, and please report it")
            raise typer.Exit(1) from None

    return wrapper


def _setup(config: Optional[Path], overrides: Optional[List[str]], json_mode: bool):
    from prover_cli.config import load_config
    from prover_cli.out import Out

    return load_config(config, overrides or []), Out(json_mode=json_mode)


def _render(out, result: dict[str, Any], title: str) -> None:
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


def _run(backend: str, name: str, config, out, title: str, /, **kwargs: Any) -> None:
    from prover_cli import backends

    result = backends.run(backend, name, config, reporter=out, **kwargs)
    _render(out, result, title)


# -- commands -------------------------------------------------------------------------------

@app.command("prepare-data")
@_command
def prepare_data(
    source: Optional[str] = typer.Argument(None, help="HF dataset id, local JSON/JSONL/Parquet file, or `examples`; default data.source."),
    out_path: Optional[Path] = typer.Option(None, "--out", "-o", help="problems.jsonl to write; default data.problems."),
    limit: Optional[int] = typer.Option(None, "--limit", min=0, help="Keep at most this many problems."),
    preset: Optional[str] = typer.Option(None, "--preset", help="Layout: auto, lean-workbook, minif2f, problems, countdown."),
    config: Optional[Path] = ConfigOpt, overrides: Optional[List[str]] = SetOpt,
    json_mode: bool = JsonOpt, backend: str = BackendOpt,
):
    """Map a dataset to problems.jsonl (id, formal_statement, header, split, source).

    Examples:
      prover prepare-data ../shared/data/minif2f/minif2f.jsonl --out problems.jsonl
      prover prepare-data --config configs/demo.toml
    """
    cfg, out = _setup(config, overrides, json_mode)
    _run(backend, "prepare_data", cfg, out, "prepare-data", source=source, out_path=out_path,
         limit=limit, preset=preset)


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
    _run(backend, "verify", cfg, out, "verify", proofs_path=proofs, out_path=out_path)


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
    _run(backend, "generate", cfg, out, "generate", problems_path=problems, out_path=out_path, model=model)


@train_app.command("es")
@_command
def train_es(
    resume: bool = typer.Option(False, "--resume", help="Continue from <run.dir>/ledger.json."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan (and, on Modal, the cost) without running."),
    detach: bool = typer.Option(False, "--detach", help="Modal: keep running after this terminal closes."),
    config: Optional[Path] = ConfigOpt, overrides: Optional[List[str]] = SetOpt,
    json_mode: bool = JsonOpt, backend: str = BackendOpt,
):
    """Evolution Strategies: ledger.json + metrics.jsonl + final/ in run.dir.

    Examples:
      prover train es --config configs/demo.toml
      prover train es --config configs/kimina-es.toml --backend modal --dry-run
    """
    cfg, out = _setup(config, overrides, json_mode)
    if dry_run:
        _run("local", "plan", cfg, out, "plan", command="train_es", backend=backend)
        return
    kwargs: dict[str, Any] = {"resume": resume}
    if backend == "modal":
        kwargs["detach"] = detach
    _run(backend, "train_es", cfg, out, "train es", **kwargs)


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
    _run(backend, "train_grpo", cfg, out, "train grpo", **kwargs)


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
      prover replay-seeds runs/demo/ledger.json --out runs/demo/replayed
    """
    cfg, out = _setup(config, overrides, json_mode)
    _run(backend, "replay_seeds", cfg, out, "replay-seeds", ledger_path=ledger, out_dir=out_dir,
         upto=upto, device=device)


@app.command("eval")
@_command
def eval_(
    model: Optional[str] = typer.Option(None, "--model", help="Model path or hub id; default model.name."),
    ledger: Optional[Path] = typer.Option(None, "--ledger", help="Rebuild the weights from this ES ledger first."),
    verdicts: Optional[Path] = typer.Option(None, "--verdicts", help="Score existing verdicts.jsonl without generating."),
    k: Optional[str] = typer.Option(None, "--k", help="Comma-separated k values, e.g. 1,8,32; default eval.k."),
    config: Optional[Path] = ConfigOpt, overrides: Optional[List[str]] = SetOpt,
    json_mode: bool = JsonOpt, backend: str = BackendOpt,
):
    """Generate, verify and report pass@k on the eval split (or score existing verdicts).

    Examples:
      prover eval --config configs/demo.toml
      prover eval --verdicts verdicts.jsonl --k 1,8,32 --json
    """
    cfg, out = _setup(config, overrides, json_mode)
    ks = None
    if k is not None:
        try:
            ks = [int(part) for part in k.split(",") if part.strip()]
        except ValueError:
            raise typer.BadParameter(f"--k {k!r}: expected comma-separated integers, e.g. 1,8,32") from None
    _run(backend, "eval", cfg, out, "eval", model=model, ledger=ledger, verdicts=verdicts, k=ks)


@app.command()
@_command
def report(
    run_dirs: List[Path] = typer.Argument(..., help="Run directories of `train es` / `train grpo`."),
    out_dir: Optional[Path] = typer.Option(None, "--out", "-o", help="Where the table and plot go; default the first run dir."),
    json_mode: bool = JsonOpt,
):
    """Compare ES and GRPO runs: verified proofs per iteration, per 1,000 samples, per hour.

    Examples:
      prover report runs/es runs/grpo
    """
    from prover_cli import backends
    from prover_cli.out import Out

    out = Out(json_mode=json_mode)
    result = backends.resolve("report")(run_dirs=run_dirs, out_dir=out_dir)
    _render(out, result, "report")


@app.command()
@_command
def doctor(
    config: Optional[Path] = ConfigOpt, overrides: Optional[List[str]] = SetOpt,
    json_mode: bool = JsonOpt,
):
    """Report what this machine has: Python, torch and CUDA, vLLM, a Lean REPL, Modal credentials.

    Examples:
      prover doctor
    """
    from prover_cli.doctor import run_doctor

    cfg, out = _setup(config, overrides, json_mode)
    checks = run_doctor(cfg)
    if json_mode:
        out.result({"checks": [c.to_dict() for c in checks]})
    else:
        out.table("prover doctor", ["check", "status", "detail", "what to do"],
                  [(c.name, "ok" if c.ok else "missing", c.detail, c.fix) for c in checks])


def main() -> None:
    # Progress is ours (rich, on stderr); hub/transformers tqdm bars would interleave with it.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    app()


if __name__ == "__main__":
    main()
