"""What `--backend modal` will run, and roughly what it costs: the `--dry-run` plan.

    prover train es --config configs/kimina-es.toml --backend modal --dry-run
    prover train grpo --config configs/kimina-grpo.toml --backend modal --dry-run --json

Pure Python: no `modal` import, so a plan is instant and needs no credentials. This module is
also the one place that turns a config into Modal resources (`resources(config)`) and that
pins the image versions (`PINS`); `prover_cli/modal_app.py` declares its functions from both,
so the plan and the deployed functions cannot drift apart.

How the cost estimate is made (per ES iteration or GRPO step, an upper estimate, in USD):
- generation: every sample decodes `max_tokens` tokens at `modal.est_decode_tokens_per_s`; the
  samples of one call decode in parallel as one batch, so a call lasts max_tokens / speed;
- verification (Lean task only): each batch of `modal.verify_batch_size` proofs loads the header
  once per REPL (`modal.est_header_s`), then spends `modal.est_verify_s_per_proof` per proof,
  `verify.workers` proofs at a time, on `modal.verify_cpus` billed cores;
- GPU-hours x `modal.gpu_price_per_hour` x GPUs + core-hours x `modal.cpu_price_per_core_hour`.
Not counted: container start and model load (paid once per container, not per iteration),
memory (Modal bills it separately, small next to GPUs), the GRPO backward pass, and network.
Measure one iteration on Modal and adjust the `modal.est_*` keys to your model and proofs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from prover_cli.progress import NULL_REPORTER

MINUTES = 60
HOURS = 60 * MINUTES
MAX_TIMEOUT_S = 24 * HOURS  # Modal's ceiling for one call; training loops resume past it

# Versions baked into the images. Pinned to a minor (or exact tag) so a rebuilt image computes
# what the last one did; bump them together and rebuild with `modal deploy`.
PINS: dict[str, str] = {
    "python": "3.11",
    "vllm": "vllm==0.33.*",              # brings its own CUDA torch; never pin torch beside it
    "transformers": "transformers==5.24.*",
    "trl": "trl==1.16.*",                # GRPOConfig defaults move between releases
    "datasets": "datasets==5.2.*",
    "safetensors": "safetensors==0.8.*",
    "huggingface_hub": "huggingface_hub==2.4.*",
    "typer": "typer==0.29.*",
    "rich": "rich==15.*",
    "matplotlib": "matplotlib==3.11.*",
    "elan": "v4.1.2",                    # the toolchain manager; the toolchain itself is a config value
}

# Where the Volumes are mounted in every container.
MODELS_MOUNT = "/models"
RUNS_MOUNT = "/runs"


@dataclass(frozen=True)
class Resources:
    """What one Modal function or class asks for. `modal_app.py` passes these to its decorators."""

    image: str                  # "orchestrator", "gpu", "trl" or "lean" (see `image_descriptions`)
    gpu: str | None             # Modal's "TYPE:COUNT", None for CPU-only
    cpu: float                  # cores reserved
    memory_mb: int              # memory reserved, MiB
    timeout_s: int              # one call is killed (and retried) after this
    retries: int                # retries of a failed or timed-out call
    max_containers: int         # parallel containers at most
    volumes: tuple[str, ...]    # mount points used (MODELS_MOUNT, RUNS_MOUNT)

    @property
    def gpu_count(self) -> int:
        return int(self.gpu.split(":")[1]) if self.gpu and ":" in self.gpu else (1 if self.gpu else 0)


def verify_batch_timeout_s(config: Any) -> int:
    """Long enough for the header plus every proof of a batch hitting its own timeout, no more:
    a wedged batch is then killed and retried (or failed), never waited on forever."""
    v, m = config.verify, config.modal
    rounds = math.ceil(m.verify_batch_size / v.workers)
    return int(v.header_timeout_s + rounds * (v.timeout_s + 5) + 2 * MINUTES)


def gpu_spec(config: Any) -> str:
    """Modal's GPU string: `H100:1`."""
    return f"{config.modal.gpu}:{config.modal.gpus_per_container}"


