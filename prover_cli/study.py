"""`prover study`: the ES-versus-GRPO question as one pre-registered design, arms x sizes x seeds.

    prover study plan demo                       # every run, its cost, the power (prover_cli/studies/demo.toml)
    prover study run demo                        # runs what is missing; a second run reruns nothing
    prover study report demo                     # the pre-registered comparison first (Holm), then exploratory

A study file (TOML, docs/study.md gives every key) names the arms (a method, a base config and
`--set`-style overrides), the seeds, the training-set sizes (`data.train_size`: the limited-data
axis) and the comparisons, decided before any run: the primary ones (Holm-corrected together) and
the secondary ones. Every run of a study reads ONE problems file, drawn once from `study.test_seed`
into the study directory, so every seed, arm and size is evaluated on the same held-out problems
(the test set; its content fingerprint is recorded in `study.json` and checked before every run
and report). A seed changes the training subset, the noise and the sampling, never the test set.

Runs live in `<study.dir>/runs/<arm>/n<size>/seed<seed>/` (n0 = every training problem). A run is
reused only when it finished (`study-run.json`, written after its last iteration) and both its
resolved config (`config.toml`) and the code that made it (`code.json`: package version, git
commit, source hash; prover_cli/metrics.py) equal what this process would run now; any other
run directory is trained again from the start, so an interrupted study resumes run by run.

`report` pairs runs by seed (same test set, so per-problem differences pair), at the largest
common training budget of each pair (refused when more than 5 % apart, as `prover report` does);
the per-seed differences give a t interval and a paired t p-value (two-sided, or the one-sided
non-inferiority test against `margin`). Everything not pre-registered (every other arm pair at
each size, each arm's small-minus-large data contrast) is labelled exploratory, p uncorrected.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
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
STUDY_JSON = "study.json"      # the study directory's record: the test set's fingerprint, the study file
# Keys the study sets for every run; an arm or study override of one would break the design.
STUDY_KEYS = ("run.seed", "run.dir", "data.train_size", "data.problems")


# --------------------------------------------------------------------------------------------
# The study file
# --------------------------------------------------------------------------------------------

@dataclass
class Arm:
    name: str
    method: str
    config: Path
    overrides: list[str]


@dataclass
class Comparison:
    """a - b of one held-out metric, paired by seed; `role` primary, secondary or exploratory."""

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

    @property
    def name(self) -> str:
        return f"{self.a}@n{self.a_size} - {self.b}@n{self.b_size} ({self.metric})"

    @property
    def sided(self) -> int:
        return 1 if self.test == "non-inferiority" else 2


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


def resolve_study(path: str | Path) -> Path:
    """The study file: `path` when it exists, else the shipped `studies/NAME.toml` it names."""
    given = Path(path)
    if given.exists():
        return given
    name = given.name[:-len(".toml")] if given.name.endswith(".toml") else given.name
    shipped = {p.stem: p for p in sorted(STUDIES_DIR.glob("*.toml"))}
    if len(given.parts) <= 2 and (len(given.parts) == 1 or given.parts[0] == "studies") and name in shipped:
        return shipped[name]
    raise ConfigError(f"{given}: study file not found",
                      hint=f"pass a study TOML, or a shipped study by name ({', '.join(shipped) or 'none'})")


_TOP = {"study": "the study's own settings", "arms": "one table per arm", "primary": "pre-registered comparisons",
        "secondary": "secondary comparisons"}
_STUDY_KEYS = ("name", "config", "dir", "seeds", "train_sizes", "test_seed", "set", "allow_unequal_budgets")
_ARM_KEYS = ("method", "config", "set")
_COMPARISON_KEYS = ("a", "b", "size", "a_size", "b_size", "metric", "test", "margin", "alpha", "power")


def load_study(path: str | Path) -> Study:
    """Read and validate a study file; every error names the file and the key."""
    from prover_cli.config import SEED_MAX, read_toml

    path = resolve_study(path)
    raw = read_toml(path, what="study file")
    read = _StudyReader(path)
    read.only(raw, tuple(_TOP), "")
    s = read.only(raw.get("study", {}), _STUDY_KEYS, "study")
    name = read.text("study.name", s.get("name", path.stem))
    seeds = read.ints("study.seeds", s.get("seeds"), 0, SEED_MAX)
    sizes = read.ints("study.train_sizes", s.get("train_sizes", [0]), 0)
    test_seed = s.get("test_seed", 0)
    if type(test_seed) is not int or not 0 <= test_seed <= SEED_MAX:
        raise read.bad("study.test_seed", f"must be an integer in 0..{SEED_MAX}, got {test_seed!r}")
    allow = s.get("allow_unequal_budgets", False)
    if not isinstance(allow, bool):
        raise read.bad("study.allow_unequal_budgets", f"must be true or false, got {allow!r}")
    arms_raw = raw.get("arms")
    if not isinstance(arms_raw, dict) or not arms_raw:
        raise read.bad("arms", "at least one arm is needed: [arms.NAME] with method = \"es\" or \"grpo\"")
    shared = read.overrides("study.set", s.get("set", []))
    arms = {arm_name: read.arm(arm_name, table, s.get("config"), shared) for arm_name, table in arms_raw.items()}
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
    study = Study(path, name, Path(s.get("dir", f"runs/study-{name}")), seeds, sizes, test_seed,
                  shared, arms, comparisons["primary"], comparisons["secondary"], allow)
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

    def ints(self, key: str, value: Any, low: int, high: int | None = None) -> list[int]:
        if not isinstance(value, list) or not value or any(type(v) is not int for v in value):
            raise self.bad(key, f"must be a non-empty list of integers, got {value!r}")
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
        if "@" in arm_name or not arm_name.replace("-", "").replace("_", "").isalnum():
            raise self.bad(where, "an arm name is letters, digits, - and _ only")
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
        return Comparison(*sides["a"], *sides["b"], metric, test, role=role, **numbers)

    def side(self, table: dict[str, Any], where: str, side: str, arms: dict[str, Arm], sizes: list[int]) -> tuple[str, int]:
        arm = self.text(f"{where}.{side}", table.get(side))
        if arm not in arms:
            raise self.bad(f"{where}.{side}", f"unknown arm {arm!r} (arms: {', '.join(arms)})")
        size = table.get(f"{side}_size", table.get("size", sizes[0] if len(sizes) == 1 else None))
        if size is None:
            raise self.bad(f"{where}.size", f"which training-set size? one of {sizes} (or a_size and b_size)")
        if size not in sizes:
            raise self.bad(f"{where}.{side}_size" if f"{side}_size" in table else f"{where}.size",
                           f"{size!r} is not one of study.train_sizes {sizes}")
        return arm, size


def run_config(study: Study, arm: Arm, size: int, seed: int) -> Any:
    """The resolved config of one run: the arm's base config, the study's and arm's overrides, then
    the keys the study sets (seed, directory, training-set size, the one problems file)."""
    from prover_cli.config import load_config

    sets = [*arm.overrides, f"run.seed={seed}", f"data.train_size={size}",
            f"data.problems={json.dumps(str(study.dir / 'problems.jsonl'))}",
            f"run.dir={json.dumps(str(run_dir(study, arm.name, size, seed)))}"]
    try:
        return load_config(arm.config, sets)
    except ConfigError as exc:
        raise ConfigError(f"{study.path}: arms.{arm.name}: {exc}", hint=exc.hint) from None


def run_dir(study: Study, arm: str, size: int, seed: int) -> Path:
    return study.dir / "runs" / arm / f"n{size}" / f"seed{seed}"


def samples_of(config: Any, method: str) -> int:
    """The run's training budget in samples (what `prover report` compares; held-out not counted)."""
    from prover_cli.demo import sample_budgets

    return sample_budgets(config)[method]


