"""Rollouts: sample completions of problems with a sampler's current weights, score them through the task.

    from prover_cli.policy import rollout

    outputs = rollout.sample(sampler, task, problems, params, family)        # [problem][sample] Samples
    completions = rollout.texts(outputs)                                     # problem-major, flat
    rewards = rollout.score(task, problems, completions, config)             # one reward each, ONE task call

Everyone who samples or scores goes through here: ES members (es/population.py, which the
training loop, the probe and Modal's member workers run), the held-out evaluation both trainers
run (heldout.py), `prover generate` and `prover eval` (generate.py, evaluate.py), GRPO's reward
function (grpo/train.py: TRL samples, we score) and the demo's base evaluation (demo.py). So a task, a sampler or a third trainer plugs in at one place.

The order is the contract (ledgers, `generate` resume and the tests' digests depend on it):
- completions are problem-major: problem 0's `params.n` samples, then problem 1's, and so on;
- `score` repeats each problem once per completion it has, in that order, and hands the whole
  batch to `task.rewards` in one call, so a Lean verify pool sees every proof at once. Several
  members scored together are `score(task, batch * members, ...)`: member-major, then problem-major;
- seeds: without `seeds` the sampler seeds the call from `params.seed` (ES: one seed shared by
  every member of an iteration; held-out: one seed every evaluation reuses); with one seed per
  problem (`generate`), each problem's samples depend on its own seed only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from prover_cli.config import Config
    from prover_cli.progress import Reporter


def prompts(task: Any, problems: Sequence[dict[str, Any]], tokenizer: Any, family: str) -> list[str]:
    """The text fed to the model for each problem, in order."""
    return [task.build_prompt(p, tokenizer, family) for p in problems]


def sample(sampler: Any, task: Any, problems: Sequence[dict[str, Any]], params: Any, family: str, *,
           seeds: Sequence[int] | None = None) -> list[list[Any]]:
    """`params.n` samples of each problem with the sampler's current weights: [problem][sample]."""
    texts_in = prompts(task, problems, sampler.tokenizer, family)
    return sampler.generate(texts_in, params) if seeds is None else sampler.generate(texts_in, params, seeds=seeds)


def texts(outputs: Sequence[Sequence[Any]]) -> list[str]:
    """The completions of `sample`'s outputs, problem-major."""
    return [s.text for samples in outputs for s in samples]


def score(task: Any, problems: Sequence[dict[str, Any]], completions: Sequence[str], config: Config, *,
          reporter: Reporter | None = None) -> list[float]:
    """One reward per completion (problem-major, the same count for every problem), in one task call."""
    if not problems or len(completions) % len(problems):
        raise ValueError(f"{len(completions)} completions are not the same number for each of {len(problems)} problems")
    per_problem = len(completions) // len(problems)
    scored = [p for p in problems for _ in range(per_problem)]
    return [float(r) for r in task.rewards(scored, list(completions), config, reporter=reporter)]
