"""The plan: what `--backend modal` runs, on which image, and what it costs (`--dry-run`).

    prover train es --config configs/kimina-es.toml --backend modal --dry-run
    prover train grpo --config configs/kimina-grpo.toml --backend modal --dry-run --json

Pure Python: no `modal` import, so a plan is instant and needs no credentials. This package is
the one place that turns a config into Modal resources (`resources(config)`) and that pins every
image (`IMAGES`); `on_modal/images.py` builds the images and `on_modal/functions.py` declares its functions from
both, so the plan and what deploys cannot drift apart.

How the cost estimate is made (per ES iteration or GRPO step, an upper estimate, in USD). Modal
bills every container for its reserved GPUs, CPU cores and memory for as long as it is up, busy
or idle, so each line is container-seconds x (GPUs, cores, GiB) x the `[modal]` prices:
- generation: every sample decodes `max_tokens` tokens at `modal.est_decode_tokens_per_s` (0: the
  estimate for `modal.gpu` in config.MODAL_GPUS); the samples of one call decode in parallel as one
  batch, so a call lasts max_tokens / speed;
- rounds: a call of more sequences than its engine's KV cache holds (on_modal/gpu_memory.py: the budget
  vLLM gives the engine, less its weights and activation peak, over one sequence's prompt and max
  tokens) runs in rounds, each a call long (ES members, the held-out evaluation, GRPO's step);
- GRPO's optimizer step: forward and backward over the step's completions, 6 x parameters x tokens
  at an ASSUMED fraction of the GPU's bf16 peak (gpu_memory.grpo_train_s), after the generation;
- memory (on_modal/gpu_memory.py): each GPU's weights, vLLM budget, fp32 masters, transients and CUDA
  contexts; a config that does not fit the GPU's memory with a margin is refused (ConfigError
  naming the config file and keys), by the dry run and by a run (remote.run_remote);
- verification (Lean task only), counted event by event as the code runs one call
  (on_modal/plan/verification.py): `verify.workers` REPL Sandboxes per batch of `modal.verify_batch_size`
  proofs, side by side, each importing the header (`modal.est_header_s`), then taking proofs of
  `modal.est_verify_s_per_proof` from one queue and ending after its last; the kernel stage's
  steps (`lean -o`, checker processes) in Sandboxes of their own, one checker batch per batch at
  once; the call lasts to its last verdict;
- low-rank ES on vLLM's LoRA path (`es.noise = "lora"`, es/vllm_lora.py): the whole population is
  ONE call on the loop's engine, every member's sequences together, in the rounds its KV budget
  (LoRA slots taken out of it, on_modal/gpu_memory.py) allows; no member containers; its proofs go to batch
  Sandboxes as in the barrier schedule (the same verification);
- an ES iteration is laid out by `schedule.simulate` as `modal.es_member_gpus` says: the barrier
  (0: every member at once, then the batch Sandboxes, the loop's GPU waiting) or the pipelined
  schedule (the loop's GPU and N member containers each running a share while their REPL
  workers check each member's proofs); the loop container and every member container are
  billed for the whole iteration, idle time included; `benchmarks/bench_pipeline.py` prints
  these same figures (`es_iteration_cost`);
- the ES held-out evaluation: pipelined, on the loop's GPU with its live weights; barrier, one GPU
  container's work (`es_eval`); the members (and the loop) billed while they wait for it; GRPO's
  runs in the trainer's container;
- per method, the same unit: the GPU-busy share of billed GPU-seconds and USD per 1,000 samples.
The `modal.est_*` timings are replaced by measured ones where a calibration file of
`prover doctor --backend modal` matches the config (on_modal/calibration.py); the plan says, per
figure, which it used.
A GPU is priced at Modal's list price of `modal.gpu` (config.MODAL_GPUS) unless
`modal.gpu_price_per_hour` is set; GPU containers reserve `modal.gpu_container_cpus` cores and
`modal.gpu_container_memory_gb` GiB. Sandboxes' CPU and memory are priced by their own keys
(`modal.sandbox_*_price_*`). After the last ES iteration each warm member idles out its
`scaledown_window` once (`est_usd_once`).
Not counted: container start and model load (once per container), a cold member's replay (the
plan prints its worst case), GRPO's activation memory, and network. ES is priced at the configured
`modal.est_resident_slowdown` and at 0.25 and 0.75 (`SLOWDOWNS`: an assumption until
scripts/gpu_first_contact.py measures it). The dry run's first table is the total, the USD per
iteration, the memory verdict and whether Modal credentials were found (prover_cli/backends.py reads the
token variables or ~/.modal.toml; nothing imports `modal`). Figures outside a physical range are
refused (calibration.check_physics). Measure one iteration and adjust the `modal.est_*` keys.

The package, in the order it is built (each file imports only the ones above it):

- pins.py            the images: every pin with its reason (the Makefile reads `VLLM` and `TRANSFORMERS` here)
- sizing.py          `Resources`, the Lean and GPU sizes, the unit prices, one billed line (`_Line`)
- verification.py    one verification call in batch Sandboxes, event by event, as the code runs it
- iteration.py       one iteration's (or step's) work and timings, and the ES schedule that lays it out
- containers.py      `resources(config)`: what every remote function asks for, the members' warm window
- costs.py           the billed lines, the held-out evaluation, the run's total, `es_iteration_cost`
- dry_run.py         `plan()`: the `--dry-run` of `train es` / `train grpo`, locally or on Modal, its tables
- explain.py         the dry run's explanations: per-function rows, roles, how the estimate is made
- doctor_dry_run.py  `prover doctor --backend modal --dry-run`: its steps and their cost
- docs.py            docs/modal.md's generated blocks; `__main__.py` rewrites them:
                     `python -m prover_cli.on_modal.plan docs/modal.md`

This `__init__` re-exports what outside code uses, so `from prover_cli.on_modal.plan import X` reads as before.
"""

