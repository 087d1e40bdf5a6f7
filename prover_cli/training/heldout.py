"""Held-out evaluation of the current weights: the one function ES and GRPO both call.

    from prover_cli.training.heldout import eval_due, evaluate_base, evaluate_heldout
    from prover_cli.tasks.problems import heldout_problems

    problems = heldout_problems(config)                       # chosen once per run (prover_cli/tasks/problems.py)
    append(base_record("es", task, evaluate_base(sampler, config, problems, fingerprint)))  # iteration 0
    if eval_due(config, iteration, last_iteration):
        record.update(evaluate_heldout(sampler, config, problems))   # {"eval/verified_rate": ...}

What is evaluated, and why it is the same for both methods:
- problems: the `data.valid_split` rows of the run's problems (the file, or for countdown and toy
  the problems generated from `run.seed`, exactly as training generates them), each problem once
  by content and none that is also a training problem (prover_cli/tasks/problems.py, `select_heldout`);
  with `run.eval_problems = K > 0`, a fixed subset of K drawn from `run.eval_problems_seed`, not
  from `run.seed`, so every seed, arm and training-set size is scored on one test set (file order
  kept). Training never draws from that split (`data.train_split`).
- weights: whatever the sampler holds now. ES calls it after the iteration's update, when the
  live model holds the unperturbed center theta; GRPO calls it from a TrainerCallback after the
  optimizer step, on the policy (the fp32 master under the training compute dtype).
- two metrics, always, because each method tends to improve the one that matches its training
  signal and a report showing one picks a winner by accident:
  * sampled: `run.eval_n` samples per problem at `run.eval_temperature`, with `generate.top_p`
    and `generate.max_tokens`, and ONE seed derived from `run.seed` that every evaluation reuses,
    so two evaluations differ only because the weights do;
  * greedy: one sample per problem at temperature 0 (at `run.eval_temperature = 0` the sampled
    metric is this one, evaluated once).
  Each comes with a 95% interval: Wilson over the samples with the sample size deflated by the
  design effect of samples sharing a problem (prover_cli/comparison/stats.py says why and when).
- the base: evaluated once, before training, and written as the iteration-0 line of the run
  (`base_record`). The result is cached under `model.cache_dir`, keyed by the base weights'
  fingerprint, the problems and the settings (`evaluate_base`), so ES and GRPO runs from the same
  base on the same problems start their curves at the very same point.
- reward: the task's own batched `rewards(...)`: for Lean the same verify engine and warm REPL
  pool training uses (`keep_warm`), 1.0 only for `verified`.
- side effects: none on training. torch's global RNG states (CPU and CUDA) are saved before
  sampling and restored after, so a run with evaluation follows the same trajectory as one
  without (tested for GRPO, whose sampling uses the global generator).

The keys it returns (merged into that iteration's metrics.jsonl line, `EVAL_KEYS`):
`eval/verified_rate` (sampled: verified samples / samples) with `eval/verified_rate_lo` and
`_hi`; `eval/greedy_verified_rate` with `_lo` and `_hi`; `eval/solved_rate` (problems with at
least one verified sample / problems), `eval/reward_mean`, `eval/verified`,
`eval/greedy_verified`, `eval/samples`, `eval/problems`, `eval/wall_s` (not counted in
`time/wall_s`, so evaluation does not tax the per-hour axis of `prover report`),
`eval/by_problem`: {problem id: [verified samples of the sampled metric, greedy verified 0/1]},
which lets `prover report` pair two runs problem by problem, and the test set's record:
`eval/problems_sha256` (its content fingerprint, 16 hex digits: `prover report` pairs two runs
only when theirs agree), `eval/duplicates_dropped` (`valid` rows of a problem already held out,
counted once) and `eval/train_overlap_dropped` (rows whose problem is also a training problem).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from prover_cli import streams
from prover_cli.comparison.stats import rate_interval
from prover_cli.fsio.jsonl import write_text_atomic
from prover_cli.policy import rollout
from prover_cli.policy.model_dir import weights_fingerprint
from prover_cli.policy.samplers import SamplingParams
from prover_cli.progress import NULL_REPORTER, Reporter
from prover_cli.tasks import get_task
from prover_cli.tasks.problems import heldout_problems, heldout_sha256

if TYPE_CHECKING:
    from prover_cli.config import Config
    from prover_cli.tasks import Task
    from prover_cli.training.run import Run

EVAL_KEYS = ("eval/verified_rate", "eval/verified_rate_lo", "eval/verified_rate_hi", "eval/greedy_verified_rate",
             "eval/greedy_verified_rate_lo", "eval/greedy_verified_rate_hi", "eval/solved_rate", "eval/reward_mean",
             "eval/verified", "eval/greedy_verified", "eval/samples", "eval/problems", "eval/wall_s", "eval/by_problem",
             "eval/problems_sha256", "eval/duplicates_dropped", "eval/train_overlap_dropped")


def eval_due(config: Config, iteration: int, last_iteration: int) -> bool:
    """True every `run.eval_every` iterations and at the last one; never when it is 0."""
    every = config.run.eval_every
    return every > 0 and (iteration % every == 0 or iteration == last_iteration)


# --------------------------------------------------------------------------------------------
# Sampling and scoring
# --------------------------------------------------------------------------------------------

def heldout_params(config: Config):
    """Fixed sampling: the same n, temperature and seed at every evaluation of every run."""

    return SamplingParams(n=config.run.eval_n, temperature=config.run.eval_temperature, top_p=config.generate.top_p,
                          max_tokens=config.generate.max_tokens, seed=streams.heldout_sampling_seed(config.run.seed))


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


def problem_keys(problems: Sequence[dict[str, Any]]) -> list[str]:
    """One key per problem for `eval/by_problem`: its `id` (or `name`), made unique by position if needed."""
    keys = [str(p.get("id", p.get("name", i))) for i, p in enumerate(problems)]
    if len(set(keys)) < len(keys):
        keys = [f"{i}:{key}" for i, key in enumerate(keys)]
    return keys


def _verified_counts(sampler: Any, config: Config, task: Task, problems: Sequence[dict[str, Any]], params: Any,
                     reporter: Reporter) -> tuple[list[int], list[float]]:
    """(verified samples per problem, every reward) for one decoding setting."""

    with preserved_torch_rng():
        completions = rollout.texts(rollout.sample(sampler, task, problems, params, config.model.family))
    rewards = rollout.score(task, problems, completions, config, reporter=reporter)
    counts = [sum(r == 1.0 for r in rewards[i * params.n:(i + 1) * params.n]) for i in range(len(problems))]
    return counts, rewards


def evaluate_heldout(sampler: Any, config: Config, problems: Sequence[dict[str, Any]] | None = None, *,
                     task: Task | None = None, reporter: Reporter = NULL_REPORTER) -> dict[str, Any]:
    """Sample the held-out problems with the sampler's current weights and score them: `eval/*` keys.

    Both metrics, each with its 95% interval (prover_cli/comparison/stats.py): the sampled verified rate
    (`run.eval_n` samples at `run.eval_temperature`) and the greedy one (one sample at temperature
    0). At `run.eval_temperature = 0` the two are one evaluation, made once.

    `sampler` is any prover sampler (`sampler.tokenizer`, `sampler.generate(prompts, params)`);
    `problems` defaults to `heldout_problems(config)`, `task` to `data.task`."""

    task = task if task is not None else get_task(config.data.task)
    problems = problems if problems is not None else heldout_problems(config)
    # What choosing the test set dropped travels with it (a HeldOutSet); a plain list dropped nothing.
    dropped = (getattr(problems, "duplicates_dropped", 0), getattr(problems, "train_overlap_dropped", 0))
    problems = list(problems)
    params = heldout_params(config)
    greedy = greedy_params(config)
    started = time.monotonic()
    if params.temperature == 0:  # greedy samples are all alike: the sampled metric is the greedy one
        params = greedy
    counts, rewards = _verified_counts(sampler, config, task, problems, params, reporter)
    greedy_counts = (counts if params is greedy
                     else _verified_counts(sampler, config, task, problems, greedy, reporter)[0])
    rate, low, high = rate_interval(counts, params.n)
    greedy_rate, greedy_low, greedy_high = rate_interval(greedy_counts, 1)
    return {
        "eval/verified_rate": rate,
        "eval/verified_rate_lo": low,
        "eval/verified_rate_hi": high,
        "eval/greedy_verified_rate": greedy_rate,
        "eval/greedy_verified_rate_lo": greedy_low,
        "eval/greedy_verified_rate_hi": greedy_high,
        "eval/solved_rate": sum(c > 0 for c in counts) / len(problems),
        "eval/reward_mean": sum(rewards) / len(rewards),
        "eval/verified": sum(counts),
        "eval/greedy_verified": sum(greedy_counts),
        "eval/samples": len(rewards),
        "eval/problems": len(problems),
        "eval/wall_s": time.monotonic() - started,
        "eval/by_problem": {key: [c, g] for key, c, g in zip(problem_keys(problems), counts, greedy_counts)},
        "eval/problems_sha256": heldout_sha256(problems),
        "eval/duplicates_dropped": dropped[0],
        "eval/train_overlap_dropped": dropped[1],
    }


def greedy_params(config: Config):
    """The greedy metric: one sample per problem at temperature 0, `generate.max_tokens` long."""

    return SamplingParams(n=1, temperature=0.0, top_p=1.0, max_tokens=config.generate.max_tokens,
                          seed=streams.heldout_sampling_seed(config.run.seed))


# --------------------------------------------------------------------------------------------
# The base: evaluated once, the first `eval/*` record (iteration 0) of every run that starts from it
# --------------------------------------------------------------------------------------------

BASE_CACHE_DIR = "heldout-base"
BASE_CACHE_VERSION = 2  # bump when evaluate_heldout changes what it computes (2: the test set's record)


def base_cache_key(config: Config, problems: Sequence[dict[str, Any]], weights_sha256: str) -> str:
    """sha256 over everything the base evaluation depends on: the weights, the problems, the settings.

    The sampler backend and device are left out on purpose: they change the numerics, not what is
    measured, and leaving them out is what lets an ES run (vLLM) and a GRPO run (transformers
    on the trainer's model) start from one shared base point."""
    params, greedy = heldout_params(config), greedy_params(config)
    inputs = {
        "version": BASE_CACHE_VERSION, "weights": weights_sha256, "task": config.data.task,
        "family": config.model.family,
        "problems": hashlib.sha256(json.dumps(list(problems), sort_keys=True).encode()).hexdigest(),
        "sampled": [params.n, params.temperature, params.top_p, params.max_tokens, params.seed],
        "greedy": [greedy.n, greedy.temperature, greedy.top_p, greedy.max_tokens],
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:24]


def evaluate_base(sampler: Any, config: Config, problems: Sequence[dict[str, Any]], weights_sha256: str, *,
                  task: Task | None = None, reporter: Reporter = NULL_REPORTER) -> dict[str, Any]:
    """`evaluate_heldout` of the base weights, computed once per cache key and reused after.

    The result is kept in `<model.cache_dir>/heldout-base/<key>.json` (written atomically, under
    a lock, so an ES and a GRPO run started together evaluate the base once between them)."""
    import fcntl

    directory = Path(config.model.cache_dir) / BASE_CACHE_DIR
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{base_cache_key(config, problems, weights_sha256)}.json"
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other run waits for this evaluation, then reads it
        try:
            cached = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(cached, dict) and "eval/verified_rate" in cached:
                reporter.log(f"held-out evaluation of the base: reused {path}")
                # The same problems may have come from rows with other duplicates: this run's counts.
                return {**cached, "eval/duplicates_dropped": getattr(problems, "duplicates_dropped", 0),
                        "eval/train_overlap_dropped": getattr(problems, "train_overlap_dropped", 0)}
        except (OSError, ValueError):
            pass  # absent or torn: evaluate again
        record = evaluate_heldout(sampler, config, problems, task=task, reporter=reporter)

        write_text_atomic(path, json.dumps(record, sort_keys=True, allow_nan=False) + "\n")  # rates: finite
        return record


def base_record(method: str, task: str, evaluation: dict[str, Any]) -> dict[str, Any]:
    """The iteration-0 metrics.jsonl line: the base's `eval/*` keys and zero counters (no training keys)."""
    return {"iteration": 0, "method": method, "task": task, "samples": 0, "samples/total": 0,
            "tokens": 0, "tokens/total": 0, "checks": 0, "checks/total": 0,
            "time/wall_s": 0.0, "time/elapsed_s": 0.0, **evaluation}


def weights_sha256(model: Any) -> str:
    """The fingerprint ES records for the base (policy/model_dir.py), from a torch module: fp32-promoted parameters."""

    class Promoted(dict):  # one fp32 copy at a time, not the whole model twice
        def __getitem__(self, name: str) -> Any:
            tensor = super().__getitem__(name).detach()
            return tensor.float() if tensor.is_floating_point() and tensor.element_size() < 4 else tensor

    return weights_fingerprint(Promoted(model.named_parameters()))


class HeldOutSchedule:
    """A run's held-out evaluation, kept out of the trainer's loop body: the problems (chosen once
    for the whole run; none when `run.eval_every` is 0), the base's iteration-0 line once, and the
    `eval/*` keys of the iterations `eval_due` picks (every `run.eval_every` and the last).

    `evaluate(problems)` is the trainer's own: it returns the `eval/*` keys of the weights it
    evaluates (ES: the population's center; GRPO: the Trainer's model)."""

    def __init__(self, config: Config, total: int):
        self.config, self.total = config, total
        self.problems = heldout_problems(config) if config.run.eval_every else []

    def due(self, iteration: int) -> bool:
        return eval_due(self.config, iteration, self.total)

    def write_base_line(self, run: Run, evaluate: Callable[[list[dict[str, Any]]], dict[str, Any]],
                        tracker: Any = None) -> None:
        """The base's evaluation as the iteration-0 line, when it is still due (`Run.base_line_due`)."""
        if run.base_line_due(self.problems):
            run.write_metrics(base_record(run.method, self.config.data.task, evaluate(self.problems)), tracker)

    def keys(self, iteration: int, evaluate: Callable[[list[dict[str, Any]]], dict[str, Any]]) -> dict[str, Any]:
        """The `eval/*` keys for `iteration`'s line: empty unless it is due."""
        return evaluate(self.problems) if self.due(iteration) else {}
