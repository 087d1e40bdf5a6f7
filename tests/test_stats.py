"""comparison/stats.py: the intervals, checked against values computed independently."""

import math

import pytest

from prover_cli.comparison.stats import design_effect, mean_interval, paired_difference, rate_interval, t975, wilson


def t_cdf_above_zero(q: float, df: int, steps: int = 4000) -> float:
    """P(0 < T < q) for Student's t with df degrees of freedom, by Simpson's rule on its density."""
    c = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))
    density = lambda x: c * (1 + x * x / df) ** (-(df + 1) / 2)  # noqa: E731
    h = q / steps
    total = density(0) + density(q) + sum((4 if i % 2 else 2) * density(i * h) for i in range(1, steps))
    return total * h / 3


@pytest.mark.parametrize("df", [1, 2, 3, 9, 29, 30, 35, 45, 60, 90, 150])
def test_t975_is_the_975_quantile(df):
    assert 0.5 + t_cdf_above_zero(t975(df), df) == pytest.approx(0.975, abs=2e-5)


def test_t975_tends_to_the_normal_quantile():
    assert 1.96 < t975(10_000) < 1.961
    with pytest.raises(ValueError):
        t975(0)


def test_wilson_matches_published_values():
    # Wilson (1927) score interval, 95%: 0/10 -> [0, 0.2775], 5/10 -> [0.2366, 0.7634], 10/10 -> [0.7225, 1].
    assert wilson(0, 10) == pytest.approx((0.0, 0.27753), abs=1e-5) and wilson(0, 10)[0] == 0.0
    assert wilson(7, 7)[1] == 1.0 and all(wilson(0, n)[0] == 0.0 for n in (1, 3, 12.5, 400))
    assert wilson(5, 10) == pytest.approx((0.23659, 0.76341), abs=1e-5)
    assert wilson(10, 10) == pytest.approx((0.72247, 1.0), abs=1e-5)


def test_rate_interval_counts_problems_when_samples_move_together():
    # Every problem all-solved or all-failed: 4 samples of one problem say no more than one does.
    counts = [4, 0, 0, 4, 0, 0, 0, 4, 0, 0]
    assert design_effect(counts, 4) == pytest.approx(4.0)
    rate, low, high = rate_interval(counts, 4)
    assert rate == pytest.approx(0.3) and (low, high) == pytest.approx(wilson(3, 10))
    assert (low, high) != pytest.approx(wilson(12, 40))  # the naive interval is narrower


def test_rate_interval_counts_samples_when_they_vary_within_problems():
    # Every problem half solved: no problem effect at all (the ICC estimate is negative, clipped to 0).
    counts = [2] * 10
    assert design_effect(counts, 4) == 1.0
    assert rate_interval(counts, 4)[1:] == pytest.approx(wilson(20, 40))


def test_rate_interval_in_between_and_edge_cases():
    counts = [4, 3, 0, 1, 0, 4, 2, 0, 0, 1]
    deff = design_effect(counts, 4)
    assert 1.0 < deff < 4.0
    # One-way ANOVA by hand: MSB = 4 * sum((p_i - p)^2) / 9, MSW = sum(4 p_i (1 - p_i)) / 30.
    means = [c / 4 for c in counts]
    p = sum(means) / 10
    msb = 4 * sum((x - p) ** 2 for x in means) / 9
    msw = sum(4 * x * (1 - x) for x in means) / 30
    assert deff == pytest.approx(1 + 3 * (msb - msw) / (msb + 3 * msw))
    assert rate_interval(counts, 4)[1:] == pytest.approx(wilson(p * 40 / deff, 40 / deff))
    # Greedy, one sample per problem: Wilson over problems.
    assert rate_interval([1, 0, 0, 1, 0], 1) == pytest.approx((0.4, *wilson(2, 5)))
    # Nothing verified: the problems are the unit, and the interval is not [0, 0].
    rate, low, high = rate_interval([0] * 20, 4)
    assert rate == low == 0.0 and high == pytest.approx(wilson(0, 20)[1]) and high > 0.1


def test_mean_interval_is_student_t():
    mean, low, high = mean_interval([1.0, 2.0, 3.0])
    half = 4.30265272975 * 1.0 / math.sqrt(3)  # sd 1, df 2
    assert (mean, low, high) == pytest.approx((2.0, 2.0 - half, 2.0 + half))
    assert mean_interval([0.25]) == (0.25, None, None)
    assert mean_interval([0.5, 0.5, 0.5]) == (0.5, 0.5, 0.5)


def test_paired_difference_pairs_by_problem_id():
    a = {"p1": 1.0, "p2": 0.5, "p3": 0.0}
    b = {"p3": 0.25, "p1": 0.5, "p2": 0.5}  # another order: paired by id, not position
    assert paired_difference(a, b) == [0.5, 0.0, -0.25]
    with pytest.raises(ValueError, match="not the same held-out problems .*p4"):
        paired_difference(a, {"p1": 0.0, "p2": 0.0, "p4": 0.0})


# -- tests and multiplicity (prover study report) ----------------------------------------------

from prover_cli.comparison.stats import (betainc, holm, paired_t_test, power_at, problems_needed, seeds_needed,  # noqa: E402
                              t_quantile, t_sf, variance_components)


@pytest.mark.parametrize("df", [1, 2, 5, 9, 30, 120])
def test_t_sf_agrees_with_the_quantile_table(df):
    assert t_sf(t975(df), df) == pytest.approx(0.025, abs=2e-6)
    assert t_quantile(0.975, df) == pytest.approx(t975(df), abs=1e-6)
    assert t_sf(0.0, df) == 0.5 and t_sf(-t975(df), df) == pytest.approx(0.975, abs=2e-6)


