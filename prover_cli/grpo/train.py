"""GRPO through TRL's `GRPOTrainer`: thin glue around our task reward, nothing more.

    prover train grpo --config configs/demo.toml                 # tiny model, countdown, CPU
    prover train grpo --config configs/demo.toml --resume        # continue from the last checkpoint
    prover train grpo --config configs/kimina-grpo.toml --backend modal

What happens, top to bottom:
1. problems: the run's `data.train_split` (prover_cli/tasks/problems.py, what ES trains on too:
   countdown and toy problems are generated from `run.seed` when `data.problems` is left empty
   and the run has none, and written to `problems.jsonl`; a named file that does not exist is
   an error);
2. dataset: one already chat-templated `prompt` string per problem plus the problem's columns;
3. reward: the task's batched reward through prover_cli/policy/rollout.py in TRL's reward signature,
   so ES, GRPO and `prover verify` share one reward path (Lean: 1.0 only for `verified`);
4. `GRPOConfig`: every `[grpo]` key, and every TRL default we depend on, set explicitly;
5. metrics: a callback (grpo/trl_glue.py) appends one `metrics.jsonl` line per optimizer step,
   built by the run's one builder of the line ES writes too (`Run.line`, prover_cli/training/run.py),
   with the held-out `eval/*` keys on the steps `HeldOutSchedule` picks (prover_cli/training/heldout.py,
   what ES uses) and streams it to `run.report_to` (prover_cli/training/tracking.py, the logger ES uses);
6. train, checkpointing into `checkpoints/` every `grpo.save_every` steps, then save `final/`
   (safetensors model + tokenizer), whole or not at all.

Precision: with `model.dtype` bfloat16/float16 the policy trains fp32 master weights (fp32
parameters, gradients and AdamW moments; forward/backward under the Trainer's autocast in the
model dtype), TRL 1.16's own default for a model given by path (`load_policy`); `final/` holds
the fp32 master. `grpo.fp32_master = false` trains the low-precision weights directly.

Resuming (`--resume`): transformers' Trainer saves the weights, optimizer, scheduler and RNG
states every `grpo.save_every` steps (the last 2 kept); `--resume` continues from the newest
complete checkpoint, drops the metrics lines written after it and keeps `samples/total` (and the
`tokens` and `checks` totals) and `time/elapsed_s` counting from the last kept line. On CPU the resumed run ends with the same
weights, bit for bit, as an uninterrupted one (tested). A run whose newest checkpoint is at
`grpo.steps` is complete: `--resume` says so and changes nothing. Without `--resume` an existing
`metrics.jsonl` or `checkpoints/` is refused rather than overwritten, as `train es` refuses an
existing ledger; a config that differs from the run's `config.toml` where it changes the
trajectory is refused on resume.

Choices that differ from TRL 1.16's defaults, and why:
- `loss_type = "grpo"` (TRL: `dapo`) and `scale_rewards = "group"`: the DeepSeekMath GRPO
  objective, the one the ES-at-scale comparison used; both are `[grpo]` keys.
- constant learning rate (TRL/transformers: linear decay to 0 over `max_steps`): ES takes a
  constant step, and a schedule that depends on `steps` would make short and long runs differ.
- one gradient step per generation batch (`num_iterations = 1`, `steps_per_generation =
  gradient_accumulation_steps`): every optimizer step scores fresh samples, so one step is one
  `iteration` of `metrics.jsonl`, as one ES iteration is.
- progress goes to our reporter; transformers' printer (which writes to stdout) is removed so
  `--json` output stays clean.
- prompt order is a pure function of (`run.seed`, epoch): TRL's sampler draws each epoch's
  permutation from one generator that a checkpoint does not save, so a resume past the first
  epoch would otherwise replay epoch 0's order.
Not covered: multi-process (DDP) training: metrics count the samples of this process only.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from prover_cli import streams
from prover_cli.grpo.resume import CHECKPOINTS_DIR, checkpoint_point, open_run
from prover_cli.grpo.trl_glue import (HeldOutEvaluation, StepRewards, build_dataset, check_batch_shape, grpo_args,
                                      load_policy, make_metrics_callback, place_trl_tensorboard, problem_columns,
                                      resumable_trainer_class)
from prover_cli.policy import rollout
from prover_cli.policy.model_dir import refuse_non_finite, same_weights, save_atomically, save_tokenizer
from prover_cli.progress import NULL_REPORTER, Reporter
from prover_cli.tasks import get_task
from prover_cli.tasks.problems import train_problems
from prover_cli.training.heldout import HeldOutSchedule
from prover_cli.training.metrics import completion_tokens
from prover_cli.training.run import Run
from prover_cli.training.tracking import open_tracker

if TYPE_CHECKING:
    from prover_cli.config import Config
    from prover_cli.tasks import Task


def train_grpo(config: Config, *, resume: bool = False, reporter: Reporter = NULL_REPORTER) -> dict[str, Any]:
    """Train with GRPO; write `config.toml`, `metrics.jsonl`, `checkpoints/` and `final/` into `run.dir`.

    Whatever transformers, TRL or a tracker prints meanwhile (transformers announces W&B offline
    mode on import, trackio its run) goes to stderr: with --json, stdout carries the result only."""
    with contextlib.redirect_stdout(sys.stderr):
        return _train_grpo(config, resume=resume, reporter=reporter)


def _train_grpo(config: Config, *, resume: bool, reporter: Reporter) -> dict[str, Any]:
    check_batch_shape(config)
    run_dir = config.run_dir
    run = open_run(config, resume, reporter)
    point = run.resume(lambda: checkpoint_point(config, reporter))  # metrics cut to the checkpoint
    checkpoint = point.source if point is not None else None
    if point is not None and run.complete:
        return finished_run(run, point.source)  # nothing to train: change nothing but a stale final/
    task = get_task(config.data.task)
    problems = train_problems(config, reporter, save_generated=True)  # before the model: a missing file fails fast
    heldout = HeldOutSchedule(config, config.grpo.steps)  # its problems fixed for the whole run

    run.begin()  # the metrics line's running totals continue from the last kept line
    kept = run.records()  # lines up to the checkpoint (none when starting from scratch)
    resumed_from = run.done

    model, tokenizer, device, compute_dtype = load_policy(config)
    cuda = device.startswith("cuda")
    dataset = build_dataset(problems, task, tokenizer, config.model.family)
    stats = StepRewards()
    reward_fn = make_reward_function(task, config, stats, columns=problem_columns(problems), tokenizer=tokenizer)

    args = grpo_args(config, output_dir=run_dir / CHECKPOINTS_DIR, cuda=cuda, compute_dtype=compute_dtype)
    samples_per_step = config.grpo.per_device_train_batch_size * config.grpo.gradient_accumulation_steps
    reporter.log(
        f"GRPO on {len(problems)} {config.data.task} problems ({config.data.train_split}): "
        f"{config.grpo.steps} steps x {samples_per_step // config.grpo.num_generations} prompts x "
        f"{config.grpo.num_generations} completions = {samples_per_step} samples/step, device {device}, "
        f"weights {model.dtype}, compute {compute_dtype}".replace("torch.", "")
    )

    from transformers import PrinterCallback, ProgressCallback

    with reporter.task("grpo", total=config.grpo.steps, unit="steps") as progress, warnings.catch_warnings(), \
            open_tracker(config.run, hyperparameters=config.to_dict(), resumed_from=resumed_from) as tracker:
        # TRL 1.16 still calls the old name inside the trainer; nothing for the user to change.
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.* is deprecated", category=FutureWarning)
        progress.advance(resumed_from)
        evaluation = HeldOutEvaluation(config, task, heldout.problems, tokenizer, compute_dtype, reporter)
        callback = make_metrics_callback(stats, progress, run=run, heldout=heldout, evaluation=evaluation,
                                         tracker=tracker)
        trainer = resumable_trainer_class()(model=model, reward_funcs=reward_fn, args=args, train_dataset=dataset,
                                            processing_class=tokenizer, callbacks=[callback])
        evaluation.trainer = trainer
        for printer in (PrinterCallback, ProgressCallback):  # both print to stdout
            trainer.remove_callback(printer)
        place_trl_tensorboard(trainer, run_dir)
        # The Trainer restores weights, optimizer, scheduler, step and RNG states, and skips the
        # batches the checkpointed steps consumed.
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)

    save_final(trainer.model, tokenizer, run.final_dir)  # the fp32 master: nothing trained is lost
    return summarize(kept + callback.records, run.final_dir, run.metrics_path, resumed_from)


def save_final(model: Any, tokenizer: Any, final_dir: Path) -> None:
    """final/ := the model and tokenizer, whole or not at all (model_dir.save_atomically), as `train es` does.

    The model is saved in its parameters' dtype: with fp32 master weights `config.json` says
    `"dtype": "float32"`; cast on load (`from_pretrained(..., dtype=torch.bfloat16)`) to serve.
    Weights holding NaN or inf (a diverged run) are refused before anything is written; the old
    final/ is kept."""

    def write(out: Path) -> None:
        refuse_non_finite(model.state_dict().items(), out)
        model.save_pretrained(out)  # safetensors (the transformers >= 4.x default)
        save_tokenizer(tokenizer, out)  # as loaded: no padding state from sampling

    save_atomically(final_dir, write)


# Trainer checkpoint files that are training state, not the model (final/ gets everything else).
_TRAINING_STATE_FILES = ("optimizer.pt", "scheduler.pt", "scaler.pt", "trainer_state.json", "training_args.bin")


def finished_run(run: Run, checkpoint: Path) -> dict[str, Any]:
    """--resume on a run whose newest checkpoint is at `grpo.steps`: train nothing.

    `final/` must be that checkpoint's model; a kill after the checkpoint but before the final
    save leaves it missing or stale, and then it is rebuilt from the checkpoint's model files
    (Run.settle_final). metrics.jsonl and the checkpoints are left untouched."""

    def model_files(out: Path) -> None:  # the checkpoint without its training state
        for path in sorted(checkpoint.iterdir()):
            if path.name in _TRAINING_STATE_FILES or path.name.startswith("rng_state"):
                continue
            (shutil.copytree if path.is_dir() else shutil.copy2)(path, out / path.name)

    run.settle_final(lambda final: same_weights(final, checkpoint), model_files, source=checkpoint.name)
    records = [r for r in run.records() if r.get("iteration", 0) <= run.total]
    result = summarize(records, run.final_dir, run.metrics_path, resumed_from=run.total)
    result["complete"] = True
    return result


# --------------------------------------------------------------------------------------------
# Reward: the task's batched reward in TRL's signature
# --------------------------------------------------------------------------------------------

def make_reward_function(task: Task, config: Config, stats: StepRewards, columns: list[str],
                         tokenizer: Any = None) -> Callable[..., list[float]]:
    """TRL reward function: `(prompts, completions, **dataset_columns) -> one float each`.

    TRL passes each dataset column as a list aligned with `completions` (prompts repeated
    `num_generations` times); we rebuild the problem dicts and score the whole generation batch
    in ONE task call, so Lean verification runs as one batch through the verify pool.
    With `grpo.shuffle_rewards` (the null control) TRL gets each group's rewards permuted
    (`shuffle_in_groups`); `stats` keeps the true ones for metrics.jsonl, and, given the policy's
    `tokenizer`, the completions' tokens counted as ES counts them (`metrics.completion_tokens`).
    """


    def reward(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
        present = [c for c in columns if c in kwargs]
        problems = [dict(zip(present, values)) for values in zip(*(kwargs[c] for c in present))]
        if len(problems) != len(completions):
            raise ValueError(f"reward got {len(completions)} completions but {len(problems)} problem rows")
        rewards = rollout.score(task, problems, list(completions), config)
        stats.rewards.extend(rewards)
        if tokenizer is not None:
            stats.tokens += completion_tokens(tokenizer, list(completions))
        if config.grpo.shuffle_rewards:
            return shuffle_in_groups(rewards, list(prompts), list(completions), config.grpo.num_generations,
                                     config.run.seed)
        return rewards

    reward.__name__ = f"{task.name}_reward"  # TRL logs rewards under the function's name
    return reward


def shuffle_in_groups(rewards: list[float], prompts: list[str], completions: list[str], group: int,
                      run_seed: int) -> list[float]:
    """Rewards permuted within each group of `group` consecutive completions of one prompt.

    TRL's sampler repeats each prompt `num_generations` times in a row and normalises advantages
    per such group, so a permutation inside a group keeps every group's rewards and removes
    their link to the completions. The permutation is seeded by the run seed and the group's
    own texts: the same group gets the same permutation on a resumed run (stream `grpo-shuffle`)."""
    if len(rewards) % group:
        raise ValueError(f"{len(rewards)} rewards are not whole groups of {group}")
    out: list[float] = []
    for start in range(0, len(rewards), group):
        if len(set(prompts[start:start + group])) != 1:
            raise ValueError(f"completions {start}..{start + group - 1} are not one prompt's group")
        order = list(range(start, start + group))
        streams.grpo_shuffle_rng(run_seed, prompts[start], completions[start:start + group]).shuffle(order)
        out.extend(rewards[i] for i in order)
    return out


def summarize(records: list[dict[str, Any]], final_dir: Path, metrics_path: Path,
              resumed_from: int = 0) -> dict[str, Any]:
    records = [r for r in records if r["iteration"] >= 1]  # not the base's iteration-0 evaluation
    rows = [[r["iteration"], round(r["reward/mean"], 4), r["reward/max"], r["verify/verified"], r["samples"],
             round(r["time/wall_s"], 2)] for r in records]
    last = records[-1] if records else {}
    return {
        "ok": True,
        "steps": len(records),
        "resumed_from": resumed_from,
        "samples": last.get("samples/total", 0),
        "verified": sum(r["verify/verified"] for r in records),
        "final_reward_mean": last.get("reward/mean", 0.0),
        "elapsed_s": round(last.get("time/elapsed_s", 0.0), 2),
        "metrics": str(metrics_path),
        "final": str(final_dir),
        "tables": [{"title": steps_title(len(rows), metrics_path),
                    "columns": ["step", "reward mean", "reward max", "verified", "samples", "wall s"],
                    "rows": terminal_rows(rows)}],
    }


# The most step rows the terminal gets: a longer run's table is thinned to about this many (every
# step is in metrics.jsonl, one line each), so the result lines after it do not scroll away.
TERMINAL_STEPS = 10


def terminal_rows(rows: list[list[Any]], most: int = TERMINAL_STEPS) -> list[list[Any]]:
    """Every `stride`-th step and the last, `most` rows or about that; all of them when they are fewer."""
    if len(rows) <= most:
        return rows
    stride = -(-len(rows) // most)
    return [row for n, row in enumerate(rows, start=1) if n % stride == 0 or n == len(rows)]


def steps_title(steps: int, metrics_path: Path, most: int = TERMINAL_STEPS) -> str:
    if steps <= most:
        return "grpo steps"
    stride = -(-steps // most)
    suffix = "th" if stride % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(stride % 10, "th")
    return f"grpo steps: every {stride}{suffix} of {steps} (each step, one line: {metrics_path})"