def _check_design(study: Study) -> None:
    """What would make the comparison unfair or unpaired, refused before anything runs."""
    from prover_cli.report import unequal

    first: dict[str, Any] = {}
    budgets: dict[tuple[str, int], int] = {}
    for arm in study.arms.values():
        for size in study.train_sizes:
            config = run_config(study, arm, size, study.seeds[0])
            where = f"{study.path}: arms.{arm.name}"
            if not config.run.eval_every:
                raise ConfigError(f"{where}: run.eval_every = 0: a study compares held-out evaluations; set it > 0")
            # Everything that decides the test set and how it is scored must be the same in every arm.
            same = {"data.task": config.data.task, "data.valid_split": config.data.valid_split,
                    "data.train_split": config.data.train_split, "run.eval_problems": config.run.eval_problems,
                    "run.eval_problems_seed": getattr(config.run, "eval_problems_seed", None),
                    "run.eval_n": config.run.eval_n, "run.eval_temperature": config.run.eval_temperature,
                    "generate.max_tokens": config.generate.max_tokens, "model.name": config.model.name}
            for key, value in same.items():
                seen = first.setdefault(key, (arm.name, value))
                if seen[1] != value:
                    raise ConfigError(f"{where}: {key} = {value!r} but arm {seen[0]} has {seen[1]!r}: every arm must "
                                      "be evaluated on the same test set the same way")
            budgets[(arm.name, size)] = samples_of(config, arm.method)
    if study.allow_unequal_budgets:
        return
    for c in (*study.primary, *study.secondary):
        a, b = budgets[(c.a, c.a_size)], budgets[(c.b, c.b_size)]
        if unequal(a, b):
            raise ConfigError(f"{study.path}: {c.role} {c.name}: unequal budgets, {a:,} against {b:,} training "
                              "samples (more than 5% apart): the difference would mix budget with method",
                              hint="match the arms' samples (es iterations x population x problems x samples; grpo "
                                   "steps x batch), or set study.allow_unequal_budgets = true (the report says so)")


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
                runs.append({"arm": arm.name, "method": arm.method, "size": size, "seed": seed,
                             "dir": run_dir(study, arm.name, size, seed), "config": config, "state": state,
                             "why": why, "samples": samples_of(config, arm.method)})
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
               if stored.get(section, {}).get(key) != current[section][key]]
    if changed:
        return "stale", f"its config.toml differs: {', '.join(changed[:4])}{' ...' if len(changed) > 4 else ''}"
    return "finished", ""