def resources(config: Any) -> dict[str, Resources]:
    """Resources of every remote function, from `[modal]` (and `[verify]` for the Lean batches)."""
    m = config.modal
    gpu = gpu_spec(config)
    call_timeout_s = m.timeout_min * MINUTES
    both = (MODELS_MOUNT, RUNS_MOUNT)
    lean_batch = Resources(
        image="lean", gpu=None, cpu=m.verify_cpus, memory_mb=m.verify_memory_gb * 1024,
        timeout_s=verify_batch_timeout_s(config), retries=m.retries,
        max_containers=m.verify_max_containers, volumes=(RUNS_MOUNT,),
    )
    return {
        # Fetch base weights once into the models Volume, before any GPU container needs them.
        "download_model": Resources("gpu", None, 2.0, 8 * 1024, 2 * HOURS, m.retries, 1, both),
        "prepare_data": Resources("orchestrator", None, 2.0, 8 * 1024, 2 * HOURS, m.retries, 1, (RUNS_MOUNT,)),
        # Waits on the Lean batches; each batch has its own timeout, so this one only bounds the run.
        "verify": Resources("orchestrator", None, 1.0, 2 * 1024, MAX_TIMEOUT_S, m.retries, 1, (RUNS_MOUNT,)),
        "verify_shard": lean_batch,
        "verify_batch": lean_batch,
        "generate": Resources("gpu", gpu, 8.0, 64 * 1024, call_timeout_s, m.retries, 1, both),
        "es_member": Resources("gpu", gpu, 8.0, 64 * 1024, call_timeout_s, m.retries, m.max_containers, both),
        # Exactly one container writes a run's ledger; a retry resumes from it.
        "train_es": Resources("gpu", gpu, 8.0, 64 * 1024, MAX_TIMEOUT_S, m.retries, 1, both),
        # Not retried: a GRPO retry would refuse the existing run; resume it with `--resume`
        # (from <run.dir>/checkpoints/ on the runs Volume).
        "train_grpo": Resources("trl", gpu, 8.0, 64 * 1024, MAX_TIMEOUT_S, 0, 1, both),
        # CPU by default; `modal_app` adds the GPU for `--device cuda` (same bits either way).
        "replay_seeds": Resources("gpu", None, 8.0, 64 * 1024, call_timeout_s, m.retries, 1, both),
        # CPU by default; `modal_app` adds the GPU when eval generates (not for `--verdicts`).
        "eval": Resources("gpu", None, 8.0, 64 * 1024, MAX_TIMEOUT_S, m.retries, 1, both),
    }


def image_descriptions(config: Any) -> dict[str, str]:
    v = config.verify
    return {
        "orchestrator": f"debian-slim py{PINS['python']} + {PINS['typer']}, {PINS['rich']}, {PINS['datasets']}, prover_cli",
        "gpu": f"debian-slim py{PINS['python']} + {PINS['vllm']}, {PINS['transformers']}, prover_cli",
        "trl": f"gpu image + {PINS['trl']}",
        "lean": (f"debian-slim + elan {PINS['elan']}, {v.lean_toolchain}, leanprover-community/repl "
                 f"{repl_tag(v.lean_toolchain)}, Mathlib {v.mathlib_rev} (cache fetched at build), prover_cli"),
    }


def repl_tag(lean_toolchain: str) -> str:
    """leanprover-community/repl tags each Lean release it supports with the same name (v4.15.0)."""
    return lean_toolchain.rpartition(":")[2]


# --------------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------------

def plan(config: Any, *, command: str, backend: str, reporter: Any = NULL_REPORTER) -> dict[str, Any]:
    """The `--dry-run` of `train es` / `train grpo`: what runs where, and (on Modal) the cost."""
    if command not in ("train_es", "train_grpo"):
        raise ValueError(f"no plan for {command!r}")  # the CLI only asks for these two
    work = _work_per_iteration(config, command)
    if backend == "local":
        return _local_plan(config, command, work)
    return _modal_plan(config, command, work)


