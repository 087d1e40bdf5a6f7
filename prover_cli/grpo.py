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
3. reward: the task's batched reward through prover_cli/rollout.py in TRL's reward signature,
   so ES, GRPO and `prover verify` share one reward path (Lean: 1.0 only for `verified`);
4. `GRPOConfig`: every `[grpo]` key, and every TRL default we depend on, set explicitly;
5. metrics: a callback appends one `metrics.jsonl` line per optimizer step, the ES schema, with
   the held-out `eval/*` keys every `run.eval_every` steps (prover_cli/heldout.py, the function
   ES calls) and streams it to `run.report_to` (prover_cli/tracking.py, the logger ES uses);
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
import dataclasses
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

from prover_cli import streams
from prover_cli.errors import BackendError, ConfigError, InputError
from prover_cli.progress import NULL_REPORTER

METHOD = "grpo"
CHECKPOINTS_DIR = "checkpoints"  # TRL's output_dir: checkpoint-<step>/ folders
KEEP_CHECKPOINTS = 2  # the newest may be torn by a kill mid-save; the one before it is whole


def train_grpo(config: Any, *, resume: bool = False, reporter: Any = NULL_REPORTER) -> dict[str, Any]:
    """Train with GRPO; write `config.toml`, `metrics.jsonl`, `checkpoints/` and `final/` into `run.dir`.

    Whatever transformers, TRL or a tracker prints meanwhile (transformers announces W&B offline
    mode on import, trackio its run) goes to stderr: with --json, stdout carries the result only."""
    with contextlib.redirect_stdout(sys.stderr):
        return _train_grpo(config, resume=resume, reporter=reporter)


def _train_grpo(config: Any, *, resume: bool, reporter: Any) -> dict[str, Any]:
    from prover_cli.tasks.problems import heldout_problems, train_problems
    from prover_cli.tasks import get_task
    from prover_cli.tracking import open_tracker

    check_batch_shape(config)
    run_dir = config.run_dir
    run = open_run(config, resume, reporter)
    point = run.resume(lambda: checkpoint_point(config, reporter))  # metrics cut to the checkpoint
    checkpoint = point.source if point is not None else None
    if run.complete:
        return finished_run(run, checkpoint)  # nothing to train: change nothing but a stale final/
    task = get_task(config.data.task)
    problems = train_problems(config, reporter, save_generated=True)  # before the model: a missing file fails fast
    heldout = heldout_problems(config) if config.run.eval_every else []  # fixed for the whole run

    counters = run.begin()
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
        evaluation = HeldOutEvaluation(config, task, heldout, tokenizer, compute_dtype, reporter)
        callback = make_metrics_callback(config, stats, progress, samples_total=counters["samples/total"],
                                         tokens_total=counters["tokens/total"],
                                         checks_total=counters["checks/total"],
                                         elapsed_s=counters["time/elapsed_s"], tracker=tracker,
                                         evaluation=evaluation, base_line=run.base_line_due(heldout), run=run)
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
    from prover_cli.model_dir import refuse_non_finite, save_atomically, save_tokenizer

    def write(out: Path) -> None:
        refuse_non_finite(model.state_dict().items(), out)
        model.save_pretrained(out)  # safetensors (the transformers >= 4.x default)
        save_tokenizer(tokenizer, out)  # as loaded: no padding state from sampling

    save_atomically(final_dir, write)


# Trainer checkpoint files that are training state, not the model (final/ gets everything else).
_TRAINING_STATE_FILES = ("optimizer.pt", "scheduler.pt", "scaler.pt", "trainer_state.json", "training_args.bin")


def finished_run(run: Any, checkpoint: Path) -> dict[str, Any]:
    """--resume on a run whose newest checkpoint is at `grpo.steps`: train nothing.

    `final/` must be that checkpoint's model; a kill after the checkpoint but before the final
    save leaves it missing or stale, and then it is rebuilt from the checkpoint's model files
    (Run.settle_final). metrics.jsonl and the checkpoints are left untouched."""
    import shutil

    from prover_cli.model_dir import same_weights

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
# Resuming: GRPO continues from the newest whole checkpoint (prover_cli/run.py does the rest)
# --------------------------------------------------------------------------------------------

