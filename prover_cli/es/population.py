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

import random
from typing import Any

from prover_cli import rollout
from prover_cli.es.noise import fp32
from prover_cli.es.update import member_noise
from prover_cli.progress import Reporter
from prover_cli.seeds import derive_seed


# ---------------------------------------------------------------------------------------------
# Seeds: every random choice is a pure function of (run seed, iteration, member); a member's
# noise seed (member_noise) lives with the update in es/update.py, which replay shares
# ---------------------------------------------------------------------------------------------

def sampling_seed(run_seed: int, iteration: int) -> int:
    """Shared by every member of the iteration (common random numbers); 31 bits suit any sampler."""
    return derive_seed("es-sampling", run_seed, iteration, bits=31)


# ---------------------------------------------------------------------------------------------
# Problems: the run's train split (prover_cli/problems.py), a seeded batch of it per iteration
# ---------------------------------------------------------------------------------------------

def pick_problems(problems: list[dict[str, Any]], run_seed: int, iteration: int, count: int) -> list[dict[str, Any]]:
    """The iteration's problems, the same for every member."""
    rng = random.Random(derive_seed("es-problems", run_seed, iteration))
    return rng.sample(problems, min(count, len(problems)))


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
        seed = sampling_seed(config.run.seed, iteration)
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

    `generate_population(iteration, batch) -> [completions of member 0, 1, ...]` lets a backend
    sample the members elsewhere (Modal fans them out to GPU workers, `es/member.py`); the
    rewards, the update and the ledger stay here either way.
    """
    es = config.es
    if generate_population is None:
        per_member = [member_completions(sampler, weights, task, batch, config, iteration, member)
                      for member in range(es.population)]
    else:
        per_member = generate_population(iteration, batch)
    expected = len(batch) * es.samples_per_problem
    if len(per_member) != es.population or any(len(c) != expected for c in per_member):
        raise RuntimeError(f"iteration {iteration}: expected {es.population} members x {expected} samples")
    completions = [text for member in per_member for text in member]  # member-major, then problem-major
    if completions_out is not None:
        completions_out.extend(completions)
    rewards = rollout.score(task, batch * es.population, completions, config, reporter=reporter)
    per_member = len(rewards) // es.population
    means = [sum(rewards[m * per_member:(m + 1) * per_member]) / per_member for m in range(es.population)]
    return means, rewards


def load_es_sampler(config: Any) -> Any:
    """The sampler of `generate.backend` for ES: vLLM gets the worker extension that perturbs in place."""
    from prover_cli.samplers import load_sampler

    if config.generate.backend == "vllm":
        from prover_cli.samplers.vllm_sampler import ES_WORKER_EXTENSION

        return load_sampler(config, worker_extension_cls=ES_WORKER_EXTENSION)
    return load_sampler(config)
