"""The ES population of one iteration: its problems, its sampling seed, each member's samples and rewards.

    batch = pick_problems(problems, run_seed, iteration, es.problems_per_iteration)   # same for every member
    texts = member_completions(sampler, weights, task, batch, config, iteration, member)  # perturb, sample, restore
    population = LocalPopulation(config); population.load_sampler()  # what train_es evaluates members with
    means, rewards, completions = population.evaluate(iteration, batch, reporter)

With `es.noise = "lora"` on vLLM, `LocalPopulation` generates every member of an iteration in one
engine call, each member a LoRA adapter (es/vllm_lora.py). The training loop (es/train.py, through a population), the probe (es/probe.py) and Modal's member
workers (es/member.py) all run `member_completions`, so a member's samples are the same wherever
it is evaluated. Sampling and scoring go through prover_cli/policy/rollout.py: a member's completions
are problem-major, and every member's samples of an iteration are scored in one task call
(member-major), so a Lean verify pool works on all of them at once.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from prover_cli import streams
from prover_cli.errors import ConfigError
from prover_cli.es.batched import BatchedMembers, check_batched, chunks
from prover_cli.es.noise.full import fp32
from prover_cli.es.update import member_noise, perturb_member
from prover_cli.es.vllm_lora import ENGINE_RANKS, LoRAMembers, engine_kwargs
from prover_cli.policy import rollout, samplers  # samplers.load_sampler through its module: tests replace it
from prover_cli.policy.samplers import SamplingParams
from prover_cli.policy.samplers.vllm_sampler import ES_WORKER_EXTENSION
from prover_cli.progress import Reporter
from prover_cli.tasks import get_task
from prover_cli.training.heldout import evaluate_heldout

if TYPE_CHECKING:
    from prover_cli.config import Config, ESConfig, GenerateConfig


# ---------------------------------------------------------------------------------------------
# Problems: the run's train split (prover_cli/tasks/problems.py), a seeded batch of it per iteration
# ---------------------------------------------------------------------------------------------

def pick_problems(problems: list[dict[str, Any]], run_seed: int, iteration: int, count: int) -> list[dict[str, Any]]:
    """The iteration's problems, the same for every member (stream `es-problems`, prover_cli/streams.py)."""
    return streams.es_problems_rng(run_seed, iteration).sample(problems, min(count, len(problems)))


# ---------------------------------------------------------------------------------------------
# Perturb and evaluate: each member samples with theta + sign * sigma * eps, then the weights
# are restored exactly (from the base copy). All samples are scored in one batch per iteration
# (prover_cli/policy/rollout.py), so a Lean verifier pool works on every member's proofs at once.
# ---------------------------------------------------------------------------------------------

def member_completions(sampler: Any, weights: Any, task: Any, batch: list[dict[str, Any]], config: Config,
                       iteration: int, member: int, *, sigma: float | None = None,
                       seed: int | None = None) -> list[str]:
    """One member's samples, problem-major: perturb, generate, restore. Also run by remote workers.

    `sigma` and `seed` replace es.sigma and the iteration's sampling seed (the probe, es/probe.py)."""
    es, gen = config.es, config.generate
    if seed is None:
        seed = streams.es_sampling_seed(config.run.seed, iteration)  # shared by every member
    params = SamplingParams(n=es.samples_per_problem, temperature=es.member_temperature, top_p=gen.top_p,
                            max_tokens=gen.max_tokens, seed=seed)
    noise_seed, sign = member_noise(config.run.seed, iteration, member, es.antithetic)
    perturb_member(weights, noise_seed, sign * fp32(es.sigma if sigma is None else sigma), es)
    try:
        return rollout.texts(rollout.sample(sampler, task, batch, params, config.model.family))
    finally:
        weights.restore()


