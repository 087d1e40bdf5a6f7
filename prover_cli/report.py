"""`prover report`: ES and GRPO runs side by side, on the same axes; several seeds per method aggregated.

    prover report runs/es runs/grpo                                  # one run per method
    prover report runs/s*/es runs/s*/grpo runs/s*/es-null            # seeds per method: means, bands, differences
    prover report runs/es runs/grpo --out reports/cmp --json

Reads each run directory's `metrics.jsonl` (one line per iteration, the schema of
`prover_cli.metrics`; iteration 0 is the base's held-out evaluation) and `config.toml` (the
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
prover_cli/heldout.py), per arm:
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
over the pairs, or over the problems for a single pair (prover_cli/stats.py says why).

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

import hashlib
import json
import math
import os
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
from prover_cli.fsio.jsonl import load_jsonl_strict, log_malformed, with_malformed, write_text_atomic
from prover_cli.metrics import METRICS_FILE, read_metrics, required_keys, training_records
from prover_cli.progress import NULL_REPORTER
from prover_cli.compare import BUDGET_TOLERANCE, final_at, per_problem, run_budget, unequal  # noqa: F401 (the one rule)
from prover_cli.stats import mean_interval, paired_difference

REPORT_JSON = "report.json"
REPORT_PNG = "report.png"
_NUMERIC_KEYS = ("reward/mean", "reward/max", "verify/verified", "samples", "samples/total",
                 "time/wall_s", "time/elapsed_s")
EVAL_RATE = "eval/verified_rate"  # the held-out curves (prover_cli/heldout.py): sampled ...
GREEDY_RATE = "eval/greedy_verified_rate"  # ... and greedy
HELDOUT_METRICS = ((EVAL_RATE, "sampled"), (GREEDY_RATE, "greedy"))
BY_PROBLEM = "eval/by_problem"
_EVAL_NUMERIC_KEYS = (EVAL_RATE, "eval/verified_rate_lo", "eval/verified_rate_hi", GREEDY_RATE,
                      "eval/greedy_verified_rate_lo", "eval/greedy_verified_rate_hi", "eval/solved_rate",
                      "eval/reward_mean", "eval/samples", "eval/problems")
_ARM_IGNORED_KEYS = ("snapshot_every", "save_every")  # how often a run saves, not what it trains
SIGNAL_KEYS = ("es/signal_share", "es/signal_var", "es/noise_var")  # ES only (es/signal.py)
SIGNAL_SHARE = SIGNAL_KEYS[0]


def report_runs(*, run_dirs: Sequence[str | Path], out_dir: str | Path | None = None,
                reporter: Any = NULL_REPORTER, allow_unequal_budgets: bool = False) -> dict[str, Any]:
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


# --------------------------------------------------------------------------------------------
# Reading a run directory
# --------------------------------------------------------------------------------------------

def load_run(run_dir: Path) -> dict[str, Any]:
    """The run's records, task and problem-set fingerprints; every defect names file and line."""
    if not run_dir.is_dir():
        raise InputError(f"{run_dir}: not a run directory (it does not exist or is a file)")
    config = read_config(run_dir / "config.toml")
    malformed: list[dict[str, Any]] = []  # reported and skipped; the report then exits 1
    path = run_dir / METRICS_FILE
    if not path.exists():
        raise InputError(f"{path}: not found; is this the directory of a `prover train` run?")
    task = config.get("data", {}).get("task")

    def same_task(line_no: int, record: dict[str, Any]) -> None:
        nonlocal task
        task = record["task"] if task is None else task
        if record["task"] != task:
            raise InputError(f"{path}:{line_no}: task {record['task']!r} but "
                             f"{run_dir / 'config.toml'} says data.task = {task!r}")

    kept = read_metrics(run_dir, malformed, defect=_metrics_defect, check=same_task)
    if not kept:
        raise InputError(f"{path}: no iterations recorded yet" + (f" ({len(malformed)} malformed line(s))"
                                                                  if malformed else ""))
    methods = {record["method"] for record in kept}
    if len(methods) > 1:
        raise InputError(f"{path}: mixes methods {sorted(methods)}; one run directory per run")
    if not any(record["iteration"] >= 1 for record in kept):
        raise InputError(f"{path}: only the base's evaluation so far; no trained iteration yet")
    method = methods.pop()
    section = config.get(method, {})
    sets, why = problem_sets(run_dir, config, heldout=any(EVAL_RATE in r for r in kept))
    identity = arm_identity(config, method)
    return {
        "dir": run_dir,
        "name": run_dir.resolve().name or str(run_dir),
        "task": task,
        "model": config.get("model", {}).get("name", "?"),
        "method": method,
        "seed": config.get("run", {}).get("seed", 0),
        "null": bool(section.get("shuffle_rewards", False)),
        "settings": {k: v for k, v in section.items() if k not in _ARM_IGNORED_KEYS},
        "identity": identity,  # every config key that defines the arm (`arm_identity`)
        "train_size": identity["data.train_size"],  # the limited-data axis: 0 = the whole training split
        "decoding": decoding(config, method),
        "records": kept,
        "base": kept[0] if kept[0]["iteration"] == 0 else None,
        "problem_sets": sets,
        "problem_sets_why": why,  # "" when checked, else why not (the report says so out loud)
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


def _metrics_defect(record: Any) -> str | None:
    """Why a metrics.jsonl line cannot be reported, or None (iteration 0: the base's evaluation)."""
    missing = [key for key in required_keys(record) if key not in record]
    if missing:
        return f"missing {', '.join(missing)}"
    optional = (*_EVAL_NUMERIC_KEYS, *SIGNAL_KEYS)
    for key in ("iteration", *(k for k in (*_NUMERIC_KEYS, *optional) if k in record)):
        value = record[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return f"{key} = {value!r}: expected a finite number"
    for key in ("method", "task"):
        if not isinstance(record[key], str):
            return f"{key} = {record[key]!r}: expected a string"
    if BY_PROBLEM in record and not _valid_by_problem(record[BY_PROBLEM]):
        return f"{BY_PROBLEM} must map problem ids to [verified samples, greedy verified] pairs of non-negative integers"
    return None


def _valid_by_problem(value: Any) -> bool:
    return isinstance(value, dict) and bool(value) and all(
        isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v)
        for v in value.values())


def started_in(run_dir: Path, recorded_dir: Any) -> Path | None:
    """The directory a run was started from, read off where its recorded `run.dir` points now.

    The run wrote `run.dir` as it was given (`runs/demo/es`); the run directory, found at
    `/x/runs/demo/es`, was then started from `/x`, wherever `prover report` runs. None when that
    cannot be told: an absolute `run.dir` (it names no starting directory), one with `..`, or one
    that is not the end of the run directory's path (the run was moved and renamed)."""
    if not isinstance(recorded_dir, str) or not recorded_dir:
        return None
    recorded = Path(recorded_dir).expanduser()
    parts = [part for part in recorded.parts if part != "."]
    if recorded.is_absolute() or ".." in parts:
        return None
    for actual in (Path(os.path.abspath(run_dir)), run_dir.resolve()):  # as named, then through symlinks
        if not parts:
            return actual
        if len(actual.parts) > len(parts) and tuple(actual.parts[-len(parts):]) == tuple(parts):
            return Path(*actual.parts[:-len(parts)])
    return None


def recorded_path(run_dir: Path, config: dict[str, Any], value: str, key: str) -> tuple[Path | None, str]:
    """Where a path the run recorded in its config.toml (`key` = `value`) is now, or None and why not.

    An absolute path is itself; a relative one was relative to the directory the run was started
    from (`started_in`), never to wherever the report runs; only when that directory cannot be
    told is the current directory tried (and named as a guess)."""
    path = Path(value).expanduser()
    if path.is_absolute():
        return (path, "") if path.exists() else (None, f"{key} = {value!r}: {path} not found")
    recorded_dir = config.get("run", {}).get("dir")
    start = started_in(run_dir, recorded_dir)
    if start is not None:
        found = start / path
        return (found, "") if found.exists() else (
            None, f"{key} = {value!r}, relative to {start} (where the run with run.dir = {recorded_dir!r} was "
                  f"started): {found} not found")
    guess = Path.cwd() / path
    if guess.exists():
        return guess, ""
    return None, (f"{key} = {value!r} is relative, and run.dir = {recorded_dir!r} does not say which directory the run "
                  f"was started from; not in the current directory either ({guess})")


def run_problem_files(run_dir: Path, config: dict[str, Any]) -> tuple[Any, Any, str]:
    """(training problems, eval problems, why not): each a path, or a list of problems generated from
    `run.seed` (countdown and toy with `data.problems` empty and no problems file: the run generated
    them, prover_cli/tasks/problems.py), or None with the reason."""
    data, evaluation = config.get("data", {}), config.get("eval", {})
    if data.get("problems"):
        train, why = recorded_path(run_dir, config, str(data["problems"]), "data.problems")
    elif (run_dir / "problems.jsonl").exists():
        train, why = run_dir / "problems.jsonl", ""
    else:
        train, why = _generated(run_dir, config)
    if train is None:
        return None, None, why
    if not evaluation.get("problems"):
        return train, train, ""
    evaluated, why = recorded_path(run_dir, config, str(evaluation["problems"]), "eval.problems")
    return (train, evaluated, "") if evaluated is not None else (None, None, why)


def _generated(run_dir: Path, config: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, str]:
    """The problems a run with `data.problems` empty generated from its seed, or None and why not."""
    from prover_cli.config import config_from_dict
    from prover_cli.errors import ConfigError
    from prover_cli.tasks.problems import generated_problems

    missing = f"data.problems is empty and {run_dir / 'problems.jsonl'} not found"
    try:
        problems = generated_problems(config_from_dict(config, source=str(run_dir / "config.toml")))
    except ConfigError as exc:
        return None, f"{missing}; its config.toml cannot say which problems it generated: {exc}"
    if problems is None:
        return None, f"{missing} (task {config.get('data', {}).get('task')!r} generates no problems)"
    return problems, ""


def problem_sets(run_dir: Path, config: dict[str, Any], heldout: bool = False) -> tuple[dict[str, str] | None, str]:
    """Fingerprints of the train, eval (and held-out) problem sets, or None and why they cannot be taken.

    The training set is the one the run trained on (`data.train_size` of its split, prover_cli/tasks/problems.py);
    the held-out set is the test set the run evaluated, chosen by the same function the trainers call
    (deduplicated by content, its subset drawn from `run.eval_problems_seed`), fingerprinted by content."""
    from prover_cli.tasks.problems import select_heldout, select_train

    data, evaluation, run = config.get("data", {}), config.get("eval", {}), config.get("run", {})
    train, evaluated, why = run_problem_files(run_dir, config)
    if train is None:
        return None, why
    rows = load_jsonl_strict(train) if isinstance(train, Path) else train
    train_split = data.get("train_split", "train")
    eval_split = evaluation.get("split", "test")
    size = data.get("train_size", 0)
    try:
        trained = select_train([p for p in rows if p.get("split") == train_split], size, run.get("seed", 0), train)
    except InputError as exc:
        return None, f"data.train_size: {exc}"
    sets = {
        "train": f"{train_split}:{_fingerprint(trained, train_split)}" + (f", data.train_size = {size}" if size else ""),
        "eval": f"{eval_split}:{_fingerprint(evaluated, eval_split)}",
    }
    if heldout:
        valid_split, count = data.get("valid_split", "valid"), run.get("eval_problems", 0)
        # A run written before run.eval_problems_seed existed drew its subset from run.seed.
        seed = run.get("eval_problems_seed", run.get("seed", 0))
        try:
            chosen = select_heldout(rows, train_split=train_split, valid_split=valid_split, count=count, seed=seed,
                                    source=train)
            sets["heldout"] = f"{valid_split}:{len(chosen)} problems, sha256 {chosen.sha256}" + (
                f", subset of {count} drawn with run.eval_problems_seed = {seed}" if count else "")
        except InputError as exc:
            sets["heldout"] = f"{valid_split}: none ({exc})"
    return sets, ""


def _fingerprint(problems: Path | list[dict[str, Any]], split: str) -> str:
    rows = load_jsonl_strict(problems) if isinstance(problems, Path) else problems
    ids = sorted(str(p.get("id", p.get("name"))) for p in rows if p.get("split") == split)
    digest = hashlib.sha256("\n".join(ids).encode("utf-8")).hexdigest()[:12]
    return f"{len(ids)} problems, sha256 {digest}"


def check_comparable(runs: list[dict[str, Any]], arms: list[dict[str, Any]] | None = None) -> None:
    """Refuse to compare different tasks or different problem sets, naming the runs and values.

    Runs of one seed must have the same held-out (and eval) set, and, at one training-set size
    (`data.train_size`), the same training set: a run on 16 problems and one on all of them, of one
    seed, differ only in what they trained on, the limited-data contrast. Runs of different seeds
    may differ (a seed may draw its problems), but two arms with no set in common share no seed to pair."""
    first = runs[0]
    for run in runs[1:]:
        if run["task"] != first["task"]:
            raise InputError(
                f"cannot compare runs of different tasks: {first['dir']} is {first['task']!r}, "
                f"{run['dir']} is {run['task']!r}",
                hint="report runs of one task together")
    arms = arms if arms is not None else group_arms(runs)
    hints = {"train": "train the runs of one seed and one data.train_size on the same problems file (data.problems) "
                      "and splits; to ask what less data does, give the runs one problems file and set "
                      "data.train_size (each size is an arm, paired by seed on one test set)",
             "eval": "give the runs of one seed the same eval.problems and eval.split",
             "heldout": "evaluate every run on one test set: the same problems file, data.valid_split, "
                        "run.eval_problems and run.eval_problems_seed"}
    for which in ("train", "eval", "heldout"):
        def fingerprint(run: dict[str, Any]) -> str | None:
            return (run["problem_sets"] or {}).get(which)

        def refuse(a: dict[str, Any], b: dict[str, Any]) -> None:
            raise InputError(
                f"cannot compare runs with different {which} problem sets: {a['dir']} has {fingerprint(a)}, "
                f"{b['dir']} has {fingerprint(b)}", hint=hints[which])

        def group(run: dict[str, Any]) -> Any:  # a training set is compared only at one size
            return _identity(run).get("data.train_size", 0) if which == "train" else None

        by_seed: dict[Any, dict[str, Any]] = {}
        for run in runs:
            if fingerprint(run) is None:
                continue
            seen = by_seed.setdefault((run["seed"], group(run)), run)
            if fingerprint(seen) != fingerprint(run):
                refuse(seen, run)
        covered = [(arm, {fingerprint(r): r for r in arm["runs"] if fingerprint(r) is not None}) for arm in arms]
        covered = [(arm, sets) for arm, sets in covered if sets]
        for index, (arm, sets) in enumerate(covered):  # arms with no set in common have nothing to pair
            other = next(((o, o_sets) for o, o_sets in covered[:index]
                          if group(o["runs"][0]) == group(arm["runs"][0])), None)
            if other is not None and not set(sets) & set(other[1]):
                refuse(next(iter(other[1].values())), next(iter(sets.values())))


# --------------------------------------------------------------------------------------------
# One run: its summary and table
# --------------------------------------------------------------------------------------------

def summarize_run(run: dict[str, Any]) -> dict[str, Any]:
    records = training_records(run["records"])
    last = records[-1]
    verified = sum(r["verify/verified"] for r in records)
    iterations = len(records)
    samples = last["samples/total"]
    hours = last["time/elapsed_s"] / 3600
    evals = [r for r in records if EVAL_RATE in r]
    best = max(evals, key=lambda r: r[EVAL_RATE]) if evals else None
    base = run["base"]
    final = evals[-1] if evals else {}
    return {
        "run": run["name"],
        "dir": str(run["dir"]),
        "method": run["method"],
        "null_control": run["null"],
        "seed": run["seed"],
        "model": run["model"],
        "train_size": _identity(run).get("data.train_size", 0),
        "decoding": run.get("decoding", "?"),
        "iterations": iterations,
        "samples": samples,
        "hours": hours,
        "verified": verified,
        "verified_per_iteration": verified / iterations,
        "verified_per_1k_samples": verified / samples * 1000 if samples else None,
        "verified_per_hour": verified / hours if hours else None,
        "final_reward": last["reward/mean"],
        # held-out evaluation of the current weights (None: the run had run.eval_every = 0)
        "heldout_verified_rate": final.get(EVAL_RATE),
        "heldout_verified_rate_lo": final.get("eval/verified_rate_lo"),
        "heldout_verified_rate_hi": final.get("eval/verified_rate_hi"),
        "heldout_greedy_verified_rate": final.get(GREEDY_RATE),
        "heldout_greedy_verified_rate_lo": final.get("eval/greedy_verified_rate_lo"),
        "heldout_greedy_verified_rate_hi": final.get("eval/greedy_verified_rate_hi"),
        "heldout_iteration": final.get("iteration"),
        "heldout_best_verified_rate": best[EVAL_RATE] if best else None,
        "heldout_best_iteration": best["iteration"] if best else None,
        "heldout_base_verified_rate": base.get(EVAL_RATE) if base else None,
        "heldout_base_greedy_verified_rate": base.get(GREEDY_RATE) if base else None,
        "heldout_problems": final.get("eval/problems"),
        "heldout_samples": final.get("eval/samples"),
        "heldout_evaluations": len(evals),
        # ES: the signal share of the last iterations at the end (None for GRPO, or before any estimate)
        "es_signal_share": next((r[SIGNAL_SHARE] for r in reversed(records) if SIGNAL_SHARE in r), None),
    }


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


# The training numbers are a diagnostic, never the comparison: they count verified samples of the
# training problems, drawn with each method's own decoding (ES: every member, greedy by default;
# GRPO: G sampled completions per prompt), so per iteration they compare unlike work, and a method
# that memorises a few training problems scores high on them with no held-out gain.
TRAINING_DIAGNOSTIC = ("training diagnostic, not the comparison: verified samples of the training problems, "
                       "each method's own decoding")


def summary_table(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """The training diagnostic, one row per run (samples, hours and held-out details stay in report.json)."""

    rows = [[s["run"], s["method"], s["decoding"], s["iterations"], s["verified"],
             _num(s["verified_per_iteration"], 2), _num(s["verified_per_1k_samples"], 1), _num(s["verified_per_hour"], 1),
             _num(s["final_reward"], 3)] for s in summaries]
    return {"title": TRAINING_DIAGNOSTIC + ", per run",
            "columns": ["run", "method", "decoding", "iters", "verified", "per iter", "per 1k samples", "per hour",
                        "final reward"],
            "rows": rows}


# --------------------------------------------------------------------------------------------
# Arms: the seeds of one method and setting
# --------------------------------------------------------------------------------------------

# The keys the runs of one arm may differ in: its seeds, where files are and how a run is executed.
# Every other resolved config key defines the arm (an allowlist: a key nobody thought of splits the
# arm rather than merging two settings into one mean); the other method's section plays no part.
_WITHIN_ARM_KEYS = ("run.seed", "run.dir", "run.report_to", "es.snapshot_every", "grpo.save_every", "data.problems",
                    "model.cache_dir", "generate.batch_size", "generate.gpu_memory_utilization", "verify.workers",
                    "verify.kernel_check_workers", "verify.kimina_url", "verify.kimina_api_key_env",
                    "verify.kimina_batch_size", "verify.kimina_max_repls", "verify.kernel_batch_size")
_WITHIN_ARM_SECTIONS = ("eval", "modal", "io")  # `prover eval` afterwards, Modal resources, input limits


def _recorded(config: dict[str, Any], dotted: str) -> Any:
    """The value a run's config.toml recorded for `section.key`, or the key's default where it has none
    (a run written before the key existed ran with what is now its default)."""
    from dataclasses import MISSING, fields

    from prover_cli.config import SECTIONS

    section, key = dotted.split(".")
    recorded = config.get(section, {})
    if key in recorded:
        return recorded[key]
    field = next(f for f in fields(SECTIONS[section]) if f.name == key)
    return field.default if field.default is not MISSING else field.default_factory()


def arm_identity(config: dict[str, Any], method: str) -> dict[str, Any]:
    """Every `section.key` of the resolved config that defines a run's arm: the method's section, the
    model, the data (`data.train_size`, the limited-data axis, among them), sampling, verification and
    the held-out settings; all but `_WITHIN_ARM_KEYS` and `_WITHIN_ARM_SECTIONS`."""
    from dataclasses import fields

    from prover_cli.config import SECTIONS

    identity = {}
    for section, cls in SECTIONS.items():
        if section in _WITHIN_ARM_SECTIONS or (section in ("es", "grpo") and section != method):
            continue
        for field in fields(cls):
            dotted = f"{section}.{field.name}"
            if dotted not in _WITHIN_ARM_KEYS:
                identity[dotted] = _recorded(config, dotted)
    return identity


def decoding(config: dict[str, Any], method: str) -> str:
    """How the method sampled its training completions, which its training numbers depend on."""
    if method == "es":
        temperature = _recorded(config, "es.member_temperature")
        how = "greedy (temperature 0)" if temperature == 0 else f"sampled at temperature {temperature:g}"
        return (f"{_recorded(config, 'es.population')} members, each {how}, "
                f"{_recorded(config, 'es.problems_per_iteration')} problems x "
                f"{_recorded(config, 'es.samples_per_problem')} sample(s)")
    if method == "grpo":
        return (f"sampled at temperature {_recorded(config, 'grpo.temperature'):g}, "
                f"{_recorded(config, 'grpo.num_generations')} per prompt")
    return "?"


def group_arms(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs grouped by method and `arm_identity` (null control and training-set size included), in
    first-seen order, labelled: `es`, `es null`, and arms of one method that differ by what differs
    (`es (sigma=0.003)`, `es (data.train_size=16)`). Never two settings merged into one arm."""
    arms: list[dict[str, Any]] = []
    for run in runs:
        identity = _identity(run)
        key = json.dumps([run["method"], identity], sort_keys=True)
        arm = next((a for a in arms if a["key"] == key), None)
        if arm is None:
            arm = {"key": key, "method": run["method"], "null": run["null"],
                   "train_size": identity.get("data.train_size", 0), "identity": identity,
                   "decoding": run.get("decoding", "?"), "runs": []}
            arms.append(arm)
        arm["runs"].append(run)
    for arm in arms:
        arm["label"] = arm["method"] + (" null" if arm["null"] else "")
    for label in {a["label"] for a in arms}:
        same = [a for a in arms if a["label"] == label]
        if len(same) > 1:  # name them by what differs
            every = set().union(*(a["identity"] for a in same))
            keys = sorted(k for k in every if len({json.dumps(a["identity"].get(k)) for a in same}) > 1)
            for arm in same:
                arm["label"] = f"{label} ({', '.join(_setting(arm, k) for k in keys)})"
    for arm in arms:  # what the plot's legend calls it: the arm, then its run directory or its seeds
        arm["display"] = _display(arm)
    return arms


def _identity(run: dict[str, Any]) -> dict[str, Any]:
    """The run's `arm_identity`; for a run dict built by hand rather than by `load_run`, its method section,
    null control and model, as arms were told apart before identities existed."""
    if "identity" in run:
        return run["identity"]
    method = run["method"]
    return {**{f"{method}.{k}": v for k, v in run.get("settings", {}).items()},
            f"{method}.shuffle_rewards": run.get("null", False), "model.name": run.get("model")}


def _setting(arm: dict[str, Any], dotted: str) -> str:
    """`sigma=0.003` (the method's own section), `data.train_size=16` (`all` for 0), `model.name="x"`."""
    section, key = dotted.split(".")
    value = arm["identity"].get(dotted)
    shown = "all" if dotted == "data.train_size" and value == 0 else _toml(value)
    return f"{key if section == arm['method'] else dotted}={shown}"


def _display(arm: dict[str, Any]) -> str:
    """One readable legend label per arm: `es`, `es (kimina-es)` (a run whose directory says more), `es (3 seeds)`."""
    if len(arm["runs"]) > 1:
        return f"{arm['label']} ({len(arm['runs'])} seeds)"
    name = arm["runs"][0]["name"]
    same = re.sub(r"[-_\s]+", " ", name).strip().lower() == arm["label"].lower()
    return arm["label"] if same else f"{arm['label']} ({name})"


def _toml(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (str, list)) else str(value).lower() if isinstance(value, bool) else str(value)


def _spread(values: list[float], floor: float | None = None) -> dict[str, Any]:
    """Mean and 95% interval over seeds (t) of any number (`floor`: its least possible value); none for one seed."""
    mean, low, high = mean_interval(values)
    if floor is not None and low is not None:
        low = max(floor, low)
    return {"mean": mean, "lo": low, "hi": high, "n": len(values)}


def _interval(values: list[float], single: tuple[float | None, float | None] = (None, None)) -> dict[str, Any]:
    """A rate's mean and 95% interval over seeds (t, clipped to [0, 1]); one seed: `single`, the run's own."""
    mean, low, high = mean_interval(values)
    if len(values) == 1:
        low, high = single
    elif low is not None and high is not None:
        low, high = max(0.0, low), min(1.0, high)
    return {"mean": mean, "lo": low, "hi": high, "n": len(values)}


def curve(arm: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """`key` at each sample budget every run of the arm has it at: mean and interval over seeds,
    with the mean iteration and mean elapsed time there (for the plot's other axes)."""
    per_run = [{r["samples/total"]: r for r in run["records"] if key in r} for run in arm["runs"]]
    budgets = sorted(set.intersection(*(set(p) for p in per_run)))
    points = []
    for budget in budgets:
        records = [p[budget] for p in per_run]
        single = (records[0].get(f"{key}_lo"), records[0].get(f"{key}_hi"))
        point = _interval([r[key] for r in records], single)
        point.update({"samples": budget, "iteration": sum(r["iteration"] for r in records) / len(records),
                      "tokens": sum(r.get("tokens/total", 0) for r in records) / len(records),
                      "elapsed_s": sum(r["time/elapsed_s"] for r in records) / len(records)})
        points.append(point)
    return points


def paired(pairs: list[tuple[dict[str, Any], dict[str, Any]]], key: str) -> dict[str, Any] | None:
    """Mean a - b over pairs of evaluations on the same problems, with its 95% interval.

    Each pair's difference is the mean of its per-problem differences (`eval/by_problem`);
    several pairs: t over the pairs; one pair: t over its problems."""
    pairs = [(a, b) for a, b in pairs if key in a and key in b]
    if not pairs:
        return None
    per_pair, problems = [], []
    for a, b in pairs:
        pa, pb = per_problem(a, key), per_problem(b, key)
        if pa is not None and pb is not None:
            try:
                diffs = paired_difference(pa, pb)
            except ValueError as exc:
                raise InputError(f"cannot pair evaluations at iterations {a['iteration']} and {b['iteration']}: "
                                 f"{exc}") from None
            per_pair.append(sum(diffs) / len(diffs))
            problems.append(diffs)
        else:  # written before eval/by_problem: the rates, if the problem counts agree
            if a.get("eval/problems") != b.get("eval/problems"):
                raise InputError(f"cannot pair evaluations on {a.get('eval/problems')} and {b.get('eval/problems')} "
                                 "held-out problems")
            per_pair.append(a[key] - b[key])
            problems.append(None)
    if len(per_pair) > 1:
        mean, low, high = mean_interval(per_pair)
        basis = f"t over {len(per_pair)} seeds"
    elif problems[0] is not None:
        mean, low, high = mean_interval(problems[0])
        mean = per_pair[0]
        basis = f"t over {len(problems[0])} problems (one seed)"
    else:
        mean, low, high, basis = per_pair[0], None, None, "one seed, no per-problem results"
    return {"mean": mean, "lo": low, "hi": high, "pairs": len(per_pair), "basis": basis}


def _final(run: dict[str, Any], key: str) -> dict[str, Any] | None:
    evals = [r for r in training_records(run["records"]) if key in r]
    return evals[-1] if evals else None


def summarize_arm(arm: dict[str, Any]) -> dict[str, Any]:
    """Held-out curves per budget, base -> final and the gain, for both metrics."""
    runs = arm["runs"]
    summary = {"arm": arm["label"], "method": arm["method"], "null_control": arm["null"],
               "train_size": arm["train_size"], "decoding": arm["decoding"],
               "runs": [run["name"] for run in runs], "seeds": [run["seed"] for run in runs],
               "iterations": sum(len(training_records(r["records"])) for r in runs) / len(runs),
               "samples": sum(training_records(r["records"])[-1]["samples/total"] for r in runs) / len(runs),
               "final_reward": _spread([training_records(r["records"])[-1]["reward/mean"] for r in runs]),
               "verified_per_iteration": _spread(
                   [sum(x["verify/verified"] for x in training_records(r["records"])) / len(training_records(r["records"]))
                    for r in runs], floor=0.0),
               "verified_per_1k_samples": _spread(
                   [sum(x["verify/verified"] for x in training_records(r["records"])) * 1000
                    / max(training_records(r["records"])[-1]["samples/total"], 1) for r in runs], floor=0.0),
               "heldout": {}}
    for key, name in HELDOUT_METRICS:
        finals = [_final(run, key) for run in runs]
        if any(f is None for f in finals):
            continue
        bases = [run["base"] if run["base"] and key in run["base"] else None for run in runs]
        entry = {"curve": curve(arm, key),
                 "final": _interval([f[key] for f in finals],
                                    (finals[0].get(f"{key}_lo"), finals[0].get(f"{key}_hi"))),
                 "final_samples": [f["samples/total"] for f in finals],
                 "base": None, "gain": None}
        if all(b is not None for b in bases):
            entry["base"] = _interval([b[key] for b in bases], (bases[0].get(f"{key}_lo"), bases[0].get(f"{key}_hi")))
            entry["gain"] = paired(list(zip(finals, bases)), key)
        summary["heldout"][name] = entry
    return summary


def _samples_text(values: list[Any]) -> str:
    low, high = min(values), max(values)
    text = [f"{v:,.0f}" if float(v).is_integer() else f"{v:,.1f}" for v in (low, high)]
    return f"{text[0]} samples" if low == high else f"{text[0]}-{text[1]} samples"


def differences(arms: list[dict[str, Any]], allow_unequal_budgets: bool = False) -> list[dict[str, Any]]:
    """Every paired difference of `contrasts(arms)` (ES - GRPO, arm - null control, less data - more data).

    Each pair of runs (one seed) is compared at the largest budget both reached: each run's last
    evaluation at or below the smaller run's `samples/total` (entry `at`: which iteration or step,
    at how many samples). Finals whose budgets still differ by more than 5 % are refused (a
    UsageError, exit 2) unless `allow_unequal_budgets`; then the entry carries `unequal_budgets`."""
    from prover_cli.errors import UsageError

    out = []
    for a, b, contrast in contrasts(arms):
        by_seed_b = _by_seed(b)
        pairs = [(run, by_seed_b[seed]) for seed, run in _by_seed(a).items() if seed in by_seed_b]
        if not pairs:
            continue
        entry = {"a": a["label"], "b": b["label"], "name": f"{a['label']} - {b['label']}", "contrast": contrast,
                 "seeds": sorted(seed for seed in _by_seed(a) if seed in by_seed_b), "at": []}
        finals_a: list[Any] = []
        finals_b: list[Any] = []
        for key, name in HELDOUT_METRICS:
            budgets = [min(run_budget(x), run_budget(y)) for x, y in pairs]
            finals = [(final_at(x, key, budget), final_at(y, key, budget)) for (x, y), budget in zip(pairs, budgets)]
            if any(fa is None or fb is None for fa, fb in finals):
                continue
            for (x, y), budget, (fa, fb) in zip(pairs, budgets, finals):
                _same_test_set(x, fa, y, fb)
                if unequal(fa["samples/total"], fb["samples/total"]) and not allow_unequal_budgets:
                    raise UsageError(
                        f"{a['label']} - {b['label']}: unequal budgets: {x['dir']} ({a['label']}) is evaluated at "
                        f"{fa['samples/total']:,} samples (iteration {fa['iteration']}, of {run_budget(x):,} trained), "
                        f"{y['dir']} ({b['label']}) at {fb['samples/total']:,} samples (iteration {fb['iteration']}, "
                        f"of {run_budget(y):,} trained): more than {BUDGET_TOLERANCE:.0%} apart, so the difference "
                        "would mix budget with method",
                        hint="give both runs the same training budget (samples/total) and evaluation points, or pass "
                             "--allow-unequal-budgets to compare them anyway (the report then says UNEQUAL BUDGETS)")
                point = {"metric": name, "seed": x["seed"], "common_budget": budget,
                         "a_run": x["name"], "a_iteration": fa["iteration"], "a_samples": fa["samples/total"],
                         "b_run": y["name"], "b_iteration": fb["iteration"], "b_samples": fb["samples/total"]}
                entry["at"].append(point)
            result = paired(finals, key)
            if result is not None:
                result["samples"] = sorted({fa["samples/total"] for fa, _ in finals} | {fb["samples/total"] for _, fb in finals})
                result["iterations"] = {a["label"]: sorted({fa["iteration"] for fa, _ in finals}),
                                        b["label"]: sorted({fb["iteration"] for _, fb in finals})}
                entry[name] = result
                finals_a += [fa["samples/total"] for fa, _ in finals]
                finals_b += [fb["samples/total"] for _, fb in finals]
        if any(name in entry for _, name in HELDOUT_METRICS):
            if any(unequal(p["a_samples"], p["b_samples"]) for p in entry["at"]):
                entry["unequal_budgets"] = (f"UNEQUAL BUDGETS: {a['label']} {_samples_text(finals_a)} vs "
                                            f"{b['label']} {_samples_text(finals_b)}")
            out.append(entry)
    return out


def _size_order(arm: dict[str, Any]) -> float:
    return math.inf if arm["train_size"] == 0 else arm["train_size"]  # 0: the whole split, the most data


def contrasts(arms: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any], str]]:
    """(a, b, contrast) for every paired difference a - b the report takes, each of one kind:
    - `method`: every ES arm - every GRPO arm trained on the same number of problems (null controls aside);
    - `null control`: every arm - its null control at that size (of the same method if there is one);
    - `training-set size`: the limited-data contrast, an arm - the arm that differs from it only in
      `data.train_size`, less data first: what limiting the data costs (same method, same settings;
      paired by seed on one test set), as `prover study` reports it.
    Arms of different sizes are never compared across methods: that would mix data with method."""
    plain = [a for a in arms if not a["null"]]
    nulls = [a for a in arms if a["null"]]
    out = [(a, b, "method") for a in plain if a["method"] == "es" for b in plain
           if b["method"] == "grpo" and b["train_size"] == a["train_size"]]
    for arm in plain:
        sized = [n for n in nulls if n["train_size"] == arm["train_size"]]
        null = next((n for n in sized if n["method"] == arm["method"]), sized[0] if sized else None)
        if null is not None:
            out.append((arm, null, "null control"))

    def rest(arm: dict[str, Any]) -> str:
        return json.dumps({k: v for k, v in arm["identity"].items() if k != "data.train_size"}, sort_keys=True)

    for index, a in enumerate(plain):
        for b in plain[index + 1:]:
            if a["method"] == b["method"] and a["train_size"] != b["train_size"] and rest(a) == rest(b):
                less, more = (a, b) if _size_order(a) < _size_order(b) else (b, a)
                out.append((less, more, "training-set size"))
    return out


def _same_test_set(x: dict[str, Any], fa: dict[str, Any], y: dict[str, Any], fb: dict[str, Any]) -> None:
    """Refuse to pair two evaluations whose test sets' content fingerprints (`eval/problems_sha256`) differ."""
    key = "eval/problems_sha256"
    if key in fa and key in fb and fa[key] != fb[key]:
        raise InputError(
            f"cannot pair {x['dir']} (iteration {fa['iteration']}) with {y['dir']} (iteration {fb['iteration']}): "
            f"their held-out sets differ ({key} {fa[key]} vs {fb[key]}), so a difference would mix problems with "
            "method", hint="evaluate every run on one test set: the same problems file, data.valid_split, "
                           "run.eval_problems and run.eval_problems_seed")


def _by_seed(arm: dict[str, Any]) -> dict[Any, dict[str, Any]]:
    seen: dict[Any, dict[str, Any]] = {}
    for run in arm["runs"]:
        if run["seed"] in seen:
            raise InputError(f"{seen[run['seed']]['dir']} and {run['dir']}: two runs of arm {arm['label']!r} with "
                             f"run.seed = {run['seed']}; a paired comparison needs one run per seed and arm",
                             hint="leave one of them out of the report")
        seen[run["seed"]] = run
    return seen


def _rate(point: dict[str, Any] | None, digits: int = 3) -> str:
    if point is None:
        return "-"
    band = f" ({point['lo']:.{digits}f}..{point['hi']:.{digits}f})" if point.get("lo") is not None else ""
    return f"{point['mean']:.{digits}f}{band}"


def _signed(point: dict[str, Any] | None) -> str:
    if point is None:
        return "-"
    band = f" ({point['lo']:+.3f}..{point['hi']:+.3f})" if point.get("lo") is not None else ""
    return f"{point['mean']:+.3f}{band}"


def _base_to_final(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "-"
    base = f"{entry['base']['mean']:.3f} -> " if entry.get("base") else ""
    return base + _rate(entry["final"])


def arm_training_table(arms: list[dict[str, Any]]) -> dict[str, Any]:
    """The training diagnostic per arm, mean over seeds (per run: report.json)."""
    rows = [[a["arm"], len(a["runs"]), a["decoding"], _num(a["iterations"], 0), _num(a["samples"], 0),
             _rate(a["verified_per_iteration"], 2), _rate(a["verified_per_1k_samples"], 1), _rate(a["final_reward"])]
            for a in arms]
    return {"title": TRAINING_DIAGNOSTIC + ", mean over seeds (95% interval)",
            "columns": ["arm", "seeds", "decoding", "iters", "samples", "verified per iter", "verified per 1k samples",
                        "final reward"],
            "rows": rows}


def heldout_table(arms: list[dict[str, Any]]) -> dict[str, Any]:
    """Held-out verified rate, base -> final with the final's interval, and the gain, both metrics."""
    rows = []
    for a in arms:
        sampled, greedy = a["heldout"].get("sampled"), a["heldout"].get("greedy")
        rows.append([a["arm"], len(a["runs"]), _num(a["samples"], 0), _base_to_final(sampled),
                     _signed(sampled and sampled["gain"]), _base_to_final(greedy), _signed(greedy and greedy["gain"])])
    return {"title": "held-out verified rate: base -> final (95% interval), gain = final - base",
            "columns": ["arm", "seeds", "samples", "sampled", "gain", "greedy", "gain"],
            "rows": rows}


def _compared_at(d: dict[str, Any]) -> str:
    """`es @10 (2,400 samples), grpo @300 (2,400 samples)`: the evaluations a difference compares."""
    points = [p for p in d["at"] if p["metric"] == d["at"][0]["metric"]] if d.get("at") else []
    if not points:
        return "-"

    def side(label: str, iterations: list[Any], samples: list[Any]) -> str:
        its = sorted(set(iterations))
        return f"{label} @{'/'.join(str(i) for i in its)} ({_samples_text(samples)})"

    return (side(d["a"], [p["a_iteration"] for p in points], [p["a_samples"] for p in points]) + ", "
            + side(d["b"], [p["b_iteration"] for p in points], [p["b_samples"] for p in points]))


def difference_table(diffs: list[dict[str, Any]]) -> dict[str, Any]:
    rows = [[d["name"], len(d["seeds"]), _signed(d.get("sampled")), _signed(d.get("greedy")),
             (d.get("sampled") or d.get("greedy"))["basis"], _compared_at(d), d["contrast"]] for d in diffs]
    return {"title": "paired difference at the final evaluation, same held-out problems (95% interval), each run's last at or below the largest common budget",
            "columns": ["difference", "seeds", "sampled", "greedy", "interval", "compared at", "contrast"],
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


def _training_curve(arm: dict[str, Any]) -> list[dict[str, Any]]:
    """Training reward per iteration every run of the arm reached: mean and interval over seeds."""
    per_run = [{r["iteration"]: r for r in training_records(run["records"])} for run in arm["runs"]]
    points = []
    for iteration in sorted(set.intersection(*(set(p) for p in per_run))):
        records = [p[iteration] for p in per_run]
        point = _spread([r["reward/mean"] for r in records])
        point.update({"iteration": iteration,
                      "samples": sum(r["samples/total"] for r in records) / len(records),
                      "tokens": sum(r.get("tokens/total", 0) for r in records) / len(records),
                      "elapsed_s": sum(r["time/elapsed_s"] for r in records) / len(records)})
        points.append(point)
    return points


def _x_columns(arms: list[dict[str, Any]], unit: str, thousands: bool, tokens_thousands: bool = False) -> list[tuple[str, str, str]]:
    """(x key, x label, title word) per column: samples first (the budget the comparison is made on), then
    training completion tokens, then wall-clock time. No iterations axis: an ES iteration and a GRPO step
    are different units (their samples each are in the training diagnostic's table)."""
    return [("samples", "samples (thousands)" if thousands else "samples", "samples"),
            ("tokens", "training tokens (thousands)" if tokens_thousands else "training tokens", "tokens"),
            ("elapsed_s", f"wall-clock ({unit})", "wall-clock")]


def build_figure(runs: list[dict[str, Any]]):
    """Training reward, held-out sampled and greedy verified rate (rows; and the ES signal share), each vs
    samples, training tokens, and wall-clock time (columns).

    One curve per arm (the mean over its seeds), one color per arm in every panel and one legend for the
    figure; held-out curves with their 95% band (a bar for a single point) and the base as a star at 0.
    Every panel of a column spans the same x range, from 0 to the column's largest value, so a curve
    with only the base's point sits on the same axis as the others. Laid out by matplotlib's
    constrained layout: the title, the legend and the panel titles never overlap."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    arms = group_arms(runs)
    for index, arm in enumerate(arms):
        arm["color"] = f"C{index % 10}"
    unit, per_unit = time_unit(max(run["records"][-1]["time/elapsed_s"] for run in runs))
    per_sample = 1000.0 if max(run["records"][-1]["samples/total"] for run in runs) >= 10_000 else 1.0
    per_token = 1000.0 if max(run["records"][-1].get("tokens/total", 0) for run in runs) >= 10_000 else 1.0
    scale = {"samples": per_sample, "tokens": per_token, "elapsed_s": per_unit}
    columns = _x_columns(arms, unit, thousands=per_sample > 1, tokens_thousands=per_token > 1)
    signal_runs = [run for run in runs if any(SIGNAL_SHARE in r for r in run["records"])]
    # the held-out rates first (the comparison), the training reward after them (a diagnostic), as
    # the report's tables are ordered
    rows = ((EVAL_RATE, "held-out verified rate, sampled"), (GREEDY_RATE, "held-out verified rate, greedy"),
            ("reward/mean", "training reward (mean)"))
    nrows = len(rows) + bool(signal_runs)
    fig, axes = plt.subplots(nrows, 3, figsize=(15, 4 * nrows), layout="constrained", squeeze=False)
    x_max = [0.0, 0.0, 0.0]
    banded = starred = False
    for row, (key, what) in zip(axes, rows):
        bases, drawn = [], False
        for arm in arms:
            points = _training_curve(arm) if key == "reward/mean" else curve(arm, key)
            if not points:
                continue
            drawn = True
            bases += [p for p in points if p["iteration"] == 0]
            ys = [p["mean"] for p in points]
            with_band = key != "reward/mean" and all(p["lo"] is not None for p in points)
            for column, (axis, (x_key, _, _)) in enumerate(zip(row, columns)):
                x = [p[x_key] / scale[x_key] for p in points]
                x_max[column] = max(x_max[column], *x)
                axis.plot(x, ys, marker=".", color=arm["color"], label=arm["display"])
                if with_band and len(points) > 1:  # held-out: the band
                    axis.fill_between(x, [p["lo"] for p in points], [p["hi"] for p in points],
                                      color=arm["color"], alpha=0.2, linewidth=0)
                elif with_band:  # one point (the base alone): its interval as a bar
                    axis.errorbar(x, ys, yerr=[[ys[0] - points[0]["lo"]], [points[0]["hi"] - ys[0]]],
                                  color=arm["color"], capsize=4, linestyle="none")
            banded = banded or with_band
        if bases:  # the shared starting point of every held-out curve
            starred = True
            for axis in row:
                axis.plot([0], [sum(p["mean"] for p in bases) / len(bases)], marker="*", markersize=12,
                          color="black", linestyle="none", label="base (iteration 0)")
        for axis, (_, xlabel, word) in zip(row, columns):
            axis.set(title=f"{what} vs {word}", xlabel=xlabel, ylabel=what)
            axis.set_ylim(bottom=0, top=min(1.0, axis.get_ylim()[1]) if key != "reward/mean" else None)  # rates: <= 1
            axis.grid(alpha=0.3)
            if not drawn:
                axis.text(0.5, 0.5, "no held-out evaluation\n(run.eval_every = 0)", ha="center", va="center",
                          transform=axis.transAxes, color="gray")
    if signal_runs:  # ES only: its middle column is ES iterations
        plot_signal(axes[len(rows)], signal_runs, arms, columns, scale, x_max)
    for row in axes:
        for column, axis in enumerate(row):
            span = x_max[column] if x_max[column] > 0 else 1.0  # the base at 0 shows whole, bar and star
            axis.set_xlim(-0.02 * span, 1.03 * span)
    handles = [Line2D([], [], color=arm["color"], marker=".", label=arm["display"]) for arm in arms]
    if starred:
        handles.append(Line2D([], [], color="black", marker="*", markersize=12, linestyle="none",
                              label="base (iteration 0)"))
    if banded:
        handles.append(Patch(color="gray", alpha=0.2, label="95% interval"))
    if signal_runs:
        from prover_cli.es.signal import NOISE_BELOW

        handles.append(Line2D([], [], color="gray", linestyle="--", linewidth=1,
                              label=f"signal share below {NOISE_BELOW}: mostly noise"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 6), frameon=False)
    models = sorted({run["model"] for run in runs})
    fig.suptitle(f"{runs[0]['task']} with {', '.join(models)}: " + " vs ".join(arm["label"] for arm in arms))
    return fig


def plot_signal(row: Any, runs: list[dict[str, Any]], arms: list[dict[str, Any]], columns: list[tuple[str, str, str]],
                scale: dict[str, float], x_max: list[float]) -> None:
    """ES signal share (pooled over the last iterations): per arm, the mean over its runs at every iteration
    they all reached, with its 95% band over seeds, in the arm's color, on the columns' axes."""
    from prover_cli.es.signal import NOISE_BELOW, WINDOW

    with_signal = {id(run) for run in runs}
    for arm in arms:
        arm_runs = [run for run in arm["runs"] if id(run) in with_signal]
        if not arm_runs:
            continue
        per_run = [{r["iteration"]: r for r in run["records"] if SIGNAL_SHARE in r} for run in arm_runs]
        points = []
        for iteration in sorted(set.intersection(*(set(p) for p in per_run))):
            records = [p[iteration] for p in per_run]
            point = _spread([r[SIGNAL_SHARE] for r in records])
            point.update({"samples": sum(r["samples/total"] for r in records) / len(records),
                          "tokens": sum(r.get("tokens/total", 0) for r in records) / len(records),
                          "elapsed_s": sum(r["time/elapsed_s"] for r in records) / len(records)})
            points.append(point)
        if not points:
            continue
        for column, (axis, (x_key, _, _)) in enumerate(zip(row, columns)):
            x = [p[x_key] / scale[x_key] for p in points]
            x_max[column] = max(x_max[column], *x)
            axis.plot(x, [p["mean"] for p in points], marker=".", color=arm["color"], label=arm["display"])
            if len(arm_runs) > 1 and all(p["lo"] is not None for p in points):
                axis.fill_between(x, [max(-1.0, p["lo"]) for p in points], [min(1.0, p["hi"]) for p in points],
                                  color=arm["color"], alpha=0.2, linewidth=0)
    for axis, (_, xlabel, word) in zip(row, columns):
        axis.axhline(NOISE_BELOW, color="gray", linestyle="--", linewidth=1, label=f"below {NOISE_BELOW}: mostly noise")
        axis.set(title=f"ES signal share vs {word}", xlabel=xlabel,
                 ylabel=f"signal share (last {WINDOW} iterations), mean over seeds", ylim=(-1.05, 1.05))
        axis.grid(alpha=0.3)