@dataclass(frozen=True)
class _Work:
    unit: str                 # "iteration" or "step"
    iterations: int
    samples: int              # samples generated and scored per iteration
    generation_calls: int     # GPU calls that generate, per iteration (ES: one per member)
    decode_tokens: int        # tokens one generation call decodes per sequence, at most
    proofs: int               # proofs sent to Lean per iteration (0 for Python-checked tasks)


def _work_per_iteration(config: Any, command: str) -> _Work:
    lean = config.data.task == "lean"
    if command == "train_es":
        es = config.es
        samples = es.population * es.problems_per_iteration * es.samples_per_problem
        return _Work("iteration", es.iterations, samples, es.population, config.generate.max_tokens,
                     samples if lean else 0)
    g = config.grpo
    samples = g.per_device_train_batch_size * g.gradient_accumulation_steps
    return _Work("step", g.steps, samples, 1, g.max_completion_length, samples if lean else 0)


def _local_plan(config: Any, command: str, work: _Work) -> dict[str, Any]:
    device = config.model.device
    sampler = config.generate.backend
    reward = (f"Lean REPL pool in this process: {config.verify.workers} `{' '.join(config.verify.repl_command)}` processes"
              if config.data.task == "lean" else f"`{config.data.task}` checker in this process (pure Python)")
    if command == "train_es":
        generation = (f"{config.es.population} members one after another, each perturbing the weights in place "
                      f"and sampling {config.es.problems_per_iteration} x {config.es.samples_per_problem}")
        update = f"fp32 update of every weight + ledger.json in {config.run.dir}"
    else:
        generation = f"TRL GRPOTrainer: {work.samples} completions per step ({config.grpo.num_generations} per prompt)"
        update = f"AdamW step, metrics.jsonl in {config.run.dir}"
    rows = [
        ["generate", f"this machine, model.device = {device}, {sampler} sampler", generation],
        ["reward", "this machine", reward],
        ["update", f"this machine, model.device = {device}", update],
    ]
    return {
        "ok": True,
        "command": command.replace("_", " "),
        "backend": "local",
        f"samples_per_{work.unit}": work.samples,
        f"{work.unit}s": work.iterations,
        "samples_total": work.samples * work.iterations,
        "tables": [{"title": f"plan: {command.replace('_', ' ')} on this machine (no cost estimate for local runs)",
                    "columns": ["stage", "where", "what"], "rows": rows}],
    }


