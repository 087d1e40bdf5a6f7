"""`prover study`: the ES-versus-GRPO question as one pre-registered design, arms x sizes x seeds.

    prover study plan demo                       # every run, its cost, the power (prover_cli/studies/demo.toml)
    prover study tune demo                       # the tuning phase alone: settings on a dev split, then frozen
    prover study run demo                        # tunes, freezes, then runs what is missing; again: reruns nothing
    prover study report demo                     # the pre-registered comparisons first (Holm), then exploratory

A study file (TOML, docs/study.md gives every key) names the arms (a method, a base config and
`--set`-style overrides), the seeds, the training-set sizes (`data.train_size`: the limited-data
axis), an optional tuning phase (`[tune]`) and the comparisons, decided before any run: the
primary ones (Holm-corrected together) and the secondary ones. Every run of a study reads ONE
problems file, drawn once from `study.test_seed` into the study directory, so every seed, arm and
size is evaluated on the same held-out problems (the test set). A seed changes the training
subset, the noise and the sampling, never the test set.

**The registration is a lock.** At the first `run` (or `tune`) the registration, every arm (method,
base config by content, overrides), the seeds, sizes, budgets, comparisons with their margins,
the tuning table and the test set's fingerprint, is written into `study.json` with its sha256;
the settings tuning chose are frozen into it before any test-set run. `run` and `report` refuse a
study file whose registration differs (naming each changed key): a new question is a new study
directory.

**Tuning** (`[tune]`): each tuned method gets the same budget, k settings x m seeds of equal
training samples, trained on the training split less a dev split carved out of it (`<dir>/tune/
problems.jsonl`: the test set's rows are not in it at all) and scored on that dev split; the
setting with the best mean dev result is chosen per method and applied to every arm of that
method (its null arm too). Every setting's dev result is reported. A test set whose fingerprint a
tuning run recorded, or that shares a problem with the dev split, is refused.

**Anchors** (`study.anchors = true`, the default): every arm of a method is registered against its
base (the run's own iteration-0 evaluation) and against its method's null arm (shuffled rewards),
as secondary comparisons; a non-inferiority verdict is printed only when the comparator beat its
own base (its anchor's 95% interval above 0).

Runs live in `<study.dir>/runs/<arm>/n<size>/seed<seed>/` (n0 = every training problem), tuning runs
in `<study.dir>/tune/runs/<method>/k<i>/seed<seed>/`. A run is reused only when it finished
(`study-run.json`, written after its last iteration) and both its resolved config and the code that
made it (`code.json`) equal what this process would run now; any other run directory is trained
again from the start, so an interrupted study resumes run by run.

`report` pairs runs by seed at the largest common training budget of each pair, by the one rule
`prover report` uses too (prover_cli/compare.py: `final_at`), refused when more than 5 % apart for a
registered comparison; an exploratory pair that cannot be compared is listed as such. The per-seed
differences give a t interval and a paired t p-value (two-sided, or the one-sided non-inferiority
test against `margin`). The report directory is written whole or not at all (a temporary
directory renamed into place).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from prover_cli.errors import ConfigError, InputError, UsageError
from prover_cli.progress import NULL_REPORTER

STUDIES_DIR = Path(__file__).resolve().parent / "studies"
METHODS = ("es", "grpo")
METRICS = {"sampled": "eval/verified_rate", "greedy": "eval/greedy_verified_rate"}
TESTS = ("difference", "non-inferiority")
DONE_FILE = "study-run.json"   # written after a run's last iteration: what made it, and that it finished
STUDY_JSON = "study.json"      # the study directory's record: the locked registration, the test set's fingerprint
CHOSEN_JSON = "chosen.json"    # <dir>/tune/chosen.json: every tuned setting's dev result and the frozen choice
# Keys the study sets for every run; an arm or study override of one would break the design.
STUDY_KEYS = ("run.seed", "run.dir", "data.train_size", "data.problems")
MAX_SEEDS = 1000               # seeds per study (and per tuning phase): a design, not a sweep
MAX_RUNS = 20_000              # runs a plan lists at most
MAX_FILE_BYTES = 1 << 20       # a study file or study.json larger than this is refused unread
BASE = "base"                  # the b side of an anchor against the run's own iteration-0 evaluation
AXES = {"samples": ("samples/total", "training samples"),
        "tokens": ("tokens/total", "training completion tokens"),
        "seconds": ("time/elapsed_s", "accelerator-seconds (training wall seconds on the run's device)")}
MIN_CURVE_POINTS = 5           # evaluations per curve after the base, on the samples axis
MIN_PILOT_SEEDS = 5            # fewer, and the power table asks for more


# --------------------------------------------------------------------------------------------
# The study file
# --------------------------------------------------------------------------------------------

@dataclass
class Arm:
    name: str
    method: str
    config: Path
    overrides: list[str]
    null: bool = False


@dataclass
class Comparison:
    """a - b of one held-out metric, paired by seed; `role` primary, secondary or exploratory.
    b = "base": the a run's own iteration-0 evaluation (an anchor)."""

    a: str
    a_size: int
    b: str
    b_size: int
    metric: str
    test: str = "difference"
    margin: float = 0.0
    alpha: float = 0.05
    power: float = 0.8
    role: str = "primary"
    anchor: str = ""              # "base" or "null" for the registered anchors

    @property
    def name(self) -> str:
        b = f"{self.b}@n{self.b_size}" if self.b != BASE else BASE
        return f"{self.a}@n{self.a_size} - {b} ({self.metric})"

    @property
    def sided(self) -> int:
        return 1 if self.test == "non-inferiority" else 2

    def registered(self) -> dict[str, Any]:
        return {"a": self.a, "a_size": self.a_size, "b": self.b, "b_size": self.b_size, "metric": self.metric,
                "test": self.test, "margin": self.margin, "alpha": self.alpha, "power": self.power, "role": self.role}


@dataclass
class Tune:
    """The tuning phase: per method k settings (lists of overrides), each trained on m seeds."""

    seeds: list[int]
    dev_problems: int
    train_size: int
    metric: str
    overrides: list[str]
    settings: dict[str, list[list[str]]]

    def registered(self) -> dict[str, Any]:
        return {"seeds": self.seeds, "dev_problems": self.dev_problems, "train_size": self.train_size,
                "metric": self.metric, "set": self.overrides, "settings": self.settings}


@dataclass
class Study:
    path: Path
    name: str
    dir: Path
    seeds: list[int]
    train_sizes: list[int]
    test_seed: int
    overrides: list[str]
    arms: dict[str, Arm]
    primary: list[Comparison]
    secondary: list[Comparison] = field(default_factory=list)
    allow_unequal_budgets: bool = False
    tune: Tune | None = None
    anchors: bool = True
    min_test_problems: int = 0
    chosen: dict[str, int] | None = None   # the tuned setting per method, once frozen (tune/chosen.json)


def resolve_study(path: str | Path) -> Path:
    """The study file: `path` when it exists, else the shipped `studies/NAME.toml` it names."""
    given = Path(path)
    if given.exists():
        if not given.is_file():
            raise ConfigError(f"{given}: not a regular file, expected a study TOML",
                              hint="pass a study TOML, or a shipped study by name")
        if given.stat().st_size > MAX_FILE_BYTES:
            raise ConfigError(f"{given}: {given.stat().st_size:,} bytes, more than a study file's {MAX_FILE_BYTES:,}",
                              hint="a study file is a few dozen lines of TOML")
        return given
    name = given.name[:-len(".toml")] if given.name.endswith(".toml") else given.name
    shipped = {p.stem: p for p in sorted(STUDIES_DIR.glob("*.toml"))}
    if len(given.parts) <= 2 and (len(given.parts) == 1 or given.parts[0] == "studies") and name in shipped:
        return shipped[name]
    raise ConfigError(f"{given}: study file not found",
                      hint=f"pass a study TOML, or a shipped study by name ({', '.join(shipped) or 'none'})")


_TOP = {"study": "the study's own settings", "arms": "one table per arm", "primary": "pre-registered comparisons",
        "secondary": "secondary comparisons", "tune": "the tuning phase"}
_STUDY_KEYS = ("name", "config", "dir", "seeds", "train_sizes", "test_seed", "set", "allow_unequal_budgets",
               "anchors", "min_test_problems")
_ARM_KEYS = ("method", "config", "set")
_COMPARISON_KEYS = ("a", "b", "size", "a_size", "b_size", "metric", "test", "margin", "alpha", "power")
_TUNE_KEYS = ("seeds", "dev_problems", "train_size", "metric", "set", *METHODS)


def load_study(path: str | Path) -> Study:
    """Read and validate a study file; every error names the file and the key."""
    from prover_cli.config import SEED_MAX, read_toml

    path = resolve_study(path)
    raw = read_toml(path, what="study file")
    read = _StudyReader(path)
    read.only(raw, tuple(_TOP), "")
    s = read.only(raw.get("study", {}), _STUDY_KEYS, "study")
    name = read.name("study.name", s.get("name", path.stem))
    seeds = read.ints("study.seeds", s.get("seeds"), 0, SEED_MAX, most=MAX_SEEDS)
    sizes = read.ints("study.train_sizes", s.get("train_sizes", [0]), 0, most=16)
    test_seed = s.get("test_seed", 0)
    if type(test_seed) is not int or not 0 <= test_seed <= SEED_MAX:
        raise read.bad("study.test_seed", f"must be an integer in 0..{SEED_MAX}, got {test_seed!r}")
    flags = {}
    for key, default in (("allow_unequal_budgets", False), ("anchors", True)):
        flags[key] = s.get(key, default)
        if not isinstance(flags[key], bool):
            raise read.bad(f"study.{key}", f"must be true or false, got {flags[key]!r}")
    least = s.get("min_test_problems", 0)
    if type(least) is not int or least < 0:
        raise read.bad("study.min_test_problems", f"must be an integer >= 0, got {least!r}")
    directory = read.directory("study.dir", s.get("dir", f"runs/study-{name}"))
    arms_raw = raw.get("arms")
    if not isinstance(arms_raw, dict) or not arms_raw:
        raise read.bad("arms", "at least one arm is needed: [arms.NAME] with method = \"es\" or \"grpo\"")
    if len(arms_raw) > 16:
        raise read.bad("arms", f"{len(arms_raw)} arms: at most 16")
    shared = read.overrides("study.set", s.get("set", []))
    arms = {arm_name: read.arm(arm_name, table, s.get("config"), shared) for arm_name, table in arms_raw.items()}
    if len(arms) * len(sizes) * len(seeds) > MAX_RUNS:
        raise read.bad("study.seeds", f"{len(arms)} arms x {len(sizes)} sizes x {len(seeds)} seeds is more than "
                                      f"{MAX_RUNS:,} runs")
    comparisons: dict[str, list[Comparison]] = {}
    for role in ("primary", "secondary"):
        tables = raw.get(role, [])
        if isinstance(tables, dict):
            tables = [tables]
        if not isinstance(tables, list):
            raise read.bad(role, "must be [[%s]] tables" % role)
        comparisons[role] = [read.comparison(t, f"{role}[{i}]", role, arms, sizes) for i, t in enumerate(tables)]
    if not comparisons["primary"]:
        raise read.bad("primary", "pre-register at least one comparison: [[primary]] a = ARM, b = ARM, metric, size")
    tune = read.tune(raw.get("tune"), arms, seeds, shared) if "tune" in raw else None
    study = Study(path, name, directory, seeds, sizes, test_seed, shared, arms, comparisons["primary"],
                  comparisons["secondary"], flags["allow_unequal_budgets"], tune, flags["anchors"], least)
    _mark_nulls(study, read)
    if study.anchors:
        study.secondary += _anchors(study, read)
    study.chosen = _frozen_choice(study)
    _check_design(study)
    return study


