"""95% intervals for held-out verified rates, over samples, problems and seeds (stdlib only).

    from prover_cli.comparison.stats import rate_interval, mean_interval

    rate_interval([3, 0, 4, 1], per_problem=4)   # one evaluation: (rate, low, high)
    mean_interval([0.21, 0.18, 0.25])             # one number per seed: (mean, low, high)

Which interval answers which question:

- **One evaluation** (`eval/*_lo`, `eval/*_hi`; prover_cli/training/heldout.py): how well is this model's
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
from statistics import NormalDist
from typing import Any, Sequence

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
    known = sorted(_T975)
    upper = next((d for d in known if d > df), None)   # None: beyond the table, the normal quantile
    lower = max(d for d in known if d < df)
    q_low, q_up = _T975[lower], (Z95 if upper is None else _T975[upper])
    weight = (1 / lower - 1 / df) / (1 / lower - (0 if upper is None else 1 / upper))
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


# --------------------------------------------------------------------------------------------
# Tests and multiplicity: paired t p-values, Holm's correction (`prover study report`)
# --------------------------------------------------------------------------------------------

def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz, as in
    Numerical Recipes' `betacf`); converges fast for x < (a + 1) / (a + b + 2)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    tail = 0.5 * betainc(df / 2, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def t_quantile(p: float, df: float) -> float:
    """The p quantile of Student's t (bisection on `t_sf`; |error| < 1e-10)."""
    if not 0 < p < 1:
        raise ValueError(f"a quantile needs 0 < p < 1, got {p}")
    low, high = -1e3, 1e3
    for _ in range(200):
        mid = (low + high) / 2
        if 1.0 - t_sf(mid, df) < p:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def paired_t_test(differences: Sequence[float], margin: float = 0.0,
                  alternative: str = "two-sided") -> dict[str, float | int | None]:
    """Student's t test of per-seed paired differences (a - b), one per seed.

    `alternative = "two-sided"`: H0 mean = 0. `"greater"`: the non-inferiority test, H0 mean <= -margin
    (a is worse than b by the margin or more), H1 mean > -margin. Returns mean, sd, n, t, df and p;
    t and p are None for fewer than 2 differences, or when they are all equal (no spread: no test)."""
    if alternative not in ("two-sided", "greater"):
        raise ValueError(f"alternative must be 'two-sided' or 'greater', got {alternative!r}")
    k = len(differences)
    if k == 0:
        raise ValueError("no differences")
    mean = sum(differences) / k
    sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / (k - 1)) if k > 1 else None
    out: dict[str, float | int | None] = {"mean": mean, "sd": sd, "n": k, "df": k - 1 if k > 1 else None,
                                           "t": None, "p": None}
    if not sd:
        return out
    t = (mean + (margin if alternative == "greater" else 0.0)) / (sd / math.sqrt(k))
    out["t"] = t
    out["p"] = t_sf(t, k - 1) if alternative == "greater" else min(1.0, 2 * t_sf(abs(t), k - 1))
    return out


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values, in the input order (None stays None and is not counted).

    Sorted ascending, p_(j) becomes max over i <= j of min(1, (m - i + 1) p_(i)); rejecting where the
    adjusted p < alpha controls the family-wise error rate at alpha for any dependence (Holm 1979)."""
    indexed = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    m = len(indexed)
    adjusted: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(indexed):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


# --------------------------------------------------------------------------------------------
# Power from a pilot: how many seeds, how many test problems (docs/study.md gives the formula)
# --------------------------------------------------------------------------------------------

def variance_components(per_seed_problem_differences: Sequence[Sequence[float]]) -> dict[str, Any]:
    """From a pilot: each seed's per-problem paired differences (a - b, the same N problems).

    A seed's difference d_k is the mean of its N per-problem differences, so
    Var(d_k) = s_train^2 + s_eval^2 / N: training luck (between seeds) plus evaluation noise (the
    per-problem variance s_eval^2 over N problems). s_eval^2 is the mean within-seed variance of
    the per-problem differences; s_train^2 = max(0, the between-seed variance of d_k - s_eval^2 / N).
    `var_train_clipped`: the max took 0 (the seeds agree more than evaluation noise alone predicts), so
    anything sized on it is a bound: seeds or problems needed at least, power at most."""
    seeds = [list(x) for x in per_seed_problem_differences]
    if len(seeds) < 2:
        raise ValueError("a pilot needs at least 2 seeds to separate training luck from evaluation noise")
    problems = len(seeds[0])
    if problems < 2 or any(len(x) != problems for x in seeds):
        raise ValueError("every seed of the pilot needs the same number (>= 2) of per-problem differences")
    means = [sum(x) / problems for x in seeds]
    grand = sum(means) / len(means)
    between = sum((d - grand) ** 2 for d in means) / (len(means) - 1)
    within = sum(sum((v - m) ** 2 for v in x) / (problems - 1) for x, m in zip(seeds, means)) / len(seeds)
    return {"var_seed_difference": between, "var_eval_per_problem": within,
            "var_train": max(0.0, between - within / problems), "var_train_clipped": between - within / problems < 0,
            "problems": problems, "seeds": len(seeds), "mean_difference": grand}


def _quantiles(alpha: float, power: float, df: float | None, sided: int) -> float:
    """z_{1-alpha/sided} + z_{power}, or the t quantiles with `df` degrees of freedom."""
    if df is None:
        normal = NormalDist()
        return normal.inv_cdf(1 - alpha / sided) + normal.inv_cdf(power)
    return t_quantile(1 - alpha / sided, df) + t_quantile(power, df)


def seeds_needed(var_train: float, var_eval: float, problems: int, margin: float, *, alpha: float = 0.05,
                 power: float = 0.8, sided: int = 2, max_seeds: int = 10_000) -> int | None:
    """Smallest k >= 2 with (t_{1-alpha/sided,k-1} + t_{power,k-1})^2 (var_train + var_eval/problems) / margin^2 <= k;
    None when no k up to `max_seeds` suffices."""
    if margin <= 0 or problems < 1:
        raise ValueError("seeds_needed needs margin > 0 and problems >= 1")
    var = var_train + var_eval / problems
    for k in range(2, max_seeds + 1):
        if _quantiles(alpha, power, k - 1, sided) ** 2 * var / margin ** 2 <= k:
            return k
    return None


def problems_needed(var_train: float, var_eval: float, seeds: int, margin: float, *, alpha: float = 0.05,
                    power: float = 0.8, sided: int = 2) -> int | None:
    """Test problems N for which `seeds` seeds reach `power`: N = var_eval / (k margin^2 / q^2 - var_train),
    q the t quantile sum at k - 1 df; None when training luck alone needs more seeds (no N suffices)."""
    if seeds < 2 or margin <= 0:
        raise ValueError("problems_needed needs seeds >= 2 and margin > 0")
    room = seeds * margin ** 2 / _quantiles(alpha, power, seeds - 1, sided) ** 2 - var_train
    if room <= 0:
        return None
    return max(1, math.ceil(var_eval / room)) if var_eval > 0 else 1


def power_at(var_train: float, var_eval: float, problems: int, seeds: int, margin: float, *,
             alpha: float = 0.05, sided: int = 2) -> float:
    """Approximate power of the paired t test of `seeds` seeds for a true distance `margin` from H0
    (the noncentral t approximated by a shifted central t)."""
    se = math.sqrt((var_train + var_eval / problems) / seeds)
    if se == 0:
        return 1.0
    critical = t_quantile(1 - alpha / sided, seeds - 1)
    return t_sf(critical - margin / se, seeds - 1)