def _modal_plan(config: Any, command: str, work: _Work) -> dict[str, Any]:
    m, v = config.modal, config.verify
    res = resources(config)
    images = image_descriptions(config)

    generation_s = work.decode_tokens / m.est_decode_tokens_per_s
    if command == "train_es":
        gen_fn = res["es_member"]
        gen_waves = math.ceil(work.generation_calls / gen_fn.max_containers)
        gen_containers = min(work.generation_calls, gen_fn.max_containers)
    else:
        gen_fn, gen_waves, gen_containers = res["train_grpo"], 1, 1

    batches = math.ceil(work.proofs / m.verify_batch_size) if work.proofs else 0
    proofs_per_batch = min(m.verify_batch_size, work.proofs) if work.proofs else 0
    batch_s = m.est_header_s + math.ceil(proofs_per_batch / v.workers) * m.est_verify_s_per_proof if batches else 0.0
    verify_fn = res["verify_batch"]
    verify_waves = math.ceil(batches / verify_fn.max_containers) if batches else 0
    iteration_s = gen_waves * generation_s + verify_waves * batch_s

    gpu_usd = m.gpu_price_per_hour
    core_usd = m.cpu_price_per_core_hour
    rows: list[list[Any]] = []

    def row(name: str, r: Resources, containers: int, calls: int | str, hours: float, usd: float) -> None:
        gpu = r.gpu.replace(":", " x ") if r.gpu else "-"
        rows.append([name, r.image, gpu, r.cpu, round(r.memory_mb / 1024), containers, calls,
                     round(hours, 4), round(usd, 4)])

    if command == "train_es":
        loop = res["train_es"]
        loop_h = iteration_s / HOURS * loop.gpu_count
        member_h = work.generation_calls * generation_s / HOURS * gen_fn.gpu_count
        row("train_es", loop, 1, 1, loop_h, loop_h * gpu_usd)
        row("ESMember", gen_fn, gen_containers, work.generation_calls, member_h, member_h * gpu_usd)
        gpu_hours = loop_h + member_h
    else:
        loop_h = iteration_s / HOURS * gen_fn.gpu_count
        row("train_grpo", gen_fn, 1, 1, loop_h, loop_h * gpu_usd)
        gpu_hours = loop_h
    core_hours = batches * batch_s * verify_fn.cpu / HOURS
    if batches:
        row("verify_batch", verify_fn, min(batches, verify_fn.max_containers), batches, core_hours,
            core_hours * core_usd)
    row("download_model", res["download_model"], 1, "once", 0.0, 0.0)
    cost = gpu_hours * gpu_usd + core_hours * core_usd
    roles = {
        "train_es": "the ES loop: holds theta, applies updates, writes the ledger (one writer)",
        "ESMember": "rebuilds theta_t from base + ledger, perturbs, samples; one member per call",
        "train_grpo": "TRL GRPOTrainer: generates, scores, takes the optimizer step",
        "verify_batch": "Lean: one isolated REPL pool per container, a batch of proofs per call",
        "download_model": "base weights into the models Volume, once per run (not per step)",
    }
    roles = [[r[0], roles[r[0]]] for r in rows]

    notes = [
        ["generation call", f"{work.decode_tokens} tokens at {m.est_decode_tokens_per_s:g} tokens/s = {generation_s:.0f} s "
                            f"(upper estimate: every sample runs to its token limit)"],
        ["verification batch", (f"{proofs_per_batch} proofs: {m.est_header_s:g} s header + "
                                f"{math.ceil(proofs_per_batch / v.workers) if batches else 0} rounds x "
                                f"{m.est_verify_s_per_proof:g} s = {batch_s:.0f} s; killed after "
                                f"{verify_fn.timeout_s} s and retried up to {verify_fn.retries} times")
                               if batches else f"none: `{config.data.task}` rewards are checked in Python"],
        [f"{work.unit} wall time", f"{gen_waves} generation wave(s) + {verify_waves} verification wave(s) = {iteration_s:.0f} s"],
        ["prices", f"{gpu_usd:g} USD per GPU-hour ({m.gpu}), {core_usd:g} USD per core-hour ([modal] keys)"],
        ["not counted", "container start and model load (once per container), memory, network"
                        + (", the backward pass" if command == "train_grpo" else "")],
    ]
    if v.workers > m.verify_cpus:
        notes.append(["warning", f"verify.workers = {v.workers} REPLs share modal.verify_cpus = {m.verify_cpus:g} cores"])
    if v.memory_limit_gb and v.workers * v.memory_limit_gb > m.verify_memory_gb:
        notes.append(["warning", f"verify.workers x verify.memory_limit_gb = {v.workers * v.memory_limit_gb:g} GiB "
                                 f"exceeds modal.verify_memory_gb = {m.verify_memory_gb}"])

    title = command.replace("_", " ")
    return {
        "ok": True,
        "command": title,
        "backend": "modal",
        "app": m.app_name,
        f"samples_per_{work.unit}": work.samples,
        f"{work.unit}s": work.iterations,
        f"est_wall_s_per_{work.unit}": round(iteration_s, 1),
        f"est_gpu_hours_per_{work.unit}": round(gpu_hours, 4),
        f"est_cpu_core_hours_per_{work.unit}": round(core_hours, 4),
        f"est_usd_per_{work.unit}": round(cost, 4),
        "est_usd_total": round(cost * work.iterations, 2),
        "tables": [
            {"title": f"plan: {title} on Modal (app `{m.app_name}`), per {work.unit}; hours and USD estimated",
             "columns": ["function", "image", "GPU", "CPU", "GiB", "parallel", "calls", "hours", "USD"],
             "rows": rows},
            {"title": "what each function does", "columns": ["function", "role"], "rows": roles},
            {"title": "images", "columns": ["image", "contents"], "rows": [[k, d] for k, d in images.items()]},
            {"title": "how the estimate is made", "columns": ["", ""], "rows": notes},
        ],
    }