# Config keys a resume may change: how far to train, how often to save, where `tiny` is cached.
# Every other key of these sections shapes the trajectory, so a resume must not change it.
RESUME_CHECKED_SECTIONS = ("grpo", "model", "data")
RESUME_CHECKED_KEYS = ("run.seed", "generate.top_p")
RESUME_MAY_CHANGE = ("grpo.steps", "grpo.save_every", "model.cache_dir")


def open_run(config: Any, resume: bool, reporter: Any = NULL_REPORTER) -> Any:
    """The GRPO run directory (prover_cli/run.py): without --resume, metrics.jsonl or checkpoints/
    already there are refused rather than overwritten."""
    from prover_cli.run import Run

    return Run.open(config, METHOD, total=config.grpo.steps, total_key="grpo.steps", resume=resume,
                    markers=[config.run_dir / "metrics.jsonl", config.run_dir / CHECKPOINTS_DIR],
                    refusal="run.dir already holds a GRPO run", reporter=reporter)


def start_or_resume(config: Any, resume: bool, reporter: Any = NULL_REPORTER) -> Path | None:
    """The checkpoint to resume from, or None for a fresh start; metrics.jsonl cut to match."""
    point = open_run(config, resume, reporter).resume(lambda: checkpoint_point(config, reporter))
    return point.source if point is not None else None


def checkpoint_point(config: Any, reporter: Any = NULL_REPORTER) -> Any:
    """GRPO's resume point: the newest whole checkpoint, once the config and the checkpoint's
    files are checked; None (from the base model) when there is none."""
    from prover_cli.run import ResumePoint

    checkpoints = config.run_dir / CHECKPOINTS_DIR
    checkpoint = latest_checkpoint(checkpoints)
    if checkpoint is None:
        reporter.log(f"{checkpoints}: no checkpoint to resume from; starting from the base model")
        return None
    check_resume_config(config, config.run_dir / "config.toml")
    check_checkpoint(checkpoint)
    step = checkpoint_step(checkpoint)
    if step > config.grpo.steps:
        raise ConfigError(f"{checkpoint}: the checkpoint is at step {step}, past grpo.steps = {config.grpo.steps}",
                          hint="raise grpo.steps, or start a new run.dir")
    if step < config.grpo.steps:
        reporter.log(f"resuming from {checkpoint} (step {step} of {config.grpo.steps})")
    return ResumePoint(step, checkpoint)


def checkpoint_step(checkpoint: Path) -> int:
    return int(checkpoint.name.rsplit("-", 1)[1])


def latest_checkpoint(checkpoints: Path) -> Path | None:
    """The newest `checkpoint-<step>` the Trainer finished writing.

    The Trainer writes `trainer_state.json` last, after weights, optimizer and RNG states; a
    kill during a save leaves a folder without it (or with a torn one), which is skipped."""
    if not checkpoints.is_dir():
        return None
    found = sorted((p for p in checkpoints.glob("checkpoint-*") if p.name.rsplit("-", 1)[1].isdigit()),
                   key=checkpoint_step, reverse=True)
    for path in found:
        try:
            json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        return path
    return None


def check_checkpoint(checkpoint: Path) -> None:
    """InputError naming a file of the checkpoint to resume from that the Trainer could not read
    (a hand-damaged or cut one; a kill mid-save leaves no trainer_state.json and is skipped)."""
    import zipfile

    from prover_cli.model_dir import check_safetensors

    for path in sorted(checkpoint.iterdir()):
        if path.suffix == ".safetensors":
            check_safetensors(path)
        elif path.suffix in (".pt", ".pth", ".bin"):  # torch.save files are zip archives
            try:
                with zipfile.ZipFile(path):
                    pass
            except (zipfile.BadZipFile, OSError) as exc:
                raise InputError(f"{path}: not a readable torch.save file ({exc})",
                                 hint=f"move {checkpoint.name} away to resume from the checkpoint before it") from None


