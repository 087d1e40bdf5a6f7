"""Power: from this study (report) or from a pilot (plan): the variance components of the paired
differences, the power now, and the seeds and problems needed (docs/study.md: the formula).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from prover_cli.comparison.arms import group_arms
from prover_cli.comparison.run_reader import load_run
from prover_cli.comparison.stats import power_at, problems_needed, seeds_needed, variance_components
from prover_cli.comparison.study.design import Arm, Comparison, MIN_PILOT_SEEDS, Study
from prover_cli.comparison.study.paired import compare
from prover_cli.comparison.study.runs import planned_runs
from prover_cli.comparison.study.study_file import load_study
from prover_cli.errors import InputError


def power_of(c: Comparison, problem_differences: list[list[float]], label: str, family: int = 1) -> dict[str, Any]:
    """Seeds needed at this test-set size, and test problems needed at this many seeds, for the margin,
    at alpha / `family`: Holm's first step over `family` primary comparisons (the conservative size).
    When the pilot's training variance was clipped to 0 (its seeds agree more than evaluation noise
    alone predicts) the seeds and problems needed are lower bounds and the power an upper bound."""
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
    options: dict[str, Any] = {"alpha": alpha, "power": c.power, "sided": c.sided}
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