# --------------------------------------------------------------------------------------------
# The test set: one problems file, its held-out split fingerprinted by content
# --------------------------------------------------------------------------------------------

def test_set(config: Any) -> dict[str, Any]:
    """The held-out problems a run is scored on, fingerprinted by content (every field but the split)."""
    from prover_cli.problems import heldout_problems

    problems = heldout_problems(config)
    rows = sorted(json.dumps({k: v for k, v in p.items() if k != "split"}, sort_keys=True) for p in problems)
    contents = {json.dumps({k: v for k, v in p.items() if k not in ("split", "id", "name")}, sort_keys=True)
                for p in problems}
    return {"problems": len(problems), "distinct_by_content": len(contents),
            "sha256": hashlib.sha256("\n".join(rows).encode("utf-8")).hexdigest()}


def prepare_test_set(study: Study, runs: list[dict[str, Any]], reporter: Any = NULL_REPORTER) -> dict[str, Any]:
    """Write the study's problems file once (from `study.test_seed`), record its test set, and check it."""
    from prover_cli.data import prepare_data

    problems_path = study.dir / "problems.jsonl"
    record_path = study.dir / STUDY_JSON
    first = runs[0]["config"]
    if not problems_path.exists():
        from prover_cli.config import load_config

        arm = study.arms[runs[0]["arm"]]
        config = load_config(arm.config, [*arm.overrides, f"run.seed={study.test_seed}",
                                          f"data.problems={json.dumps(str(problems_path))}",
                                          f"run.dir={json.dumps(str(study.dir))}"])
        prepare_data(config, reporter=reporter)
        reporter.log(f"{problems_path}: the study's one problems file (run.seed = {study.test_seed})")
    fingerprint = test_set(first)
    if record_path.exists():
        recorded = json.loads(record_path.read_text(encoding="utf-8")).get("test_set")
        if recorded != fingerprint:
            raise InputError(f"{problems_path}: the test set changed since the study started ({recorded} -> "
                             f"{fingerprint}); its runs are no longer comparable",
                             hint="restore the file, or start the study in a new study.dir")
    else:
        from prover_cli.jsonl import write_text_atomic

        write_text_atomic(record_path, json.dumps({"study": study.name, "test_set": fingerprint,
                                                   "study_file": str(study.path)}, indent=2) + "\n")
        write_text_atomic(study.dir / "study.toml", study.path.read_text(encoding="utf-8"))
    if fingerprint["distinct_by_content"] < fingerprint["problems"]:
        getattr(reporter, "warn", reporter.log)(
            f"{problems_path}: the test set has {fingerprint['problems']} held-out rows but "
            f"{fingerprint['distinct_by_content']} distinct problems by content; duplicates narrow every interval")
    return fingerprint


