"""Held-out evaluation of the current weights: the one function ES and GRPO both call.

    from prover_cli.heldout import eval_due, evaluate_heldout, heldout_problems

    problems = heldout_problems(config)                       # chosen once per run
    if eval_due(config, iteration, last_iteration):
        record.update(evaluate_heldout(sampler, config, problems))   # {"eval/verified_rate": ...}

What is evaluated, and why it is the same for both methods:
- problems: the `data.valid_split` rows of the run's problems (the file, or for countdown and toy
  the problems generated from `run.seed`, exactly as training generates them); with
  `run.eval_problems = K > 0`, a fixed subset of K drawn once from `run.seed` (file order kept).
  Training never draws from that split (`data.train_split`).
- weights: whatever the sampler holds now. ES calls it after the iteration's update, when the
  live model holds the unperturbed center theta; GRPO calls it from a TrainerCallback after the
  optimizer step, on the policy (the fp32 master under the training compute dtype).
- sampling: `run.eval_n` samples per problem at `run.eval_temperature` (0 = greedy), with
  `generate.top_p` and `generate.max_tokens`, and ONE seed derived from `run.seed` that every
  evaluation reuses, so two evaluations differ only because the weights do.
- reward: the task's own batched `rewards(...)`: for Lean the same verify engine and warm REPL
  pool training uses (`keep_warm`), 1.0 only for `verified`.
- side effects: none on training. torch's global RNG states (CPU and CUDA) are saved before
  sampling and restored after, so a run with evaluation follows the same trajectory as one
  without (tested for GRPO, whose sampling uses the global generator).

The keys it returns (merged into that iteration's metrics.jsonl line, `EVAL_KEYS`):
`eval/verified_rate` (verified samples / samples), `eval/solved_rate` (problems with at least one
verified sample / problems), `eval/reward_mean`, `eval/verified`, `eval/samples`,
`eval/problems`, `eval/wall_s` (not counted in `time/wall_s`, so evaluation does not tax the
per-hour axis of `prover report`).
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import time
from typing import Any, Iterator, Sequence

from prover_cli.errors import InputError
from prover_cli.progress import NULL_REPORTER

EVAL_KEYS = ("eval/verified_rate", "eval/solved_rate", "eval/reward_mean", "eval/verified", "eval/samples",
             "eval/problems", "eval/wall_s")


def _derive_seed(*parts: Any, bits: int = 63) -> int:
    """A seed from its parts via sha256 (the rule es/train.py uses), stable across machines."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> (64 - bits)


def eval_due(config: Any, iteration: int, last_iteration: int) -> bool:
    """True every `run.eval_every` iterations and at the last one; never when it is 0."""
    every = config.run.eval_every
    return every > 0 and (iteration % every == 0 or iteration == last_iteration)


# --------------------------------------------------------------------------------------------
# Problems: the held-out split, or a fixed seeded subset of it
# --------------------------------------------------------------------------------------------

def heldout_problems(config: Any) -> list[dict[str, Any]]:
    """The `data.valid_split` problems (a fixed `run.eval_problems` subset when > 0), in file order."""
    problems, source = _all_problems(config)
    split = config.data.valid_split
    heldout = [p for p in problems if p.get("split") == split]
    if not heldout:
        raise InputError(f"{source}: no problems with split {split!r} for the held-out evaluation "
                         f"(data.valid_split, run.eval_every = {config.run.eval_every})",
                         hint="set data.valid_split to a split the problems have, or run.eval_every = 0")
    count = config.run.eval_problems
    if 0 < count < len(heldout):
        rng = random.Random(_derive_seed("heldout-problems", config.run.seed))
        keep = sorted(rng.sample(range(len(heldout)), count))
        heldout = [heldout[i] for i in keep]
    return heldout


def _all_problems(config: Any) -> tuple[list[dict[str, Any]], str]:
    from prover_cli.tasks import run_problems  # the problems training reads or generates

    problems, source, _ = run_problems(config)
    return problems, source


# --------------------------------------------------------------------------------------------
# Sampling and scoring
# --------------------------------------------------------------------------------------------

def heldout_params(config: Any):
    """Fixed sampling: the same n, temperature and seed at every evaluation of every run."""
    from prover_cli.samplers import SamplingParams

    return SamplingParams(n=config.run.eval_n, temperature=config.run.eval_temperature, top_p=config.generate.top_p,
                          max_tokens=config.generate.max_tokens,
                          seed=_derive_seed("heldout-sampling", config.run.seed, bits=31))


@contextlib.contextmanager
def preserved_torch_rng() -> Iterator[None]:
    """Restore torch's global CPU and CUDA generators afterwards: evaluation must not steer training."""
    import torch

    cpu = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


def evaluate_heldout(sampler: Any, config: Any, problems: Sequence[dict[str, Any]] | None = None, *,
                     task: Any = None, reporter: Any = NULL_REPORTER) -> dict[str, Any]:
    """Sample the held-out problems with the sampler's current weights and score them: `eval/*` keys.

    `sampler` is any prover sampler (`sampler.tokenizer`, `sampler.generate(prompts, params)`);
    `problems` defaults to `heldout_problems(config)`, `task` to `data.task`."""
    from prover_cli.tasks import get_task

    task = task if task is not None else get_task(config.data.task)
    problems = list(problems) if problems is not None else heldout_problems(config)
    params = heldout_params(config)
    started = time.monotonic()
    prompts = [task.build_prompt(p, sampler.tokenizer, config.model.family) for p in problems]
    with preserved_torch_rng():
        outputs = sampler.generate(prompts, params)
    completions = [sample.text for samples in outputs for sample in samples]
    scored = [p for p in problems for _ in range(params.n)]
    rewards = [float(r) for r in task.rewards(scored, completions, config, reporter=reporter)]
    verified = [r == 1.0 for r in rewards]
    solved = sum(any(verified[i * params.n:(i + 1) * params.n]) for i in range(len(problems)))
    return {
        "eval/verified_rate": sum(verified) / len(rewards),
        "eval/solved_rate": solved / len(problems),
        "eval/reward_mean": sum(rewards) / len(rewards),
        "eval/verified": sum(verified),
        "eval/samples": len(rewards),
        "eval/problems": len(problems),
        "eval/wall_s": time.monotonic() - started,
    }