from __future__ import annotations

from prover_cli.on_modal.plan.pins import (
    BASE_EXECUTABLES,
    DATASETS,
    ELAN_VERSION,
    HF_HUB,
    ImageSpec,
    LEAN_EXECUTABLES,
    MATPLOTLIB,
    MODAL_TRACKERS,
    MODELS_MOUNT,
    PYTHON_VERSION,
    RICH,
    RUNS_MOUNT,
    SAFETENSORS,
    TENSORBOARD,
    TRANSFORMERS,
    TRL,
    TYPER,
    VLLM,
    image_specs,
    repl_tag,
)
from prover_cli.on_modal.plan.sizing import (
    HOURS,
    MAX_SCALEDOWN_WINDOW_S,
    MAX_TIMEOUT_S,
    MINUTES,
    Resources,
    UNIT_NAMES,
    UPDATE_MARGIN_S,
    cold_member_replay,
    decode_tokens_per_s,
    gpu_container_size,
    gpu_price_per_hour,
    gpu_spec,
    kernel_imports_per_batch,
    kernel_memory_problem,
    kernel_s_per_pass,
    kernel_step_size,
    kernel_step_timeout_s,
    kernel_workers,
    unit_prices,
    verify_batch_timeout_s,
)
from prover_cli.on_modal.plan.verification import VerificationRun, verification_as_run, verification_batches
from prover_cli.on_modal.plan.iteration import (
    _timings,
    _work_per_iteration,
    es_generating_gpus,
    es_gpus_billed,
    es_kernel_latency_s,
    es_lean_workers,
    es_member_containers,
    es_one_call,
    es_schedule_problem,
    es_pipelined,
    es_prices,
    es_simulation_inputs,
    heldout_evaluations,
    with_es_schedule,
)
from prover_cli.on_modal.plan.containers import (
    es_gap_bound_s,
    es_gap_s,
    es_member_scaledown_window_s,
    resources,
)
from prover_cli.on_modal.plan.costs import (
    SLOWDOWNS,
    _billed_lines,
    cheapest_es_pipeline,
    es_iteration_cost,
    gpu_memory_problem,
    kernel_batches,
    kernel_check_core_s_per_proof,
    memory_problem,
    with_resident_slowdown,
)
from prover_cli.on_modal.plan.dry_run import (
    plan,
)
from prover_cli.on_modal.plan.doctor_dry_run import (
    DOCTOR_EST_MODEL_LOAD_S,
    DOCTOR_EST_VOLUME_CALL_S,
    DoctorStep,
    doctor_plan,
    doctor_steps,
)
from prover_cli.on_modal.plan.docs import (
    BLOCK_END,
    BLOCK_START,
    docs_block,
    render_docs,
)

__all__ = [
    "BASE_EXECUTABLES",
    "BLOCK_END",
    "BLOCK_START",
    "DATASETS",
    "DOCTOR_EST_MODEL_LOAD_S",
    "DOCTOR_EST_VOLUME_CALL_S",
    "DoctorStep",
    "ELAN_VERSION",
    "HF_HUB",
    "HOURS",
    "ImageSpec",
    "LEAN_EXECUTABLES",
    "MATPLOTLIB",
    "MAX_SCALEDOWN_WINDOW_S",
    "MAX_TIMEOUT_S",
    "MINUTES",
    "MODAL_TRACKERS",
    "MODELS_MOUNT",
    "PYTHON_VERSION",
    "RICH",
    "RUNS_MOUNT",
    "Resources",
    "SAFETENSORS",
    "SLOWDOWNS",
    "TENSORBOARD",
    "TRANSFORMERS",
    "TRL",
    "TYPER",
    "UNIT_NAMES",
    "VerificationRun",
    "UPDATE_MARGIN_S",
    "VLLM",
    "_billed_lines",
    "_timings",
    "_work_per_iteration",
    "cheapest_es_pipeline",
    "cold_member_replay",
    "decode_tokens_per_s",
    "docs_block",
    "doctor_plan",
    "doctor_steps",
    "es_gap_bound_s",
    "es_gap_s",
    "es_generating_gpus",
    "es_gpus_billed",
    "es_iteration_cost",
    "es_kernel_latency_s",
    "es_lean_workers",
    "es_member_containers",
    "es_member_scaledown_window_s",
    "es_one_call",
    "es_schedule_problem",
    "es_pipelined",
    "es_prices",
    "es_simulation_inputs",
    "gpu_container_size",
    "gpu_memory_problem",
    "gpu_price_per_hour",
    "gpu_spec",
    "heldout_evaluations",
    "image_specs",
    "kernel_batches",
    "kernel_check_core_s_per_proof",
    "kernel_imports_per_batch",
    "kernel_memory_problem",
    "kernel_s_per_pass",
    "kernel_step_size",
    "kernel_step_timeout_s",
    "kernel_workers",
    "memory_problem",
    "plan",
    "render_docs",
    "repl_tag",
    "resources",
    "unit_prices",
    "verification_as_run",
    "verification_batches",
    "verify_batch_timeout_s",
    "with_es_schedule",
    "with_resident_slowdown",
]
