"""`prover report`: ES and GRPO runs side by side, on the same axes.

    prover report runs/es runs/grpo                       # -> reports/es-vs-grpo-<timestamp>/
    prover report runs/es runs/grpo --out reports/cmp --json

Reads each run directory's `metrics.jsonl` (one line per iteration, the schema of
`prover_cli.metrics`) and `config.toml` (the resolved config written when the run started), and
writes into a NEW output directory (`--out`; default `reports/<run names>-<timestamp>/`): never
an input run directory itself (a subdirectory such as `runs/es/report/` is fine), and never over
an existing report.

- `report.json`: one summary per run (the table below, unrounded);
- `report.png`: two rows of three panels, every run on the same axes:
  1. training reward (`reward/mean`) vs iteration, vs thousands of samples, vs wall-clock time;
  2. held-out verified rate (`eval/verified_rate`, prover_cli/heldout.py) on the same three axes,
     for runs trained with `run.eval_every > 0`;
  3. for ES runs, the signal share of the update (`es/signal_share`, pooled over the last 5
     iterations; es/signal.py) on the same axes, with the 0.5 line below which the update is
     mostly noise.
  Iterations are integer ticks, y axes start at 0, wall-clock time is in s, min or h (whichever
  fits the longest run), and the title names the task, the model(s) and the runs.

"Verified" in the table is `verify/verified`: samples with reward 1.0 (Lean: proofs Lean accepted);
"held-out" is the last `eval/verified_rate`, "best held-out" the highest.

Comparisons are refused, with the runs and the values named, when
- the tasks differ (`data.task`), or
- the problem sets differ: for each run whose problems file is present, the ids of its training
  split (`data.train_split`), of its eval split (`eval.split`, from `eval.problems` or else the
  training problems) and, for runs with held-out evaluations, of its held-out set
  (`data.valid_split`, with `run.eval_problems` and the seed choosing its subset) are
  fingerprinted, and the fingerprints must agree. A run whose problems file is absent is not
  checked (nothing to compare), and the report says so.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
import time
from pathlib import Path
from typing import Any, Sequence

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

from prover_cli.errors import InputError
from prover_cli.jsonl import BadLine, load_jsonl_strict, log_malformed, read_jsonl, with_malformed, write_text_atomic
from prover_cli.metrics import METRICS_FILE, REQUIRED_KEYS
from prover_cli.progress import NULL_REPORTER

REPORT_JSON = "report.json"
REPORT_PNG = "report.png"
_NUMERIC_KEYS = ("reward/mean", "reward/max", "verify/verified", "samples", "samples/total",
                 "time/wall_s", "time/elapsed_s")
EVAL_RATE = "eval/verified_rate"  # the held-out curve (prover_cli/heldout.py)
_EVAL_NUMERIC_KEYS = (EVAL_RATE, "eval/solved_rate", "eval/reward_mean", "eval/samples", "eval/problems")
SIGNAL_KEYS = ("es/signal_share", "es/signal_var", "es/noise_var")  # ES only (es/signal.py)
SIGNAL_SHARE = SIGNAL_KEYS[0]


def report_runs(*, run_dirs: Sequence[str | Path], out_dir: str | Path | None = None,
                reporter: Any = NULL_REPORTER) -> dict[str, Any]:
    """Compare runs: one table, `report.json` and `report.png` in a new `out_dir`.

    A malformed metrics line is reported by file and line and left out; the rest is reported
    and the command exits 1 (`ok` false)."""
    if not run_dirs:
        raise InputError("prover report needs at least one run directory")
    runs = [load_run(Path(d)) for d in run_dirs]
    check_comparable(runs)
    for run in runs:
        log_malformed(reporter, run["dir"] / METRICS_FILE, run["malformed"])

    summaries = [summarize_run(run) for run in runs]
    out = prepare_out_dir(out_dir, runs)
    json_path, png_path = out / REPORT_JSON, out / REPORT_PNG
    task = runs[0]["task"]
    unchecked = [str(run["dir"]) for run in runs if run["problem_sets"] is None]
    write_text_atomic(json_path, json.dumps({"task": task, "runs": summaries, "problem_sets_unchecked": unchecked},
                                            indent=2, sort_keys=True) + "\n")
    plot_runs(runs, png_path)
    result = {
        "ok": True,
        "task": task,
        "runs": summaries,
        "problem_sets_unchecked": len(unchecked),
        "out": str(out),
        "report_json": str(json_path),
        "plot": str(png_path),
        "tables": [summary_table(summaries)],
    }
    for run in runs:
        with_malformed(result, run["dir"] / METRICS_FILE, run["malformed"])
    return result


def prepare_out_dir(out_dir: str | Path | None, runs: list[dict[str, Any]]) -> Path:
    """The directory to write into: never an input run dir (or inside one), never over a report."""
    if out_dir is None:
        names = "-vs-".join(_safe_name(run["name"]) for run in runs)[:80]
        stamp = time.strftime("%Y%m%d-%H%M%S")
        out = Path("reports") / f"{names}-{stamp}"
        suffix = 2
        while out.exists():  # two reports in one second: a new directory, not the same one
            out = Path("reports") / f"{names}-{stamp}-{suffix}"
            suffix += 1
    else:
        out = Path(out_dir)
    resolved = out.resolve()
    for run in runs:
        # Its own subdirectory (runs/x/report/) mixes nothing; the run directory itself would.
        if resolved == run["dir"].resolve():
            raise InputError(f"--out {out}: is the input run directory {run['dir']}; a report never writes "
                             "among a run's files", hint="pass another --out, or leave it out for reports/<runs>-<time>/")
    existing = [out / name for name in (REPORT_JSON, REPORT_PNG) if (out / name).exists()]
    if existing:
        raise InputError(f"{existing[0]}: a report is already there; not overwriting it",
                         hint="pass a new --out directory, or delete the old report first")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "run"


# --------------------------------------------------------------------------------------------
# Reading a run directory
# --------------------------------------------------------------------------------------------

def load_run(run_dir: Path) -> dict[str, Any]:
    """The run's records, task and problem-set fingerprints; every defect names file and line."""
    if not run_dir.is_dir():
        raise InputError(f"{run_dir}: not a run directory (it does not exist or is a file)")
    config = read_config(run_dir / "config.toml")
    malformed: list[dict[str, Any]] = []  # reported and skipped; the report then exits 1
    records = read_metrics(run_dir / METRICS_FILE, malformed)
    data = config.get("data", {})
    task = data.get("task")
    for line_no, record in records:
        if task is None:
            task = record["task"]
        if record["task"] != task:
            raise InputError(f"{run_dir / METRICS_FILE}:{line_no}: task {record['task']!r} but "
                             f"{run_dir / 'config.toml'} says data.task = {task!r}")
    methods = {record["method"] for _, record in records}
    if len(methods) > 1:
        raise InputError(f"{run_dir / METRICS_FILE}: mixes methods {sorted(methods)}; one run directory per run")
    kept = [record for _, record in records]
    return {
        "dir": run_dir,
        "name": run_dir.resolve().name or str(run_dir),
        "task": task,
        "model": config.get("model", {}).get("name", "?"),
        "method": methods.pop(),
        "records": kept,
        "problem_sets": problem_sets(run_dir, config, heldout=any(EVAL_RATE in r for r in kept)),
        "malformed": malformed,
    }


