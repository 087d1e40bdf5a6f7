"""pass@k: the unbiased estimator against values worked out by hand, grouping, errors."""

import pytest

from prover_cli.errors import InputError
from prover_cli.evaluate import group_verdicts, pass_at_k, pass_at_k_table


# Each value by hand from 1 - C(n-c, k) / C(n, k):
@pytest.mark.parametrize("n,c,k,expected", [
    (1, 0, 1, 0.0),
    (1, 1, 1, 1.0),
    (5, 0, 3, 0.0),            # c = 0: never solved
    (5, 5, 3, 1.0),            # c = n: always solved
    (5, 2, 1, 2 / 5),          # pass@1 = c / n
    (5, 2, 2, 1 - 3 / 10),     # C(3,2)=3, C(5,2)=10
    (5, 2, 3, 1 - 1 / 10),     # C(3,3)=1, C(5,3)=10
    (5, 2, 4, 1.0),            # n - c = 3 < k: every 4-subset holds a correct sample
    (10, 3, 5, 1 - 21 / 252),  # C(7,5)=21, C(10,5)=252
    (8, 1, 8, 1.0),
    (32, 4, 8, 1 - 3108105 / 10518300),  # C(28,8)=3108105, C(32,8)=10518300
    (200, 1, 1, 1 / 200),
])
def test_pass_at_k_by_hand(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_pass_at_k_is_stable_where_binomials_overflow_floats():
    # C(4000, 2000) is far beyond float range; the product form stays exact enough.
    # With c = 1, pass@k = k / n exactly.
    assert pass_at_k(4000, 1, 2000) == pytest.approx(0.5, rel=1e-12)
    assert 0.0 < pass_at_k(4000, 3, 10) < 1.0


def test_pass_at_k_rejects_k_above_n():
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def verdicts(pid, statuses, split=None, with_problem_id=True):
    rows = []
    for j, status in enumerate(statuses):
        row = {"id": f"{pid}/{j}", "verdict": status}
        if with_problem_id:
            row["problem_id"] = pid
        if split:
            row["split"] = split
        rows.append(row)
    return rows


def test_grouping_falls_back_to_id_and_anything_but_verified_fails():
    records = (verdicts("a", ["rejected", "rejected", "timeout", "error"], split="test")
               + verdicts("b", ["rejected", "rejected", "rejected", "rejected"], split="test", with_problem_id=False)
               + verdicts("c", ["verified", "verified", "verified", "verified"], split="valid")
               + [{"id": "a/0", "problem_id": "a", "verdict": "verified"}])   # the last line of an id is its verdict
    problems, superseded = group_verdicts(records, "v.jsonl")
    assert superseded == 1
    assert {pid: (p.n, p.c, p.split) for pid, p in problems.items()} == {
        "a": (4, 1, "test"), "b": (4, 0, "test"), "c": (4, 4, "valid")}
    result = pass_at_k_table(problems, [1, 2, 4], "v.jsonl")
    assert set(result) == {"test", "valid", "all"}
    assert result["test"]["pass@1"] == pytest.approx((1 / 4 + 0) / 2)
    assert result["test"]["pass@2"] == pytest.approx((1 - 3 / 6 + 0) / 2)  # a: 1 - C(3,2)/C(4,2)
    assert result["test"]["solved_any"] == 0.5
    assert result["all"]["pass@4"] == pytest.approx(2 / 3)
    assert result["all"]["verified"] == 5 and result["all"]["samples"] == 12


def test_k_above_a_problems_n_names_the_problem():
    problems, _ = group_verdicts(verdicts("big", ["verified"] * 8) + verdicts("small", ["rejected"] * 2), "v.jsonl")
    with pytest.raises(InputError, match=r"k = 4 exceeds the 2 sample\(s\) of problem 'small'"):
        pass_at_k_table(problems, [1, 4], "v.jsonl")


def test_records_without_verdict_or_ids_are_errors():
    with pytest.raises(InputError, match="record 1 .* has no `verdict`"):
        group_verdicts([{"id": "x/0", "problem_id": "x"}], "v.jsonl")
    with pytest.raises(InputError, match="neither `problem_id` nor `id`"):
        group_verdicts([{"verdict": "verified"}], "v.jsonl")
    with pytest.raises(InputError, match="no verdicts"):
        pass_at_k_table({}, [1], "v.jsonl")
