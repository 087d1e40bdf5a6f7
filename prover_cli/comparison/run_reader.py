"""Reading a run directory for `prover report` and `prover study`: its metrics, its resolved config,
where its problems are (`started_in`, `recorded_path`), their fingerprints, and the check that the
runs compared were trained and scored on comparable problem sets (`check_comparable`).
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
from pathlib import Path
from typing import Any

from prover_cli.comparison.arms import (
    EVAL_RATE, GREEDY_RATE, SIGNAL_KEYS, arm_identity, decoding, group_arms, run_identity)
from prover_cli.config import config_from_dict
from prover_cli.errors import ConfigError, InputError
from prover_cli.fsio.jsonl import load_jsonl_strict
from prover_cli.tasks.problems import generated_problems, select_heldout, select_train
from prover_cli.training.metrics import METRICS_FILE, read_metrics, required_keys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


_NUMERIC_KEYS = ("reward/mean", "reward/max", "verify/verified", "samples", "samples/total",
                 "time/wall_s", "time/elapsed_s")
BY_PROBLEM = "eval/by_problem"
_EVAL_NUMERIC_KEYS = (EVAL_RATE, "eval/verified_rate_lo", "eval/verified_rate_hi", GREEDY_RATE,
                      "eval/greedy_verified_rate_lo", "eval/greedy_verified_rate_hi", "eval/solved_rate",
                      "eval/reward_mean", "eval/samples", "eval/problems")
_ARM_IGNORED_KEYS = ("snapshot_every", "save_every")  # how often a run saves, not what it trains


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
    train: Path | list[dict[str, Any]] | None
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
            return run_identity(run).get("data.train_size", 0) if which == "train" else None

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