def test_t_sf_matches_closed_forms():
    # df = 1 is the Cauchy: P(T > t) = 1/2 - atan(t)/pi; df = 2: P(T > t) = (1 - t / sqrt(2 + t^2)) / 2.
    for t in (0.3, 1.0, 4.0):
        assert t_sf(t, 1) == pytest.approx(0.5 - math.atan(t) / math.pi, abs=1e-12)
        assert t_sf(t, 2) == pytest.approx((1 - t / math.sqrt(2 + t * t)) / 2, abs=1e-12)
    assert betainc(2, 3, 0.4) == pytest.approx(0.5248, abs=1e-12)  # I_0.4(2,3) = 1 - 0.6^4 - 4*0.4*0.6^3


def test_paired_t_test_by_hand():
    d = [0.1, 0.3, -0.1, 0.2]  # mean 0.125, sd 0.170782...
    sd = math.sqrt(sum((x - 0.125) ** 2 for x in d) / 3)
    two = paired_t_test(d)
    assert two["t"] == pytest.approx(0.125 / (sd / 2)) and two["p"] == pytest.approx(2 * t_sf(0.125 / (sd / 2), 3))
    ni = paired_t_test(d, margin=0.05, alternative="greater")  # H0: mean <= -0.05
    assert ni["t"] == pytest.approx(0.175 / (sd / 2)) and ni["p"] == pytest.approx(t_sf(0.175 / (sd / 2), 3))
    assert ni["p"] < two["p"] / 2  # the margin moves H0 away from the data
    assert paired_t_test([0.2])["p"] is None and paired_t_test([0.1, 0.1])["p"] is None  # no spread: no test
    with pytest.raises(ValueError):
        paired_t_test(d, alternative="less")


def test_holm_matches_a_hand_computed_case():
    # Sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> max so far 0.06.
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([0.02, None]) == [0.02, None]  # a comparison without a test is not counted
    assert holm([0.03]) == [0.03] and holm([]) == []


# -- power from a pilot: the formula against simulation -------------------------------------------

def _pilot(rng, seeds, problems, sd_train, sd_problem, shift=0.0):
    """Per-seed per-problem differences: a seed effect (training luck) plus per-problem noise."""
    out = []
    for _ in range(seeds):
        seed_effect = shift + rng.gauss(0.0, sd_train)
        out.append([seed_effect + rng.gauss(0.0, sd_problem) for _ in range(problems)])
    return out


def test_variance_components_recover_the_simulated_ones():
    import random

    rng = random.Random(31)
    estimates = [variance_components(_pilot(rng, 10, 50, 0.04, 0.4)) for _ in range(300)]
    mean_train = sum(e["var_train"] for e in estimates) / len(estimates)
    mean_eval = sum(e["var_eval_per_problem"] for e in estimates) / len(estimates)
    assert 0.0016 * 0.8 < mean_train < 0.0016 * 1.25  # clipping at 0 biases it up a little; far from flipping
    assert mean_eval == pytest.approx(0.16, rel=0.03)
    with pytest.raises(ValueError):
        variance_components([[0.1, 0.2]])


@pytest.mark.parametrize("sided", [1, 2])
def test_seeds_needed_give_the_power_asked_in_simulation(sided):
    import random

    var_train, var_eval, problems, margin, alpha = 0.03 ** 2, 0.4 ** 2, 100, 0.05, 0.05
    k = seeds_needed(var_train, var_eval, problems, margin, alpha=alpha, power=0.8, sided=sided)
    assert k == seeds_needed(var_train, var_eval, problems, margin, alpha=alpha, power=0.8, sided=sided)
    assert 4 <= k <= 20
    assert power_at(var_train, var_eval, problems, k, margin, alpha=alpha, sided=sided) >= 0.8
    assert power_at(var_train, var_eval, problems, k - 1, margin, alpha=alpha, sided=sided) < 0.8
    rng = random.Random(2026 + sided)
    trials, rejected = 1000, 0
    sd = math.sqrt(var_train + var_eval / problems)
    for _ in range(trials):  # per-seed differences: true distance `margin` from H0
        d = [rng.gauss(margin if sided == 2 else 0.0, sd) for _ in range(k)]
        result = (paired_t_test(d) if sided == 2 else paired_t_test(d, margin=margin, alternative="greater"))
        rejected += result["p"] < alpha and (sided == 1 or result["mean"] > 0)
    assert 0.72 < rejected / trials < 0.92  # 0.8 asked; binomial sd 0.013: bounds 6 sd away
    # Under H0 (distance 0) the same test rejects about alpha (non-inferiority: at the margin exactly).
    null = sum((paired_t_test([rng.gauss(0.0 if sided == 2 else -margin, sd) for _ in range(k)],
                              margin=margin if sided == 1 else 0.0,
                              alternative="greater" if sided == 1 else "two-sided")["p"] < alpha)
               for _ in range(trials)) / trials
    assert 0.02 < null < 0.085


def test_problems_needed_inverts_the_formula():
    var_train, var_eval, margin = 0.02 ** 2, 0.4 ** 2, 0.05
    n = problems_needed(var_train, var_eval, 12, margin)
    assert seeds_needed(var_train, var_eval, n, margin) <= 12 < seeds_needed(var_train, var_eval, max(1, n // 2), margin)
    # Training luck alone too large for 3 seeds: no test set is big enough.
    assert problems_needed(0.1 ** 2, var_eval, 3, margin) is None
    assert problems_needed(var_train, 0.0, 12, margin) == 1
