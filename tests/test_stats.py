"""stats.py: the intervals, checked against values computed independently."""

import math

import pytest

from prover_cli.stats import design_effect, mean_interval, paired_difference, rate_interval, t975, wilson


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
