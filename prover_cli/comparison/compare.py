"""The one comparison rule that `prover report` and `prover study` share: which evaluation of a run a
paired difference reads, at which budget, and when two evaluations are too far apart to compare.

    from prover_cli.comparison import compare

    budget = min(compare.run_budget(x), compare.run_budget(y))   # the pair's largest common budget
    fa, fb = compare.final_at(x, key, budget), compare.final_at(y, key, budget)
    compare.unequal(fa["samples/total"], fb["samples/total"])      # more than 5 % apart: refused or flagged
    compare.per_problem(fa, key)                                     # {problem id: verified fraction}

`final_at` is the only rule in the tree for "a run's final evaluation at a budget": its last held-out
evaluation of `key` at or below `budget` training samples (the base's, at 0, counts); when it has
none there, its first evaluation above it, so the two budgets differ and `unequal` says so (the
caller refuses, or flags UNEQUAL BUDGETS when told to allow it). Before this module `report.py` and
`study.py` each had one, and they disagreed for a run with no evaluation below the common budget.
"""

from __future__ import annotations

from typing import Any

from prover_cli.training.metrics import training_records

BUDGET_TOLERANCE = 0.05  # finals whose training samples differ by more than this share are not compared silently
GREEDY_RATE = "eval/greedy_verified_rate"
BY_PROBLEM = "eval/by_problem"


def run_budget(run: dict[str, Any]) -> int | float:
    """The run's training budget: `samples/total` of its last trained iteration (held-out samples not counted)."""
    trained = training_records(run["records"])
    return trained[-1]["samples/total"] if trained else 0


def final_at(run: dict[str, Any], key: str, budget: float) -> dict[str, Any] | None:
    """The run's last evaluation of `key` at or below `budget` training samples (the base's at 0 counts);
    when it has none there, its first evaluation above it (then the budgets differ, and `unequal` says so)."""
    evals = [r for r in run["records"] if key in r]
    below = [r for r in evals if r["samples/total"] <= budget]
    if below:
        return below[-1]
    above = [r for r in evals if r["iteration"] >= 1]
    return above[0] if above else None


def base_of(run: dict[str, Any], key: str) -> dict[str, Any] | None:
    """The run's iteration-0 evaluation of `key` (the base model, before any training), or None."""
    return next((r for r in run["records"] if r.get("iteration") == 0 and key in r), None)


def unequal(a_samples: float, b_samples: float) -> bool:
    """Whether two finals' budgets differ by more than BUDGET_TOLERANCE of the larger one."""
    return abs(a_samples - b_samples) > BUDGET_TOLERANCE * max(a_samples, b_samples, 1)


def per_problem(record: dict[str, Any], key: str) -> dict[str, float] | None:
    """One evaluation's verified fraction per held-out problem, for `key` (sampled or greedy)."""
    by_problem = record.get(BY_PROBLEM)
    if by_problem is None:
        return None
    if key == GREEDY_RATE:
        return {pid: float(v[1]) for pid, v in by_problem.items()}
    per = record["eval/samples"] / record["eval/problems"]
    return {pid: v[0] / per for pid, v in by_problem.items()}


def evaluation_budgets(run: dict[str, Any], key: str) -> list[float]:
    """The training budgets (`samples/total`) at which the run has an evaluation of `key`, base first."""
    return [r["samples/total"] for r in run["records"] if key in r]
