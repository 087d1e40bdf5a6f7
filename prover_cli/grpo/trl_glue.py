"""TRL glue for GRPO (prover_cli/grpo/train.py is the algorithm): the `GRPOConfig` with every
default we depend on, a `GRPOTrainer` whose prompt order survives a resume, the dataset of
chat-templated prompts, the policy loaded with fp32 master weights, the held-out evaluation on
the Trainer's model (or its colocated vLLM engine), and TRL's TensorBoard events placed in run.dir.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prover_cli import streams
from prover_cli.errors import BackendError, ConfigError
from prover_cli.grpo.resume import KEEP_CHECKPOINTS
from prover_cli.policy.model_dir import refuse_non_finite
from prover_cli.policy.rollout import prompts as task_prompts
from prover_cli.policy.samplers.transformers_sampler import TransformersSampler, load_model_and_tokenizer
from prover_cli.policy.samplers.vllm_sampler import VLLMSampler
from prover_cli.progress import NULL_REPORTER, Reporter
from prover_cli.training.heldout import HeldOutSchedule, evaluate_base, evaluate_heldout, weights_sha256
from prover_cli.training.run import Run
from prover_cli.training.tracking import parse_report_to, project_name, run_name

if TYPE_CHECKING:
    from prover_cli.config import Config
    from prover_cli.tasks import Task


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


def build_dataset(problems: list[dict[str, Any]], task: Task, tokenizer: Any, family: str):
    """A `datasets.Dataset`: a chat-templated `prompt` string plus the problem columns.

    String prompts (not message lists) make TRL use them verbatim, so the policy is trained on
    the token ids `generate`, ES and the held-out evaluation sample from (`trainer_prompts`).
    """
    from datasets import Dataset

    columns = problem_columns(problems)
    prompts = trainer_prompts(task_prompts(task, problems, tokenizer, family), tokenizer)
    rows = [{**{c: p.get(c) for c in columns}, "prompt": prompt} for p, prompt in zip(problems, prompts)]
    return Dataset.from_list(rows)


def trainer_prompts(prompts: list[str], tokenizer: Any) -> list[str]:
    """The prompt strings to hand TRL so that the ids it trains on are the samplers' ids.

    The samplers tokenize a prompt with `add_special_tokens=False` (the prompt text carries its
    BOS: chat templates write it, policy/prompts.py adds it to continuation prompts). TRL tokenizes a
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
# Model: a local directory TRL (and vLLM) can reload by path
# --------------------------------------------------------------------------------------------

def load_policy(config: Config):
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

def check_batch_shape(config: Config) -> None:
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


def grpo_args(config: Config, *, output_dir: str | Path, cuda: bool, compute_dtype: Any = None):
    """TRL `GRPOConfig` from our config. Everything the run depends on is set here, explicitly.

    `compute_dtype` (the model dtype, from `load_policy`) picks the autocast: bfloat16 -> `bf16`,
    float16 -> `fp16` (CUDA only: accelerate has no CPU fp16 autocast), float32 -> none."""
    import torch
    from trl import GRPOConfig

    check_batch_shape(config)
    trackers = parse_report_to(config.run.report_to)
    g = config.grpo
    checkpointing_key = ("activation_checkpointing"  # transformers >= 5.x name; the old one warns
                         if "activation_checkpointing" in {f.name for f in dataclasses.fields(GRPOConfig)}
                         else "gradient_checkpointing")
    activation_checkpointing: dict[str, Any] = {checkpointing_key: cuda}
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
        report_to=trackers or "none",  # TRL's own curves; ours go through prover_cli/training/tracking.py
        run_name=run_name(config.run.dir),
        project=project_name("trackio"),  # trackio resumes the run our tracker opened (same project+name)
        log_completions=False,
        disable_tqdm=True,  # progress goes through our reporter
        # -- device and precision --------------------------------------------------------------
        use_cpu=not cuda,
        bf16=compute_dtype == torch.bfloat16,  # autocast: fp32 master weights, bf16 matmuls
        fp16=compute_dtype == torch.float16 and cuda,
        **activation_checkpointing,  # trade compute for memory on GPU; the tiny CPU model needs none
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
    """The policy's held-out `eval/*` keys (prover_cli/training/heldout.py, the function ES calls too).

    Runs on the Trainer's model after the optimizer step: eval mode (no dropout, no activation
    checkpointing, so generation keeps its KV cache), under the same autocast as training, so
    it scores the weights exactly as training computes with them; then back to train mode."""

    def __init__(self, config: Config, task: Task, problems: list[dict[str, Any]], tokenizer: Any, compute_dtype: Any,
                 reporter: Reporter = NULL_REPORTER):
        self.config, self.task, self.problems, self.tokenizer = config, task, problems, tokenizer
        self.compute_dtype, self.reporter = compute_dtype, reporter
        self.trainer: Any = None   # set once the trainer exists: with grpo.use_vllm its engine samples

    def __call__(self, model: Any, base: bool = False) -> dict[str, Any]:
        """The `eval/*` keys of `model`; `base=True`: of the untrained base, through the shared cache."""
        import torch

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


