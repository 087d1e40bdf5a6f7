"""One comparison over the study's seeds: each seed's pair of runs, their evaluations at the pair's
largest common budget (compare.py's one rule; the base for an anchor), the per-seed differences,
their t interval and the paired t test.
"""

from __future__ import annotations

from typing import Any

from prover_cli.comparison.compare import base_of, final_at, per_problem, run_budget, unequal
from prover_cli.comparison.stats import mean_interval, paired_difference, paired_t_test
from prover_cli.comparison.study.design import BASE, Comparison, METRICS, Study
from prover_cli.errors import InputError, UsageError


def pair_of(study: Study, c: Comparison, loaded: dict[tuple[str, int, int], dict[str, Any]], seed: int):
    """The two runs of one seed a comparison pairs (an anchor against the base: the run with itself)."""
    x = loaded.get((c.a, c.a_size, seed))
    y = x if c.b == BASE else loaded.get((c.b, c.b_size, seed))
    return x, y


def evaluations_at(c: Comparison, x: dict[str, Any], y: dict[str, Any], key: str, budget: float):
    """The two evaluations a comparison reads at `budget`, by the one rule (compare.final_at); the base
    side of an anchor is the run's iteration-0 evaluation."""
    return final_at(x, key, budget), (base_of(y, key) if c.b == BASE else final_at(y, key, budget))


def compare(study: Study, c: Comparison, loaded: dict[tuple[str, int, int], dict[str, Any]]) -> dict[str, Any]:
    """One comparison: per seed, the paired difference at the pair's largest common budget; then the test."""
    key = METRICS[c.metric]
    per_seed = []
    for seed in study.seeds:
        x, y = pair_of(study, c, loaded, seed)
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
