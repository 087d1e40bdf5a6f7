"""Is the ES update signal or noise? The signal share of the rewards the update weights its noise by.

    parts = iteration_variances(sample_rewards, population, antithetic)   # es/signal_var, es/noise_var
    share = pooled_share(history_of_parts)                                # es/signal_share
    monitor = SignalMonitor(config.es, run.records())   # the ES loop's diagnostic: both, the warning, the bar

The ES update moves along sum_k (R_2k - R_2k+1) eps_k (antithetic pairs; sum_m R_m eps_m without).
Each member reward R is the mean of the member's J samples (es.problems_per_iteration x
es.samples_per_problem), so it is the member's true reward under its perturbation plus sampling
noise: which problems were drawn, which samples came out. When the noise dominates, each update
is mostly a random direction; over T iterations the signal adds up as T and the noise as sqrt(T),
so a low share slows a run down (docs/ledger.md) rather than making it a random walk.

**Signal share** is the reliability of those rewards: between the units of the update (pair
differences with antithetic pairs, members without), the share of their variance that is the
perturbations' own effect rather than sampling noise. 1 = all signal, 0 = none; below 0.5 the
update is mostly noise (the noise variance exceeds the signal variance). It is also the expected
correlation between these rewards and the rewards an independent scoring of the same members on
as many fresh samples would give.

Per iteration, at no extra generation cost: lay the iteration's sample rewards as a table with
one row per unit (the pair difference r[2k, j] - r[2k+1, j], or the member's r[m, j]) and one
column per sample cell j (a problem and a sample index: the same problem and sampling seed for
every member, common random numbers). Two-way analysis of variance without replication gives
MS_units (between the K row means, K - 1 degrees of freedom) and MS_noise (the residual, the
unit x cell interaction, (K - 1)(J - 1) degrees of freedom), and two variances on the scale of
one unit's reward:

    es/signal_var = (MS_units - MS_noise) / J   variance of the units' true rewards (can read < 0)
    es/noise_var  = MS_noise / J                sampling-noise variance of one unit's reward

Both are unbiased whatever the reward's distribution, as long as the cells' noise is independent.
The share is their ratio, pooled over the last WINDOW iterations (this one included):

    es/signal_share = sum signal_var / sum (signal_var + noise_var)

For one iteration that ratio is 1 - MS_noise / MS_units = ICC(3,k) (McGraw & Wong 1996), i.e.
Cronbach's alpha with the J cells as items: the mean, over every way to split the J cells in two
halves, of the split-half correlation of the units' rewards, Spearman-Brown corrected to J. One
iteration alone is a poor estimate with 8 pairs: it swings by a few tenths, and is biased low
(-0.4 on average on pure Gaussian noise with 8 units), while the usual small-sample correction of
that, (K - 3) / (K - 1) on the noise term, reads +0.26 on pure noise as sparse as common random
numbers make pair differences. Pooling the unbiased parts of 5 iterations keeps pure noise near 0
in both cases. Values below -1 are written as -1. The
share is None (absent from metrics.jsonl) while no pooled unit reward varies at all, and the
parts are None when J = 1 or K = 1 (nothing to split).

**What the window can and cannot tell.** Five iterations of 8 pairs are few: at the demo's shipped
settings (sigma 0.01, J = 8, greedy members) the window's jackknife error (`share_error`) is about
0.3, so its sign and its swings mean nothing while it is within about two errors of 0. There
(`make demo`, seed 0) it read from -1.00 to +0.42 and ended at -0.42, negative in 20 of its 36
windows, where the probe's direct figure is +0.01 (docs/ledger.md): a disagreement in sign like
the one issue #31 reported, and it is sampling error, not a different quantity. Both estimate
the variance of the pairs' true reward differences, and the whole run's pooled share, 40
iterations of fresh pairs, read +0.01 ± 0.11, as the probe did. What the window can say is "mostly noise" when it sits below
NOISE_BELOW by more than its error; the warning fires on the window below NOISE_BELOW alone, so
read it with the error the progress line prints beside the window, and the run's share after
them (`progress_field`).

Measured against the probe's direct figure with members sampled at temperature 0.7 (docs/ledger.md),
the estimate also read far lower at J = 32 (-0.04 to -0.59 against 0.01 to 0.10, 12 scorings of the
same 8 pairs); its error was not printed then, so whether sampling error explains that gap is not
known (the cells of one iteration may not be independent there as assumed); where the two differ
by more than the error now printed beside the estimate, trust the probe.

Spearman-Brown also says how the share grows with samples per member: share s at J samples is
n s / (1 + (n - 1) s) at n J samples (`samples_for_share`).

`prover train es --probe` (es/probe.py) measures the same quantity the direct way, by re-scoring
the same members on S fresh draws of problems and sampling seeds: `single_scoring_share` of the
unit x scoring table, ICC(3,1), the share of one scoring of J samples.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from prover_cli.config import ESConfig
    from prover_cli.progress import Reporter

WINDOW = 5         # iterations pooled for es/signal_share, and needed before the warning
NOISE_BELOW = 0.5  # below this the noise variance exceeds the signal variance: "mostly noise"

Parts = tuple[float, float]  # (signal variance, noise variance) of one iteration's units


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


def variances(table: Sequence[Sequence[float]]) -> Parts | None:
    """(signal variance, noise variance) of the row means: ((MS_rows - MS_noise) / J, MS_noise / J)."""
    ms = anova(table)
    if ms is None:
        return None
    cols = len(table[0])
    return (ms[0] - ms[1]) / cols, ms[1] / cols


def iteration_table(sample_rewards: Sequence[float], population: int, antithetic: bool) -> list[list[float]]:
    """Rows of the update's units: pair differences (antithetic) or members; member-major input."""
    per_member = len(sample_rewards) // population
    members = [list(sample_rewards[m * per_member:(m + 1) * per_member]) for m in range(population)]
    if not antithetic:
        return members
    return [[a - b for a, b in zip(members[2 * k], members[2 * k + 1])] for k in range(population // 2)]


def iteration_variances(sample_rewards: Sequence[float], population: int, antithetic: bool) -> Parts | None:
    """`es/signal_var` and `es/noise_var` of one iteration (module docstring)."""
    return variances(iteration_table(sample_rewards, population, antithetic))


def pooled_share(parts: Sequence[Parts | None], window: int = WINDOW) -> float | None:
    """`es/signal_share`: sum of signal variances / sum of signal + noise, over the last `window` parts."""
    recent = [p for p in parts if p is not None][-window:]
    total = sum(signal + noise for signal, noise in recent)
    if total <= 1e-15:  # no unit's reward varied: nothing to tell apart
        return None
    return max(-1.0, sum(signal for signal, _ in recent) / total)


def single_scoring_share(table: Sequence[Sequence[float]]) -> float | None:
    """ICC(3,1) of a units x scorings table: the reliability of ONE scoring (one column)."""
    ms = anova(table)
    if ms is None:
        return None
    ms_units, ms_noise = ms
    denominator = ms_units + (len(table[0]) - 1) * ms_noise
    return None if denominator <= 1e-15 else (ms_units - ms_noise) / denominator


def samples_for_share(share: float, samples: int, target: float = NOISE_BELOW) -> int | None:
    """Samples per member that would lift `share` (at `samples`) to `target`, by Spearman-Brown.

    None when the share is <= 0: no signal was seen, so no number of samples can be predicted."""
    if share <= 0:
        return None
    if share >= target:
        return samples
    return math.ceil(samples * target * (1 - share) / (share * (1 - target)))


def noise_warning(parts: Sequence[Parts | None], es: ESConfig, minimum: int = WINDOW) -> str | None:
    """The warning when the pooled share of the last WINDOW iterations (at least `minimum` of them)
    is below NOISE_BELOW, naming the knobs that raise signal (from `es`, the `[es]` section); None otherwise."""
    pooled = [p for p in parts if p is not None][-WINDOW:]
    share = pooled_share(pooled)
    if len(pooled) < max(1, minimum) or share is None or share >= NOISE_BELOW:
        return None
    samples = es.problems_per_iteration * es.samples_per_problem
    needed = samples_for_share(share, samples)
    estimate = (f"about {needed} would reach {NOISE_BELOW} by this estimate" if needed is not None
                else "this estimate saw no signal at all, so more samples alone may not help: try es.sigma first")
    over = f"the last {len(pooled)} iterations" if len(pooled) > 1 else "the last iteration"
    # the temperature is advice only where it can be lowered: greedy members (0) are as low as it goes
    temperature = (f"with a lower member sampling temperature (es.member_temperature = {es.member_temperature:g}; "
                   "0 = greedy) and " if es.member_temperature > 0 else "")
    greedy = (f"; the members already decode greedily (es.member_temperature = 0): the noise left is which "
              f"problems the iteration drew, a perturbation's effect being measured on only {samples} of them"
              if es.member_temperature == 0 else "")
    return (f"the ES update is mostly sampling noise: signal share {share:.2f} over {over} "
            f"(1 = all signal, below {NOISE_BELOW} = mostly noise). Signal rises with samples per member "
            f"(es.problems_per_iteration x es.samples_per_problem = {samples} now; {estimate}), {temperature}with a "
            f"better es.sigma (= {es.sigma:g} now){greedy}; `prover train es --probe` measures es.sigma and its "
            "neighbours before training")


def share_error(parts: Sequence[Parts | None], window: int | None = WINDOW) -> float | None:
    """Jackknife standard error of `pooled_share` over the last `window` defined parts (None: all).

    Delete-one over iterations: each iteration's members are fresh perturbations, so iterations are
    the independent replicates. None with fewer than 2 parts, or when leaving one out leaves no
    variance. On sparse pair differences like the demo's it matches the spread of the share over
    windows (tests/test_es_probe.py)."""
    recent = [p for p in parts if p is not None]
    recent = recent[-window:] if window else recent
    signal, total = sum(s for s, _ in recent), sum(s + n for s, n in recent)
    left_out = [(signal - s) / (total - s - n) for s, n in recent if total - s - n > 1e-15]
    if len(recent) < 2 or len(left_out) < len(recent):
        return None
    mean = sum(left_out) / len(left_out)
    return math.sqrt((len(left_out) - 1) / len(left_out) * sum((x - mean) ** 2 for x in left_out))


def progress_field(parts: Sequence[Parts | None], warning: str | None) -> str:
    """The progress line's `signal=` field: the pooled share of the last WINDOW iterations with its
    standard error, then the whole run's (once it spans more), flagged while the warning holds.

    What it can tell: whether the update is mostly noise (the share well below NOISE_BELOW). What it
    cannot: with 8 pairs the WINDOW share's error is about 0.3, so its sign and its swings from one
    iteration to the next mean nothing while |share| is within about two errors of 0. The run's
    share is the figure to set beside the probe's (the same quantity, on many more pairs)."""
    share = pooled_share(parts)
    if share is None:
        return "-"
    text = _with_error(share, share_error(parts))
    defined = [p for p in parts if p is not None]
    run = pooled_share(defined, window=len(defined))
    if len(defined) > WINDOW and run is not None:
        text += f" (run {_with_error(run, share_error(defined, window=None))})"
    return text + (" NOISE" if warning else "")


def _with_error(share: float, error: float | None) -> str:
    return f"{share:.2f}" + ("" if error is None else f"±{error:.2f}")


class SignalMonitor:
    """The signal diagnostic of one ES run, kept beside the loop rather than in it.

        monitor = SignalMonitor(config.es, run.records())   # the parts of the lines kept so far
        line.update(monitor.observe(sample_rewards))         # es/signal_var, es/noise_var, es/signal_share
        monitor.warn(iteration, reporter)                    # once each time the run turns mostly noise
        bar.advance(..., signal=monitor.progress())
        monitor.summary()                                    # signal_share (and a warning) for the result

    A resumed run pools the parts of the lines it kept, so its figures are an uninterrupted run's."""

    def __init__(self, es: ESConfig, records: Sequence[dict[str, Any]]):
        self.es = es
        # (es/signal_var, es/noise_var) of every line so far (None where undefined): pooled over the last few
        self.parts: list[Parts | None] = [(r["es/signal_var"], r["es/noise_var"]) if "es/noise_var" in r else None
                                          for r in records]
        self.warning: str | None = None

    def observe(self, sample_rewards: Sequence[float]) -> dict[str, float]:
        """This iteration's `es/*` signal keys (each absent where undefined), its parts pooled from now on."""
        parts = iteration_variances(sample_rewards, self.es.population, self.es.antithetic)
        self.parts.append(parts)
        keys = {} if parts is None else {"es/signal_var": parts[0], "es/noise_var": parts[1]}
        share = pooled_share(self.parts)
        return keys if share is None else {**keys, "es/signal_share": share}

    def warn(self, iteration: int, reporter: Reporter) -> None:
        """Log the noise warning when it starts to hold; the progress line flags it throughout."""
        alert = noise_warning(self.parts, self.es)
        if alert and not self.warning:
            reporter.log(f"Warning (iteration {iteration}): {alert}")
        self.warning = alert

    def progress(self) -> str:
        """The last 5 iterations' share ± its error, then the whole run's: the window's sign is noise
        near 0 (`progress_field`); the run's is the figure to set beside the probe's."""
        return progress_field(self.parts, self.warning)

    def summary(self) -> dict[str, Any]:
        """The run's result keys: `signal_share`, and `warning` when the pooled share is mostly noise
        however short the run."""
        warning = noise_warning(self.parts, self.es, minimum=1)
        return {"signal_share": pooled_share(self.parts), **({"warning": warning} if warning else {})}
