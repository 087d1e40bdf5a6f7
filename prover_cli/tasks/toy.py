"""Toy: an objective the tiny random model learns in seconds on CPU (ES tests, demos, benchmarks).

Reward = the fraction of the completion's non-space characters that are digits (0 for an empty
completion). A random 512-token model writes a digit a few percent of the time, so there is
signal from the first iteration, and the reward is graded rather than 0/1, so small weight
changes show up in it. Prompts are plain text (no chat template) to keep generation short.
Problems are generated from a seed, like countdown's, so no prepare-data step is needed.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any, Sequence

from prover_cli.progress import Reporter
from prover_cli.tasks import register_task

if TYPE_CHECKING:
    from prover_cli.config import Config

DEFAULT_COUNT = 256  # problems generated when no problems file exists
TARGET = frozenset("0123456789")


def generate_problems(count: int, seed: int) -> list[dict[str, Any]]:
    """`count` problems, a pure function of the arguments (about 10% in split `valid`)."""
    rng = random.Random(f"toy:{seed}")
    problems: list[dict[str, Any]] = []
    for index in range(count):
        digits = " ".join(str(rng.randint(0, 9)) for _ in range(3))
        problems.append({
            "id": f"toy_{seed}_{index:05d}",
            "prompt": f"Continue with digits only: {digits}",
            "split": "valid" if rng.random() < 0.1 else "train",
            "source": f"toy(seed={seed})",
        })
    return problems


def completion_reward(completion: str) -> float:
    characters = [c for c in completion if not c.isspace()]
    return sum(c in TARGET for c in characters) / len(characters) if characters else 0.0


@register_task("toy")
class ToyTask:
    name = "toy"
    problem_fields = {"prompt": (str, True)}
    reward_range = (0.0, 1.0)  # a fraction of characters

    def problems_from_seed(self, config: Config, count: int) -> list[dict[str, Any]]:
        return generate_problems(count or DEFAULT_COUNT, seed=config.run.seed)

    def content_key(self, problem: dict[str, Any]) -> str | None:
        """The prompt up to whitespace; None for a row without a prompt."""
        if isinstance(problem.get("prompt"), str):
            return "toy|" + " ".join(problem["prompt"].split())
        return None

    def build_prompt(self, problem: dict[str, Any], tokenizer: Any, family: str) -> str:
        return problem["prompt"]

    def rewards(self, problems: Sequence[dict[str, Any]], completions: Sequence[str], config: Config | None = None,
                reporter: Reporter | None = None) -> list[float]:
        if len(problems) != len(completions):
            raise ValueError(f"{len(problems)} problems for {len(completions)} completions")  # a caller bug
        return [completion_reward(c) for c in completions]