def check_resume_config(config: Any, stored_path: Path) -> None:
    """ConfigError naming every key whose value differs from the run's `config.toml`."""
    from prover_cli.config import tomllib  # tomli on Python 3.10

    if not stored_path.exists():
        return  # nothing recorded to compare with (written at every start, so only if deleted)
    try:
        stored = tomllib.loads(stored_path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{stored_path}: not valid TOML: {exc}") from None
    current = tomllib.loads(config.to_toml())  # the same serialisation on both sides
    keys = [f"{section}.{key}" for section in RESUME_CHECKED_SECTIONS for key in current[section]]
    differences = []
    for dotted in [*keys, *RESUME_CHECKED_KEYS]:
        section, key = dotted.split(".", 1)
        if dotted in RESUME_MAY_CHANGE or key not in stored.get(section, {}):
            continue  # keys the stored config predates are not compared
        if stored[section][key] != current[section][key]:
            differences.append(f"{dotted}: run {stored[section][key]!r} != config {current[section][key]!r}")
    if differences:
        raise ConfigError(f"{stored_path}: cannot resume, the config differs from the run's: " + "; ".join(differences),
                          hint="restore those values, or start a new run.dir")


def resumable_trainer_class():
    """`GRPOTrainer` whose prompt order depends only on (seed, epoch).

    TRL's `RepeatSampler` draws each epoch's permutation from one generator seeded once, whose
    state no checkpoint saves: a run resumed in epoch 2 would see epoch 1's order again. Reseeding
    per epoch and skipping the earlier epochs' draws gives the order an uninterrupted run sees,
    so fresh runs are unchanged and resumed runs match them. The Trainer calls `set_epoch`."""
    import torch
    from torch.utils.data import Sampler
    from trl import GRPOTrainer

    class EpochSeededSampler(Sampler):
        def __init__(self, inner: Any) -> None:
            self.inner, self.epoch = inner, 0

        def set_epoch(self, epoch: int) -> None:
            self.epoch = epoch

        def __len__(self) -> int:
            return len(self.inner)

        def __iter__(self):
            if self.inner.shuffle:
                self.inner.generator.manual_seed(self.inner.seed)
                for _ in range(self.epoch):
                    torch.randperm(self.inner.num_samples, generator=self.inner.generator)
            return iter(self.inner)

    class ResumableGRPOTrainer(GRPOTrainer):
        def _get_train_sampler(self, dataset=None):
            return EpochSeededSampler(super()._get_train_sampler(dataset))

        def _save_checkpoint(self, model, trial):
            """No checkpoint of weights holding NaN or inf: refused before the Trainer writes any file."""
            import os

            from prover_cli.model_dir import refuse_non_finite

            folder = os.path.join(self._get_output_dir(trial=trial), f"checkpoint-{self.state.global_step}")
            refuse_non_finite(self.model.state_dict().items(), folder)
            super()._save_checkpoint(model, trial)

    return ResumableGRPOTrainer


# --------------------------------------------------------------------------------------------
# Dataset: the train problems (prover_cli/tasks/problems.py) as TRL rows
# --------------------------------------------------------------------------------------------

def problem_columns(problems: list[dict[str, Any]]) -> list[str]:
    """Every key of any problem, in first-seen order (TRL passes each as a reward kwarg)."""
    columns: dict[str, None] = {}
    for problem in problems:
        columns.update(dict.fromkeys(problem))
    columns.pop("prompt", None)  # the prompt column is ours
    return list(columns)


def build_dataset(problems: list[dict[str, Any]], task: Any, tokenizer: Any, family: str):
    """A `datasets.Dataset`: a chat-templated `prompt` string plus the problem columns.

    String prompts (not message lists) make TRL use them verbatim, so the policy is trained on
    the token ids `generate`, ES and the held-out evaluation sample from (`trainer_prompts`).
    """
    from datasets import Dataset

    from prover_cli.rollout import prompts as task_prompts

    columns = problem_columns(problems)
    prompts = trainer_prompts(task_prompts(task, problems, tokenizer, family), tokenizer)
    rows = [{**{c: p.get(c) for c in columns}, "prompt": prompt} for p, prompt in zip(problems, prompts)]
    return Dataset.from_list(rows)


def trainer_prompts(prompts: list[str], tokenizer: Any) -> list[str]:
    """The prompt strings to hand TRL so that the ids it trains on are the samplers' ids.

    The samplers tokenize a prompt with `add_special_tokens=False` (the prompt text carries its
    BOS: chat templates write it, prompts.py adds it to continuation prompts). TRL tokenizes a
    string prompt with the tokenizer's defaults, and a tokenizer that adds a BOS itself (LLaMA
    style: the DeepSeek-Prover and Goedel-Prover-V1 families) would put a second BOS in front.
    For those the prompt goes to TRL without its leading BOS text, and the tokenizer puts back
    exactly one. Any other difference is an error: training on other tokens than evaluation
    samples from would bias the comparison silently."""
    if not prompts:
        return prompts
    wanted = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    given = list(prompts)
    if tokenizer(given)["input_ids"] == wanted:
        return given
    bos = getattr(tokenizer, "bos_token", None)
    if isinstance(bos, str) and bos:
        given = [p[len(bos):] if p.startswith(bos) else p for p in prompts]
    got = tokenizer(given)["input_ids"]
    for index, (a, b) in enumerate(zip(got, wanted)):
        if a != b:
            name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
            raise BackendError(f"tokenizer {name}: GRPO would train on other token ids than the samplers use for "
                               f"prompt {index} (starts {a[:6]} vs {b[:6]}; bos_token {bos!r})",
                               hint="the tokenizer adds special tokens TRL cannot be told to skip; please report it")
    return given


# --------------------------------------------------------------------------------------------
# Reward: the task's batched reward in TRL's signature
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass
class StepRewards:
    """Rewards scored since the last optimizer step (the reward function fills it, the callback drains it)."""

    rewards: list[float] = dataclasses.field(default_factory=list)
    tokens: int = 0  # completion tokens of those rewards' completions (metrics.completion_tokens)

    def take(self) -> list[float]:
        taken, self.rewards = self.rewards, []
        return taken

    def take_tokens(self) -> int:
        taken, self.tokens = self.tokens, 0
        return taken


def make_reward_function(task: Any, config: Any, stats: StepRewards, columns: list[str],
                         tokenizer: Any = None) -> Callable[..., list[float]]:
    """TRL reward function: `(prompts, completions, **dataset_columns) -> one float each`.

    TRL passes each dataset column as a list aligned with `completions` (prompts repeated
    `num_generations` times); we rebuild the problem dicts and score the whole generation batch
    in ONE task call, so Lean verification runs as one batch through the verify pool.
    With `grpo.shuffle_rewards` (the null control) TRL gets each group's rewards permuted
    (`shuffle_in_groups`); `stats` keeps the true ones for metrics.jsonl, and, given the policy's
    `tokenizer`, the completions' tokens counted as ES counts them (`metrics.completion_tokens`).
    """

    from prover_cli import rollout
    from prover_cli.metrics import completion_tokens

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


# --------------------------------------------------------------------------------------------
# Model: a local directory TRL (and vLLM) can reload by path
# --------------------------------------------------------------------------------------------

def load_policy(config: Any):
    """(model, tokenizer, device, compute dtype), the model's parameters the fp32 master copy.

    fp32 master weights (`grpo.fp32_master`, default on) when `model.dtype` resolves to bfloat16
    or float16: the parameters, gradients and AdamW moments are fp32 and the forward/backward
    pass runs under the Trainer's autocast in the model dtype (`bf16=True` / `fp16=True`). This is
    what TRL 1.16 does when given a model path (`create_model_from_path` defaults `dtype` to
    float32; TRL's `bf16` default then autocasts); we load the model ourselves, so we upcast it.
    Without it AdamW updates bf16 parameters directly and steps below half a bf16 ulp round away
    (at lr 1e-5, most weights and every RMSNorm weight never move).

    TRL reloads the reference model (beta > 0) and vLLM loads the policy from
    `model.name_or_path`; both must see a local directory holding exactly these initial weights,
    never a hub id that needs network (and would lose `model.revision`). That directory keeps the
    model dtype, so vLLM serves in it; TRL builds the reference in the policy's dtype (fp32)."""
    from prover_cli.samplers.transformers_sampler import load_model_and_tokenizer

    model, tokenizer, device = load_model_and_tokenizer(config.model)
    if config.grpo.beta > 0 or config.grpo.use_vllm:
        ensure_local_base(model, tokenizer, config.run_dir / "base")
    compute_dtype = model.dtype
    if config.grpo.fp32_master and model.dtype.is_floating_point and model.dtype.itemsize < 4:
        model.float()  # exact: every bf16/fp16 value is an fp32 value
    return model, tokenizer, device, compute_dtype


def ensure_local_base(model: Any, tokenizer: Any, base_dir: Path) -> str:
    """Point `model.name_or_path` at a local directory of the initial weights, saving one if needed."""
    source = Path(str(model.name_or_path))
    if source.is_dir() and (source / "config.json").exists():
        return str(source)  # `tiny` and local models: already a saved directory
    model.save_pretrained(base_dir)
    tokenizer.save_pretrained(base_dir)
    model.name_or_path = str(base_dir)  # what vLLM loads
    model.config._name_or_path = str(base_dir)  # what TRL reloads the reference model from
    return str(base_dir)


# --------------------------------------------------------------------------------------------
# GRPOConfig: our [grpo] keys plus every default we depend on
# --------------------------------------------------------------------------------------------

def check_batch_shape(config: Any) -> None:
    """TRL needs whole groups in a generation batch; say so with our key names, before any import."""
    g = config.grpo
    batch = g.per_device_train_batch_size * g.gradient_accumulation_steps
    if batch % g.num_generations:
        raise ConfigError(
            f"{config.source}: grpo.per_device_train_batch_size * grpo.gradient_accumulation_steps = "
            f"{g.per_device_train_batch_size} * {g.gradient_accumulation_steps} = {batch}: must be a multiple of "
            f"grpo.num_generations = {g.num_generations} (each prompt's group of completions must fit in one "
            "generation batch); change one of them"
        )


def grpo_args(config: Any, *, output_dir: str | Path, cuda: bool, compute_dtype: Any = None):
    """TRL `GRPOConfig` from our config. Everything the run depends on is set here, explicitly.

    `compute_dtype` (the model dtype, from `load_policy`) picks the autocast: bfloat16 -> `bf16`,
    float16 -> `fp16` (CUDA only: accelerate has no CPU fp16 autocast), float32 -> none."""
    import torch
    from trl import GRPOConfig

    from prover_cli.tracking import parse_report_to, project_name, run_name

    check_batch_shape(config)
    trackers = parse_report_to(config.run.report_to)
    g = config.grpo
    checkpointing_key = ("activation_checkpointing"  # transformers >= 5.x name; the old one warns
                         if "activation_checkpointing" in {f.name for f in dataclasses.fields(GRPOConfig)}
                         else "gradient_checkpointing")
    return GRPOConfig(
        output_dir=str(output_dir),
        # -- the [grpo] section ----------------------------------------------------------------
        max_steps=g.steps,
        num_generations=g.num_generations,
        per_device_train_batch_size=g.per_device_train_batch_size,
        gradient_accumulation_steps=g.gradient_accumulation_steps,
        learning_rate=g.learning_rate,
        beta=g.beta,
        epsilon=g.epsilon,
        epsilon_high=g.epsilon,  # symmetric clipping, as in the GRPO paper (TRL: None -> epsilon)
        loss_type=g.loss_type,
        scale_rewards=g.scale_rewards,
        max_completion_length=g.max_completion_length,
        temperature=g.temperature,
        use_vllm=g.use_vllm,
        vllm_mode="colocate",  # one process shares the GPU: no separate server to start
        vllm_gpu_memory_utilization=g.vllm_gpu_memory_utilization,
        vllm_enable_sleep_mode=False,  # the held-out evaluation samples with this engine between steps
        # -- sampling shared with `generate` ---------------------------------------------------
        top_p=config.generate.top_p,
        top_k=0,  # no top-k cut: only temperature and top_p shape the distribution
        min_p=None,
        repetition_penalty=1.0,
        # -- the algorithm: one fresh batch per optimizer step ---------------------------------
        num_iterations=1,
        steps_per_generation=g.gradient_accumulation_steps,
        importance_sampling_level="token",
        mask_truncated_completions=False,  # a truncated proof scores 0, and that is learned from
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        disable_dropout=True,  # same logprobs for policy and reference on the same input
        shuffle_dataset=True,
        remove_unused_columns=False,  # the reward needs the problem columns
        # -- determinism, logging, saving ------------------------------------------------------
        seed=streams.grpo_trainer_seed(config.run.seed),
        data_seed=streams.grpo_trainer_seed(config.run.seed),
        logging_steps=1,
        **checkpointing(g.save_every),
        report_to=trackers or "none",  # TRL's own curves; ours go through prover_cli/tracking.py
        run_name=run_name(config.run.dir),
        project=project_name("trackio"),  # trackio resumes the run our tracker opened (same project+name)
        log_completions=False,
        disable_tqdm=True,  # progress goes through our reporter
        # -- device and precision --------------------------------------------------------------
        use_cpu=not cuda,
        bf16=compute_dtype == torch.bfloat16,  # autocast: fp32 master weights, bf16 matmuls
        fp16=compute_dtype == torch.float16 and cuda,
        **{checkpointing_key: cuda},  # trade compute for memory on GPU; the tiny CPU model needs none
    )


def checkpointing(save_every: int) -> dict[str, Any]:
    """GRPOConfig save settings: full Trainer checkpoints (weights as safetensors, optimizer,
    scheduler, RNG states) every `save_every` steps, the last 2 kept; `final/` is saved by us."""
    if save_every == 0:
        return {"save_strategy": "no"}
    return {"save_strategy": "steps", "save_steps": save_every, "save_total_limit": KEEP_CHECKPOINTS,
            "save_only_model": False,  # optimizer and RNG states too: what an exact resume needs
            "ignore_data_skip": False}  # skip the batches the checkpointed steps consumed


# --------------------------------------------------------------------------------------------
# Held-out evaluation and trackers
# --------------------------------------------------------------------------------------------

class HeldOutEvaluation:
    """The policy's held-out `eval/*` keys (prover_cli/heldout.py, the function ES calls too).

    Runs on the Trainer's model after the optimizer step: eval mode (no dropout, no activation
    checkpointing, so generation keeps its KV cache), under the same autocast as training, so
    it scores the weights exactly as training computes with them; then back to train mode."""

    def __init__(self, config: Any, task: Any, problems: list[dict[str, Any]], tokenizer: Any, compute_dtype: Any,
                 reporter: Any = NULL_REPORTER):
        self.config, self.task, self.problems, self.tokenizer = config, task, problems, tokenizer
        self.compute_dtype, self.reporter = compute_dtype, reporter
        self.trainer: Any = None   # set once the trainer exists: with grpo.use_vllm its engine samples

    def due(self, step: int) -> bool:
        from prover_cli.heldout import eval_due

        return eval_due(self.config, step, self.config.grpo.steps)

    def __call__(self, model: Any, base: bool = False) -> dict[str, Any]:
        """The `eval/*` keys of `model`; `base=True`: of the untrained base, through the shared cache."""
        import torch

        from prover_cli.heldout import evaluate_base, evaluate_heldout, weights_sha256
        from prover_cli.samplers.transformers_sampler import TransformersSampler

        if self.trainer is not None and self.config.grpo.use_vllm:
            sampler = colocated_vllm_sampler(self.trainer, self.config)
        else:
            sampler = TransformersSampler(self.config.model, self.config.generate, model=model,
                                          tokenizer=self.tokenizer)
        device_type = next(model.parameters()).device.type
        # The autocast grpo_args gives the Trainer: bf16 anywhere, fp16 on CUDA only.
        autocasts = self.compute_dtype != model.dtype and (self.compute_dtype == torch.bfloat16 or device_type == "cuda")
        autocast = torch.autocast(device_type, dtype=self.compute_dtype) if autocasts else contextlib.nullcontext()
        was_training = model.training
        model.eval()
        try:
            with autocast:
                if base:
                    return evaluate_base(sampler, self.config, self.problems, weights_sha256(model), task=self.task,
                                         reporter=self.reporter)
                return evaluate_heldout(sampler, self.config, self.problems, task=self.task, reporter=self.reporter)
        finally:
            model.train(was_training)


def colocated_vllm_sampler(trainer: Any, config: Any) -> Any:
    """The held-out sampler on the GPU path: the vLLM engine TRL colocates for training, holding the
    weights of the step just taken. transformers `generate` on a 1.5B prover's held-out set takes
    about an hour per evaluation where vLLM takes minutes, and ES's held-out evaluation samples with
    vLLM too, so both methods are scored by the same engine.

    TRL pushes the policy into the engine only before its next generation (`_generate_single_turn`:
    when `state.global_step != _last_loaded_step`); the same condition and call here, so the engine
    holds exactly the evaluated step's weights and TRL does not push them twice. With
    `vllm_enable_sleep_mode` the engine drops its weights and KV cache between generations; we do
    not enable it (`grpo_args`), and refuse to sample from an engine in that mode."""
    from prover_cli.samplers.vllm_sampler import VLLMSampler

    generation = getattr(trainer, "vllm_generation", None)
    if generation is None or generation.mode != "colocate" or generation.enable_sleep_mode:
        raise BackendError("grpo.use_vllm = true but the trainer has no colocated vLLM engine awake to evaluate with",
                           hint="the held-out evaluation samples with TRL's colocated engine; sleep mode and server mode are not supported")
    if trainer.state.global_step != trainer._last_loaded_step:
        generation.sync_weights()
        trainer._last_loaded_step = trainer.state.global_step
    return VLLMSampler.from_engine(generation.llm)


def place_trl_tensorboard(trainer: Any, run_dir: Path) -> None:
    """TRL's TensorBoard events go to `<run.dir>/tensorboard/trl/`, beside ours, not into checkpoints/."""
    from transformers.integrations import TensorBoardCallback

    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, TensorBoardCallback) and callback.logging_dir is None:
            callback.logging_dir = str(run_dir / "tensorboard" / "trl")