# --------------------------------------------------------------------------------------------
# plan
# --------------------------------------------------------------------------------------------

def plan_study(study: Study, *, backend: str = "local", pilot: Sequence[str | Path] = (),
               reporter: Any = NULL_REPORTER) -> dict[str, Any]:
    """Every run with its state and cost, the totals, and (with a pilot) the power of each primary comparison."""
    from prover_cli.on_modal.plan import plan as train_plan

    runs = planned_runs(study)
    rows, total_samples, total_usd = [], 0, 0.0
    listed = []
    for run in runs:
        command = f"train_{run['method']}"
        cost = train_plan(run["config"], command=command, backend=backend)
        usd = cost.get("est_usd_total")
        total_samples += run["samples"]
        total_usd += usd or 0.0
        listed.append({"arm": run["arm"], "method": run["method"], "train_size": run["size"], "seed": run["seed"],
                       "dir": str(run["dir"]), "state": run["state"], "why": run["why"], "samples": run["samples"],
                       "heldout_evaluations": cost.get("heldout_evaluations"), **({"est_usd": usd} if usd is not None else {})})
        rows.append([run["arm"], run["size"] or "all", run["seed"], str(run["dir"]), run["state"], f"{run['samples']:,}",
                     *([f"{usd:.2f}"] if backend == "modal" else [cost.get("heldout_evaluations", 0)])])
    todo = [r for r in listed if r["state"] != "finished"]
    columns = ["arm", "train size", "seed", "run dir", "state", "training samples",
               "est USD" if backend == "modal" else "held-out evaluations"]
    tables = [{"title": f"study {study.name}: {len(runs)} runs ({len(study.arms)} arms x {len(study.train_sizes)} sizes x "
                        f"{len(study.seeds)} seeds), {len(todo)} to run, on {backend}", "columns": columns, "rows": rows},
              comparisons_table(study)]
    result: dict[str, Any] = {"ok": True, "study": study.name, "study_file": str(study.path), "dir": str(study.dir),
                              "backend": backend, "runs_total": len(runs), "runs_to_run": len(todo),
                              "samples_total": total_samples, "runs": listed}
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
    result["tables"] = tables
    return result


def comparisons_table(study: Study) -> dict[str, Any]:
    rows = [[c.role, c.name, c.test + (f", margin {c.margin:g}" if c.margin else ""), c.alpha, c.power]
            for c in (*study.primary, *study.secondary)]
    return {"title": f"pre-registered comparisons (primary: Holm over {len(study.primary)})",
            "columns": ["role", "comparison", "test", "alpha", "power"], "rows": rows}


# --------------------------------------------------------------------------------------------
# run
# --------------------------------------------------------------------------------------------