def colocated_vllm_sampler(trainer: Any, config: Config) -> Any:
    """The held-out sampler on the GPU path: the vLLM engine TRL colocates for training, holding the
    weights of the step just taken. transformers `generate` on a 1.5B prover's held-out set takes
    about an hour per evaluation where vLLM takes minutes, and ES's held-out evaluation samples with
    vLLM too, so both methods are scored by the same engine.

    TRL pushes the policy into the engine only before its next generation (`_generate_single_turn`:
    when `state.global_step != _last_loaded_step`); the same condition and call here, so the engine
    holds exactly the evaluated step's weights and TRL does not push them twice. With
    `vllm_enable_sleep_mode` the engine drops its weights and KV cache between generations; we do
    not enable it (`grpo_args`), and refuse to sample from an engine in that mode."""

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
# Metrics: one metrics.jsonl line per optimizer step, built by the run (training/run.py) as ES's is
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


# TRL's own per-step numbers worth keeping beside ours (missing ones are skipped).
_TRL_LOG_KEYS = {"loss": "grpo/loss", "grad_norm": "grpo/grad_norm", "kl": "grpo/kl",
                 "entropy": "grpo/entropy", "learning_rate": "grpo/learning_rate"}


def make_metrics_callback(stats: StepRewards, progress: Any, *, run: Run, heldout: HeldOutSchedule,
                          evaluation: HeldOutEvaluation, tracker: Any = None) -> Any:
    """A TrainerCallback writing metrics.jsonl: the run's line at step end (`run.line`, the builder
    ES's lines come from, its totals continuing a resumed run's), TRL's loss/KL added from its log.

    Every completion TRL generated for the step is a sample (and one task check), as every ES
    member's is. On the steps `heldout` picks, `evaluation(model)` adds the held-out `eval/*` keys
    (its time is not counted in `time/*`); the base's evaluation is the iteration-0 line, written
    when training begins, when it is due. Every line goes through `run.write_metrics`, to
    metrics.jsonl and to `tracker` (run.report_to)."""
    from transformers import TrainerCallback

    class MetricsCallback(TrainerCallback):
        def __init__(self) -> None:
            self.records: list[dict[str, Any]] = []
            self.pending: dict[str, Any] | None = None
            self.last = time.perf_counter()

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step == 0:  # the model holds the base weights still
                heldout.write_base_line(run, lambda problems: evaluation(kwargs["model"], base=True), tracker)
            self.last = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._flush()  # a step whose log never came still gets its line
            now = time.perf_counter()
            record = run.line(state.global_step, stats.take(), tokens=stats.take_tokens(), wall_s=now - self.last)
            self.pending = record
            if heldout.due(state.global_step):
                record.update(evaluation(kwargs["model"]))
                now = time.perf_counter()  # evaluation time is not training time
            self.last = now
            progress.advance(1, reward=f"{record['reward/mean']:.3f}", verified=record["verify/verified"])

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
                   **kwargs: Any) -> None:
            # logging_steps = 1: the log of step N follows on_step_end of step N.
            if self.pending is not None and logs and "loss" in logs:
                for key, name in _TRL_LOG_KEYS.items():
                    if isinstance(logs.get(key), (int, float)):
                        self.pending[name] = float(logs[key])
                self._flush()

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._flush()

        def _flush(self) -> None:
            if self.pending is not None:
                run.write_metrics(self.pending, tracker)
                self.records.append(self.pending)
                self.pending = None

    return MetricsCallback()