# --------------------------------------------------------------------------------------------
# Metrics: one metrics.jsonl line per optimizer step, the ES schema
# --------------------------------------------------------------------------------------------

def step_record(config: Any, iteration: int, rewards: list[float], samples_total: int,
                wall_s: float, elapsed_s: float, *, tokens: int = 0, tokens_total: int = 0,
                checks_total: int | None = None) -> dict[str, Any]:
    """The shared metrics.jsonl record (see prover_cli.metrics) for one optimizer step: every
    completion TRL generated for the step is a sample (and one task check), as every ES member's is."""
    return {
        "iteration": iteration,
        "method": METHOD,
        "task": config.data.task,
        "reward/mean": sum(rewards) / len(rewards) if rewards else 0.0,
        "reward/max": max(rewards) if rewards else 0.0,
        "verify/verified": sum(1 for r in rewards if r == 1.0),
        "samples": len(rewards),
        "samples/total": samples_total,
        "tokens": tokens,
        "tokens/total": tokens_total,
        "checks": len(rewards),
        "checks/total": samples_total if checks_total is None else checks_total,
        "time/wall_s": wall_s,
        "time/elapsed_s": elapsed_s,
    }


# TRL's own per-step numbers worth keeping beside ours (missing ones are skipped).
_TRL_LOG_KEYS = {"loss": "grpo/loss", "grad_norm": "grpo/grad_norm", "kl": "grpo/kl",
                 "entropy": "grpo/entropy", "learning_rate": "grpo/learning_rate"}