def run_study(study: Study, *, backend: str = "local", reporter: Any = NULL_REPORTER) -> dict[str, Any]:
    """Train every run that is not finished with this code and config; reuse the rest."""
    runs = planned_runs(study)
    fingerprint = prepare_test_set(study, runs, reporter)
    todo = [run for run in runs if run["state"] != "finished"]
    from prover_cli.problems import train_problems

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
            reporter.log(f"study {study.name}: run {i}/{len(todo)}: {run['arm']} n{run['size']} seed {run['seed']}")
            backends.run("local", f"train_{run['method']}", run["config"], reporter=reporter, resume=False)
            _mark_done(run, fingerprint)
    rows = [[r["arm"], r["size"] or "all", r["seed"], str(r["dir"]), "trained" if r in todo else "reused"] for r in runs]
    return {"ok": True, "study": study.name, "dir": str(study.dir), "trained": len(todo), "reused": len(runs) - len(todo),
            "test_set": fingerprint,
            "tables": [{"title": f"study {study.name}: {len(todo)} trained, {len(runs) - len(todo)} reused",
                        "columns": ["arm", "train size", "seed", "run dir", "this time"], "rows": rows}]}


def _mark_done(run: dict[str, Any], fingerprint: dict[str, Any]) -> None:
    """The run finished: record it, with the code that made it (a run without this file is redone)."""
    from prover_cli.jsonl import write_text_atomic
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

def _final_at(run: dict[str, Any], key: str, budget: float) -> dict[str, Any] | None:
    """The run's last evaluation at or below `budget` training samples."""
    below = [r for r in run["records"] if key in r and r["samples/total"] <= budget]
    return below[-1] if below else None


def compare(study: Study, c: Comparison, loaded: dict[tuple[str, int, int], dict[str, Any]]) -> dict[str, Any]:
    """One comparison: per seed, the paired difference at the pair's largest common budget; then the test."""
    from prover_cli.report import per_problem, run_budget, unequal
    from prover_cli.stats import mean_interval, paired_difference, paired_t_test

    key = METRICS[c.metric]
    per_seed = []
    for seed in study.seeds:
        x, y = loaded.get((c.a, c.a_size, seed)), loaded.get((c.b, c.b_size, seed))
        if x is None or y is None:
            continue
        budget = min(run_budget(x), run_budget(y))
        fa, fb = _final_at(x, key, budget), _final_at(y, key, budget)
        if fa is None or fb is None:
            raise InputError(f"{c.name}: seed {seed}: no {c.metric} evaluation at or below {budget:,} samples in "
                             f"{x['dir'] if fa is None else y['dir']}")
        if unequal(fa["samples/total"], fb["samples/total"]) and not study.allow_unequal_budgets:
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
                         "difference": sum(diffs) / len(diffs), "problem_differences": diffs})
    out: dict[str, Any] = {"name": c.name, "role": c.role, "metric": c.metric, "test": c.test, "margin": c.margin,
                           "alpha": c.alpha, "seeds": [p["seed"] for p in per_seed], "per_seed": per_seed}
    if not per_seed:
        return {**out, "mean": None, "lo": None, "hi": None, "p": None}
    values = [p["difference"] for p in per_seed]
    mean, low, high = mean_interval(values)
    test = paired_t_test(values, c.margin, "greater" if c.test == "non-inferiority" else "two-sided")
    return {**out, "mean": mean, "lo": low, "hi": high, "t": test["t"], "p": test["p"], "n": test["n"]}


def exploratory(study: Study) -> list[Comparison]:
    """What was not pre-registered: every arm pair at each size, and each arm's data-size contrasts."""
    registered = {(c.a, c.a_size, c.b, c.b_size, c.metric) for c in (*study.primary, *study.secondary)}
    names = list(study.arms)
    out = []
    for metric in METRICS:
        for size in study.train_sizes:
            for i, a in enumerate(names):
                for b in names[i + 1:]:
                    out.append(Comparison(a, size, b, size, metric, role="exploratory"))
        for arm in names:  # the limited-data contrast: the same seed with fewer training problems
            for i, small in enumerate(study.train_sizes):
                for large in study.train_sizes[i + 1:]:
                    out.append(Comparison(arm, small, arm, large, metric, role="exploratory"))
    return [c for c in out if (c.a, c.a_size, c.b, c.b_size, c.metric) not in registered]


