"""Is the ES update signal or noise? The signal share of the rewards the update weights its noise by.

    share = signal_share(iteration_table(sample_rewards, population, antithetic))   # es/signal_share

The ES update moves along sum_k (R_2k - R_2k+1) eps_k (antithetic pairs; sum_m R_m eps_m without).
Each member reward R is the mean of the member's J samples (es.problems_per_iteration x
es.samples_per_problem), so it is the member's true reward under its perturbation plus sampling
noise: which problems were drawn, which samples came out. When the noise dominates, the update
is a random direction, however many iterations run.

**Signal share** is the reliability of those rewards: between units (pair differences with
antithetic pairs, members without), the share of their variance that is the perturbations' own
effect rather than sampling noise. 1 = all signal; 0 = none; below 0.5 the update is mostly noise.
It is also the expected correlation between these rewards and the rewards an independent scoring
of the same members on as many fresh samples would give.

Per iteration, at no extra generation cost: lay one iteration's sample rewards as a table with one
row per unit (the pair difference r[2k, j] - r[2k+1, j], or the member's r[m, j]) and one column
per sample cell j (a problem and a sample index: the same problem and sampling seed for every
member, common random numbers). Two-way analysis of variance without replication gives

    MS_units = J * variance of the row means                 (K - 1 degrees of freedom)
    MS_noise = residual mean square (unit x cell interaction) ((K - 1)(J - 1) degrees of freedom)
    share    = 1 - c * MS_noise / MS_units,   c = (K - 3) / (K - 1)  (c = 1 for K < 4)

Without c this is ICC(3,k) (McGraw & Wong 1996), i.e. Cronbach's alpha with the J cells as
items: the mean, over every way to split the J cells in two halves, of the split-half correlation
of the units' rewards corrected to the full J by Spearman-Brown. That ratio is biased low with few
units (on pure noise it averages -(2 / (K - 3)): -0.4 with 8 pairs), because E[1 / MS_units] is
(K - 1) / (K - 3) times 1 / E[MS_units] under normal errors; c removes that, so pure noise
averages 0 and windows of iterations average fairly. It is an estimate: with 8 pairs it swings by
a few tenths from one iteration to the next, and below 0 when the units' rewards vary less than
their noise would by itself (values below -1 are written as -1); the warning looks at the mean of
the last `WINDOW` iterations (`es/signal_share_avg`), once there are that many. It is undefined (None, and the key is absent from
metrics.jsonl) when J = 1 or when every unit's reward is the same (the update is empty).

Spearman-Brown also says how the share grows with samples per member: share s at J samples is
n s / (1 + (n - 1) s) at n J samples (`samples_for_share`).

`prover train es --probe` (es/probe.py) measures the same quantity the direct way, by re-scoring
the same members on S fresh draws of problems and sampling seeds: `single_scoring_share` of the
unit x scoring table, ICC(3,1), the share of one scoring of J samples.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

WINDOW = 5        # iterations averaged for the warning
NOISE_BELOW = 0.5  # below this the noise variance exceeds the signal variance: "mostly noise"


def anova(table: Sequence[Sequence[float]]) -> tuple[float, float] | None:
    """(MS_rows, MS_residual) of a rows x columns table without replication; None below 2 x 2."""
    rows, cols = len(table), len(table[0]) if table else 0
    if rows < 2 or cols < 2 or any(len(row) != cols for row in table):
        return None
    row_means = [sum(row) / cols for row in table]
    col_means = [sum(row[j] for row in table) / rows for j in range(cols)]
    grand = sum(row_means) / rows
    ms_rows = cols * sum((m - grand) ** 2 for m in row_means) / (rows - 1)
    residual = sum((x - row_means[i] - col_means[j] + grand) ** 2
                   for i, row in enumerate(table) for j, x in enumerate(row))
    return ms_rows, residual / ((rows - 1) * (cols - 1))


def signal_share(table: Sequence[Sequence[float]]) -> float | None:
    """ICC(3,k) = 1 - MS_noise / MS_units: the reliability of the row means; None when undefined."""
    ms = anova(table)
    if ms is None or ms[0] <= 1e-15:  # every row mean equal: nothing to rank, the update is empty
        return None
    df_units = len(table) - 1
    unbiased = (df_units - 2) / df_units if df_units > 2 else 1.0  # E[1/MS_units] = (df/(df-2)) / E[MS_units]
    return max(-1.0, 1.0 - unbiased * ms[1] / ms[0])


def single_scoring_share(table: Sequence[Sequence[float]]) -> float | None:
    """ICC(3,1) of a units x scorings table: the reliability of ONE scoring (one column)."""
    ms = anova(table)
    if ms is None:
        return None
    ms_units, ms_noise = ms
    denominator = ms_units + (len(table[0]) - 1) * ms_noise
    return None if denominator <= 1e-15 else (ms_units - ms_noise) / denominator


def iteration_table(sample_rewards: Sequence[float], population: int, antithetic: bool) -> list[list[float]]:
    """Rows of the update's units: pair differences (antithetic) or members; member-major input."""
    per_member = len(sample_rewards) // population
    members = [list(sample_rewards[m * per_member:(m + 1) * per_member]) for m in range(population)]
    if not antithetic:
        return members
    return [[a - b for a, b in zip(members[2 * k], members[2 * k + 1])] for k in range(population // 2)]


def iteration_share(sample_rewards: Sequence[float], population: int, antithetic: bool) -> float | None:
    """`es/signal_share` of one iteration (module docstring)."""
    return signal_share(iteration_table(sample_rewards, population, antithetic))


def recent_mean(shares: Sequence[float | None], window: int = WINDOW) -> float | None:
    """Mean of the last `window` defined shares (`es/signal_share_avg`); None before any."""
    recent = [s for s in shares if s is not None][-window:]
    return sum(recent) / len(recent) if recent else None


def samples_for_share(share: float, samples: int, target: float = NOISE_BELOW) -> int | None:
    """Samples per member that would lift `share` (at `samples`) to `target`, by Spearman-Brown.

    None when the share is <= 0: no signal was seen, so no number of samples can be predicted."""
    if share <= 0:
        return None
    if share >= target:
        return samples
    return math.ceil(samples * target * (1 - share) / (share * (1 - target)))


def noise_warning(shares: Sequence[float | None], config: Any, minimum: int = WINDOW) -> str | None:
    """The warning when the mean of the last WINDOW shares (at least `minimum` of them) is below
    NOISE_BELOW, naming the knobs that raise signal; None otherwise."""
    recent = [s for s in shares if s is not None][-WINDOW:]
    if len(recent) < max(1, minimum):
        return None
    share = sum(recent) / len(recent)
    if share >= NOISE_BELOW:
        return None
    es, gen = config.es, config.generate
    samples = es.problems_per_iteration * es.samples_per_problem
    needed = samples_for_share(share, samples)
    estimate = (f"about {needed} would reach {NOISE_BELOW} by this estimate" if needed is not None
                else "this estimate saw no signal at all, so more samples alone may not help: try es.sigma first")
    over = f"the last {len(recent)} iterations" if len(recent) > 1 else "the last iteration"
    return (f"the ES update is mostly sampling noise: signal share {share:.2f} over {over} "
            f"(1 = all signal, below {NOISE_BELOW} = mostly noise). Signal rises with samples per member "
            f"(es.problems_per_iteration x es.samples_per_problem = {samples} now; {estimate}), with a lower "
            f"member sampling temperature (generate.temperature = {gen.temperature:g}) and with a better es.sigma "
            f"(= {es.sigma:g} now); `prover train es --probe` measures es.sigma and its neighbours before training")


def progress_field(share: float | None, warning: str | None) -> str:
    """The progress line's `signal=` field: the recent mean share, flagged while the warning holds."""
    if share is None:
        return "-"
    return f"{share:.2f}" + (" NOISE" if warning else "")