# ---------------------------------------------------------------------------------------------
# The population seam: what the training loop (es/train.py) asks of wherever its members run.
# `LocalPopulation` evaluates them here, one after another, on the loop's own sampler; Modal's
# (on_modal/functions.py, ModalPopulation) fans them out to GPU containers. Either way the loop
# scores, updates and writes the ledger itself.
# ---------------------------------------------------------------------------------------------

class LocalPopulation:
    """An iteration's members and the held-out evaluation, in this process, on the loop's sampler.

        population.load_sampler()                             # the loop's sampler; its weights are theta
        means, rewards, texts = population.evaluate(iteration, batch, reporter)
        population.heldout(iteration, record, problems, reporter)  # eval/* keys of theta_iteration
        population.close()                                    # after the run, whether it ended or failed

    `members` is what a backend replaces: each member's completions, problem-major, or
    `{"completions": [...], "rewards": [...]}` already scored by the same `rollout.score` where it
    was sampled (Modal's pipelined schedule, on_modal/pipeline.py). A task's reward of a sample
    depends on that sample alone, so both give the same rewards; the update and the ledger stay in
    the loop. `heldout` here evaluates the live weights, which are theta_iteration once the loop has
    applied the iteration's update."""

    def __init__(self, config: Config):
        if config.es.batched_members:
            check_batched(config.es, config.generate)  # before anything loads
        check_noise(config.es, config.generate)
        self.config = config
        self.task = get_task(config.data.task)
        self.sampler: Any = None
        self.weights: Any = None
        self._batched: Any = None
        self._lora: Any = None

    def load_sampler(self) -> Any:
        self.sampler = load_es_sampler(self.config)
        self.weights = self.sampler.es_weights()
        return self.sampler

    def members(self, iteration: int, batch: list[dict[str, Any]]) -> list[Any]:
        es = self.config.es
        if lora_members(self.config):  # every member a LoRA adapter, one engine call (es/vllm_lora.py)
            if self._lora is None:
                self._lora = LoRAMembers(self.sampler)
            c = self.config
            return self._lora.completions(self.task, batch, iteration, range(es.population), es=es,
                                          generate=c.generate, run_seed=c.run.seed, family=c.model.family)
        if es.batched_members:  # es.batched_members members per `generate` call (es/batched.py)
            if self._batched is None:
                self._batched = BatchedMembers(self.sampler, self.weights)
            c = self.config
            return [texts for chunk in chunks(range(es.population), es.batched_members)
                    for texts in self._batched.completions(self.task, batch, iteration, chunk, es=es, generate=c.generate,
                                                           run_seed=c.run.seed, family=c.model.family)]
        return [member_completions(self.sampler, self.weights, self.task, batch, self.config, iteration, member)
                for member in range(es.population)]

    def evaluate(self, iteration: int, batch: list[dict[str, Any]],
                 reporter: Reporter) -> tuple[list[float], list[float], list[str]]:
        """(mean reward of each member, reward of every sample, every sample's completion in the
        rewards' order: member-major, then problem-major)."""
        return score_members(self.members(iteration, batch), self.task, batch, self.config, iteration, reporter)

    def heldout(self, iteration: int, record: dict[str, Any], problems: list[dict[str, Any]],
                reporter: Reporter) -> dict[str, Any]:
        """The held-out evaluation (heldout.py) of theta_iteration: here, the live weights."""
        return evaluate_heldout(self.sampler, self.config, problems, task=self.task, reporter=reporter)

    def close(self) -> None:
        """The LoRA path's temporary adapter directory goes; a backend also lets its workers go."""
        if self._lora is not None:
            self._lora.close()