def report_study(study: Study, *, reporter: Any = NULL_REPORTER) -> dict[str, Any]:
    """The pre-registered comparisons first (Holm over the primary ones), the power for their margins,
    then everything else as exploratory; tables, plots, per-seed CSV and JSONL into `<dir>/report/`."""
    from prover_cli.jsonl import write_text_atomic
    from prover_cli.report import load_run
    from prover_cli.stats import holm

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
    for entry, adjusted in zip(primary, holm([e["p"] for e in primary])):
        entry["p_holm"] = adjusted
        entry["verdict"] = _verdict(entry, adjusted)
    secondary = [compare(study, c, loaded) for c in study.secondary]
    extra = [compare(study, c, loaded) for c in exploratory(study)]
    power = [study_power(c, e, len(study.primary)) for c, e in zip(study.primary, primary)]
    out = study.dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    per_seed_rows = _per_seed_rows(runs, loaded, [*primary, *secondary, *extra])
    write_text_atomic(out / "per_seed.jsonl", "".join(json.dumps(row, sort_keys=True) + "\n" for row in per_seed_rows))
    write_text_atomic(out / "per_seed.csv", _csv(per_seed_rows))
    plots = plot_study(study, loaded, out)
    tables = [comparison_table(f"PRIMARY (pre-registered; Holm over {len(primary)}): {study.name}", primary, holm_column=True),
              power_table(power, "power for the pre-registered margins, from this study as a pilot")]
    if secondary:
        tables.append(comparison_table("secondary (pre-registered, not corrected for multiplicity)", secondary))
    tables.append(comparison_table("EXPLORATORY (not pre-registered: p uncorrected, a lead for a new study, "
                                   "not a finding)", extra))
    tables.append(arms_table(study, loaded))
    strip = lambda entries: [{k: v for k, v in e.items() if k != "per_seed"} for e in entries]  # noqa: E731
    summary = {"study": study.name, "test_set": fingerprint, "primary": strip(primary), "secondary": strip(secondary),
               "exploratory": strip(extra), "power": power}
    write_text_atomic(out / "study_report.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    write_text_atomic(out / "tables.md", "\n".join(_markdown(t) for t in tables))
    return {"ok": True, "study": study.name, "headline": primary[0]["verdict"], "primary": strip(primary),
            "secondary": strip(secondary), "exploratory": strip(extra), "power": power, "test_set": fingerprint,
            "out": str(out), "plots": plots, "per_seed_csv": str(out / "per_seed.csv"),
            "per_seed_jsonl": str(out / "per_seed.jsonl"), "tables": tables}


def _verdict(entry: dict[str, Any], adjusted: float | None) -> str:
    if adjusted is None:
        return f"{entry['name']}: no test (fewer than 2 seeds, or no spread between seeds)"
    shown = adjusted < entry["alpha"]
    if entry["test"] == "non-inferiority":
        what = (f"non-inferior within {entry['margin']:g}" if shown else
                f"non-inferiority within {entry['margin']:g} NOT shown")
    else:
        what = (f"differ, {'a' if entry['mean'] > 0 else 'b'} ahead" if shown else "no difference shown")
    return f"{entry['name']}: {what} (Holm p = {adjusted:.3g}, alpha {entry['alpha']:g})"


def _per_seed_rows(runs: list[dict[str, Any]], loaded: dict[tuple[str, int, int], Any],
                   entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from prover_cli.report import run_budget

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


def comparison_table(title: str, entries: list[dict[str, Any]], holm_column: bool = False) -> dict[str, Any]:
    rows = []
    for e in entries:
        test = e["test"] + (f" (margin {e['margin']:g})" if e["test"] == "non-inferiority" else "")
        row = [e["name"], len(e["seeds"]), f"{_num(e['mean'], True)} ({_num(e['lo'], True)}..{_num(e['hi'], True)})",
               test, "-" if e.get("p") is None else f"{e['p']:.3g}"]
        if holm_column:
            row += ["-" if e.get("p_holm") is None else f"{e['p_holm']:.3g}", e["verdict"].split(": ", 1)[1]]
        rows.append(row)
    columns = ["comparison", "seeds", "mean a - b (95% t interval)", "test", "p (paired t)"]
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
    at alpha / `family`: Holm's first step over `family` primary comparisons (the conservative size)."""
    from prover_cli.stats import power_at, problems_needed, seeds_needed, variance_components

    entry: dict[str, Any] = {"comparison": c.name, "from": label, "margin": c.margin, "alpha": c.alpha / family,
                             "power_wanted": c.power, "test": c.test}
    if c.margin <= 0:
        return {**entry, "note": "no margin pre-registered: nothing to size"}
    if len(problem_differences) < 2:
        return {**entry, "note": "the pilot has fewer than 2 paired seeds: training luck cannot be estimated"}
    parts = variance_components(problem_differences)
    k, n = parts["seeds"], parts["problems"]
    if parts["var_seed_difference"] == 0 and parts["var_eval_per_problem"] == 0:
        return {**entry, **parts, "note": "no variation at all in the pilot (every difference the same): it cannot "
                                          "size a study; pilot on a setting where the runs solve something"}
    alpha = c.alpha / family
    options = dict(alpha=alpha, power=c.power, sided=c.sided)
    return {**entry, **parts, "seeds_needed": seeds_needed(parts["var_train"], parts["var_eval_per_problem"], n,
                                                           c.margin, **options),
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
            rows.append([p["comparison"], p["margin"], "-", "-", "-", "-", p["note"]])
            continue
        rows.append([p["comparison"], p["margin"], f"{p['seeds']} x {p['problems']}",
                     f"{math.sqrt(p['var_train']):.4f} / {math.sqrt(p['var_eval_per_problem']):.3f}",
                     f"{p['power_at_these_seeds']:.2f}", p["seeds_needed"] or "> 10,000",
                     p["problems_needed_at_these_seeds"] or "none: training luck alone needs more seeds"])
    return {"title": title + " (docs/study.md: the formula)",
            "columns": ["comparison", "margin", "seeds x problems", "sd training / sd per problem",
                        "power now", "seeds needed", "problems needed at these seeds"], "rows": rows}


# --------------------------------------------------------------------------------------------
# Plots: the held-out curves on a samples axis and an iteration axis
# --------------------------------------------------------------------------------------------

def plot_study(study: Study, loaded: dict[tuple[str, int, int], Any], out: Path) -> list[str]:
    """`curves_samples.png` and `curves_iterations.png`: per arm and size, the mean over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from prover_cli.report import curve

    paths = []
    for axis, label in (("samples", "training samples"), ("iteration", "ES iteration / GRPO step")):
        figure, panels = plt.subplots(1, len(METRICS), figsize=(6 * len(METRICS), 4.2), squeeze=False)
        for panel, (metric, key) in zip(panels[0], METRICS.items()):
            for arm in study.arms:
                for size in study.train_sizes:
                    points = curve({"runs": [loaded[(arm, size, s)] for s in study.seeds]}, key)
                    xs = [p[axis] for p in points]
                    line, = panel.plot(xs, [p["mean"] for p in points], marker="o", label=f"{arm}, n={size or 'all'}")
                    lows = [p["lo"] if p["lo"] is not None else p["mean"] for p in points]
                    highs = [p["hi"] if p["hi"] is not None else p["mean"] for p in points]
                    panel.fill_between(xs, lows, highs, alpha=0.15, color=line.get_color())
            panel.set_title(f"held-out {metric} verified rate vs {label}")
            panel.set_xlabel(label)
            panel.set_ylabel(f"held-out {metric} rate (mean of {len(study.seeds)} seeds, 95% band)")
            panel.set_ylim(bottom=0)
            panel.legend(fontsize=8)
        figure.suptitle(f"study {study.name}: same test set for every arm, size and seed")
        figure.tight_layout()
        path = out / f"curves_{'samples' if axis == 'samples' else 'iterations'}.png"
        figure.savefig(path, dpi=110)
        plt.close(figure)
        paths.append(str(path))
    return paths