class _StudyReader:
    """The checks of one study file's values; each error names the file and the key."""

    def __init__(self, path: Path):
        self.path = path

    def bad(self, key: str, why: str) -> ConfigError:
        return ConfigError(f"{self.path}: {key}: {why}", hint="docs/study.md lists every key of a study file")

    def only(self, table: Any, allowed: Sequence[str], where: str) -> dict[str, Any]:
        if not isinstance(table, dict):
            raise self.bad(where, "must be a table")
        for key in table:
            if key not in allowed:
                raise self.bad(f"{where}.{key}" if where else key, f"unknown key (allowed: {', '.join(allowed)})")
        return table

    def ints(self, key: str, value: Any, low: int, high: int | None = None, most: int = MAX_SEEDS) -> list[int]:
        if not isinstance(value, list) or not value or any(type(v) is not int for v in value):
            raise self.bad(key, f"must be a non-empty list of integers, got {str(value)[:80]}")
        if len(value) > most:
            raise self.bad(key, f"{len(value):,} values: at most {most:,}")
        if len(set(value)) != len(value):
            raise self.bad(key, f"has a repeated value: {value!r}")
        if any(v < low or (high is not None and v > high) for v in value):
            raise self.bad(key, f"every value must be {f'in {low}..{high}' if high is not None else f'>= {low}'}, "
                                f"got {value!r}")
        return list(value)

    def text(self, key: str, value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise self.bad(key, f"must be a non-empty string, got {value!r}")
        return value

    def name(self, key: str, value: Any) -> str:
        text = self.text(key, value)
        if text in (".", "..") or not text.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise self.bad(key, f"{text!r}: a study name is letters, digits, '-', '_' and '.' (not '.' or '..' alone): "
                                "it names the default directory runs/study-<name>")
        return text

    def directory(self, key: str, value: Any) -> Path:
        text = value if isinstance(value, str) else None
        if not text or not text.strip() or Path(text) in (Path("."), Path("/")) or ".." in Path(text).parts:
            raise self.bad(key, f"{value!r}: the study's own directory is needed (not empty, '.', '/' or one with "
                                "'..'): the study writes problems.jsonl, study.json, runs/ and report/ into it")
        return Path(text)

    def overrides(self, key: str, value: Any) -> list[str]:
        if not isinstance(value, list) or any(not isinstance(v, str) for v in value):
            raise self.bad(key, f'must be a list of "section.key=value" strings, got {value!r}')
        for item in value:
            if item.partition("=")[0].strip() in STUDY_KEYS:
                raise self.bad(key, f"{item!r}: the study sets {item.partition('=')[0].strip()} for every run "
                                    f"({', '.join(STUDY_KEYS)})")
        return list(value)

    def config_path(self, key: str, value: Any) -> Path:
        from prover_cli.shipped import resolve_config

        given = Path(self.text(key, value))
        beside = self.path.parent / given
        try:
            return beside if not given.is_absolute() and beside.is_file() else resolve_config(given)
        except ConfigError as exc:
            raise self.bad(key, str(exc)) from None

    def arm(self, arm_name: str, table: Any, base: Any, shared: list[str]) -> Arm:
        where = f"arms.{arm_name}"
        if arm_name == BASE or "@" in arm_name or not arm_name.replace("-", "").replace("_", "").isalnum():
            raise self.bad(where, f"an arm name is letters, digits, - and _ only (not {BASE!r})")
        table = self.only(table, _ARM_KEYS, where)
        method = table.get("method")
        if method not in METHODS:
            raise self.bad(f"{where}.method", f"must be one of {', '.join(METHODS)}, got {method!r}")
        if table.get("config", base) is None:
            raise self.bad(f"{where}.config", "no base config: set study.config or the arm's config")
        config = self.config_path(f"{where}.config" if "config" in table else "study.config", table.get("config", base))
        return Arm(arm_name, method, config, shared + self.overrides(f"{where}.set", table.get("set", [])))

    def comparison(self, table: Any, where: str, role: str, arms: dict[str, Arm], sizes: list[int]) -> Comparison:
        table = self.only(table, _COMPARISON_KEYS, where)
        sides = {side: self.side(table, where, side, arms, sizes) for side in ("a", "b")}
        if sides["a"] == sides["b"]:
            raise self.bad(where, "compares an arm at one size with itself")
        metric = table.get("metric", "greedy")
        if metric not in METRICS:
            raise self.bad(f"{where}.metric", f"must be one of {', '.join(METRICS)}, got {metric!r}")
        test = table.get("test", "difference")
        if test not in TESTS:
            raise self.bad(f"{where}.test", f"must be one of {', '.join(TESTS)}, got {test!r}")
        numbers = {}
        for key, default, low, high in (("margin", 0.0, 0.0, 1.0), ("alpha", 0.05, 0.0, 0.5), ("power", 0.8, 0.0, 1.0)):
            value = table.get(key, default)
            if type(value) not in (int, float) or not math.isfinite(value) or not low <= value < high \
                    or (key != "margin" and value == low):
                raise self.bad(f"{where}.{key}", f"must be a number in {'[' if key == 'margin' else '('}{low}, {high}), "
                                                 f"got {value!r}")
            numbers[key] = float(value)
        if test == "non-inferiority" and numbers["margin"] <= 0:
            raise self.bad(f"{where}.margin", "a non-inferiority test needs margin > 0 (how much worse is still acceptable)")
        if sides["b"][0] == BASE:
            sides["b"] = (BASE, sides["a"][1])
        return Comparison(*sides["a"], *sides["b"], metric, test, role=role, **numbers)

    def side(self, table: dict[str, Any], where: str, side: str, arms: dict[str, Arm], sizes: list[int]) -> tuple[str, int]:
        arm = self.text(f"{where}.{side}", table.get(side))
        if side == "b" and arm == BASE:
            return BASE, -1
        if arm not in arms:
            raise self.bad(f"{where}.{side}", f"unknown arm {arm!r} (arms: {', '.join(arms)}; b may be {BASE!r})")
        size = table.get(f"{side}_size", table.get("size", sizes[0] if len(sizes) == 1 else None))
        if size is None:
            raise self.bad(f"{where}.size", f"which training-set size? one of {sizes} (or a_size and b_size)")
        if size not in sizes:
            raise self.bad(f"{where}.{side}_size" if f"{side}_size" in table else f"{where}.size",
                           f"{size!r} is not one of study.train_sizes {sizes}")
        return arm, size

    def tune(self, table: Any, arms: dict[str, Arm], seeds: list[int], shared: list[str]) -> Tune:
        from prover_cli.config import SEED_MAX

        table = self.only(table, _TUNE_KEYS, "tune")
        tune_seeds = self.ints("tune.seeds", table.get("seeds"), 0, SEED_MAX, most=64)
        if set(tune_seeds) & set(seeds):
            raise self.bad("tune.seeds", f"{sorted(set(tune_seeds) & set(seeds))} are also study.seeds: tuning seeds "
                                         "must be fresh ones, so the test runs confirm a choice made elsewhere")
        dev = table.get("dev_problems", 100)
        if type(dev) is not int or not 2 <= dev <= 100_000:
            raise self.bad("tune.dev_problems", f"must be an integer in 2..100000, got {dev!r}")
        size = table.get("train_size", 0)
        if type(size) is not int or size < 0:
            raise self.bad("tune.train_size", f"must be an integer >= 0 (0: the training split less the dev split), "
                                              f"got {size!r}")
        metric = table.get("metric", "greedy")
        if metric not in METRICS:
            raise self.bad("tune.metric", f"must be one of {', '.join(METRICS)}, got {metric!r}")
        overrides = self.overrides("tune.set", table.get("set", []))
        settings: dict[str, list[list[str]]] = {}
        for method in METHODS:
            if method not in table:
                continue
            value = table[method]
            if not isinstance(value, list) or len(value) < 2 or any(not isinstance(v, list) for v in value):
                raise self.bad(f"tune.{method}", 'must be a list of >= 2 settings, each a list of "section.key=value" '
                                                 f"strings, got {str(value)[:80]}")
            if len(value) > 32:
                raise self.bad(f"tune.{method}", f"{len(value)} settings: at most 32")
            listed = []
            for i, setting in enumerate(value):
                items = self.overrides(f"tune.{method}[{i}]", setting)
                for item in items:
                    if not item.partition("=")[0].strip().startswith(f"{method}."):
                        raise self.bad(f"tune.{method}[{i}]", f"{item!r}: a {method} setting tunes {method}.* keys only")
                if items in listed:
                    raise self.bad(f"tune.{method}[{i}]", f"repeats setting {listed.index(items)}")
                listed.append(items)
            settings[method] = listed
        if not settings:
            raise self.bad("tune", "no method to tune: give tune.es and/or tune.grpo, lists of settings")
        counts = {method: len(v) for method, v in settings.items()}
        if len(set(counts.values())) > 1:
            raise self.bad("tune", f"unequal tuning budgets: {counts} settings per method; every tuned method gets "
                                   "the same k settings x m seeds")
        used = {arm.method for arm in arms.values()}
        missing = sorted(used - set(settings))
        if missing and len(used) > 1:
            raise self.bad("tune", f"the study's arms use {', '.join(sorted(used))} but only "
                                   f"{', '.join(sorted(settings))} is tuned: tune every method with the same budget, "
                                   "or tune none")
        for arm in arms.values():
            tuned = {item.partition("=")[0].strip() for s in settings.get(arm.method, []) for item in s}
            clash = [o for o in arm.overrides[len(shared):] if o.partition("=")[0].strip() in tuned]  # study.set: a default
            if clash:
                raise self.bad(f"arms.{arm.name}.set", f"{clash[0]!r} sets a key that [tune] chooses")
        return Tune(tune_seeds, dev, size, metric, overrides, settings)


def _mark_nulls(study: Study, read: _StudyReader) -> None:
    """Which arms are null controls (their method's shuffle_rewards), from the resolved config."""
    for arm in study.arms.values():
        config = run_config(study, arm, study.train_sizes[0], study.seeds[0])
        arm.null = bool(getattr(getattr(config, arm.method), "shuffle_rewards", False))


def _anchors(study: Study, read: _StudyReader) -> list[Comparison]:
    """Each method arm - its base and - its method's null arm, per size, on every primary metric."""
    metrics = list(dict.fromkeys(c.metric for c in study.primary))
    nulls = {}
    for arm in study.arms.values():
        if arm.null:
            nulls.setdefault(arm.method, arm.name)
    out = []
    registered = {(c.a, c.a_size, c.b, c.b_size, c.metric) for c in (*study.primary, *study.secondary)}
    for arm in study.arms.values():
        if arm.null:
            continue
        if arm.method not in nulls:
            raise read.bad("arms", f"arm {arm.name} ({arm.method}) has no null arm to be anchored against: add "
                                   f"[arms.{arm.method}-null] with set = [\"{arm.method}.shuffle_rewards=true\"], or "
                                   "set study.anchors = false (then no method is shown to learn)")
        for size in study.train_sizes:
            for metric in metrics:
                for b, b_size, kind in ((BASE, size, "base"), (nulls[arm.method], size, "null")):
                    if (arm.name, size, b, b_size, metric) not in registered:
                        out.append(Comparison(arm.name, size, b, b_size, metric, role="secondary", anchor=kind))
    return out


def tuned_overrides(study: Study, method: str) -> list[str]:
    """The tuned setting of `method` applied to its arms: the frozen choice, or (before tuning) setting 0,
    which stands in only for planning (budgets, costs): no test-set run starts before the choice."""
    if study.tune is None or method not in study.tune.settings:
        return []
    index = (study.chosen or {}).get(method, 0)
    return list(study.tune.settings[method][index])


def run_config(study: Study, arm: Arm, size: int, seed: int) -> Any:
    """The resolved config of one run: the arm's base config, the study's and arm's overrides, the tuned
    setting of its method, then the keys the study sets (seed, directory, training-set size, the problems file)."""
    from prover_cli.config import load_config

    sets = [*arm.overrides, *tuned_overrides(study, arm.method), f"run.seed={seed}", f"data.train_size={size}",
            f"data.problems={json.dumps(str(study.dir / 'problems.jsonl'))}",
            f"run.dir={json.dumps(str(run_dir(study, arm.name, size, seed)))}"]
    try:
        return load_config(arm.config, sets)
    except ConfigError as exc:
        raise ConfigError(f"{study.path}: arms.{arm.name}: {exc}", hint=exc.hint) from None


def run_dir(study: Study, arm: str, size: int, seed: int) -> Path:
    return study.dir / "runs" / arm / f"n{size}" / f"seed{seed}"


def tune_arm(study: Study, method: str) -> Arm:
    """The arm a method is tuned as: its first arm that is not a null control."""
    return next(a for a in study.arms.values() if a.method == method and not a.null)


def tune_config(study: Study, method: str, index: int, seed: int) -> Any:
    """One tuning run: the method's arm with setting `index`, on the tuning problems (dev split held out)."""
    from prover_cli.config import load_config

    assert study.tune is not None
    arm = tune_arm(study, method)
    directory = study.dir / "tune" / "runs" / method / f"k{index}" / f"seed{seed}"
    sets = [*arm.overrides, *study.tune.settings[method][index], *study.tune.overrides, f"run.seed={seed}",
            f"data.train_size={study.tune.train_size}",
            f"data.problems={json.dumps(str(study.dir / 'tune' / 'problems.jsonl'))}",
            f"run.dir={json.dumps(str(directory))}"]
    try:
        return load_config(arm.config, sets)
    except ConfigError as exc:
        raise ConfigError(f"{study.path}: tune.{method}[{index}]: {exc}", hint=exc.hint) from None


def samples_of(config: Any, method: str) -> int:
    """The run's training budget in samples (what `prover report` compares; held-out not counted)."""
    from prover_cli.demo import sample_budgets

    return sample_budgets(config)[method]


def _same_evaluation(config: Any) -> dict[str, Any]:
    """Everything that decides the test set and how it is scored: the same in every arm."""
    return {"data.task": config.data.task, "data.valid_split": config.data.valid_split,
            "data.train_split": config.data.train_split, "run.eval_problems": config.run.eval_problems,
            "run.eval_problems_seed": getattr(config.run, "eval_problems_seed", None),
            "run.eval_n": config.run.eval_n, "run.eval_temperature": config.run.eval_temperature,
            "generate.max_tokens": config.generate.max_tokens, "model.name": config.model.name}


def _check_design(study: Study) -> None:
    """What would make the comparison unfair or unpaired, refused before anything runs."""
    from prover_cli.compare import unequal

    first: dict[str, Any] = {}
    budgets: dict[tuple[str, int], int] = {}
    for arm in study.arms.values():
        for size in study.train_sizes:
            config = run_config(study, arm, size, study.seeds[0])
            where = f"{study.path}: arms.{arm.name}"
            if not config.run.eval_every:
                raise ConfigError(f"{where}: run.eval_every = 0: a study compares held-out evaluations; set it > 0")
            if config.data.valid_split == config.data.train_split:
                raise ConfigError(f"{where}: data.valid_split = data.train_split = {config.data.valid_split!r}: the test "
                                  "set would be the training set", hint="hold out a split the runs do not train on")
            for key, value in _same_evaluation(config).items():
                seen = first.setdefault(key, (arm.name, value))
                if seen[1] != value:
                    raise ConfigError(f"{where}: {key} = {value!r} but arm {seen[0]} has {seen[1]!r}: every arm must "
                                      "be evaluated on the same test set the same way")
            budgets[(arm.name, size)] = samples_of(config, arm.method)
    study_budgets = budgets
    if study.tune is not None:
        _check_tune(study)
    if study.allow_unequal_budgets:
        return
    for c in (*study.primary, *study.secondary):
        if c.b == BASE:
            continue
        a, b = study_budgets[(c.a, c.a_size)], study_budgets[(c.b, c.b_size)]
        if unequal(a, b):
            raise ConfigError(f"{study.path}: {c.role} {c.name}: unequal budgets, {a:,} against {b:,} training "
                              "samples (more than 5% apart): the difference would mix budget with method",
                              hint="match the arms' samples (es iterations x population x problems x samples; grpo "
                                   "steps x batch), or set study.allow_unequal_budgets = true (the report says so)")


def _check_tune(study: Study) -> None:
    """Every tuned method: the same k settings x m seeds, each setting of equal training samples."""
    from prover_cli.compare import unequal

    assert study.tune is not None
    totals = {}
    for method, settings in study.tune.settings.items():
        if not any(a.method == method and not a.null for a in study.arms.values()):
            raise ConfigError(f"{study.path}: tune.{method}: no arm of method {method} to tune")
        samples = []
        for index in range(len(settings)):
            config = tune_config(study, method, index, study.tune.seeds[0])
            if not config.run.eval_every:
                raise ConfigError(f"{study.path}: tune.{method}[{index}]: run.eval_every = 0: tuning scores the dev split")
            samples.append(samples_of(config, method))
        totals[method] = samples
    every = [s for samples in totals.values() for s in samples]
    if any(unequal(s, every[0]) for s in every):
        shown = "; ".join(f"{m}: {', '.join(f'{s:,}' for s in v)}" for m, v in totals.items())
        raise ConfigError(f"{study.path}: tune: unequal tuning budgets ({shown} training samples per setting): "
                          "every setting of every method gets the same samples (5%)",
                          hint="pair a change of es.samples_per_problem or es.population with es.iterations")


def design_problems(study: Study) -> tuple[list[dict[str, Any]] | None, str]:
    """The problems the study's file will hold: the file when written, else (a task that generates its
    problems) generated in memory from `study.test_seed`; None when neither (checked at `run`)."""
    from prover_cli.fsio.jsonl import load_jsonl_strict
    from prover_cli.tasks.problems import generated_problems

    path = study.dir / "problems.jsonl"
    if path.is_file():
        return load_jsonl_strict(path), str(path)
    arm = next(iter(study.arms.values()))
    config = run_config(study, arm, study.train_sizes[0], study.test_seed)
    generated = generated_problems(config)
    label = f"{config.data.task} problems generated from study.test_seed = {study.test_seed} (as `run` will write them)"
    return generated, label


def check_problems(study: Study) -> dict[str, Any]:
    """Before anything is written: every training size fits the training split, the test set holds
    `study.min_test_problems` distinct problems and none of them is a training problem, and the dev
    split leaves training problems. Errors name the study file and the key."""
    from prover_cli.tasks.problems import content_key, in_split

    problems, source = design_problems(study)
    if problems is None:
        return {"checked": False, "why": "the problems file is written at `run` (its task does not generate them)"}
    arm = next(iter(study.arms.values()))
    config = run_config(study, arm, study.train_sizes[0], study.test_seed)
    train = in_split(problems, config.data.train_split, source, "data.train_split")
    valid = in_split(problems, config.data.valid_split, source, "data.valid_split")
    trained = {content_key(p) for p in train}
    overlap = sum(content_key(p) in trained for p in valid)
    for size in study.train_sizes:
        if size > len(train):
            raise ConfigError(f"{study.path}: study.train_sizes: {size:,} but the training split of {source} has "
                              f"{len(train):,} problems", hint=f"every size <= {len(train):,} (0 = all of them)")
    held = _heldout_of(problems, config, source)
    test_contents = {content_key(p) for p in held}
    if study.min_test_problems and len(test_contents) < study.min_test_problems:
        raise ConfigError(f"{study.path}: study.min_test_problems: the test set has {len(test_contents)} distinct "
                          f"problems, fewer than {study.min_test_problems}",
                          hint="generate more problems (data.countdown_problems) or hold out more")
    out = {"checked": True, "source": source, "train_rows": len(train), "test_problems": len(held),
           "test_rows_dropped_as_training": overlap, "distinct_training_problems": len(trained)}
    if study.tune is not None:
        dev = _dev_contents(study, train, test_contents)
        if len(dev) < study.tune.dev_problems:
            raise ConfigError(f"{study.path}: tune.dev_problems: {study.tune.dev_problems} but the training split has "
                              f"{len(trained - test_contents)} distinct problems to carve them from")
        left = len(trained - test_contents - set(dev))
        if study.tune.train_size > sum(content_key(p) not in dev for p in train):
            raise ConfigError(f"{study.path}: tune.train_size: {study.tune.train_size:,} but the training split less "
                              f"the dev split has {sum(content_key(p) not in dev for p in train):,} rows")
        out.update(dev_problems=len(dev), distinct_training_problems_when_tuning=left)
    return out


def _heldout_of(problems: list[dict[str, Any]], config: Any, source: str) -> Any:
    from prover_cli.tasks.problems import select_heldout

    return select_heldout(problems, train_split=config.data.train_split, valid_split=config.data.valid_split,
                          count=config.run.eval_problems, seed=config.run.eval_problems_seed, source=source)


def _dev_contents(study: Study, train: list[dict[str, Any]], test_contents: set[str]) -> list[str]:
    """The dev split: `tune.dev_problems` distinct training problems (by content) drawn from
    study.test_seed, none of them a test problem."""
    from prover_cli.tasks.problems import content_key
    from prover_cli.streams import study_dev_split_rng

    assert study.tune is not None
    contents = sorted({content_key(p) for p in train} - test_contents)
    rng = study_dev_split_rng(study.test_seed)
    return sorted(rng.sample(contents, min(study.tune.dev_problems, len(contents))))


# --------------------------------------------------------------------------------------------
# The runs: what exists, what is missing
# --------------------------------------------------------------------------------------------

def planned_runs(study: Study) -> list[dict[str, Any]]:
    """Every run of the study (arm x size x seed), in a fixed order, with its config and state."""
    runs = []
    for arm in study.arms.values():
        for size in study.train_sizes:
            for seed in study.seeds:
                config = run_config(study, arm, size, seed)
                state, why = run_state(config)
                if study.tune is not None and study.chosen is None:
                    state, why = "after tuning", "waits for the tuning phase to choose its method's setting"
                runs.append({"arm": arm.name, "method": arm.method, "size": size, "seed": seed,
                             "dir": run_dir(study, arm.name, size, seed), "config": config, "state": state,
                             "why": why, "samples": samples_of(config, arm.method)})
    return runs


def planned_tune_runs(study: Study) -> list[dict[str, Any]]:
    """Every tuning run (method x setting x tuning seed), with its config and state."""
    if study.tune is None:
        return []
    runs = []
    for method, settings in study.tune.settings.items():
        for index in range(len(settings)):
            for seed in study.tune.seeds:
                config = tune_config(study, method, index, seed)
                state, why = run_state(config)
                runs.append({"arm": f"tune-{method}-k{index}", "method": method, "setting": index, "size":
                             study.tune.train_size, "seed": seed, "dir": Path(config.run.dir), "config": config,
                             "state": state, "why": why, "samples": samples_of(config, method)})
    return runs


def _toml_dict(text: str) -> dict[str, Any]:
    from prover_cli.config import tomllib

    return tomllib.loads(text)


def run_state(config: Any) -> tuple[str, str]:
    """("finished", "") for a run to reuse; ("missing" | "stale", why) for one to train (again)."""
    from prover_cli.metrics import CODE_FILE, code_version

    directory = Path(config.run.dir)
    if not directory.exists():
        return "missing", "not run yet"
    done_path = directory / DONE_FILE
    if not done_path.exists():
        return "stale", "did not finish (no study-run.json): trained again from the start"
    try:
        done = json.loads(done_path.read_text(encoding="utf-8"))
        recorded = json.loads((directory / CODE_FILE).read_text(encoding="utf-8"))
        (directory / "config.toml").read_text(encoding="utf-8")   # the run's own record is there too
    except (OSError, ValueError) as exc:
        return "stale", f"its records cannot be read ({exc}): trained again"
    if not isinstance(done, dict):
        return "stale", f"its {DONE_FILE} holds a {type(done).__name__}, not the record of a finished run: trained again"
    # The config the study planned for the run, as recorded when it finished: on Modal the run's own
    # config.toml holds the Volume's paths (`to_wire`), so it is not what to compare with.
    stored = done.get("config")
    if not isinstance(stored, dict):
        return "stale", "its study-run.json records no planned config: trained again"
    now = code_version()
    for record, label in ((recorded, CODE_FILE), (done.get("code"), DONE_FILE)):
        if record != now:
            keys = [k for k in now if not isinstance(record, dict) or record.get(k) != now[k]]
            return "stale", f"made by other code ({label}: {', '.join(keys)} differ{'s' if len(keys) == 1 else ''})"
    current = _toml_dict(config.to_toml())
    changed = [f"{section}.{key}" for section in current for key in current[section]
               if not isinstance(stored.get(section), dict) or stored[section].get(key) != current[section][key]]
    if changed:
        return "stale", f"its config.toml differs: {', '.join(changed[:4])}{' ...' if len(changed) > 4 else ''}"
    return "finished", ""


# --------------------------------------------------------------------------------------------
# The test set and the dev split
# --------------------------------------------------------------------------------------------

def test_set(config: Any) -> dict[str, Any]:
    """The held-out problems a run is scored on, fingerprinted by content (every field but the split);
    `heldout_sha256` is the fingerprint every run records in its held-out lines (eval/problems_sha256)."""
    from prover_cli.tasks.problems import heldout_problems

    problems = heldout_problems(config)
    rows = sorted(json.dumps({k: v for k, v in p.items() if k != "split"}, sort_keys=True) for p in problems)
    contents = {json.dumps({k: v for k, v in p.items() if k not in ("split", "id", "name")}, sort_keys=True)
                for p in problems}
    return {"problems": len(problems), "distinct_by_content": len(contents),
            "sha256": hashlib.sha256("\n".join(rows).encode("utf-8")).hexdigest(), "heldout_sha256": problems.sha256}


def write_problems(study: Study, reporter: Any = NULL_REPORTER) -> None:
    """The study's one problems file (from `study.test_seed`) and, with [tune], the tuning problems file."""
    from prover_cli.tasks.datasets import prepare_data

    problems_path = study.dir / "problems.jsonl"
    if not problems_path.exists():
        from prover_cli.config import load_config

        arm = next(iter(study.arms.values()))
        config = load_config(arm.config, [*arm.overrides, *tuned_overrides(study, arm.method),
                                          f"run.seed={study.test_seed}",
                                          f"data.problems={json.dumps(str(problems_path))}",
                                          f"run.dir={json.dumps(str(study.dir))}"])
        prepare_data(config, reporter=reporter)
        reporter.log(f"{problems_path}: the study's one problems file (run.seed = {study.test_seed})")
    if study.tune is not None and not (study.dir / "tune" / "problems.jsonl").exists():
        _write_tune_problems(study, reporter)


def _write_tune_problems(study: Study, reporter: Any) -> None:
    """`<dir>/tune/problems.jsonl`: the study's problems without the test set's rows, a dev split of
    `tune.dev_problems` training problems (by content) relabelled as the held-out split, the rest training."""
    from prover_cli.fsio.jsonl import load_jsonl_strict, write_jsonl_atomic
    from prover_cli.tasks.problems import content_key

    problems = load_jsonl_strict(study.dir / "problems.jsonl")
    config = run_config(study, next(iter(study.arms.values())), study.train_sizes[0], study.test_seed)
    train_split, valid_split = config.data.train_split, config.data.valid_split
    test_contents = {content_key(p) for p in problems if p.get("split") == valid_split}
    train = [p for p in problems if p.get("split") == train_split]
    dev = set(_dev_contents(study, train, test_contents))
    rows = []
    for p in problems:
        content = content_key(p)
        if p.get("split") == valid_split or content in test_contents:
            continue   # the test set is not in the tuning file at all
        if content in dev:
            rows.append({**p, "split": valid_split})
        else:
            rows.append(p)
    write_jsonl_atomic(study.dir / "tune" / "problems.jsonl", rows)
    reporter.log(f"{study.dir / 'tune' / 'problems.jsonl'}: the tuning problems, {len(dev)} dev problems carved out "
                 f"of training as {valid_split!r}, the test set left out")


def dev_set(study: Study) -> dict[str, Any]:
    return test_set(tune_config(study, next(iter(study.tune.settings)), 0, study.tune.seeds[0]))  # type: ignore[union-attr]


def check_test_set_fresh(study: Study, fingerprint: dict[str, Any]) -> None:
    """Refuse a test set a tuning run was scored on (its recorded eval/problems_sha256), or that shares a
    problem with the dev split: fresh seeds do not make a reused test set fresh."""
    from prover_cli.metrics import METRICS_FILE
    from prover_cli.tasks.problems import content_key

    tune_dir = study.dir / "tune"
    for path in sorted((tune_dir / "runs").glob(f"*/k*/seed*/{METRICS_FILE}")) if tune_dir.exists() else []:
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                recorded = json.loads(line).get("eval/problems_sha256")
            except (ValueError, AttributeError):
                continue
            if recorded is not None and recorded == fingerprint.get("heldout_sha256"):
                raise InputError(f"{path}: this tuning run was scored on the study's test set (eval/problems_sha256 "
                                 f"{recorded}): a setting chosen on the test set cannot be tested on it",
                                 hint="tune on the dev split ([tune], tune/problems.jsonl), or start a new study.dir")
    tune_file = tune_dir / "problems.jsonl"
    if tune_file.exists() and study.tune is not None:
        from prover_cli.fsio.jsonl import load_jsonl_strict

        config = run_config(study, next(iter(study.arms.values())), study.train_sizes[0], study.test_seed)
        dev = {content_key(p) for p in load_jsonl_strict(tune_file) if p.get("split") == config.data.valid_split}
        from prover_cli.tasks.problems import heldout_problems

        shared = dev & {content_key(p) for p in heldout_problems(config)}
        if shared:
            raise InputError(f"{tune_file}: {len(shared)} dev problems are also test problems: the test set was "
                             "used for tuning", hint="start the study in a new study.dir")


# --------------------------------------------------------------------------------------------
# The locked registration
# --------------------------------------------------------------------------------------------

def registration(study: Study) -> dict[str, Any]:
    """What the study is decided to be before any test-set run; hashed into study.json at the first run."""
    arms = {}
    for arm in study.arms.values():
        # the base config by content, not by path: the same study read from another checkout is the same study
        arms[arm.name] = {"method": arm.method, "null": arm.null,
                          "config_sha256": hashlib.sha256(arm.config.read_bytes()).hexdigest(), "set": arm.overrides,
                          "budgets": {str(size): samples_of(run_config(study, arm, size, study.seeds[0]), arm.method)
                                      for size in study.train_sizes}}
    return {"study": study.name, "dir": str(study.dir), "seeds": study.seeds, "train_sizes": study.train_sizes,
            "test_seed": study.test_seed, "arms": arms, "anchors": study.anchors,
            "allow_unequal_budgets": study.allow_unequal_budgets, "min_test_problems": study.min_test_problems,
            "primary": [c.registered() for c in study.primary],
            "secondary": [c.registered() for c in study.secondary],
            "tune": None if study.tune is None else {**study.tune.registered(), "chosen": study.chosen}}


def registration_sha256(reg: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(reg, sort_keys=True).encode("utf-8")).hexdigest()


def _changes(old: Any, new: Any, where: str = "") -> list[str]:
    """Dotted keys whose values differ between two registrations."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in list(old) + [k for k in new if k not in old]:
            out += _changes(old.get(key), new.get(key), f"{where}.{key}" if where else str(key))
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new) \
            and all(isinstance(x, dict) for x in old + new):
        return [c for i, (x, y) in enumerate(zip(old, new)) for c in _changes(x, y, f"{where}[{i}]")]
    return [] if old == new else [f"{where}: {json.dumps(old)} -> {json.dumps(new)}"]


def read_record(study: Study) -> dict[str, Any] | None:
    """study.json, checked: None before the first run; an unreadable one is an error naming it."""
    path = study.dir / STUDY_JSON
    if not path.exists():
        return None
    hint = ("study.json is the study's lock, written once at its first run; if it was not edited by hand the "
            "directory was damaged: start the study in a new study.dir")
    if not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
        raise InputError(f"{path}: not a study record (not a regular file of at most {MAX_FILE_BYTES:,} bytes)", hint=hint)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not valid JSON ({exc}): truncated or damaged", hint=hint) from None
    if not isinstance(record, dict):
        raise InputError(f"{path}: holds a JSON {type(record).__name__}, not the study's record (an object)", hint=hint)
    for key, kind in (("registration", dict), ("registration_sha256", str), ("test_set", dict)):
        if not isinstance(record.get(key), kind):
            raise InputError(f"{path}: no {key!r} ({kind.__name__}): written by an older prover, before registrations "
                             "were locked, or damaged", hint="start the study in a new study.dir (or remove this one)")
    if registration_sha256(record["registration"]) != record["registration_sha256"]:
        raise InputError(f"{path}: registration_sha256 does not match its registration: edited by hand", hint=hint)
    return record


def check_registration(study: Study, record: dict[str, Any] | None) -> None:
    """Refuse a study file whose registration differs from the one locked at the first run."""
    if record is None:
        return
    locked, now = record["registration"], registration(study)
    if locked.get("tune") and now.get("tune") and locked["tune"].get("chosen") is None:
        now = {**now, "tune": {**now["tune"], "chosen": None}}   # locked before the choice was frozen
    changes = _changes(locked, now)
    if changes:
        shown = "; ".join(changes[:6]) + (f"; and {len(changes) - 6} more" if len(changes) > 6 else "")
        raise UsageError(f"{study.path}: the registration changed since the study's first run ({study.dir / STUDY_JSON}, "
                         f"sha256 {record['registration_sha256'][:12]}): {shown}",
                         hint="a registration is decided before the runs: restore the study file, or ask the new "
                              "question as a new study (a new study.dir); its runs can be trained again there")


def lock_registration(study: Study, fingerprint: dict[str, Any], record: dict[str, Any] | None) -> None:
    """Write (or, when tuning has just chosen, complete) study.json's registration."""
    from prover_cli.fsio.jsonl import write_text_atomic

    reg = registration(study)
    if record is not None and record["registration"] == reg and record.get("test_set") == fingerprint:
        return
    write_text_atomic(study.dir / STUDY_JSON, json.dumps(
        {"study": study.name, "study_file": str(study.path), "test_set": fingerprint, "registration": reg,
         "registration_sha256": registration_sha256(reg)}, indent=2, sort_keys=True) + "\n")
    if record is None:
        write_text_atomic(study.dir / "study.toml", study.path.read_text(encoding="utf-8"))


def prepare_test_set(study: Study, runs: list[dict[str, Any]], reporter: Any = NULL_REPORTER) -> dict[str, Any]:
    """Write the problems files once, check the record (registration, test set), lock it, return the fingerprint."""
    record = read_record(study)
    check_registration(study, record)
    write_problems(study, reporter)
    check_problems(study)   # problems from a file are checked once written, before any training
    fingerprint = test_set(runs[0]["config"])
    if record is not None and record["test_set"] != fingerprint:
        raise InputError(f"{study.dir / 'problems.jsonl'}: the test set changed since the study started "
                         f"({record['test_set'].get('sha256')} -> {fingerprint['sha256']}); its runs are no longer "
                         "comparable", hint="restore the file, or start the study in a new study.dir")
    check_test_set_fresh(study, fingerprint)
    lock_registration(study, fingerprint, record)
    if fingerprint["distinct_by_content"] < fingerprint["problems"]:
        getattr(reporter, "warn", reporter.log)(
            f"{study.dir / 'problems.jsonl'}: the test set has {fingerprint['problems']} held-out rows but "
            f"{fingerprint['distinct_by_content']} distinct problems by content; duplicates narrow every interval")
    return fingerprint


# --------------------------------------------------------------------------------------------
# Tuning: k settings x m seeds per method on the dev split, the choice frozen before any test run
# --------------------------------------------------------------------------------------------

def _frozen_choice(study: Study) -> dict[str, int] | None:
    """The choice recorded in <dir>/tune/chosen.json (None before tuning finished)."""
    path = study.dir / "tune" / CHOSEN_JSON
    if study.tune is None or not path.exists():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8")) if path.stat().st_size <= MAX_FILE_BYTES else None
    except (OSError, ValueError, UnicodeDecodeError):
        record = None
    chosen = record.get("chosen") if isinstance(record, dict) else None
    if not isinstance(chosen, dict) or set(chosen) != set(study.tune.settings) or any(
            type(i) is not int or not 0 <= i < len(study.tune.settings[m]) for m, i in chosen.items()):
        raise InputError(f"{path}: not a tuning choice for this study's [tune] (methods "
                         f"{', '.join(study.tune.settings)}): damaged, or written for another study",
                         hint="start the study in a new study.dir")
    return dict(chosen)


def tune_results(study: Study, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Every tuned setting's dev result (final evaluation of `tune.metric`, per seed, mean and t interval)
    and the choice: per method, the best mean (the first listed on a tie)."""
    from prover_cli.compare import final_at, run_budget
    from prover_cli.report import load_run
    from prover_cli.stats import mean_interval

    assert study.tune is not None
    key = METRICS[study.tune.metric]
    results: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        loaded = load_run(run["dir"])
        final = final_at(loaded, key, run_budget(loaded))
        entry = results.setdefault(run["method"], [])
        while len(entry) <= run["setting"]:
            index = len(entry)
            entry.append({"setting": index, "set": study.tune.settings[run["method"]][index], "per_seed": {}})
        entry[run["setting"]]["per_seed"][str(run["seed"])] = None if final is None else final[key]
        entry[run["setting"]]["samples"] = run["samples"]
    chosen = {}
    for method, entries in results.items():
        for entry in entries:
            values = [v for v in entry["per_seed"].values() if v is not None]
            mean, low, high = mean_interval(values) if values else (None, None, None)
            entry.update(mean=mean, lo=low, hi=high)
        ranked = [e for e in entries if e["mean"] is not None]
        if not ranked:
            raise InputError(f"tune.{method}: no tuning run has a {study.tune.metric} evaluation on the dev split")
        chosen[method] = max(ranked, key=lambda e: (e["mean"], -e["setting"]))["setting"]
    return {"metric": study.tune.metric, "seeds": study.tune.seeds, "results": results, "chosen": chosen}


def tune_study(study: Study, *, backend: str = "local", reporter: Any = NULL_REPORTER) -> dict[str, Any]:
    """The tuning phase: train what is missing on the dev split, choose, freeze the choice (tune/chosen.json,
    and study.json's registration) before any test-set run."""
    from prover_cli.fsio.jsonl import write_text_atomic

    if study.tune is None:
        raise UsageError(f"{study.path}: no [tune] table: nothing to tune", hint="docs/study.md: the tuning phase")
    check_problems(study)
    record = read_record(study)
    check_registration(study, record)
    runs = planned_tune_runs(study)
    write_problems(study, reporter)
    check_problems(study)   # problems from a file are checked once written, before any training
    dev = dev_set(study)
    test = test_set(run_config(study, next(iter(study.arms.values())), study.train_sizes[0], study.seeds[0]))
    if dev["heldout_sha256"] == test["heldout_sha256"]:
        raise InputError(f"{study.dir / 'tune' / 'problems.jsonl'}: the dev split is the test set")
    check_test_set_fresh(study, test)
    lock_registration(study, test, record)
    todo = _train(study, runs, backend, reporter, dev, "tune")
    results = tune_results(study, runs)
    frozen = _frozen_choice(study)
    if frozen is None:
        write_text_atomic(study.dir / "tune" / CHOSEN_JSON, json.dumps({**results, "dev_set": dev}, indent=2,
                                                                      sort_keys=True) + "\n")
    elif frozen != results["chosen"]:
        raise InputError(f"{study.dir / 'tune' / CHOSEN_JSON}: frozen choice {frozen} but the tuning runs now choose "
                         f"{results['chosen']}: they were trained again by other code",
                         hint="the choice stays frozen: start a new study.dir to tune again")
    study.chosen = _frozen_choice(study)
    lock_registration(study, test, read_record(study))
    return {"ok": True, "study": study.name, "trained": len(todo), "reused": len(runs) - len(todo), "dev_set": dev,
            "chosen": {m: study.tune.settings[m][i] for m, i in (study.chosen or {}).items()},
            "tune": results, "tables": [tune_table(study, results)]}


def tune_table(study: Study, results: dict[str, Any]) -> dict[str, Any]:
    assert study.tune is not None
    rows = []
    for method, entries in results["results"].items():
        for e in entries:
            seeds = ", ".join("-" if v is None else f"{v:.3f}" for v in e["per_seed"].values())
            band = f" ({_num(e['lo'])}..{_num(e['hi'])})" if e.get("lo") is not None else ""
            rows.append([method, e["setting"], " ".join(e["set"]) or "(base config)", f"{e.get('samples', 0):,}", seeds,
                         f"{_num(e['mean'])}{band}", "CHOSEN" if results["chosen"].get(method) == e["setting"] else ""])
    k = max(len(v) for v in study.tune.settings.values())
    return {"title": f"tuning on the dev split ({study.tune.dev_problems} training problems held out; "
                     f"{k} settings x {len(study.tune.seeds)} seeds per method, equal budgets; "
                     f"{study.tune.metric} rate at the final evaluation): every setting",
            "columns": ["method", "k", "setting", "samples", f"dev {study.tune.metric} per seed",
                        "mean (95% t interval)", "choice"], "rows": rows}


# --------------------------------------------------------------------------------------------
# plan
# --------------------------------------------------------------------------------------------

def plan_study(study: Study, *, backend: str = "local", pilot: Sequence[str | Path] = (),
               reporter: Any = NULL_REPORTER) -> dict[str, Any]:
    """Every run (tuning first) with its state and cost, the totals, the checks `run` would refuse on
    (done here, before anything is written), and (with a pilot) the power of each primary comparison."""
    from prover_cli.on_modal.plan import plan as train_plan

    problems = check_problems(study)
    record = read_record(study)
    check_registration(study, record)
    tune_runs, runs = planned_tune_runs(study), planned_runs(study)
    rows, listed, total_samples, total_usd = [], [], 0, 0.0
    for run in (*tune_runs, *runs):
        cost = train_plan(run["config"], command=f"train_{run['method']}", backend=backend)
        usd = cost.get("est_usd_total")
        total_samples += run["samples"]
        total_usd += usd or 0.0
        listed.append({"arm": run["arm"], "method": run["method"], "train_size": run["size"], "seed": run["seed"],
                       "dir": str(run["dir"]), "state": run["state"], "why": run["why"], "samples": run["samples"],
                       "phase": "tune" if "setting" in run else "test",
                       "heldout_evaluations": cost.get("heldout_evaluations"), **({"est_usd": usd} if usd is not None else {})})
        rows.append([run["arm"], run["size"] or "all", run["seed"], str(run["dir"]), run["state"], f"{run['samples']:,}",
                     *([f"{usd:.2f}"] if backend == "modal" else [cost.get("heldout_evaluations", 0)])])
    todo = [r for r in listed if r["state"] != "finished"]
    columns = ["arm", "train size", "seed", "run dir", "state", "training samples",
               "est USD" if backend == "modal" else "held-out evaluations"]
    tuning = (f"{len(tune_runs)} tuning runs ({len(study.tune.settings)} methods x "   # type: ignore[union-attr]
              f"{max(len(v) for v in study.tune.settings.values())} settings x {len(study.tune.seeds)} seeds) + "  # type: ignore[union-attr]
              if tune_runs else "")
    tables = [{"title": f"study {study.name}: {tuning}{len(runs)} test runs ({len(study.arms)} arms x "
                        f"{len(study.train_sizes)} sizes x {len(study.seeds)} seeds), {len(todo)} to run, on {backend}",
               "columns": columns, "rows": rows},
              comparisons_table(study)]
    result: dict[str, Any] = {"ok": True, "study": study.name, "study_file": str(study.path), "dir": str(study.dir),
                              "backend": backend, "runs_total": len(runs), "tune_runs_total": len(tune_runs),
                              "runs_to_run": len(todo), "samples_total": total_samples, "runs": listed,
                              "problems": problems, "registration": "locked" if record else "written at the first run",
                              "unregistered_arms": unregistered_arms(study)}
    if result["unregistered_arms"]:
        result["note"] = (f"arms in no registered comparison: {', '.join(result['unregistered_arms'])} (exploratory "
                          "only; a pair that cannot be compared is listed as such, never a reason to drop another)")
    if backend == "modal":
        result["est_usd_total"] = round(total_usd, 2)
        result["est_usd_to_run"] = round(sum(r.get("est_usd", 0.0) for r in todo), 2)
    if pilot:
        power = pilot_power(study, pilot)
        result["power"] = power
        tables.append(power_table(power, f"power from the pilot {', '.join(map(str, pilot))}"))
    else:
        result["power_note"] = ("no pilot given: pass --pilot <finished study dir or ES and GRPO run dirs> for the "
                                "seeds and test problems each primary margin needs")
    if problems.get("checked"):
        tables.insert(1, {"title": "problems (checked before anything is written)", "columns": ["what", "value"],
                          "rows": [[key.replace("_", " "), f"{value:,}" if isinstance(value, int) else value]
                                   for key, value in problems.items() if key != "checked"]})
    result["tables"] = tables
    return result


def unregistered_arms(study: Study) -> list[str]:
    used = {side for c in (*study.primary, *study.secondary) for side in (c.a, c.b)}
    return [name for name in study.arms if name not in used]


def comparisons_table(study: Study) -> dict[str, Any]:
    rows = [[c.role + (f" (anchor: {c.anchor})" if c.anchor else ""), c.name,
             c.test + (f", margin {c.margin:g}" if c.margin else ""), c.alpha, c.power]
            for c in (*study.primary, *study.secondary)]
    return {"title": f"pre-registered comparisons (primary: Holm over {len(study.primary)})",
            "columns": ["role", "comparison", "test", "alpha", "power"], "rows": rows}


# --------------------------------------------------------------------------------------------
# run
# --------------------------------------------------------------------------------------------

def run_study(study: Study, *, backend: str = "local", reporter: Any = NULL_REPORTER) -> dict[str, Any]:
    """The tuning phase when there is one (its choice frozen), then every test run not finished with
    this code and config; the rest reused. Everything `plan` checks is refused before anything is written."""
    check_problems(study)
    check_registration(study, read_record(study))
    tuned: dict[str, Any] = {}
    if study.tune is not None:
        tuned = tune_study(study, backend=backend, reporter=reporter)
    runs = planned_runs(study)
    fingerprint = prepare_test_set(study, runs, reporter)
    todo = _train(study, runs, backend, reporter, fingerprint, "test")
    rows = [[r["arm"], r["size"] or "all", r["seed"], str(r["dir"]), "trained" if r in todo else "reused"] for r in runs]
    return {"ok": True, "study": study.name, "dir": str(study.dir), "trained": len(todo), "reused": len(runs) - len(todo),
            "test_set": fingerprint, **({"tune": {k: tuned[k] for k in ("trained", "reused", "chosen")}} if tuned else {}),
            "tables": [*tuned.get("tables", []),
                       {"title": f"study {study.name}: {len(todo)} trained, {len(runs) - len(todo)} reused",
                        "columns": ["arm", "train size", "seed", "run dir", "this time"], "rows": rows}]}


def _train(study: Study, runs: list[dict[str, Any]], backend: str, reporter: Any, fingerprint: dict[str, Any],
           phase: str) -> list[dict[str, Any]]:
    """Train every run of `runs` that is not finished, each whole (a stale directory removed first)."""
    from prover_cli.tasks.problems import train_problems

    todo = [run for run in runs if run["state"] != "finished"]
    for run in {run["size"]: run for run in todo}.values():  # a size the training split cannot hold fails now
        train_problems(run["config"])
    for run in todo:
        reporter.log(f"{run['dir']}: {run['why']}")
        if run["dir"].exists():
            shutil.rmtree(run["dir"])  # a run is trained whole or not reused: never a mix of two codes
    if backend == "modal":
        _run_on_modal(todo, reporter)
    else:
        from prover_cli import backends

        for i, run in enumerate(todo, 1):
            reporter.log(f"study {study.name} ({phase}): run {i}/{len(todo)}: {run['arm']} n{run['size']} "
                         f"seed {run['seed']}")
            backends.run("local", f"train_{run['method']}", run["config"], reporter=reporter, resume=False)
            _mark_done(run, fingerprint)
    return todo


def _mark_done(run: dict[str, Any], fingerprint: dict[str, Any]) -> None:
    """The run finished: record it, with the code that made it (a run without this file is redone)."""
    from prover_cli.fsio.jsonl import write_text_atomic
    from prover_cli.metrics import code_version

    if test_set(run["config"]) != fingerprint:
        raise InputError(f"{run['dir']}: evaluated on another test set than the study's ({fingerprint['sha256'][:12]})")
    write_text_atomic(run["dir"] / DONE_FILE, json.dumps(
        {"arm": run["arm"], "method": run["method"], "train_size": run["size"], "seed": run["seed"],
         "code": code_version(), "test_set": fingerprint, "config": _toml_dict(run["config"].to_toml())},
        indent=2, sort_keys=True) + "\n")


def _run_on_modal(todo: list[dict[str, Any]], reporter: Any) -> None:
    """Whole runs fanned out on Modal, one `train_es` / `train_grpo` call each (functions.study_runs),
    each writing its own directory on the runs Volume; the small files come back to the same paths.
    tests/test_study.py runs it with the Volume stand-in and each call in a stand-in container."""
    from prover_cli import backends

    remote = backends.modal_module("prover_cli.on_modal.remote")
    functions = backends.modal_module("prover_cli.on_modal.functions")
    import modal

    from prover_cli.metrics import CODE_FILE

    for method in METHODS:
        batch = [run for run in todo if run["method"] == method]
        if not batch:
            continue
        name = f"train_{method}"
        wires = [remote.to_wire(name, run["config"], {"resume": False}) for run in batch]
        with modal.enable_output(), remote.app_of(name).run():   # this method's app only (images.py)
            for config, _, _ in wires:   # a stale run is trained whole on the Volume too, never on top
                try:
                    remote.runs_volume.remove_file(config["run"]["dir"], recursive=True)
                except modal.exception.NotFoundError:
                    pass
            remote.upload([upload for _, _, uploads in wires for upload in uploads])
            results = functions.study_runs(name, [(config, kwargs) for config, kwargs, _ in wires], batch[0]["config"])
        for run, (config, kwargs, _), result in zip(batch, wires, results):
            if isinstance(result, BaseException):
                raise InputError(f"{run['dir']}: the run failed on Modal: {type(result).__name__}: {result}",
                                 hint="rerun `prover study run` to retry the runs that did not finish")
            remote._pull([*remote._outputs(name, config, kwargs), str(Path(config["run"]["dir"]) / CODE_FILE)])
            _mark_done(run, test_set(run["config"]))
            reporter.log(f"{run['dir']}: finished on Modal")


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------

def _pair_of(study: Study, c: Comparison, loaded: dict[tuple[str, int, int], dict[str, Any]], seed: int):
    """The two runs of one seed a comparison pairs (an anchor against the base: the run with itself)."""
    x = loaded.get((c.a, c.a_size, seed))
    y = x if c.b == BASE else loaded.get((c.b, c.b_size, seed))
    return x, y


def evaluations_at(c: Comparison, x: dict[str, Any], y: dict[str, Any], key: str, budget: float):
    """The two evaluations a comparison reads at `budget`, by the one rule (compare.final_at); the base
    side of an anchor is the run's iteration-0 evaluation."""
    from prover_cli.compare import base_of, final_at

    return final_at(x, key, budget), (base_of(y, key) if c.b == BASE else final_at(y, key, budget))


def compare(study: Study, c: Comparison, loaded: dict[tuple[str, int, int], dict[str, Any]]) -> dict[str, Any]:
    """One comparison: per seed, the paired difference at the pair's largest common budget; then the test."""
    from prover_cli.compare import per_problem, run_budget, unequal
    from prover_cli.stats import mean_interval, paired_difference, paired_t_test

    key = METRICS[c.metric]
    per_seed = []
    for seed in study.seeds:
        x, y = _pair_of(study, c, loaded, seed)
        if x is None or y is None:
            continue
        budget = run_budget(x) if c.b == BASE else min(run_budget(x), run_budget(y))
        fa, fb = evaluations_at(c, x, y, key, budget)
        if fa is None or fb is None:
            raise InputError(f"{c.name}: seed {seed}: no {c.metric} evaluation at or below {budget:,} samples in "
                             f"{x['dir'] if fa is None else y['dir']}")
        if c.b != BASE and unequal(fa["samples/total"], fb["samples/total"]) and not study.allow_unequal_budgets:
            raise UsageError(f"{c.name}: seed {seed}: evaluated at {fa['samples/total']:,} and {fb['samples/total']:,} "
                             "training samples, more than 5% apart", hint="align run.eval_every of the arms, or set "
                             "study.allow_unequal_budgets = true")
        pa, pb = per_problem(fa, key), per_problem(fb, key)
        if pa is None or pb is None:
            raise InputError(f"{c.name}: seed {seed}: no eval/by_problem to pair problem by problem")
        try:
            diffs = paired_difference(pa, pb)
        except ValueError as exc:
            raise InputError(f"{c.name}: seed {seed}: {x['dir']} and {y['dir']}: {exc}") from None
        per_seed.append({"comparison": c.name, "role": c.role, "metric": c.metric, "seed": seed,
                         "a_run": str(x["dir"]), "b_run": str(y["dir"]), "a_samples": fa["samples/total"],
                         "b_samples": fb["samples/total"], "a_iteration": fa["iteration"],
                         "b_iteration": fb["iteration"], "a_rate": fa[key], "b_rate": fb[key],
                         "a_tokens": fa.get("tokens/total", 0), "b_tokens": fb.get("tokens/total", 0),
                         "a_seconds": fa.get("time/elapsed_s", 0.0), "b_seconds": fb.get("time/elapsed_s", 0.0),
                         "difference": sum(diffs) / len(diffs), "problem_differences": diffs})
    out: dict[str, Any] = {"name": c.name, "role": c.role, "metric": c.metric, "test": c.test, "margin": c.margin,
                           "alpha": c.alpha, "anchor": c.anchor, "a": c.a, "a_size": c.a_size, "b": c.b,
                           "b_size": c.b_size, "seeds": [p["seed"] for p in per_seed], "per_seed": per_seed}
    if not per_seed:
        return {**out, "mean": None, "lo": None, "hi": None, "p": None, "budget": None}
    values = [p["difference"] for p in per_seed]
    mean, low, high = mean_interval(values)
    test = paired_t_test(values, c.margin, "greater" if c.test == "non-inferiority" else "two-sided")
    return {**out, "mean": mean, "lo": low, "hi": high, "t": test["t"], "p": test["p"], "n": test["n"],
            "budget": _budget_of(per_seed)}


def _budget_of(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    """The budget a claim is made on: each side's mean samples, tokens and accelerator-seconds there."""
    def mean(key: str) -> float:
        return sum(p[key] for p in per_seed) / len(per_seed)

    return {side: {"samples": mean(f"{side}_samples"), "tokens": mean(f"{side}_tokens"),
                   "seconds": mean(f"{side}_seconds")} for side in ("a", "b")}


def exploratory(study: Study) -> list[Comparison]:
    """What was not pre-registered: at each size every pair of arms that are not null controls, each arm
    against its own method's null arms, and each arm's data-size contrasts (a null control against
    another method's arm or null compares nothing anyone asked)."""
    registered = {(c.a, c.a_size, c.b, c.b_size, c.metric) for c in (*study.primary, *study.secondary)}
    names = list(study.arms)
    arms = study.arms
    out = []
    for metric in METRICS:
        for size in study.train_sizes:
            for i, a in enumerate(names):
                for b in names[i + 1:]:
                    if (arms[a].null or arms[b].null) and (arms[a].method != arms[b].method or arms[a].null == arms[b].null):
                        continue
                    first, second = (b, a) if arms[a].null else (a, b)   # the null control is always b
                    out.append(Comparison(first, size, second, size, metric, role="exploratory"))
        for arm in names:  # the limited-data contrast: the same seed with fewer training problems
            for i, small in enumerate(study.train_sizes):
                for large in study.train_sizes[i + 1:]:
                    out.append(Comparison(arm, small, arm, large, metric, role="exploratory"))
    return [c for c in out if (c.a, c.a_size, c.b, c.b_size, c.metric) not in registered]


def _exploratory_entry(study: Study, c: Comparison, loaded: dict[tuple[str, int, int], Any]) -> dict[str, Any]:
    """An exploratory comparison, or, when its pair cannot be compared (unequal budgets, no evaluation
    there), an entry that says so: never a reason to drop the registered ones."""
    try:
        return compare(study, c, loaded)
    except (UsageError, InputError) as exc:
        return {"name": c.name, "role": "exploratory", "metric": c.metric, "test": c.test, "margin": 0.0,
                "alpha": c.alpha, "anchor": "", "a": c.a, "a_size": c.a_size, "b": c.b, "b_size": c.b_size,
                "seeds": [], "per_seed": [], "mean": None, "lo": None, "hi": None, "p": None, "budget": None,
                "not_comparable": str(exc)}


def report_study(study: Study, *, reporter: Any = NULL_REPORTER) -> dict[str, Any]:
    """The pre-registered comparisons first (Holm over the primary ones), the anchors, the power for the
    margins, the tuning phase, the limited-data table, then everything else as exploratory; tables,
    plots, per-seed CSV and JSONL into `<dir>/report/`, written whole or not at all."""
    from prover_cli.report import load_run
    from prover_cli.stats import holm

    record = read_record(study)
    if record is None:
        raise InputError(f"study {study.name}: {study.dir / STUDY_JSON} not found: the study has not run",
                         hint=f"run `prover study run {study.path}` first")
    check_registration(study, record)
    if study.tune is not None and study.chosen is None:
        raise InputError(f"study {study.name}: the tuning phase has not chosen (no {study.dir / 'tune' / CHOSEN_JSON})",
                         hint=f"run `prover study run {study.path}` first")
    runs = planned_runs(study)
    unfinished = [r for r in runs if r["state"] != "finished"]
    if unfinished:
        first = unfinished[0]
        raise InputError(f"study {study.name}: {len(unfinished)} of {len(runs)} runs are not finished with this code "
                         f"and config (e.g. {first['dir']}: {first['why']})",
                         hint=f"run `prover study run {study.path}` first")
    fingerprint = prepare_test_set(study, runs, reporter)
    loaded = {(r["arm"], r["size"], r["seed"]): {**load_run(r["dir"]), "study_run": r} for r in runs}
    primary = [compare(study, c, loaded) for c in study.primary]
    secondary = [compare(study, c, loaded) for c in study.secondary]
    for entry, adjusted in zip(primary, holm([e["p"] for e in primary])):
        entry["p_holm"] = adjusted
        entry["verdict"] = _verdict(entry, adjusted, _comparator_anchor(study, entry, secondary, loaded))
    for entry in secondary:
        entry["verdict"] = _verdict(entry, entry["p"], None)
    extra = [_exploratory_entry(study, c, loaded) for c in exploratory(study)]
    power = [study_power(c, e, len(study.primary)) for c, e in zip(study.primary, primary)]
    tuned = tune_results(study, planned_tune_runs(study)) if study.tune is not None else None
    per_seed_rows = _per_seed_rows(runs, loaded, [*primary, *secondary, *extra])
    data_axis = limited_data(study, loaded)
    tables = [comparison_table(f"PRIMARY (pre-registered; Holm over {len(primary)}): {study.name}", primary,
                               holm_column=True),
              power_table(power, "power for the pre-registered margins, from this study as a pilot")]
    anchors = [e for e in secondary if e["anchor"]]
    others = [e for e in secondary if not e["anchor"]]
    if anchors:
        tables.append(comparison_table("ANCHORS (pre-registered secondary: each method against its base and its null "
                                       "arm; did it learn at all?)", anchors))
    if others:
        tables.append(comparison_table("secondary (pre-registered, not corrected for multiplicity)", others))
    if tuned is not None:
        tables.append(tune_table(study, tuned))
    if data_axis["rows"]:
        tables.append(data_axis)
    tables.append(comparison_table("EXPLORATORY (not pre-registered: p uncorrected, a lead for a new study, "
                                   "not a finding)", extra))
    tables.append(arms_table(study, loaded))
    strip = lambda entries: [{k: v for k, v in e.items() if k != "per_seed"} for e in entries]  # noqa: E731
    summary = {"study": study.name, "test_set": fingerprint, "registration_sha256": record["registration_sha256"],
               "primary": strip(primary), "secondary": strip(secondary), "exploratory": strip(extra), "power": power,
               "tune": tuned, "limited_data": data_axis}
    out = study.dir / "report"
    layout, plots = _write_report_dir(out, study, loaded, primary, secondary, per_seed_rows, summary, tables)
    return {"ok": True, "study": study.name, "headline": primary[0]["verdict"], "primary": strip(primary),
            "secondary": strip(secondary), "exploratory": strip(extra), "power": power, "test_set": fingerprint,
            "tune": tuned, "out": str(out), "plots": [str(out / p) for p in plots], "layout": layout,
            "per_seed_csv": str(out / "per_seed.csv"), "per_seed_jsonl": str(out / "per_seed.jsonl"), "tables": tables}


def _write_report_dir(out: Path, study: Study, loaded: dict[tuple[str, int, int], Any], primary: list[dict[str, Any]],
                      secondary: list[dict[str, Any]], per_seed_rows: list[dict[str, Any]], summary: dict[str, Any],
                      tables: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    """Every report file into a fresh temporary directory beside `out`, then renamed into place: a kill
    leaves the previous report whole (or none), never a mix of two."""
    import tempfile

    for leftover in out.parent.glob(f".{out.name}.*"):   # what a killed report left: never read
        shutil.rmtree(leftover, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)   # mkdtemp's 0700 would outlive the rename: a report is for reading
    try:
        (staging / "per_seed.jsonl").write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in per_seed_rows),
                                                encoding="utf-8")
        (staging / "per_seed.csv").write_text(_csv(per_seed_rows), encoding="utf-8")
        layout = plot_study(study, loaded, primary, secondary, staging)
        summary["figures"] = layout
        (staging / "study_report.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        (staging / "tables.md").write_text("\n".join(_markdown(t) for t in tables), encoding="utf-8")
        for path in staging.iterdir():
            with path.open("rb") as handle:
                os.fsync(handle.fileno())
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        if out.exists():
            os.replace(out, old)
        os.replace(staging, out)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return layout, sorted(p for p in layout["files"])


def _comparator_anchor(study: Study, entry: dict[str, Any], secondary: list[dict[str, Any]],
                       loaded: dict[tuple[str, int, int], Any]) -> dict[str, Any] | None:
    """For a non-inferiority primary a - b: b - base on the same metric (registered, else computed)."""
    if entry["test"] != "non-inferiority" or entry["b"] == BASE:
        return None
    found = next((e for e in secondary if e["anchor"] == "base" and e["a"] == entry["b"]
                  and e["a_size"] == entry["b_size"] and e["metric"] == entry["metric"]), None)
    return found or compare(study, Comparison(entry["b"], entry["b_size"], BASE, entry["b_size"], entry["metric"],
                                              role="secondary", anchor="base"), loaded)


def _verdict(entry: dict[str, Any], adjusted: float | None, anchor: dict[str, Any] | None) -> str:
    if adjusted is None:
        return f"{entry['name']}: no test (fewer than 2 seeds, or no spread between seeds)"
    shown = adjusted < entry["alpha"]
    p_text = f"{'Holm ' if entry['role'] == 'primary' else ''}p = {adjusted:.3g}, alpha {entry['alpha']:g}"
    if entry["test"] == "non-inferiority":
        beat = anchor is not None and anchor.get("lo") is not None and anchor["lo"] > 0
        if not beat:
            told = "-" if anchor is None or anchor.get("mean") is None else (
                f"{anchor['mean']:+.3f} ({_num(anchor['lo'], True)}..{_num(anchor['hi'], True)})")
            return (f"{entry['name']}: NO VERDICT: the comparator {entry['b']} did not beat its base "
                    f"({entry['b']} - base {told}), so non-inferiority to it says nothing ({p_text})")
        what = (f"non-inferior within {entry['margin']:g}" if shown else
                f"non-inferiority within {entry['margin']:g} NOT shown")
        what += f"; the comparator beat its base by {anchor['mean']:+.3f}"
    else:
        what = (f"differ, {'a' if entry['mean'] > 0 else 'b'} ahead" if shown else "no difference shown")
    return f"{entry['name']}: {what} ({p_text})"


def limited_data(study: Study, loaded: dict[tuple[str, int, int], Any]) -> dict[str, Any]:
    """The limited-data axis: each arm's held-out rate (mean over seeds) at every budget all its runs
    were evaluated at, per training-set size, with the distinct training problems that size is."""
    from prover_cli.tasks.problems import content_key, train_problems

    if len(study.train_sizes) < 2:
        return {"title": "", "columns": [], "rows": [], "points": []}
    budgets = sorted({b for run in loaded.values() for b in _eval_budgets(run)})
    points, rows = [], []
    for arm in study.arms:
        for size in study.train_sizes:
            runs = [loaded[(arm, size, s)] for s in study.seeds]
            distinct = sum(len({content_key(p) for p in train_problems(r["study_run"]["config"])}) for r in runs) / len(runs)
            for metric, key in METRICS.items():
                cells = []
                for budget in budgets:
                    values = [next((e[key] for e in r["records"] if key in e and e["samples/total"] == budget), None)
                              for r in runs]
                    value = None if any(v is None for v in values) else sum(values) / len(values)
                    cells.append(_num(value))
                    if value is not None:
                        points.append({"arm": arm, "size": size, "distinct_training_problems": distinct,
                                       "metric": metric, "samples": budget, "rate": value})
                rows.append([arm, size or "all", f"{distinct:,.0f}", metric, *cells])
    return {"title": "limited data: held-out rate (mean over seeds) by training-set size x budget; distinct training "
                     "problems by content", "columns": ["arm", "train size", "distinct problems", "metric",
                                                        *[f"{b:,.0f} samples" for b in budgets]],
            "rows": rows, "points": points}


def _eval_budgets(run: dict[str, Any]) -> list[float]:
    from prover_cli.compare import evaluation_budgets

    return evaluation_budgets(run, METRICS["greedy"])


def _per_seed_rows(runs: list[dict[str, Any]], loaded: dict[tuple[str, int, int], Any],
                   entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from prover_cli.compare import run_budget

    rows = []
    for run in runs:
        records = loaded[(run["arm"], run["size"], run["seed"])]["records"]
        row = {"kind": "run", "arm": run["arm"], "method": run["method"], "train_size": run["size"],
               "seed": run["seed"], "dir": str(run["dir"]),
               "samples": run_budget(loaded[(run["arm"], run["size"], run["seed"])])}
        for metric, key in METRICS.items():
            evals = [r for r in records if key in r]
            row[f"base_{metric}"] = evals[0][key] if evals and evals[0]["iteration"] == 0 else None
            row[f"final_{metric}"] = evals[-1][key] if evals else None
        rows.append(row)
    for entry in entries:
        for p in entry["per_seed"]:
            rows.append({"kind": "difference", **{k: v for k, v in p.items() if k != "problem_differences"}})
    return rows


def _csv(rows: list[dict[str, Any]]) -> str:
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def _num(value: float | None, signed: bool = False, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def _budget_text(budget: dict[str, Any] | None) -> str:
    if not budget:
        return "-"
    a, b = budget["a"], budget["b"]
    if b["samples"] == 0 and b["tokens"] == 0:   # an anchor: the base trained nothing
        return f"{a['samples']:,.0f} samples; {a['tokens']:,.0f} tokens; {a['seconds']:,.1f} s"
    return (f"{a['samples']:,.0f} / {b['samples']:,.0f} samples; {a['tokens']:,.0f} / {b['tokens']:,.0f} tokens; "
            f"{a['seconds']:,.1f} / {b['seconds']:,.1f} s")


def comparison_table(title: str, entries: list[dict[str, Any]], holm_column: bool = False) -> dict[str, Any]:
    rows = []
    for e in entries:
        test = e["test"] + (f" (margin {e['margin']:g})" if e["test"] == "non-inferiority" else "")
        if e.get("not_comparable"):
            row = [e["name"], 0, "NOT COMPARABLE", test, e["not_comparable"], "-"]
        else:
            row = [e["name"], len(e["seeds"]), f"{_num(e['mean'], True)} ({_num(e['lo'], True)}..{_num(e['hi'], True)})",
                   test, "-" if e.get("p") is None else f"{e['p']:.3g}", _budget_text(e.get("budget"))]
        if holm_column:
            row += ["-" if e.get("p_holm") is None else f"{e['p_holm']:.3g}", e["verdict"].split(": ", 1)[1]]
        rows.append(row)
    columns = ["comparison", "seeds", "mean a - b (95% t interval)", "test", "p (paired t)",
               "budget a / b (samples; tokens; accelerator-s)"]
    return {"title": title, "columns": columns + (["p (Holm)", "verdict"] if holm_column else []), "rows": rows}


def arms_table(study: Study, loaded: dict[tuple[str, int, int], Any]) -> dict[str, Any]:
    from prover_cli.stats import mean_interval

    rows = []
    for arm in study.arms:
        for size in study.train_sizes:
            cells = []
            for key in METRICS.values():
                finals = [[r for r in loaded[(arm, size, s)]["records"] if key in r][-1][key] for s in study.seeds]
                mean, low, high = mean_interval(finals)
                cells.append(f"{mean:.3f} ({_num(low)}..{_num(high)})")
            rows.append([arm, size or "all", len(study.seeds), *cells])
    return {"title": "held-out final, mean over seeds (95% t interval): every arm and training-set size",
            "columns": ["arm", "train size", "seeds", "sampled", "greedy"], "rows": rows}


def _markdown(table: dict[str, Any]) -> str:
    lines = [f"### {table['title']}", "", "| " + " | ".join(table["columns"]) + " |",
             "|" + "---|" * len(table["columns"])]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in table["rows"]]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# Power: from this study (report) or from a pilot (plan)
# --------------------------------------------------------------------------------------------

def power_of(c: Comparison, problem_differences: list[list[float]], label: str, family: int = 1) -> dict[str, Any]:
    """Seeds needed at this test-set size, and test problems needed at this many seeds, for the margin,
    at alpha / `family`: Holm's first step over `family` primary comparisons (the conservative size).
    When the pilot's training variance was clipped to 0 (its seeds agree more than evaluation noise
    alone predicts) the seeds and problems needed are lower bounds and the power an upper bound."""
    from prover_cli.stats import power_at, problems_needed, seeds_needed, variance_components

    entry: dict[str, Any] = {"comparison": c.name, "from": label, "margin": c.margin, "alpha": c.alpha / family,
                             "power_wanted": c.power, "test": c.test}
    if c.margin <= 0:
        return {**entry, "note": "no margin pre-registered: nothing to size"}
    if len(problem_differences) < 2:
        return {**entry, "note": "the pilot has fewer than 2 paired seeds: training luck cannot be estimated; "
                                 f"run a pilot of >= {MIN_PILOT_SEEDS} seeds"}
    parts = variance_components(problem_differences)
    k, n = parts["seeds"], parts["problems"]
    if parts["var_seed_difference"] == 0 and parts["var_eval_per_problem"] == 0:
        return {**entry, **parts, "note": "no variation at all in the pilot (every difference the same): it cannot "
                                          "size a study; pilot on a setting where the runs solve something"}
    alpha = c.alpha / family
    options = dict(alpha=alpha, power=c.power, sided=c.sided)
    notes = []
    if parts["var_train_clipped"]:
        notes.append("LOWER BOUND: the pilot's training variance was clipped to 0, so seeds and problems needed are "
                     "lower bounds and power now an upper bound")
    if k < MIN_PILOT_SEEDS:
        notes.append(f"a pilot of {k} seeds: run >= {MIN_PILOT_SEEDS} pilot seeds before sizing on it")
    return {**entry, **parts, "bound": "lower" if parts["var_train_clipped"] else None, "pilot_notes": notes,
            "seeds_needed": seeds_needed(parts["var_train"], parts["var_eval_per_problem"], n, c.margin, **options),
            "problems_needed_at_these_seeds": problems_needed(parts["var_train"], parts["var_eval_per_problem"], k,
                                                              c.margin, **options),
            "power_at_these_seeds": power_at(parts["var_train"], parts["var_eval_per_problem"], n, k, c.margin,
                                             alpha=alpha, sided=c.sided)}


def study_power(c: Comparison, entry: dict[str, Any], family: int = 1) -> dict[str, Any]:
    return power_of(c, [p["problem_differences"] for p in entry["per_seed"]], "this study", family)


def pilot_power(study: Study, pilot: Sequence[str | Path]) -> list[dict[str, Any]]:
    """Power of each primary comparison from a pilot: a finished study directory (its study.toml),
    or run directories (paired by seed: the first ES arm against the first GRPO arm)."""
    from prover_cli.report import group_arms, load_run

    paths = [Path(p) for p in pilot]
    if len(paths) == 1 and (paths[0] / "study.toml").is_file():
        pilot_study = load_study(paths[0] / "study.toml")
        runs = planned_runs(pilot_study)
        loaded = {(r["arm"], r["size"], r["seed"]): load_run(r["dir"]) for r in runs if r["state"] == "finished"}
        out = []
        for c in study.primary:
            same = next((p for p in pilot_study.primary if p.metric == c.metric), pilot_study.primary[0])
            entry = compare(pilot_study, same, loaded)
            out.append(power_of(c, [p["problem_differences"] for p in entry["per_seed"]], str(paths[0]),
                                len(study.primary)))
        return out
    runs = [load_run(p) for p in paths]
    arms = [a for a in group_arms(runs) if not a["null"]]
    es = next((a for a in arms if a["method"] == "es"), None)
    grpo = next((a for a in arms if a["method"] == "grpo"), None)
    if es is None or grpo is None:
        raise InputError("--pilot: run directories need at least one ES and one GRPO run (paired by run.seed)")
    fake = Study(Path("<pilot>"), "pilot", Path("."), sorted({r["seed"] for r in runs}), [0], 0, [],
                 {"es": Arm("es", "es", Path("."), []), "grpo": Arm("grpo", "grpo", Path("."), [])}, [])
    loaded = {("es", 0, r["seed"]): r for r in es["runs"]} | {("grpo", 0, r["seed"]): r for r in grpo["runs"]}
    out = []
    for c in study.primary:
        entry = compare(fake, Comparison("es", 0, "grpo", 0, c.metric), loaded)
        out.append(power_of(c, [p["problem_differences"] for p in entry["per_seed"]], "run directories",
                            len(study.primary)))
    return out


def power_table(power: list[dict[str, Any]], title: str) -> dict[str, Any]:
    rows = []
    for p in power:
        if "note" in p:
            rows.append([p["comparison"], p["margin"], "-", "-", "-", "-", "-", p["note"]])
            continue
        lower = p.get("bound") == "lower"
        seeds = p["seeds_needed"] or "> 10,000"
        problems = p["problems_needed_at_these_seeds"] or "none: training luck alone needs more seeds"
        rows.append([p["comparison"], p["margin"], f"{p['seeds']} x {p['problems']}",
                     f"{math.sqrt(p['var_train']):.4f}{' (clipped to 0)' if lower else ''} / "
                     f"{math.sqrt(p['var_eval_per_problem']):.3f}",
                     f"{'<= ' if lower else ''}{p['power_at_these_seeds']:.2f}{' (upper bound)' if lower else ''}",
                     f"{'>= ' if lower else ''}{seeds}{' (lower bound)' if lower else ''}",
                     f"{'>= ' if lower and isinstance(problems, int) else ''}{problems}"
                     f"{' (lower bound)' if lower and isinstance(problems, int) else ''}",
                     "; ".join(p.get("pilot_notes", [])) or "-"])
    return {"title": title + " (docs/study.md: the formula)",
            "columns": ["comparison", "margin", "seeds x problems", "sd training / sd per problem",
                        "power now", "seeds needed", "problems needed at these seeds", "pilot"], "rows": rows}


# --------------------------------------------------------------------------------------------
# Plots: held-out curves on the samples, tokens and accelerator-seconds axes; the paired difference
# --------------------------------------------------------------------------------------------

def _curve(runs: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """`key` at each sample budget every run has it at: mean and 95% t band over seeds, with the mean
    tokens and accelerator-seconds there (the other axes)."""
    from prover_cli.stats import mean_interval

    per_run = [{r["samples/total"]: r for r in run["records"] if key in r} for run in runs]
    points = []
    for budget in sorted(set.intersection(*(set(p) for p in per_run))):
        records = [p[budget] for p in per_run]
        mean, low, high = mean_interval([r[key] for r in records])
        points.append({"samples/total": budget, "mean": mean, "lo": low, "hi": high,
                       "tokens/total": sum(r.get("tokens/total", 0) for r in records) / len(records),
                       "time/elapsed_s": sum(r.get("time/elapsed_s", 0.0) for r in records) / len(records)})
    return points


def difference_curve(study: Study, c: Comparison, loaded: dict[tuple[str, int, int], Any]) -> list[dict[str, Any]]:
    """The paired difference a - b at every budget both sides were evaluated at in every seed (each
    side's evaluation by the one rule, compare.final_at): mean over seeds and 95% t band."""
    from prover_cli.compare import evaluation_budgets, per_problem
    from prover_cli.stats import mean_interval, paired_difference

    key = METRICS[c.metric]
    pairs = [_pair_of(study, c, loaded, s) for s in study.seeds]
    pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
    if not pairs or c.b == BASE:
        return []
    budgets = sorted(set.intersection(*(set(evaluation_budgets(x, key)) & set(evaluation_budgets(y, key))
                                        for x, y in pairs)))
    points = []
    for budget in budgets:
        values = []
        for x, y in pairs:
            fa, fb = evaluations_at(c, x, y, key, budget)
            pa, pb = per_problem(fa, key), per_problem(fb, key)
            if pa is None or pb is None:
                return []
            diffs = paired_difference(pa, pb)
            values.append(sum(diffs) / len(diffs))
        mean, low, high = mean_interval(values)
        points.append({"samples/total": budget, "mean": mean, "lo": low, "hi": high})
    return points


def plot_study(study: Study, loaded: dict[tuple[str, int, int], Any], primary: list[dict[str, Any]],
               secondary: list[dict[str, Any]], out: Path) -> dict[str, Any]:
    """`curves_samples.png` (with the paired-difference panels), `curves_tokens.png`, `curves_seconds.png`
    and, with several training sizes, `limited_data.png`; returns the layout (points per curve, panels)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layout: dict[str, Any] = {"files": [], "curves": {}, "difference_panels": {}, "min_points": None}
    drawn = [Comparison(e["a"], e["a_size"], e["b"], e["b_size"], e["metric"], e["test"], e["margin"])
             for e in (*primary, *secondary) if e["b"] != BASE and e.get("anchor") != "base"]
    for axis_name, (x_key, x_label) in AXES.items():
        with_diff = axis_name == "samples"
        figure, panels = plt.subplots(2 if with_diff else 1, len(METRICS), figsize=(6.5 * len(METRICS),
                                      9 if with_diff else 4.6), squeeze=False, layout="constrained")
        name = f"curves_{axis_name}.png"
        counts: dict[str, int] = {}
        for panel, (metric, key) in zip(panels[0], METRICS.items()):
            bases = []
            for index, arm in enumerate(study.arms.values()):
                for size_index, size in enumerate(study.train_sizes):
                    runs = [loaded[(arm.name, size, s)] for s in study.seeds]
                    points = _curve(runs, key)
                    bases += [p["mean"] for p in points if p["samples/total"] == 0]
                    trained = [p for p in points if p["samples/total"] > 0]
                    label = f"{arm.name}, n={size or 'all'}"
                    counts[f"{label} ({metric})"] = len(trained)
                    xs = [p[x_key] for p in points]
                    style = "--" if arm.null else ["-", ":", "-."][size_index % 3]
                    line, = panel.plot(xs, [p["mean"] for p in points], style, marker="o", markersize=3,
                                       color=f"C{index % 10}", label=label + (" (null)" if arm.null else ""))
                    if not arm.null:
                        panel.fill_between(xs, [p["lo"] if p["lo"] is not None else p["mean"] for p in points],
                                           [p["hi"] if p["hi"] is not None else p["mean"] for p in points],
                                           alpha=0.12, color=line.get_color(), linewidth=0)
            if bases:
                panel.plot([0], [sum(bases) / len(bases)], marker="*", markersize=14, color="black",
                           linestyle="none", label="base (before training)")
            panel.set_title(f"held-out {metric} rate vs {x_label}", fontsize=9)
            panel.set_xlabel(x_label)
            panel.set_ylabel(f"{metric} rate, mean of {len(study.seeds)} seeds (95% t band)")
            panel.set_ylim(bottom=0)
            panel.grid(alpha=0.3)
            panel.legend(fontsize=7)
        if with_diff:
            for panel, metric in zip(panels[1], METRICS):
                names = []
                for index, c in enumerate(d for d in drawn if d.metric == metric):
                    points = difference_curve(study, c, loaded)
                    if not points:
                        continue
                    xs = [p["samples/total"] for p in points]
                    line, = panel.plot(xs, [p["mean"] for p in points], marker="o", markersize=3, color=f"C{index % 10}",
                                       label=c.name)
                    panel.fill_between(xs, [p["lo"] if p["lo"] is not None else p["mean"] for p in points],
                                       [p["hi"] if p["hi"] is not None else p["mean"] for p in points],
                                       alpha=0.15, color=line.get_color(), linewidth=0)
                    if c.test == "non-inferiority":
                        panel.axhline(-c.margin, color=line.get_color(), linestyle=":", linewidth=1,
                                      label=f"-margin {c.margin:g} ({c.a} - {c.b})")
                    names.append(c.name)
                panel.axhline(0, color="black", linewidth=0.8)
                panel.set_title(f"paired difference a - b, {metric} (same problems, same seed; 95% t band over seeds)",
                                fontsize=9)
                panel.set_xlabel(x_label)
                panel.set_ylabel(f"a - b, held-out {metric} rate")
                panel.grid(alpha=0.3)
                if names:
                    panel.legend(fontsize=7)
                layout["difference_panels"][metric] = names
        figure.suptitle(f"study {study.name}: one test set for every arm, size and seed; base and null arms drawn")
        figure.savefig(out / name, dpi=100)
        plt.close(figure)
        layout["files"].append(name)
        layout["curves"][name] = counts
    layout["min_points"] = min(layout["curves"]["curves_samples.png"].values(), default=0)
    if len(study.train_sizes) > 1:
        layout["files"].append(_plot_limited_data(study, loaded, out))
    return layout


def _plot_limited_data(study: Study, loaded: dict[tuple[str, int, int], Any], out: Path) -> str:
    import matplotlib.pyplot as plt

    points = limited_data(study, loaded)["points"]
    figure, panels = plt.subplots(1, len(METRICS), figsize=(6.5 * len(METRICS), 4.6), squeeze=False, layout="constrained")
    budgets = sorted({p["samples"] for p in points if p["samples"] > 0})
    for panel, metric in zip(panels[0], METRICS):
        for index, arm in enumerate(study.arms):
            for j, budget in enumerate(budgets):
                chosen = sorted((p for p in points if p["arm"] == arm and p["metric"] == metric and p["samples"] == budget),
                                key=lambda p: p["distinct_training_problems"])
                if chosen:
                    panel.plot([p["distinct_training_problems"] for p in chosen], [p["rate"] for p in chosen],
                               marker="o", color=f"C{index % 10}", alpha=0.3 + 0.7 * (j + 1) / len(budgets),
                               linestyle="--" if study.arms[arm].null else "-",
                               label=f"{arm} @ {budget:,.0f} samples" if j in (0, len(budgets) - 1) else None)
        panel.set_xscale("log")
        panel.set_xlabel("distinct training problems (by content)")
        panel.set_ylabel(f"held-out {metric} rate, mean over seeds")
        panel.set_title(f"{metric}: held-out rate vs training problems, one line per arm and budget", fontsize=9)
        panel.grid(alpha=0.3)
        panel.legend(fontsize=7)
    figure.savefig(out / "limited_data.png", dpi=100)
    plt.close(figure)
    return "limited_data.png"