def read_config(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: not found; `prover train` writes the resolved config there when a run starts") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML: {exc}") from None


def read_metrics(path: Path, malformed: list[dict[str, Any]] | None = None) -> list[tuple[int, dict[str, Any]]]:
    """(line number, record) pairs; strictly increasing iterations, every required key a number.

    A malformed line (not JSON, a key missing or not a finite number) is an InputError naming the
    file and line, or, when a `malformed` list is given, appended to it ({"line", "reason"}) and
    skipped. Iterations that do not increase mean two runs in one file: always an error."""
    if not path.exists():
        raise InputError(f"{path}: not found; is this the directory of a `prover train` run?")
    records: list[tuple[int, dict[str, Any]]] = []
    for line_no, record in read_jsonl(path):
        where = f"{path}:{line_no}"
        reason = _metrics_defect(record)
        if reason is not None:
            if malformed is None:
                raise InputError(f"{where}: {reason}")
            malformed.append({"line": line_no, "reason": reason})
            continue
        if records and record["iteration"] <= records[-1][1]["iteration"]:
            raise InputError(f"{where}: iteration {record['iteration']} after iteration "
                             f"{records[-1][1]['iteration']}; the file mixes two runs")
        records.append((line_no, record))
    if not records:
        raise InputError(f"{path}: no iterations recorded yet" + (f" ({len(malformed)} malformed line(s))"
                                                                  if malformed else ""))
    return records