def make_metrics_callback(config: Any, stats: StepRewards, progress: Any, *, run: Any, samples_total: int = 0,
                          tokens_total: int = 0, checks_total: int = 0, elapsed_s: float = 0.0, tracker: Any = None,
                          evaluation: Any = None, base_line: bool = False):
    """A TrainerCallback writing metrics.jsonl: our record at step end, TRL's loss/KL added from its log.

    `samples_total`, `tokens_total`, `checks_total` and `elapsed_s` are where a resumed run's cumulative
    counters start. On the
    steps `run.eval_every` picks, `evaluation(model)` adds the held-out `eval/*` keys (its time is
    not counted in `time/*`); with `base_line`, the base's evaluation is the iteration-0 line,
    written when training begins. Every line goes through `run.write_metrics` (prover_cli/run.py),
    to metrics.jsonl and to `tracker` (run.report_to)."""
    from prover_cli.heldout import base_record
    from transformers import TrainerCallback

    class MetricsCallback(TrainerCallback):
        def __init__(self) -> None:
            self.records: list[dict[str, Any]] = []
            self.pending: dict[str, Any] | None = None
            self.samples_total = samples_total
            self.tokens_total, self.checks_total = tokens_total, checks_total
            self.start = self.last = time.perf_counter()

        def on_train_begin(self, args, state, control, **kwargs):
            if base_line and state.global_step == 0:  # the model holds the base weights still
                self.pending = base_record(METHOD, config.data.task, evaluation(kwargs["model"], base=True))
                self._flush()
            self.start = self.last = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self._flush()  # a step whose log never came still gets its line
            now = time.perf_counter()
            rewards, tokens = stats.take(), stats.take_tokens()
            self.samples_total += len(rewards)
            self.tokens_total += tokens
            self.checks_total += len(rewards)  # one task check per scored completion
            self.pending = step_record(config, state.global_step, rewards, self.samples_total,
                                       wall_s=now - self.last, elapsed_s=elapsed_s + now - self.start,
                                       tokens=tokens, tokens_total=self.tokens_total,
                                       checks_total=self.checks_total)
            record = self.pending
            if evaluation is not None and evaluation.due(state.global_step):
                record.update(evaluation(kwargs["model"]))
                self.start += time.perf_counter() - now  # evaluation time is not training time
                now = time.perf_counter()
            self.last = now
            progress.advance(1, reward=f"{record['reward/mean']:.3f}", verified=record["verify/verified"])

        def on_log(self, args, state, control, logs=None, **kwargs):
            # logging_steps = 1: the log of step N follows on_step_end of step N.
            if self.pending is not None and logs and "loss" in logs:
                for key, name in _TRL_LOG_KEYS.items():
                    if isinstance(logs.get(key), (int, float)):
                        self.pending[name] = float(logs[key])
                self._flush()

        def on_train_end(self, args, state, control, **kwargs):
            self._flush()

        def _flush(self) -> None:
            if self.pending is not None:
                run.write_metrics(self.pending, tracker)
                self.records.append(self.pending)
                self.pending = None

    return MetricsCallback()


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