def score_members(per_member: list[Any], task: Any, batch: list[dict[str, Any]], config: Config, iteration: int,
                  reporter: Reporter) -> tuple[list[float], list[float], list[str]]:
    """`LocalPopulation.evaluate` of what `members` returned: every unscored sample scored in one task
    call (member-major), or every member's rewards as scored elsewhere, checked (never both)."""
    es = config.es
    expected = len(batch) * es.samples_per_problem
    scored = [isinstance(m, dict) for m in per_member]
    texts = [m["completions"] if isinstance(m, dict) else m for m in per_member]
    if len(per_member) != es.population or any(len(c) != expected for c in texts):
        raise RuntimeError(f"iteration {iteration}: expected {es.population} members x {expected} samples")
    completions = [text for member in texts for text in member]  # member-major, then problem-major
    if all(scored):
        rewards = [r for m in per_member for r in _checked_rewards(task, m["rewards"], expected, iteration)]
    elif any(scored):
        raise RuntimeError(f"iteration {iteration}: some members came back scored and some not")
    else:
        rewards = rollout.score(task, batch * es.population, completions, config, reporter=reporter)
    per_member_count = len(rewards) // es.population
    means = [sum(rewards[m * per_member_count:(m + 1) * per_member_count]) / per_member_count
             for m in range(es.population)]
    return means, rewards, completions


def _checked_rewards(task: Any, rewards: Any, expected: int, iteration: int) -> list[float]:
    """Rewards scored in another container, refused unless they are what `rollout.score` returns:
    `expected` finite floats inside the task's `reward_range` (fail closed: never coerce)."""
    low, high = task.reward_range or (-math.inf, math.inf)
    if (not isinstance(rewards, list) or len(rewards) != expected
            or not all(type(r) is float and math.isfinite(r) and low <= r <= high for r in rewards)):
        raise RuntimeError(f"iteration {iteration}: a member's rewards are not {expected} finite floats in "
                           f"[{low}, {high}]: {str(rewards)[:200]}")
    return rewards


def check_noise(es: ESConfig, generate: GenerateConfig) -> None:
    """ConfigError unless `es.noise` can run on `generate.backend` (run start, before the model loads)."""
    if es.noise == "lowrank" and generate.backend != "transformers":
        raise ConfigError(f"es.noise = \"lowrank\" runs on the transformers sampler only, and generate.backend = "
                          f"{generate.backend!r}: it also perturbs the embedding, the head, the norms and the biases "
                          "(es/noise/lowrank.py), which a vLLM LoRA adapter cannot carry",
                          hint="set es.noise = \"lora\" (low-rank noise on the attention and MLP projections only, "
                               "one LoRA adapter per member), or generate.backend = \"transformers\"")
    if es.noise == "lora" and generate.backend == "vllm":
        if es.rank > ENGINE_RANKS[-1]:
            raise ConfigError(f"es.rank = {es.rank}: vLLM's LoRA takes ranks up to {ENGINE_RANKS[-1]} "
                              "(vllm/config/lora.py at 0.31.0)", hint=f"set es.rank <= {ENGINE_RANKS[-1]}")
    if es.noise == "lora" and es.batched_members:
        raise ConfigError(f"es.noise = \"lora\" with es.batched_members = {es.batched_members}: batched transformers "
                          "members are built for \"full\" and \"lowrank\" noise only",
                          hint="set es.batched_members = 0 (on vLLM the whole population is already one engine call)")


def lora_members(config: Config) -> bool:
    """Whether an iteration's members run as LoRA adapters in one vLLM engine call (es/vllm_lora.py)."""
    return config.es.noise == "lora" and config.generate.backend == "vllm"


def load_es_sampler(config: Config) -> Any:
    """The sampler of `generate.backend` for ES: vLLM gets the worker extension that perturbs in place,
    and with `es.noise = "lora"` its LoRA slots (es/vllm_lora.py engine_kwargs)."""
    if config.generate.backend == "vllm":
        extra: dict[str, Any] = {}
        if config.es.noise == "lora":
            extra["engine_kwargs"] = engine_kwargs(config.es)
        return samplers.load_sampler(config.model, config.generate, worker_extension_cls=ES_WORKER_EXTENSION, **extra)
    return samplers.load_sampler(config.model, config.generate)