def _metrics_defect(record: Any) -> str | None:
    """Why a metrics.jsonl line cannot be reported, or None."""
    if isinstance(record, BadLine):
        return record.reason
    missing = [key for key in REQUIRED_KEYS if key not in record]
    if missing:
        return f"missing {', '.join(missing)}"
    optional = (*_EVAL_NUMERIC_KEYS, *SIGNAL_KEYS)
    for key in ("iteration", *_NUMERIC_KEYS, *(k for k in optional if k in record)):
        value = record[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return f"{key} = {value!r}: expected a finite number"
    for key in ("method", "task"):
        if not isinstance(record[key], str):
            return f"{key} = {record[key]!r}: expected a string"
    return None


def problem_sets(run_dir: Path, config: dict[str, Any], heldout: bool = False) -> dict[str, str] | None:
    """Fingerprints of the train, eval (and held-out) problem ids, or None when the problems file is absent."""
    data, evaluation, run = config.get("data", {}), config.get("eval", {}), config.get("run", {})
    train_path = Path(data["problems"]) if data.get("problems") else run_dir / "problems.jsonl"
    eval_path = Path(evaluation["problems"]) if evaluation.get("problems") else train_path
    if not train_path.exists() or not eval_path.exists():
        return None
    train_split = data.get("train_split", "train")
    eval_split = evaluation.get("split", "test")
    sets = {
        "train": f"{train_split}:{_fingerprint(train_path, train_split)}",
        "eval": f"{eval_split}:{_fingerprint(eval_path, eval_split)}",
    }
    if heldout:  # the subset heldout.py draws depends on run.eval_problems and, when it is > 0, run.seed
        valid_split, count = data.get("valid_split", "valid"), run.get("eval_problems", 0)
        subset = f", subset of {count} drawn with run.seed = {run.get('seed', 0)}" if count else ""
        sets["heldout"] = f"{valid_split}:{_fingerprint(train_path, valid_split)}{subset}"
    return sets


def _fingerprint(path: Path, split: str) -> str:
    ids = sorted(str(p.get("id", p.get("name"))) for p in load_jsonl_strict(path) if p.get("split") == split)
    digest = hashlib.sha256("\n".join(ids).encode("utf-8")).hexdigest()[:12]
    return f"{len(ids)} problems, sha256 {digest}"


def check_comparable(runs: list[dict[str, Any]]) -> None:
    """Refuse to compare different tasks or different problem sets, naming the runs and values."""
    first = runs[0]
    for run in runs[1:]:
        if run["task"] != first["task"]:
            raise InputError(
                f"cannot compare runs of different tasks: {first['dir']} is {first['task']!r}, "
                f"{run['dir']} is {run['task']!r}",
                hint="report runs of one task together")
    for which in ("train", "eval", "heldout"):
        checked = [run for run in runs if run["problem_sets"] is not None and which in run["problem_sets"]]
        for run in checked[1:]:
            a, b = checked[0]["problem_sets"][which], run["problem_sets"][which]
            if a != b:
                raise InputError(
                    f"cannot compare runs with different {which} problem sets: {checked[0]['dir']} has {a}, "
                    f"{run['dir']} has {b}",
                    hint="train both runs on the same problems file (data.problems) and splits")


# --------------------------------------------------------------------------------------------
# Summary and table
# --------------------------------------------------------------------------------------------

def summarize_run(run: dict[str, Any]) -> dict[str, Any]:
    records = run["records"]
    last = records[-1]
    verified = sum(r["verify/verified"] for r in records)
    iterations = len(records)
    samples = last["samples/total"]
    hours = last["time/elapsed_s"] / 3600
    evals = [r for r in records if EVAL_RATE in r]
    best = max(evals, key=lambda r: r[EVAL_RATE]) if evals else None
    return {
        "run": run["name"],
        "dir": str(run["dir"]),
        "method": run["method"],
        "model": run["model"],
        "iterations": iterations,
        "samples": samples,
        "hours": hours,
        "verified": verified,
        "verified_per_iteration": verified / iterations,
        "verified_per_1k_samples": verified / samples * 1000 if samples else None,
        "verified_per_hour": verified / hours if hours else None,
        "final_reward": last["reward/mean"],
        # held-out evaluation of the current weights (None: the run had run.eval_every = 0)
        "heldout_verified_rate": evals[-1][EVAL_RATE] if evals else None,
        "heldout_iteration": evals[-1]["iteration"] if evals else None,
        "heldout_best_verified_rate": best[EVAL_RATE] if best else None,
        "heldout_best_iteration": best["iteration"] if best else None,
        "heldout_problems": evals[-1].get("eval/problems") if evals else None,
        "heldout_samples": evals[-1].get("eval/samples") if evals else None,
        "heldout_evaluations": len(evals),
        # ES: the signal share of the last iterations at the end (None for GRPO, or before any estimate)
        "es_signal_share": next((r[SIGNAL_SHARE] for r in reversed(records) if SIGNAL_SHARE in r), None),
    }


def summary_table(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """The human table (samples, hours and held-out details stay in report.json)."""

    def num(value: float | None, digits: int) -> str:
        return "-" if value is None else f"{value:,.{digits}f}"

    def at(value: float | None, iteration: int | None) -> str:
        return "-" if value is None else f"{value:.3f} @{iteration}"

    rows = [[s["run"], s["method"], s["iterations"], s["verified"], num(s["verified_per_iteration"], 2),
             num(s["verified_per_1k_samples"], 1), num(s["verified_per_hour"], 1), num(s["final_reward"], 3),
             at(s["heldout_verified_rate"], s["heldout_iteration"]),
             at(s["heldout_best_verified_rate"], s["heldout_best_iteration"])]
            for s in summaries]
    return {"title": "verified proofs: ES vs GRPO",
            "columns": ["run", "method", "iters", "verified", "per iter", "per 1k samples", "per hour",
                        "final reward", "held-out", "best held-out"],
            "rows": rows}


# --------------------------------------------------------------------------------------------
# Plot
# --------------------------------------------------------------------------------------------

def time_unit(seconds: float) -> tuple[str, float]:
    """(unit, seconds per unit) that fits a span: s below 2 minutes, min below 2 hours, else h."""
    if seconds < 120:
        return "s", 1.0
    if seconds < 2 * 3600:
        return "min", 60.0
    return "h", 3600.0


def plot_runs(runs: list[dict[str, Any]], path: Path) -> None:
    """Write `build_figure(runs)` as a PNG (matplotlib's Agg backend: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = build_figure(runs)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def build_figure(runs: list[dict[str, Any]]):
    """Training reward, held-out verified rate (and ES signal share) in rows, each vs iteration, samples, time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    unit, per_unit = time_unit(max(run["records"][-1]["time/elapsed_s"] for run in runs))
    signal_runs = [run for run in runs if any(SIGNAL_SHARE in r for r in run["records"])]
    fig, axes = plt.subplots(3 if signal_runs else 2, 3, figsize=(15, 12 if signal_runs else 8))
    rows = (("reward/mean", "training reward (mean)"), (EVAL_RATE, "held-out verified rate"))
    for row, (key, what) in zip(axes, rows):
        for run in runs:
            records = [r for r in run["records"] if key in r]
            if not records:
                continue
            label = run["name"] if run["name"] == run["method"] else f"{run['name']} ({run['method']})"
            values = [r[key] for r in records]
            row[0].plot([r["iteration"] for r in records], values, marker=".", label=label)
            row[1].plot([r["samples/total"] / 1000 for r in records], values, marker=".", label=label)
            row[2].plot([r["time/elapsed_s"] / per_unit for r in records], values, marker=".", label=label)
        for axis, xlabel in zip(row, ("iteration", "samples (thousands)", f"wall-clock ({unit})")):
            axis.set(title=f"{what} vs {xlabel.split(' (')[0]}", xlabel=xlabel, ylabel=what)
            axis.set_xlim(left=0)
            axis.set_ylim(bottom=0, top=max(1.0, axis.get_ylim()[1]) if key == EVAL_RATE else None)
            axis.grid(alpha=0.3)
            if axis.get_legend_handles_labels()[0]:
                axis.legend(fontsize="small")
            else:
                axis.text(0.5, 0.5, "no held-out evaluation\n(run.eval_every = 0)", ha="center", va="center",
                          transform=axis.transAxes, color="gray")
        row[0].xaxis.set_major_locator(MaxNLocator(integer=True))  # iterations are whole numbers
    if signal_runs:
        plot_signal(axes[2], signal_runs, unit, per_unit)
    models = sorted({run["model"] for run in runs})
    fig.suptitle(f"{runs[0]['task']} with {', '.join(models)}: "
                 + " vs ".join(f"{run['name']} ({run['method']})" for run in runs))
    fig.tight_layout()
    return fig


def plot_signal(row: Any, runs: list[dict[str, Any]], unit: str, per_unit: float) -> None:
    """ES signal share (pooled over the last iterations), vs iteration, samples, time."""
    from matplotlib.ticker import MaxNLocator

    from prover_cli.es.signal import NOISE_BELOW, WINDOW

    for run in runs:
        records = [r for r in run["records"] if SIGNAL_SHARE in r]
        xs = ([r["iteration"] for r in records], [r["samples/total"] / 1000 for r in records],
              [r["time/elapsed_s"] / per_unit for r in records])
        for axis, x in zip(row, xs):
            axis.plot(x, [r[SIGNAL_SHARE] for r in records], marker=".", label=f"{run['name']} (last {WINDOW} iterations)")
    for axis, xlabel in zip(row, ("iteration", "samples (thousands)", f"wall-clock ({unit})")):
        axis.axhline(NOISE_BELOW, color="gray", linestyle="--", linewidth=1, label=f"below {NOISE_BELOW}: mostly noise")
        axis.set(title=f"ES signal share vs {xlabel.split(' (')[0]}", xlabel=xlabel,
                 ylabel="signal share of the update", ylim=(-1.05, 1.05))
        axis.set_xlim(left=0)
        axis.grid(alpha=0.3)
        axis.legend(fontsize="small")
    row[0].xaxis.set_major_locator(MaxNLocator(integer=True))
