"""One run's summary, and arms: the seeds of one method and setting (`group_arms`), their held-out
curves and base -> final gains, the paired differences between arms at the largest common budget
(`differences`, by the one rule of compare.py), and the tables `prover report` prints.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import MISSING, fields
from typing import Any

from prover_cli.comparison.compare import BUDGET_TOLERANCE, final_at, per_problem, run_budget, unequal
from prover_cli.comparison.stats import mean_interval, paired_difference
from prover_cli.config import SECTIONS
from prover_cli.errors import InputError, UsageError
from prover_cli.training.metrics import training_records


EVAL_RATE = "eval/verified_rate"  # the held-out curves (prover_cli/training/heldout.py): sampled ...
GREEDY_RATE = "eval/greedy_verified_rate"  # ... and greedy
HELDOUT_METRICS = ((EVAL_RATE, "sampled"), (GREEDY_RATE, "greedy"))
SIGNAL_KEYS = ("es/signal_share", "es/signal_var", "es/noise_var")  # ES only (es/signal.py)
SIGNAL_SHARE = SIGNAL_KEYS[0]


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
        "train_size": run_identity(run).get("data.train_size", 0),
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
    section, key = dotted.split(".")
    recorded = config.get(section, {})
    if key in recorded:
        return recorded[key]
    field = next(f for f in fields(SECTIONS[section]) if f.name == key)
    # a dataclass field has a default or a default_factory; mypy cannot narrow `is not MISSING`
    return field.default if field.default is not MISSING else field.default_factory()  # type: ignore[operator]


def arm_identity(config: dict[str, Any], method: str) -> dict[str, Any]:
    """Every `section.key` of the resolved config that defines a run's arm: the method's section, the
    model, the data (`data.train_size`, the limited-data axis, among them), sampling, verification and
    the held-out settings; all but `_WITHIN_ARM_KEYS` and `_WITHIN_ARM_SECTIONS`."""
    identity = {}
    for section, cls in SECTIONS.items():
        if section in _WITHIN_ARM_SECTIONS or (section in ("es", "grpo") and section != method):
            continue
        for field in fields(cls):
            dotted = f"{section}.{field.name}"
            if dotted not in _WITHIN_ARM_KEYS:
                identity[dotted] = _recorded(config, dotted)
    for task, options in sorted(config.get("task", {}).items()):  # `[task.<name>]`: a task's own options
        identity.update({f"task.{task}.{key}": value for key, value in sorted(options.items())})
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
        identity = run_identity(run)
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


def run_identity(run: dict[str, Any]) -> dict[str, Any]:
    """The run's `arm_identity`; for a run dict built by hand rather than by `load_run`, its method section,
    null control and model, as arms were told apart before identities existed."""
    if "identity" in run:
        return run["identity"]
    method = run["method"]
    return {**{f"{method}.{k}": v for k, v in run.get("settings", {}).items()},
            f"{method}.shuffle_rewards": run.get("null", False), "model.name": run.get("model")}


def _setting(arm: dict[str, Any], dotted: str) -> str:
    """`sigma=0.003` (the method's own section), `data.train_size=16` (`all` for 0), `model.name="x"`."""
    section, key = dotted.split(".", 1)  # `task.countdown.problems`: a task's option has two dots
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


def spread_of(values: list[float], floor: float | None = None) -> dict[str, Any]:
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
    per_pair: list[float] = []
    problems: list[list[float] | None] = []
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
               "final_reward": spread_of([training_records(r["records"])[-1]["reward/mean"] for r in runs]),
               "verified_per_iteration": spread_of(
                   [sum(x["verify/verified"] for x in training_records(r["records"])) / len(training_records(r["records"]))
                    for r in runs], floor=0.0),
               "verified_per_1k_samples": spread_of(
                   [sum(x["verify/verified"] for x in training_records(r["records"])) * 1000
                    / max(training_records(r["records"])[-1]["samples/total"], 1) for r in runs], floor=0.0),
               "heldout": {}}
    for key, name in HELDOUT_METRICS:
        finals = [f for f in (_final(run, key) for run in runs) if f is not None]
        if len(finals) < len(runs):
            continue
        bases = [run["base"] for run in runs if run["base"] and key in run["base"]]
        entry = {"curve": curve(arm, key),
                 "final": _interval([f[key] for f in finals],
                                    (finals[0].get(f"{key}_lo"), finals[0].get(f"{key}_hi"))),
                 "final_samples": [f["samples/total"] for f in finals],
                 "base": None, "gain": None}
        if len(bases) == len(runs):
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
            found = [(final_at(x, key, budget), final_at(y, key, budget)) for (x, y), budget in zip(pairs, budgets)]
            finals = [(fa, fb) for fa, fb in found if fa is not None and fb is not None]
            if len(finals) < len(found):
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
             (d.get("sampled") or d["greedy"])["basis"], _compared_at(d), d["contrast"]] for d in diffs]
    return {"title": "paired difference at the final evaluation, same held-out problems (95% interval), each run's last at or below the largest common budget",
            "columns": ["difference", "seeds", "sampled", "greedy", "interval", "compared at", "contrast"],
            "rows": rows}
