"""`prover report`: ES and GRPO runs side by side, on the same axes; several seeds per method aggregated.

    prover report runs/es runs/grpo                                  # one run per method
    prover report runs/s*/es runs/s*/grpo runs/s*/es-null            # seeds per method: means, bands, differences
    prover report runs/es runs/grpo --out reports/cmp --json

Reads each run directory's `metrics.jsonl` (one line per iteration, the schema of
`prover_cli.training.metrics`; iteration 0 is the base's held-out evaluation) and `config.toml` (the
resolved config written when the run started), and writes into a NEW output directory (`--out`;
default `reports/<run names>-<timestamp>/`): never an input run directory itself (a
subdirectory such as `runs/es/report/` is fine), and never over an existing report.

**Arms.** Runs are grouped into arms: the same method and the same resolved config (`arm_identity`:
every key but the few that tell one run of an arm from another, `_WITHIN_ARM_KEYS`: the seed,
paths, how often a run saves, workers, Modal resources; and not the other method's section);
the runs of an arm are its seeds (`run.seed`). The training-set size (`data.train_size`) is part
of the arm, so runs of different sizes are never merged. A null control (`es.shuffle_rewards`,
`grpo.shuffle_rewards`) is an arm of its own, `es null` / `grpo null`; two arms of one method that
differ otherwise are named by what differs (`es (sigma=0.003)`, `es (data.train_size=16)`).

**Held-out, both metrics** (sampled `eval/verified_rate`, greedy `eval/greedy_verified_rate`;
prover_cli/training/heldout.py), per arm:
- at every sample budget (`samples/total`) all its runs were evaluated at, the base (0) first:
  the mean over seeds and its 95% interval (Student's t over seeds); for an arm of one run, that
  run's own interval, which covers the held-out problems and samples, not the luck of training;
- base -> final (each run's last evaluation), and the gain final - base (per seed, then t over
  seeds; for one run, paired problem by problem).

**Paired differences** at the largest common budget, each labelled with its `contrast`
(`contrasts`): `method`, ES - GRPO (every ES arm against every GRPO arm of the same training-set
size, null controls aside); `null control`, every method against its null control at that size
(of the same method if there is one); `training-set size`, the limited-data contrast, an arm
against the arm that differs from it only in `data.train_size` (less data first: what limiting
the data costs). For each pair of runs, each run's last evaluation at or below the smaller
run's `samples/total` (the table's "compared at" column and `at` in report.json name the
iteration or step and its samples). When those two evaluations are more than 5 % apart in training samples
(different evaluation points, or no evaluation below the common budget), the report refuses
(exit 2, a usage error naming both runs, their budgets and the flag) unless
`--allow-unequal-budgets`; then its first line, the first table's title and `headline` in the
result and report.json say `UNEQUAL BUDGETS: es N samples vs grpo M samples`. Runs with the same
`run.seed` are scored on the same held-out problems and are paired; two evaluations whose test
sets' fingerprints (`eval/problems_sha256`) differ are refused;
each pair's difference is taken problem by problem (`eval/by_problem`), and the interval is t
over the pairs, or over the problems for a single pair (prover_cli/comparison/stats.py says why).

Outputs:
- `report.json`: every run's summary, every arm's aggregates per budget, every difference;
- `report.png`: three rows of three panels, held-out sampled and held-out greedy verified rate,
  then training reward (a diagnostic, last as in the tables), each vs samples (first: the budget that is the same work for every
  method; in thousands from 10,000), vs training completion tokens (`tokens/total`; in
  thousands from 10,000), vs wall-clock time: no iterations axis, since an ES iteration and a
  GRPO step are different units. One curve per arm (its mean over seeds, one color per arm
  everywhere) with its 95% band (a bar for a lone point), and the base as a star at 0; one legend
  for the figure, one label per arm. Every panel of a column spans the column's x range (a curve
  with only the base's point included), y axes start at 0, wall-clock time is in s, min or h
  (whichever fits the longest run), and the title names the task, the model(s) and the arms; for
  ES runs a fourth row, the signal share of the update (`es/signal_share`, pooled over the last 5
  iterations; es/signal.py) per arm, its mean over seeds with a 95% band, on the same axes, with
  the 0.5 line below which the update is mostly noise.
- tables: the comparison first, held-out base -> final with gains, then the paired differences;
  last, the **training diagnostic, not the comparison**, per run (one run per arm) or per arm:
  verified training samples per iteration and per 1,000 samples, with each method's decoding
  (ES members greedy or sampled at `es.member_temperature`; GRPO sampled at `grpo.temperature`,
  `grpo.num_generations` per prompt), which make those numbers count unlike work.

"Verified" in the diagnostic is `verify/verified`: samples with reward 1.0 (Lean: proofs Lean
accepted) of the training problems; report.json keeps each run's last and best held-out rate.

Comparisons are refused, with the runs and the values named, when
- the tasks differ (`data.task`), or
- the problem sets differ: for each run, the ids of its training split (`data.train_split`), of
  its eval split (`eval.split`, from `eval.problems` or else the training problems) and, for runs
  with held-out evaluations, of its held-out set (chosen as the trainers choose it: deduplicated
  by content, `run.eval_problems` drawn from `run.eval_problems_seed`; prover_cli/tasks/problems.py) are
  fingerprinted. Runs of one seed must agree (the training sets only at one `data.train_size`);
  across seeds the sets may differ (a seed may draw its own problems), but two arms must have at
  least one set in common (their paired seeds).

Where a run's problems are: `data.problems` / `eval.problems` as its `config.toml` recorded them;
a relative path is relative to the directory the run was started from, which its recorded
`run.dir` tells (`run.dir = "runs/demo/es"` and the run found at `/x/runs/demo/es`: `/x`), so the
report finds them from any directory. `data.problems` empty: `<run dir>/problems.jsonl`, or for
countdown and toy the problems the run generated from `run.seed`, generated again. A run whose
problems cannot be found is not checked, and never silently: a `Warning:` line per run naming the
path tried, a table, `problem_sets_not_checked` in the result and report.json.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Sequence

from prover_cli.comparison.arms import (
    arm_training_table, difference_table, differences, group_arms, heldout_table, summarize_arm, summarize_run,
    summary_table)
from prover_cli.comparison.report_figure import plot_runs
from prover_cli.comparison.run_reader import check_comparable, load_run
from prover_cli.errors import InputError
from prover_cli.fsio.jsonl import log_malformed, with_malformed, write_text_atomic
from prover_cli.progress import NULL_REPORTER, Reporter
from prover_cli.training.metrics import METRICS_FILE

REPORT_JSON = "report.json"
REPORT_PNG = "report.png"


def report_runs(*, run_dirs: Sequence[str | Path], out_dir: str | Path | None = None,
                reporter: Reporter = NULL_REPORTER, allow_unequal_budgets: bool = False) -> dict[str, Any]:
    """Compare runs: tables, `report.json` and `report.png` in a new `out_dir`.

    Differences are taken at the largest budget both runs reached (`differences`); finals more
    than 5 % apart in training samples are refused (UsageError, exit 2) unless
    `allow_unequal_budgets`, and then the output's headline says "UNEQUAL BUDGETS: ...".

    A malformed metrics line is reported by file and line and left out; the rest is reported
    and the command exits 1 (`ok` false)."""
    if not run_dirs:
        raise InputError("prover report needs at least one run directory")
    runs = [load_run(Path(d)) for d in run_dirs]
    arms = group_arms(runs)
    check_comparable(runs, arms)
    unchecked = [{"run": run["name"], "dir": str(run["dir"]), "why": run["problem_sets_why"]}
                 for run in runs if run["problem_sets"] is None]
    if len(runs) > 1:  # never silently: a comparison whose problems nobody checked says so on stderr
        warn = getattr(reporter, "warn", reporter.log)
        for entry in unchecked:
            warn(f"{entry['dir']}: problem sets NOT checked, so this comparison may mix problem sets: {entry['why']}")
    for run in runs:
        log_malformed(reporter, run["dir"] / METRICS_FILE, run["malformed"])

    summaries = [summarize_run(run) for run in runs]
    arm_summaries = [summarize_arm(arm) for arm in arms]
    diffs = differences(arms, allow_unequal_budgets=allow_unequal_budgets)
    headlines = [d["unequal_budgets"] for d in diffs if "unequal_budgets" in d]
    for line in headlines:  # first, before any table: these differences mix budget with method
        getattr(reporter, "warn", reporter.log)(line)
    out = prepare_out_dir(out_dir, runs)
    json_path, png_path = out / REPORT_JSON, out / REPORT_PNG
    task = runs[0]["task"]
    write_text_atomic(json_path, json.dumps({"task": task, **({"headline": "; ".join(headlines)} if headlines else {}),
                                             "runs": summaries, "arms": arm_summaries,
                                             "differences": diffs, "problem_sets_unchecked": unchecked},
                                            indent=2, sort_keys=True) + "\n")
    plot_runs(runs, png_path)
    single = all(len(arm["runs"]) == 1 for arm in arms)
    tables = []  # the held-out comparison first: the headline; training numbers after it, as a diagnostic
    if any(a["heldout"] for a in arm_summaries):
        tables.append(heldout_table(arm_summaries))
    if diffs:
        tables.append(difference_table(diffs))
    tables.append(summary_table(summaries) if single else arm_training_table(arm_summaries))
    if headlines:  # the headline: the first table's title too, so no reader of the tables misses it
        tables[0] = {**tables[0], "title": "; ".join(headlines) + " -- " + tables[0]["title"]}
    if unchecked and len(runs) > 1:
        tables.append({"title": "problem sets NOT checked: these runs may have other problems than the rest",
                       "columns": ["run", "dir", "why"], "rows": [[u["run"], u["dir"], u["why"]] for u in unchecked]})
    result = {
        "ok": True,
        **({"headline": "; ".join(headlines)} if headlines else {}),
        "task": task,
        "runs": summaries,
        "arms": arm_summaries,
        "differences": diffs,
        "problem_sets_unchecked": len(unchecked),
        "problem_sets_not_checked": unchecked,  # run, dir and why, for each run whose problems were not found
        "out": str(out),
        "report_json": str(json_path),
        "plot": str(png_path),
        "tables": tables,
    }
    if any(a["heldout"] for a in arm_summaries) and min(len(arm["runs"]) for arm in arms) < 2:
        result["note"] = ("one run per arm: its intervals cover the held-out problems and samples, not the luck of "
                          "training, so they cannot say which method is better; run several seeds per method as a "
                          "study designed before it runs (`prover study run demo`, docs/study.md)")
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
