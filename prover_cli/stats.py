"""95% intervals for held-out verified rates, over samples, problems and seeds (stdlib only).

    from prover_cli.stats import rate_interval, mean_interval

    rate_interval([3, 0, 4, 1], per_problem=4)   # one evaluation: (rate, low, high)
    mean_interval([0.21, 0.18, 0.25])             # one number per seed: (mean, low, high)

Which interval answers which question:

- **One evaluation** (`eval/*_lo`, `eval/*_hi`; prover_cli/heldout.py): how well is this model's
  verified rate on the held-out distribution pinned down by N problems x m samples? The samples
  of one problem are not independent (a problem is easy or hard for every sample), so a Wilson
  interval over the N·m samples would be too narrow. We use the Wilson score interval with the
  *effective* sample size N·m / deff, where deff = 1 + (m - 1)·ICC is Kish's design effect and
  the intraclass correlation ICC is the one-way ANOVA estimate from the per-problem counts
  (clipped to [0, 1]). With every problem all-solved or all-failed the interval is Wilson over
  the N problems; with samples independent of their problem it is Wilson over the N·m samples;
  with one sample per problem (greedy) it is Wilson over problems. With no variation at all
  (rate 0 or 1) the ICC cannot be estimated and the problems are the unit (the cautious end).
  Wilson rather than a bootstrap: it is exact arithmetic, needs no random draws, and does not
  collapse to [0, 0] at a rate of 0.
- **Several runs of one method** (`prover report`, `benchmarks/bench_demo.py`): the seed is the
  unit, since a seed changes the training problems, the held-out subset, the noise and the
  sampling. The interval of the mean over k seeds is Student's t with k - 1 degrees of freedom.
- **A paired difference** (ES - GRPO, or a method - its null control): runs of the same
  `run.seed` are scored on the same held-out problems, so each pair gives a difference paired
  by problem (`paired_difference`); over k >= 2 pairs the interval is t over the k per-seed
  differences (resampling only the top level of a hierarchy, the seeds, is what keeps such
  intervals honest); for one pair, t over the per-problem differences, which covers the choice
  of problems and samples but not the luck of training.
"""

from __future__ import annotations

import math
from typing import Sequence

Z95 = 1.959963984540054  # the 0.975 quantile of the standard normal

# Student's t 0.975 quantiles (two-sided 95%) by degrees of freedom; between the last entries the
# quantile is interpolated linearly in 1/df, the standard table rule (error < 1e-3).
_T975 = {1: 12.7062047364, 2: 4.30265272975, 3: 3.18244630528, 4: 2.7764451052, 5: 2.57058183661,
         6: 2.44691185114, 7: 2.36462425159, 8: 2.30600413520, 9: 2.26215716280, 10: 2.22813885196,
         11: 2.20098516009, 12: 2.17881282966, 13: 2.16036865646, 14: 2.14478668792, 15: 2.13144954556,
         16: 2.11990529922, 17: 2.10981557783, 18: 2.10092204024, 19: 2.09302405441, 20: 2.08596344727,
         21: 2.07961384473, 22: 2.07387306790, 23: 2.06865761042, 24: 2.06389856163, 25: 2.05953855275,
         26: 2.05552943864, 27: 2.05183051648, 28: 2.04840714180, 29: 2.04522964213, 30: 2.04227245630,
         40: 2.02107539030, 60: 2.00029782106, 120: 1.97993040505}


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with `df` degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df in _T975:
        return _T975[df]
    known = sorted(_T975) + [math.inf]
    upper = next(d for d in known if d > df)
    lower = max(d for d in known if d < df)
    q_low, q_up = _T975[lower], _T975.get(upper, Z95)
    weight = (1 / lower - 1 / df) / (1 / lower - (0 if upper == math.inf else 1 / upper))
    return q_low + weight * (q_up - q_low)


def wilson(successes: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion; `n` may be an effective (fractional) sample size."""
    if n <= 0:
        raise ValueError("a proportion needs n > 0")
    p = successes / n
    denominator = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    low = 0.0 if p <= 0 else max(0.0, center - half)  # exact at the ends, not a rounding error off them
    high = 1.0 if p >= 1 else min(1.0, center + half)
    return low, high


def design_effect(counts: Sequence[int], per_problem: int) -> float:
    """Kish's 1 + (m - 1)·ICC for `counts[i]` successes out of m = `per_problem` samples per problem."""
    n, m = len(counts), per_problem
    if m == 1:
        return 1.0
    p = sum(counts) / (n * m)
    if p in (0.0, 1.0) or n < 2:
        return float(m)  # nothing varies: the ICC is unknown, so count problems, not samples
    means = [c / m for c in counts]
    between = m * sum((x - p) ** 2 for x in means) / (n - 1)  # one-way ANOVA mean squares
    within = sum(m * x * (1 - x) for x in means) / (n * (m - 1))
    icc = (between - within) / (between + (m - 1) * within) if between + (m - 1) * within > 0 else 1.0
    return 1 + (m - 1) * min(1.0, max(0.0, icc))


def rate_interval(counts: Sequence[int], per_problem: int) -> tuple[float, float, float]:
    """(rate, low, high): verified samples / samples and its 95% interval (module docstring)."""
    if not counts:
        raise ValueError("no problems")
    total = len(counts) * per_problem
    rate = sum(counts) / total
    effective = total / design_effect(counts, per_problem)
    low, high = wilson(rate * effective, effective)
    return rate, low, high


def mean_interval(values: Sequence[float]) -> tuple[float, float | None, float | None]:
    """(mean, low, high) with Student's t over the values; low = high = None for a single value."""
    if not values:
        raise ValueError("no values")
    k = len(values)
    mean = sum(values) / k
    if k < 2:
        return mean, None, None
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (k - 1))
    half = t975(k - 1) * sd / math.sqrt(k)
    return mean, mean - half, mean + half


def paired_difference(a: dict[str, float], b: dict[str, float]) -> list[float]:
    """Per-problem differences a - b over the problems both were scored on (ids must match)."""
    if set(a) != set(b):
        only = sorted(set(a) ^ set(b))[:3]
        raise ValueError(f"not the same held-out problems (e.g. {', '.join(only)} in only one)")
    return [a[key] - b[key] for key in sorted(a)]
