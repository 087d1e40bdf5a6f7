"""`prover report`: ES and GRPO runs side by side, on the same axes.

    prover report runs/es runs/grpo
    prover report runs/es runs/grpo --out reports/ --json

Reads each run directory's `metrics.jsonl` (one line per iteration, the schema of
`prover_cli.metrics`) and `config.toml` (the resolved config written when the run started), and
writes into the output directory (default: the first run directory):

- `report.json`: one summary per run (the table below, unrounded);
- `report.png`: three panels, every run on the same axes:
  1. verified per iteration vs iteration (the reference work's metric),
  2. cumulative verified per 1,000 samples vs samples (sample efficiency),
  3. cumulative verified vs wall-clock hours (time efficiency).

"Verified" is `verify/verified`: samples with reward 1.0 (Lean: proofs Lean accepted).

Comparisons are refused, with the runs and the values named, when
- the tasks differ (`data.task`), or
- the problem sets differ: for each run whose problems file is present, the ids of its training
  split (`data.train_split`) and of its eval split (`eval.split`, from `eval.problems` or else the
  training problems) are fingerprinted, and the fingerprints must agree. A run whose problems
  file is absent is not checked (nothing to compare), and the report says so.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path
from typing import Any, Sequence

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

from prover_cli.errors import InputError
from prover_cli.jsonl import BadLine, load_jsonl_strict, read_jsonl
from prover_cli.metrics import METRICS_FILE, REQUIRED_KEYS

REPORT_JSON = "report.json"
REPORT_PNG = "report.png"
_NUMERIC_KEYS = ("reward/mean", "reward/max", "verify/verified", "samples", "samples/total",
                 "time/wall_s", "time/elapsed_s")


def report_runs(*, run_dirs: Sequence[str | Path], out_dir: str | Path | None = None) -> dict[str, Any]:
    """Compare runs: one table, `report.json` and `report.png` in `out_dir` (default the first run)."""
    if not run_dirs:
        raise InputError("prover report needs at least one run directory")
    runs = [load_run(Path(d)) for d in run_dirs]
    check_comparable(runs)

    summaries = [summarize_run(run) for run in runs]
    out = Path(out_dir) if out_dir is not None else Path(run_dirs[0])
    out.mkdir(parents=True, exist_ok=True)
    json_path, png_path = out / REPORT_JSON, out / REPORT_PNG
    task = runs[0]["task"]
    unchecked = [str(run["dir"]) for run in runs if run["problem_sets"] is None]
    json_path.write_text(json.dumps({"task": task, "runs": summaries, "problem_sets_unchecked": unchecked},
                                    indent=2, sort_keys=True) + "\n", encoding="utf-8")
    plot_runs(runs, png_path)
    return {
        "ok": True,
        "task": task,
        "runs": summaries,
        "problem_sets_unchecked": len(unchecked),
        "report_json": str(json_path),
        "plot": str(png_path),
        "tables": [summary_table(summaries)],
    }


# --------------------------------------------------------------------------------------------
# Reading a run directory
# --------------------------------------------------------------------------------------------

def load_run(run_dir: Path) -> dict[str, Any]:
    """The run's records, task and problem-set fingerprints; every defect names file and line."""
    if not run_dir.is_dir():
        raise InputError(f"{run_dir}: not a run directory (it does not exist or is a file)")
    config = read_config(run_dir / "config.toml")
    records = read_metrics(run_dir / METRICS_FILE)
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
    return {
        "dir": run_dir,
        "name": run_dir.name or str(run_dir),
        "task": task,
        "method": methods.pop(),
        "records": [record for _, record in records],
        "problem_sets": problem_sets(run_dir, config),
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


def read_metrics(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, record) pairs; strictly increasing iterations, every required key a number."""
    if not path.exists():
        raise InputError(f"{path}: not found; is this the directory of a `prover train` run?")
    records: list[tuple[int, dict[str, Any]]] = []
    for line_no, record in read_jsonl(path):
        where = f"{path}:{line_no}"
        if isinstance(record, BadLine):
            raise InputError(f"{where}: {record.reason}")
        missing = [key for key in REQUIRED_KEYS if key not in record]
        if missing:
            raise InputError(f"{where}: missing {', '.join(missing)}")
        for key in ("iteration", *_NUMERIC_KEYS):
            value = record[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise InputError(f"{where}: {key} = {value!r}: expected a finite number")
        if records and record["iteration"] <= records[-1][1]["iteration"]:
            raise InputError(f"{where}: iteration {record['iteration']} after iteration "
                             f"{records[-1][1]['iteration']}; the file mixes two runs")
        records.append((line_no, record))
    if not records:
        raise InputError(f"{path}: no iterations recorded yet")
    return records


def problem_sets(run_dir: Path, config: dict[str, Any]) -> dict[str, str] | None:
    """Fingerprints of the train and eval problem ids, or None when the problems file is absent."""
    data, evaluation = config.get("data", {}), config.get("eval", {})
    train_path = Path(data["problems"]) if data.get("problems") else run_dir / "problems.jsonl"
    eval_path = Path(evaluation["problems"]) if evaluation.get("problems") else train_path
    if not train_path.exists() or not eval_path.exists():
        return None
    train_split = data.get("train_split", "train")
    eval_split = evaluation.get("split", "test")
    return {
        "train": f"{train_split}:{_fingerprint(train_path, train_split)}",
        "eval": f"{eval_split}:{_fingerprint(eval_path, eval_split)}",
    }


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
    checked = [run for run in runs if run["problem_sets"] is not None]
    for which in ("train", "eval"):
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
    return {
        "run": run["name"],
        "dir": str(run["dir"]),
        "method": run["method"],
        "iterations": iterations,
        "samples": samples,
        "hours": hours,
        "verified": verified,
        "verified_per_iteration": verified / iterations,
        "verified_per_1k_samples": verified / samples * 1000 if samples else None,
        "verified_per_hour": verified / hours if hours else None,
        "final_reward": last["reward/mean"],
    }


def summary_table(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """The human table (samples and hours stay in report.json: eight columns fit a terminal)."""

    def num(value: float | None, digits: int) -> str:
        return "-" if value is None else f"{value:,.{digits}f}"

    rows = [[s["run"], s["method"], s["iterations"], s["verified"], num(s["verified_per_iteration"], 2),
             num(s["verified_per_1k_samples"], 1), num(s["verified_per_hour"], 1), num(s["final_reward"], 3)]
            for s in summaries]
    return {"title": "verified proofs: ES vs GRPO",
            "columns": ["run", "method", "iters", "verified", "per iter", "per 1k samples", "per hour",
                        "final reward"],
            "rows": rows}


# --------------------------------------------------------------------------------------------
# Plot
# --------------------------------------------------------------------------------------------

def plot_runs(runs: list[dict[str, Any]], path: Path) -> None:
    """Three panels, all runs on the same axes (matplotlib's Agg backend: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (per_iter, per_sample, per_hour) = plt.subplots(1, 3, figsize=(15, 4.5))
    for run in runs:
        records = run["records"]
        label = run["name"] if run["name"] == run["method"] else f"{run['name']} ({run['method']})"
        iterations = [r["iteration"] for r in records]
        cumulative, total = [], 0
        for r in records:
            total += r["verify/verified"]
            cumulative.append(total)
        samples = [r["samples/total"] for r in records]
        hours = [r["time/elapsed_s"] / 3600 for r in records]
        per_1k = [c / s * 1000 if s else 0.0 for c, s in zip(cumulative, samples)]
        per_iter.plot(iterations, [r["verify/verified"] for r in records], marker=".", label=label)
        per_sample.plot(samples, per_1k, marker=".", label=label)
        per_hour.plot(hours, cumulative, marker=".", label=label)
    per_iter.set(title="verified per iteration", xlabel="iteration", ylabel="verified")
    per_sample.set(title="cumulative verified per 1,000 samples", xlabel="samples", ylabel="verified / 1k samples")
    per_hour.set(title="cumulative verified vs wall-clock", xlabel="wall-clock hours", ylabel="verified")
    for axis in (per_iter, per_sample, per_hour):
        axis.grid(alpha=0.3)
        axis.legend(fontsize="small")
    fig.suptitle(f"{runs[0]['task']}: " + " vs ".join(run["name"] for run in runs))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
