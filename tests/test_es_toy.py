"""tasks/toy.py: deterministic problems, graded digit reward."""

from prover_cli.tasks import get_task
from prover_cli.tasks.toy import generate_problems, completion_reward


def test_problems_are_a_pure_function_of_the_seed_with_both_splits():
    problems = generate_problems(200, seed=3)
    assert problems == generate_problems(200, seed=3) and problems != generate_problems(200, seed=4)
    assert len({p["id"] for p in problems}) == 200
    assert {p["split"] for p in problems} == {"train", "valid"}


def test_reward_is_the_fraction_of_non_space_characters_that_are_digits():
    task = get_task("toy")
    problem = generate_problems(1, seed=0)[0]
    assert task.build_prompt(problem, None, "plain") == problem["prompt"]
    assert task.rewards([problem] * 4, ["1 2 3", "a1", "", "   "]) == [1.0, 0.5, 0.0, 0.0]
    assert completion_reward("12ab") == 0.5
