"""The ES population of one iteration: its problems, its sampling seed, each member's samples and rewards.

    batch = pick_problems(problems, run_seed, iteration, es.problems_per_iteration)   # same for every member
    texts = member_completions(sampler, weights, task, batch, config, iteration, member)  # perturb, sample, restore
    means, rewards = evaluate_population(sampler, weights, task, batch, config, iteration, reporter)

The training loop (es/train.py), the probe (es/probe.py) and Modal's member workers (es/member.py)
all run these, so a member's samples are the same wherever it is evaluated. Sampling and scoring
go through prover_cli/rollout.py: a member's completions are problem-major, and every member's
samples of an iteration are scored in one task call (member-major), so a Lean verify pool works
on all of them at once.
"""

from __future__ import annotations

import math
from typing import Any

from prover_cli import rollout, streams
from prover_cli.es.noise import fp32
from prover_cli.es.update import member_noise
from prover_cli.progress import Reporter


# ---------------------------------------------------------------------------------------------
# Problems: the run's train split (prover_cli/problems.py), a seeded batch of it per iteration
# ---------------------------------------------------------------------------------------------

def pick_problems(problems: list[dict[str, Any]], run_seed: int, iteration: int, count: int) -> list[dict[str, Any]]:
    """The iteration's problems, the same for every member (stream `es-problems`, prover_cli/streams.py)."""
    return streams.es_problems_rng(run_seed, iteration).sample(problems, min(count, len(problems)))


# ---------------------------------------------------------------------------------------------
# Perturb and evaluate: each member samples with theta + sign * sigma * eps, then the weights
# are restored exactly (from the base copy). All samples are scored in one batch per iteration
# (prover_cli/rollout.py), so a Lean verifier pool works on every member's proofs at once.
# ---------------------------------------------------------------------------------------------

def member_completions(sampler: Any, weights: Any, task: Any, batch: list[dict[str, Any]], config: Any,
                       iteration: int, member: int, *, sigma: float | None = None,
                       seed: int | None = None) -> list[str]:
    """One member's samples, problem-major: perturb, generate, restore. Also run by remote workers.

    `sigma` and `seed` replace es.sigma and the iteration's sampling seed (the probe, es/probe.py)."""
    from prover_cli.samplers import SamplingParams

    es, gen = config.es, config.generate
    if seed is None:
        seed = streams.es_sampling_seed(config.run.seed, iteration)  # shared by every member
    params = SamplingParams(n=es.samples_per_problem, temperature=es.member_temperature, top_p=gen.top_p,
                            max_tokens=gen.max_tokens, seed=seed)
    noise_seed, sign = member_noise(config.run.seed, iteration, member, es.antithetic)
    weights.perturb(noise_seed, sign * fp32(es.sigma if sigma is None else sigma))
    try:
        return rollout.texts(rollout.sample(sampler, task, batch, params, config.model.family))
    finally:
        weights.restore()


def evaluate_population(sampler: Any, weights: Any, task: Any, batch: list[dict[str, Any]], config: Any,
                        iteration: int, reporter: Reporter,
                        generate_population: Any = None,
                        completions_out: list[str] | None = None) -> tuple[list[float], list[float]]:
    """(mean reward of each member, reward of every sample); `completions_out`, when given, receives
    every sample's completion text in the rewards' order (the trainer counts their tokens).

    `generate_population(iteration, batch) -> [member 0, member 1, ...]` lets a backend sample the
    members elsewhere (Modal fans them out to GPU workers, `es/member.py`). Each member is either
    its completions (the barrier schedule: every sample is scored here, in one task call) or
    `{"completions": [...], "rewards": [...]}`, already scored by the same `rollout.score` where it
    was sampled (the pipelined schedule, on_modal/pipeline.py). A task's reward of a sample depends
    on that sample alone, so both give the same rewards; the update and the ledger stay here.
    """
    es = config.es
    if generate_population is None:
        per_member: list[Any] = [member_completions(sampler, weights, task, batch, config, iteration, member)
                                 for member in range(es.population)]
    else:
        per_member = generate_population(iteration, batch)
    expected = len(batch) * es.samples_per_problem
    scored = [isinstance(m, dict) for m in per_member]
    texts = [m["completions"] if isinstance(m, dict) else m for m in per_member]
    if len(per_member) != es.population or any(len(c) != expected for c in texts):
        raise RuntimeError(f"iteration {iteration}: expected {es.population} members x {expected} samples")
    completions = [text for member in texts for text in member]  # member-major, then problem-major
    if completions_out is not None:
        completions_out.extend(completions)
    if all(scored):
        rewards = [r for m in per_member for r in _checked_rewards(task, m["rewards"], expected, iteration)]
    elif any(scored):
        raise RuntimeError(f"iteration {iteration}: some members came back scored and some not")
    else:
        rewards = rollout.score(task, batch * es.population, completions, config, reporter=reporter)
    per_member_count = len(rewards) // es.population
    means = [sum(rewards[m * per_member_count:(m + 1) * per_member_count]) / per_member_count
             for m in range(es.population)]
    return means, rewards


def _checked_rewards(task: Any, rewards: Any, expected: int, iteration: int) -> list[float]:
    """Rewards scored in another container, refused unless they are what `rollout.score` returns:
    `expected` finite floats inside the task's `reward_range` (fail closed: never coerce)."""
    low, high = task.reward_range or (-math.inf, math.inf)
    if (not isinstance(rewards, list) or len(rewards) != expected
            or not all(type(r) is float and math.isfinite(r) and low <= r <= high for r in rewards)):
        raise RuntimeError(f"iteration {iteration}: a member's rewards are not {expected} finite floats in "
                           f"[{low}, {high}]: {str(rewards)[:200]}")
    return rewards


def load_es_sampler(config: Any) -> Any:
    """The sampler of `generate.backend` for ES: vLLM gets the worker extension that perturbs in place."""
    from prover_cli.samplers import load_sampler

    if config.generate.backend == "vllm":
        from prover_cli.samplers.vllm_sampler import ES_WORKER_EXTENSION

        return load_sampler(config.model, config.generate, worker_extension_cls=ES_WORKER_EXTENSION)
    return load_sampler(config.model, config.generate)
