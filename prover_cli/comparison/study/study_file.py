"""Reading and validating a study file (`load_study`): every error names the file and the key; null
arms and anchors marked, the frozen tuning choice read back, and the design checked (matched budgets,
one evaluation schedule) before anything runs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

from prover_cli.comparison.compare import unequal
from prover_cli.comparison.study.design import (
    Arm, BASE, CHOSEN_JSON, Comparison, MAX_FILE_BYTES, MAX_RUNS, MAX_SEEDS, METHODS, METRICS, STUDY_KEYS, Study,
    TESTS, Tune, resolve_study)
from prover_cli.comparison.study.run_configs import run_config, same_evaluation, samples_of, tune_config
from prover_cli.config import SEED_MAX, read_toml
from prover_cli.errors import ConfigError, InputError
from prover_cli.shipped import resolve_config


_TOP = {"study": "the study's own settings", "arms": "one table per arm", "primary": "pre-registered comparisons",
        "secondary": "secondary comparisons", "tune": "the tuning phase"}
_STUDY_KEYS = ("name", "config", "dir", "seeds", "train_sizes", "test_seed", "set", "allow_unequal_budgets",
               "anchors", "min_test_problems")
_ARM_KEYS = ("method", "config", "set")
_COMPARISON_KEYS = ("a", "b", "size", "a_size", "b_size", "metric", "test", "margin", "alpha", "power")
_TUNE_KEYS = ("seeds", "dev_problems", "train_size", "metric", "set", *METHODS)


def load_study(path: str | Path) -> Study:
    """Read and validate a study file; every error names the file and the key."""
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
    study.chosen = frozen_choice(study)
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
        return Comparison(*sides["a"], *sides["b"], metric, test, role=role, margin=numbers["margin"],
                          alpha=numbers["alpha"], power=numbers["power"])

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
            listed: list[list[str]] = []
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
    nulls: dict[str, str] = {}
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


def _check_design(study: Study) -> None:
    """What would make the comparison unfair or unpaired, refused before anything runs."""
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
            for key, value in same_evaluation(config).items():
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


def frozen_choice(study: Study) -> dict[str, int] | None:
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
