"""Countdown: exact checking, seeded generation, solvable problems."""

import pytest

from prover_cli.tasks import get_task
from prover_cli.tasks.countdown import check_answer, extract_answer, generate_problems, completion_reward


@pytest.mark.parametrize("expr,numbers,target,ok", [
    ("(3 + 5) * 7", [3, 5, 7], 56, True),
    ("7 * (5 + 3)", [3, 5, 7], 56, True),
    ("7 / 2 * 4", [7, 2, 4], 14, True),          # exact fractions, not float
    ("(1 + 2) / 3", [1, 2, 3], 1, True),
    ("3 + 5", [3, 5, 7], 8, False),               # 7 unused
    ("3 + 5 + 7 + 7", [3, 5, 7], 22, False),      # 7 used twice
    ("(3 + 5) * 7", [3, 5, 7], 57, False),        # wrong value
    ("3 / (5 - 5) + 7", [3, 5, 5, 7], 7, False),  # division by zero is wrong, not a crash
    ("-3 + 5 + 7", [3, 5, 7], 9, False),          # unary minus invents a number
    ("3 ** 2 + 7 - 5", [3, 5, 7], 11, False),     # powers not allowed
    ("__import__('os')", [1], 1, False),          # no names or calls
    ("3.0 + 5 + 7", [3, 5, 7], 15, False),        # no floats
    ("35 + 7", [3, 5, 7], 42, False),             # digits cannot be glued
    ("(3 + 5", [3, 5], 8, False),
])
def test_check_answer(expr, numbers, target, ok):
    assert check_answer(expr, numbers, target) is ok


def test_a_malformed_answer_is_wrong_and_prints_no_warning():
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert check_answer("7 + 1or 8", [7, 1, 8], 8) is False   # parsed, with a SyntaxWarning unfiltered
        assert check_answer("1else", [1], 1) is False            # a SyntaxWarning, then a SyntaxError
        assert check_answer("(3 + 5) * 7", [3, 5, 7], 56) is True
    assert [str(w.message) for w in seen] == []


def test_extract_takes_last_answer():
    assert extract_answer("<answer>1+1</answer> no, <answer> 2 * 3 </answer>") == "2 * 3"
    assert extract_answer("no tags here") is None


def test_generation_is_seeded_and_solvable():
    a = generate_problems(50, 4, 20, seed=7)
    b = generate_problems(50, 4, 20, seed=7)
    c = generate_problems(50, 4, 20, seed=8)
    assert a == b and a != c
    assert len({p["id"] for p in a}) == 50
    for p in a:
        assert len(p["numbers"]) == 4 and all(1 <= n <= 20 for n in p["numbers"])
        assert isinstance(p["target"], int) and p["target"] > 0
        assert p["split"] in {"train", "valid"}


def test_task_rewards_batch():
    task = get_task("countdown")
    problem = {"id": "p", "numbers": [2, 3, 4], "target": 20}
    completions = ["<think>..</think><answer>(2 + 3) * 4</answer>", "<answer>2 * 3 * 4</answer>", ""]
    assert task.rewards([problem] * 3, completions) == [1.0, 0.0, 0.0]
    assert completion_reward("<answer>(2 + 3) * 4</answer>", problem) == 1.0
    prompt = task.build_prompt(problem, None, "plain")
    assert "[2, 3, 4]" in prompt and "20" in prompt
