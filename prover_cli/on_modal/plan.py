"""The plan: what `--backend modal` runs, on which image, and what it costs (`--dry-run`).

    prover train es --config configs/kimina-es.toml --backend modal --dry-run
    prover train grpo --config configs/kimina-grpo.toml --backend modal --dry-run --json

Pure Python: no `modal` import, so a plan is instant and needs no credentials. This module is
the one place that turns a config into Modal resources (`resources(config)`) and that pins every
image (`IMAGES`); `images.py` builds the images and `functions.py` declares its functions from
both, so the plan and what deploys cannot drift apart.

How the cost estimate is made (per ES iteration or GRPO step, an upper estimate, in USD). Modal
bills every container for its reserved GPUs, CPU cores and memory for as long as it is up, busy
or idle, so each line is container-seconds x (GPUs, cores, GiB) x the `[modal]` prices:
- generation: every sample decodes `max_tokens` tokens at `modal.est_decode_tokens_per_s` (0: the
  estimate for `modal.gpu` in config.MODAL_GPUS); the samples of one call decode in parallel as one
  batch, so a call lasts max_tokens / speed;
- rounds: a call of more sequences than its engine's KV cache holds (gpu_memory.py: the budget
  vLLM gives the engine, less its weights and activation peak, over one sequence's prompt and max
  tokens) runs in rounds, each a call long (ES members, the held-out evaluation, GRPO's step);
- GRPO's optimizer step: forward and backward over the step's completions, 6 x parameters x tokens
  at an ASSUMED fraction of the GPU's bf16 peak (gpu_memory.grpo_train_s), after the generation;
- memory (gpu_memory.py): each GPU's weights, vLLM budget, fp32 masters, transients and CUDA
  contexts; a config that does not fit the GPU's memory with a margin is refused (ConfigError
  naming the config file and keys), by the dry run and by a run (remote.run_remote);
- verification (Lean task only): each batch of `modal.verify_batch_size` proofs runs in its own
  Sandbox: the header once per REPL (`modal.est_header_s`), then `modal.est_verify_s_per_proof`
  per proof, `verify.workers` proofs at a time, on `modal.verify_cpus` cores and
  `modal.verify_memory_gb` GiB;
- low-rank ES on vLLM's LoRA path (`es.noise = "lora"`, es/vllm_lora.py): the whole population is
  ONE call on the loop's engine, every member's sequences together, in the rounds its KV budget
  (LoRA slots taken out of it, gpu_memory.py) allows; no member containers; its proofs go to batch
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
iteration, the memory verdict and whether Modal credentials were found (backends.py reads the
token variables or ~/.modal.toml; nothing imports `modal`). Figures outside a physical range are
refused (calibration.check_physics). Measure one iteration and adjust the `modal.est_*` keys.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from prover_cli.config import MODAL_GPUS
from prover_cli.progress import NULL_REPORTER

MINUTES = 60
HOURS = 60 * MINUTES
MAX_TIMEOUT_S = 24 * HOURS            # Modal's ceiling for one call; training loops resume past it
MAX_SCALEDOWN_WINDOW_S = 60 * MINUTES  # Modal refuses a scaledown_window outside [2, 3600] s

# --------------------------------------------------------------------------------------------
# Images: every requirement string each one installs, with the reason for each pin
# --------------------------------------------------------------------------------------------
# The pins must resolve together: tests/test_modal_pins.py runs `uv pip compile` on each image's
# `python_packages` for Python 3.11 on x86_64 Linux. Bump them together, rerun that test, then
# rebuild with `modal deploy`.

PYTHON_VERSION = "3.11"
ELAN_VERSION = "v4.1.2"  # the toolchain manager; the Lean toolchain itself is a config value

VLLM = "vllm==0.31.0"                 # TRL 1.16 supports colocated vLLM 0.22.0-0.31.0 (trl/import_utils.py);
                                      # it brings its own CUDA torch, so torch is never pinned beside it;
                                      # pyproject.toml's [gpu] extra pins the same (a test compares them)
TRANSFORMERS = "transformers==5.17.*"  # vllm 0.31.0 requires transformers>=5.10.4,<5.18.0
HF_HUB = "huggingface_hub==1.33.*"     # transformers 5.17 requires huggingface-hub>=1.5.0,<2.0
TRL = "trl==1.16.*"                    # GRPOConfig defaults move between releases
DATASETS = "datasets==5.2.*"           # prepare-data's hub loader
SAFETENSORS = "safetensors==0.8.*"     # ES snapshots and replayed weights
TYPER = "typer==0.29.*"                # prover_cli's CLI, imported by the package
RICH = "rich==15.*"                    # prover_cli's tables and progress
MATPLOTLIB = "matplotlib==3.11.*"      # eval's pass@k plot
TENSORBOARD = "tensorboard==2.21.*"    # run.report_to = "tensorboard" (W&B and Trackio are not in the images)
MODAL_TRACKERS = ("tensorboard",)      # the run.report_to trackers the GPU images can stream to


@dataclass(frozen=True)
class ImageSpec:
    """One image: what it is based on and everything it installs, as `--dry-run --json` lists it.

    `executables` names every program that the image's build steps and our code run inside it,
    with what puts it there. tests/test_modal_images.py checks every build step and every
    `exec(...)` / subprocess argv in prover_cli/on_modal/ against it, and the Sandbox stand-in
    refuses to run a program its image does not list. Add a program here in the same change
    that installs it (a build step, an apt package) and the code that calls it.
    """

    base: str
    python_packages: tuple[str, ...]
    apt_packages: tuple[str, ...] = ()
    toolchain: dict[str, str] = field(default_factory=dict)  # Lean pins (lean image only)
    why: str = ""
    executables: dict[str, str] = field(default_factory=dict)  # program -> what puts it in the image

    def to_json(self) -> dict[str, Any]:
        return {"base": self.base, "python": PYTHON_VERSION, "python_packages": list(self.python_packages),
                "apt_packages": list(self.apt_packages), "toolchain": dict(self.toolchain), "why": self.why,
                "executables": dict(self.executables)}


# What every debian_slim image has: the Python of the base image, and Debian's Essential
# packages (dash, coreutils, tar: "Essential: yes", present in every Debian image). Not `kill`:
# /bin/kill is procps (Priority: important, not Essential), which no slim image has and none of
# our apt installs pulls in (`apt-get -s install` of debian_slim's build-essential layer plus
# the Lean image's packages on bookworm's package data: 154 packages, no procps).
BASE_EXECUTABLES = {
    "python": f"the python:{PYTHON_VERSION} slim base image (/usr/local/bin/python)",
    "sh": "Debian Essential (dash): runs every RUN step",
    "mkdir": "Debian Essential (coreutils)",
    "ln": "Debian Essential (coreutils)",
    "env": "Debian Essential (coreutils): runs the kernel checker with LEAN_ABORT_ON_PANIC=1 (verify/kernel.py)",
    "printf": "Debian Essential (coreutils; also a dash builtin)",
    "tar": "Debian Essential (tar)",
}
# The Lean image adds these (images.LEAN_BUILD_STEPS installs them in this order).
LEAN_EXECUTABLES = {
    "curl": "apt_packages",
    "git": "apt_packages",
    "/tmp/elan-init": "unpacked by the first elan step",
    "elan": "the elan step: $ELAN_HOME/bin, on PATH",
    "lake": "the elan step: the pinned toolchain's lake, through elan's proxy on PATH",
    "lean": "the elan step: the pinned toolchain's lean, through elan's proxy on PATH",
    "repl": "the repl steps: built at the toolchain's tag, linked into /usr/local/bin",
    "touch": "Debian Essential (coreutils)",
    # the kernel checker steps run one script (images.KERNEL_CHECKER_SCRIPT); what it installs:
    "prover_check": "the kernel checker steps, Lean 4.9-4.21: prover_cli/verify/checker built with lake, linked "
                    "into /usr/local/bin (absent when its build failed: images.KERNEL_CHECKER_FAILED)",
    "safe_verify": "the kernel checker steps, Lean 4.27/4.29: SafeVerify built at the commit pinned for the "
                   "toolchain (verify/kernel.py PINS), linked into /usr/local/bin",
}


def _checker_pin(lean_toolchain: str) -> str:
    from prover_cli.verify.kernel import pin_for

    pin = pin_for(lean_toolchain)
    return pin.describe if pin else "none pinned for this toolchain (verify.kernel_check = true refuses)"


def repl_tag(lean_toolchain: str) -> str:
    """leanprover-community/repl tags each Lean release it supports with the same name (v4.15.0)."""
    return lean_toolchain.rpartition(":")[2]


def image_specs(lean_toolchain: str, mathlib_rev: str) -> dict[str, ImageSpec]:
    """The four images, one per job. The Lean pins come from `[verify]` (baked in at import)."""
    base = f"debian_slim(python_version={PYTHON_VERSION!r})"
    gpu_packages = (VLLM, TRANSFORMERS, HF_HUB, SAFETENSORS, DATASETS, TYPER, RICH, MATPLOTLIB, TENSORBOARD)
    return {
        "orchestrator": ImageSpec(base, (TYPER, RICH, DATASETS, HF_HUB),
                                  why="prepare-data and `prover verify`: reads files, drives Lean Sandboxes",
                                  executables=dict(BASE_EXECUTABLES)),
        "gpu": ImageSpec(base, gpu_packages, why="vLLM generation, the ES loop and members, replay, eval",
                         executables=dict(BASE_EXECUTABLES)),
        "trl": ImageSpec(base, (*gpu_packages, TRL), why="TRL's GRPOTrainer with colocated vLLM",
                         executables=dict(BASE_EXECUTABLES)),
        "lean": ImageSpec(
            base, (TYPER, RICH), apt_packages=("curl", "git", "ca-certificates"),
            toolchain={"elan": ELAN_VERSION, "lean_toolchain": lean_toolchain,
                       "repl": f"leanprover-community/repl {repl_tag(lean_toolchain)}",
                       "mathlib": f"mathlib4 {mathlib_rev} (build cache fetched at image build)",
                       "kernel_checker": _checker_pin(lean_toolchain)},
            why="verification Sandboxes: the REPL with Mathlib, no network, no Volumes",
            executables={**BASE_EXECUTABLES, **LEAN_EXECUTABLES}),
    }


# Where the Volumes are mounted in every container.
MODELS_MOUNT = "/models"
RUNS_MOUNT = "/runs"


# --------------------------------------------------------------------------------------------
# Resources of every function, and of the verification Sandboxes
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Resources:
    """What one Modal function, class or Sandbox asks for. `functions.py` passes these on."""

    image: str                  # "orchestrator", "gpu", "trl" or "lean" (see `image_specs`)
    gpu: str | None             # Modal's "TYPE:COUNT", None for CPU-only
    cpu: float                  # cores reserved
    memory_mb: int              # memory reserved, MiB
    timeout_s: int              # one call (or Sandbox) is killed after this
    retries: int                # retries of a failed or timed-out call
    max_containers: int         # parallel containers at most
    volumes: tuple[str, ...]    # mount points used (MODELS_MOUNT, RUNS_MOUNT)
    scaledown_window_s: int | None = None  # idle seconds a warm container waits for its next call

    @property
    def gpu_count(self) -> int:
        return int(self.gpu.split(":")[1]) if self.gpu and ":" in self.gpu else (1 if self.gpu else 0)


def verify_batch_timeout_s(config: Any) -> int:
    """Long enough for the header plus every proof of a batch hitting its own timeout, no more:
    a wedged Sandbox is then killed and its proofs retried once, never waited on forever."""
    v, m = config.verify, config.modal
    rounds = math.ceil(m.verify_batch_size / v.workers)
    return int(v.header_timeout_s + rounds * (v.timeout_s + 5) + 2 * MINUTES)


def kernel_workers(verify_config: Any) -> int:
    from prover_cli.verify.kernel import kernel_workers as workers

    return workers(verify_config)


def kernel_imports_per_batch(config: Any, passes: int) -> tuple[int, float]:
    """(checker processes, header imports) for `passes` proofs of one verification batch, by the
    design of the pinned checker: prover_check imports once per process of up to
    verify.kernel_batch_size proofs; SafeVerify (2026) takes one pair per process and imports the
    header four times in it (`checkImportSuperset` twice, then one `replayFile` per side; its
    Main.lean at b291b588)."""
    from prover_cli.verify.kernel import pin_for

    pin = pin_for(config.verify.lean_toolchain)
    if pin is not None and pin.dialect == "batch":
        processes = math.ceil(passes / config.verify.kernel_batch_size)
        return processes, float(processes)
    return passes, 4.0 * passes


def kernel_s_per_pass(config: Any, passes_per_batch: int) -> float:
    """Seconds of kernel-stage work per fast-path pass, amortised over a verification batch's
    passes: the per-proof part (modal.est_kernel_check_s_per_proof) plus the batch's header
    imports (modal.est_kernel_import_s each) shared among its passes."""
    passes = max(1, passes_per_batch)
    _, imports = kernel_imports_per_batch(config, passes)
    return config.modal.est_kernel_check_s_per_proof + imports * config.modal.est_kernel_import_s / passes


def kernel_step_size(config: Any) -> tuple[float, int]:
    """(cores, MiB) of one kernel-stage Sandbox: what one REPL of a verification Sandbox gets."""
    v, m = config.verify, config.modal
    memory_mb = (m.kernel_sandbox_memory_gb * 1024 if m.kernel_sandbox_memory_gb
                 else max(4 * 1024, int(m.verify_memory_gb * 1024 / v.workers)))
    return max(1.0, m.verify_cpus / v.workers), memory_mb


def kernel_memory_problem(config: Any) -> str | None:
    """Why a kernel-stage Sandbox of this config would run out of memory, by the doctor's measured
    peak (the calibration file), or None: no kernel stage, no measured peak, or it fits."""
    from prover_cli.on_modal.calibration import resolve

    if config.data.task != "lean" or not config.verify.kernel_check:
        return None
    figures = resolve(config)
    sandbox_gib = kernel_step_size(config)[1] / 1024
    if figures.kernel_peak_memory_gib is None or figures.kernel_peak_memory_gib <= sandbox_gib:
        return None
    return (f"the kernel stage's measured peak memory, {figures.kernel_peak_memory_gib:.1f} GiB per step "
            f"({figures.path}), exceeds its Sandbox's {sandbox_gib:g} GiB: set modal.kernel_sandbox_memory_gb "
            f"to at least {math.ceil(figures.kernel_peak_memory_gib)}")


def kernel_step_timeout_s(config: Any) -> int:
    """The step's own deadline (verify.kernel_check_timeout_s) plus the Sandbox's start."""
    return int(config.verify.kernel_check_timeout_s + 5 * MINUTES)


def gpu_spec(config: Any) -> str:
    """Modal's GPU string: `H100:1`."""
    return f"{config.modal.gpu}:{config.modal.gpus_per_container}"


def gpu_price_per_hour(config: Any) -> float:
    """USD per GPU-hour: `modal.gpu_price_per_hour`, or (0) Modal's list price of `modal.gpu`."""
    from prover_cli.on_modal.calibration import check_physical_key

    m = config.modal
    return check_physical_key(config, "gpu_price_per_hour") or MODAL_GPUS[m.gpu].usd_per_hour


def decode_tokens_per_s(config: Any) -> float:
    """One sequence's decode speed: `modal.est_decode_tokens_per_s`, or (0) the estimate for `modal.gpu`."""
    from prover_cli.on_modal.calibration import check_physical_key

    m = config.modal
    return check_physical_key(config, "est_decode_tokens_per_s") or MODAL_GPUS[m.gpu].est_decode_tokens_per_s


def gpu_container_size(config: Any) -> tuple[float, int]:
    """(cores, MiB) every container of the gpu and trl images reserves (and is billed for)."""
    return config.modal.gpu_container_cpus, config.modal.gpu_container_memory_gb * 1024


def es_gap_s(config: Any) -> float:
    """Estimated seconds an ES member waits between its calls: the iteration minus its own generation."""
    work = _work_per_iteration(config, "train_es")
    return _timings(config, "train_es", work).iteration_s - _timings(config, "train_es", work).generation_s


UPDATE_MARGIN_S = 2 * MINUTES  # the loop's update, ledger write and commit between verification and the next call


def es_gap_bound_s(config: Any) -> float:
    """The longest a member may legitimately wait between its calls: the other generation waves,
    then every verification wave running to its Sandboxes' timeout (`verify_batch_timeout_s`:
    header + every proof at its own timeout) plus the kernel stage's estimated time, then the update."""
    work = _work_per_iteration(config, "train_es")
    t = _timings(config, "train_es", work)
    # the kernel stage after each batch's fast path: its estimate (each of its steps is bounded by
    # verify.kernel_check_timeout_s, which this bound does not multiply out)
    return ((t.gen_waves - 1) * t.generation_s + t.verify_waves * (verify_batch_timeout_s(config) + t.kernel_s)
            + UPDATE_MARGIN_S)


def es_member_scaledown_window_s(config: Any) -> int:
    """Long enough to outlast the longest legitimate gap between iterations (at least 5 minutes, at
    most Modal's 1 h): a member that went cold replays the ledger from the newest snapshot, so
    idling through any gap the verification bound allows is the cheaper choice."""
    return int(min(MAX_SCALEDOWN_WINDOW_S, max(5 * MINUTES, math.ceil(es_gap_bound_s(config)))))


def cold_member_replay(config: Any) -> tuple[int, float]:
    """(iterations, seconds) a cold member replays at worst before it can generate: up to
    `es.snapshot_every` iterations after the newest snapshot, or the whole ledger without one."""
    es = config.es
    iterations = min(es.snapshot_every, es.iterations - 1) if es.snapshot_every else es.iterations - 1
    return iterations, iterations * config.modal.est_replay_s_per_iteration


def resources(config: Any) -> dict[str, Resources]:
    """Resources of every remote function, from `[modal]` (and `[verify]` for the Lean Sandboxes)."""
    m = config.modal
    gpu = gpu_spec(config)
    call_timeout_s = m.timeout_min * MINUTES
    both = (MODELS_MOUNT, RUNS_MOUNT)
    host = gpu_container_size(config)  # cores, MiB of every gpu / trl image container
    return {
        # Fetch base weights once into the models Volume, before any GPU container needs them.
        "download_model": Resources("gpu", None, 2.0, 8 * 1024, 2 * HOURS, m.retries, 1, both),
        "prepare_data": Resources("orchestrator", None, 2.0, 8 * 1024, 2 * HOURS, m.retries, 1, (RUNS_MOUNT,)),
        # Drives the Lean Sandboxes; each Sandbox has its own timeout, so this one only bounds the run.
        "verify": Resources("orchestrator", None, 2.0, 4 * 1024, MAX_TIMEOUT_S, m.retries, 1, (RUNS_MOUNT,)),
        # One batch of proofs: no Volumes, no secrets, no network (see sandbox.py). One core per
        # REPL (verify.workers), several GiB each for Mathlib's environment; killed after the
        # header plus every proof at its timeout; a Sandbox that fails gets one more attempt.
        "verify_sandbox": Resources("lean", None, m.verify_cpus, m.verify_memory_gb * 1024,
                                    verify_batch_timeout_s(config), 1, m.verify_max_containers, ()),
        # One kernel-stage step (`lean -o` of one proof, the trusted target, or SafeVerify) in a
        # fresh Sandbox of its own (verify/kernel.py, sandbox.SandboxRunner): one REPL's share of
        # the verification Sandbox, verify.kernel_check_workers at a time per batch.
        "kernel_sandbox": Resources("lean", None, *kernel_step_size(config), kernel_step_timeout_s(config), 0,
                                    m.verify_max_containers * kernel_workers(config.verify), ()),
        # The pipelined ES schedule (modal.es_member_gpus > 0): one REPL per Sandbox, warm for the
        # whole run (the header imported once), verify.workers of them per generating GPU.
        "lean_worker": Resources("lean", None, *kernel_step_size(config), MAX_TIMEOUT_S, 1,
                                 max(1, es_lean_workers(config)), ()),
        # Declared so `modal deploy` builds the Lean image up front (Sandboxes alone would build it
        # on the first verification); it reports the image's Lean and Mathlib versions.
        "lean_image_check": Resources("lean", None, 1.0, 4 * 1024, 10 * MINUTES, 0, 1, ()),
        # `prover doctor --backend modal`: one short prompt on one GPU of the generation kind, and
        # the Volumes' commit/reload round trip between two small containers (doctor_plan below).
        "doctor_gpu": Resources("gpu", gpu, *host, 30 * MINUTES, 0, 1, both),
        "doctor_volumes": Resources("orchestrator", None, 1.0, 1024, 10 * MINUTES, 0, 1, both),
        # The ES held-out evaluation: one GPU container with the current weights (base + ledger), not
        # the whole population held (docs/modal.md); one call per evaluation.
        "es_eval": Resources("gpu", gpu, *host, call_timeout_s, m.retries, 1, both),
        # vLLM loads once per container; modal.gpu_container_cpus cores and gpu_container_memory_gb
        # GiB of host RAM stage the weights and run the tokenizer and the engine's CPU side. One
        # call per `prover generate`.
        "generate": Resources("gpu", gpu, *host, call_timeout_s, m.retries, 1, both),
        # One member per call, the population in one wave (max_containers); warm through the gap
        # between iterations (a cold member would replay the ledger); a member is a pure function
        # of (ledger, t, i), so retries are safe.
        "es_member": Resources("gpu", gpu, *host, call_timeout_s, m.retries, m.max_containers, both,
                               scaledown_window_s=es_member_scaledown_window_s(config)),
        # Exactly one container writes a run's ledger; a retry resumes from it.
        "train_es": Resources("gpu", gpu, *host, MAX_TIMEOUT_S, m.retries, 1, both),
        # Not retried: a GRPO retry would refuse the existing run; resume it with `--resume`
        # (from <run.dir>/checkpoints/ on the runs Volume).
        "train_grpo": Resources("trl", gpu, *host, MAX_TIMEOUT_S, 0, 1, both),
        # CPU by default; functions.py adds the GPU for `--device cuda` (same bits either way).
        "replay_seeds": Resources("gpu", None, *host, call_timeout_s, m.retries, 1, both),
        # CPU by default; functions.py adds the GPU when eval generates (not for `--verdicts`).
        "eval": Resources("gpu", None, *host, MAX_TIMEOUT_S, m.retries, 1, both),
    }


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
    rounds: int = 1           # rounds of one generation call: its sequences over what the engine's KV cache holds
    train_s: float = 0.0      # GRPO: the optimizer step's forward and backward passes
    train_note: str = ""


def _memory(config: Any, command: str, measured: dict[str, float] | None = None) -> tuple[Any, list[Any]]:
    """(the model's shape, each GPU's memory: gpu_memory.py) as this config lays its engines out."""
    from prover_cli.on_modal.gpu_memory import gpu_memory

    return gpu_memory(config, command, pipelined=command == "train_es" and es_pipelined(config), measured=measured)


def _kv_capacity(config: Any, command: str, *, heldout: bool = False) -> int:
    """Sequences one engine holds at once where the call runs (0: not known here). ES: a member GPU's
    engine; its held-out evaluation on the loop's engine 0 (pipelined) or es_eval's one engine (barrier)."""
    if command == "train_es" and heldout and not es_pipelined(config):
        from prover_cli.on_modal.gpu_memory import es_gpus, model_facts

        facts = model_facts(config)
        gpus = es_gpus(config, facts, pipelined=False) if facts and config.modal.gpu in MODAL_GPUS else []
    else:
        _, gpus = _memory(config, command)
    if not gpus:
        return 0
    return gpus[0 if heldout else -1].kv_sequences


def es_one_call(config: Any) -> bool:
    """`es.noise = "lora"`: every member a LoRA adapter, the population one call on the loop's engine
    (es/vllm_lora.py); refused beside the pipelined schedule, which splits members over engines."""
    if config.es.noise != "lora":
        return False
    if config.modal.es_member_gpus:
        from prover_cli.errors import ConfigError

        raise ConfigError(f"{config.source}: es.noise = \"lora\" generates the whole population in one call on the "
                          f"loop's engine, and modal.es_member_gpus = {config.modal.es_member_gpus} would split it "
                          "over member containers", hint="set modal.es_member_gpus = 0")
    return True


def _work_per_iteration(config: Any, command: str) -> _Work:
    from prover_cli.on_modal.gpu_memory import grpo_train_s, model_facts, rounds

    lean = config.data.task == "lean"
    if command == "train_es":
        es = config.es
        samples = es.population * es.problems_per_iteration * es.samples_per_problem
        if es_one_call(config):   # every member's sequences in one call, in the loop engine's rounds
            return _Work("iteration", es.iterations, samples, 1, config.generate.max_tokens,
                         samples if lean else 0, rounds=rounds(samples, _kv_capacity(config, command)))
        batch = es.problems_per_iteration * es.samples_per_problem     # one member's call
        return _Work("iteration", es.iterations, samples, es.population, config.generate.max_tokens,
                     samples if lean else 0, rounds=rounds(batch, _kv_capacity(config, command)))
    g = config.grpo
    samples = g.per_device_train_batch_size * g.gradient_accumulation_steps
    calls = rounds(samples, _kv_capacity(config, command))   # TRL generates a step's completions in one call
    train_s, how = grpo_train_s(config, model_facts(config), samples,
                                calls * g.max_completion_length / decode_tokens_per_s(config))
    return _Work("step", g.steps, samples, 1, g.max_completion_length, samples if lean else 0, rounds=calls,
                 train_s=train_s, train_note=how)


def heldout_evaluations(config: Any, iterations: int) -> tuple[int, int]:
    """(evaluations, samples per evaluation) of the held-out evaluation (prover_cli/heldout.py): the base,
    every `run.eval_every` iterations and the last; sampled (`run.eval_n`, once at temperature 0) plus greedy."""
    r = config.run
    if not r.eval_every:
        return 0, 0
    count = 1 + iterations // r.eval_every + (1 if iterations % r.eval_every else 0)
    problems = r.eval_problems or 0  # 0 = the whole valid split: unknown before prepare-data
    per_problem = 1 if r.eval_temperature == 0 else r.eval_n + 1
    return count, problems * per_problem


@dataclass(frozen=True)
class _Timings:
    generation_s: float       # one generation call
    gen_waves: int
    gen_containers: int
    batches: int              # Lean Sandboxes per iteration
    proofs_per_batch: int
    batch_s: float            # one Sandbox's lifetime
    verify_waves: int
    iteration_s: float        # wall time of one iteration / step
    kernel_passes: int = 0    # fast-path passes per iteration, each through the kernel stage
    kernel_s: float = 0.0     # one batch's kernel stage, wall (its passes, verify.workers at a time)
    es: Any = None            # ES: the simulated iteration (schedule.Result), which sets iteration_s


def _timings(config: Any, command: str, work: _Work) -> _Timings:
    m, v = config.modal, config.verify
    generation_s = work.rounds * work.decode_tokens / decode_tokens_per_s(config)
    if command == "train_es":
        gen_waves = math.ceil(work.generation_calls / m.max_containers)
        gen_containers = min(work.generation_calls, m.max_containers)
    else:
        gen_waves, gen_containers = 1, 1
    batches = math.ceil(work.proofs / m.verify_batch_size) if work.proofs else 0
    proofs_per_batch = min(m.verify_batch_size, work.proofs) if work.proofs else 0
    batch_s = m.est_header_s + math.ceil(proofs_per_batch / v.workers) * m.est_verify_s_per_proof if batches else 0.0
    kernel_passes = math.ceil(work.proofs * m.est_pass_rate) if v.kernel_check else 0
    batch_passes = math.ceil(proofs_per_batch * m.est_pass_rate)
    # `lean -o` of each pass, kernel_workers at a time, then the batch's checker processes in turn
    kernel_s = (math.ceil(batch_passes / kernel_workers(v)) * m.est_kernel_check_s_per_proof
                + kernel_imports_per_batch(config, batch_passes)[1] * m.est_kernel_import_s
                if v.kernel_check and batches and batch_passes else 0.0)
    batch_s += kernel_s     # the batch ends with its last kernel check (its REPL Sandbox waits for it)
    verify_waves = math.ceil(batches / m.verify_max_containers) if batches else 0
    iteration_s = gen_waves * generation_s + work.train_s + verify_waves * batch_s
    t = _Timings(generation_s, gen_waves, gen_containers, batches, proofs_per_batch, batch_s, verify_waves,
                 iteration_s, kernel_passes, kernel_s)
    if command != "train_es":
        return t
    from dataclasses import replace

    from prover_cli.on_modal.schedule import simulate

    result = simulate(*es_simulation_inputs(config, work, t))
    return replace(t, iteration_s=result.iteration_s, es=result, batches=result.batches,
                   gen_containers=es_member_containers(config))


# --------------------------------------------------------------------------------------------
# The ES iteration as the schedule runs it (schedule.simulate: barrier or pipelined)
# --------------------------------------------------------------------------------------------
# One code path: the plan prices the iteration the simulator lays out, and
# benchmarks/bench_pipeline.py prints the plan's figures for both schedules.

def es_pipelined(config: Any) -> bool:
    """modal.es_member_gpus > 0: a few GPUs evaluate the members one after another (docs/modal.md)."""
    return config.modal.es_member_gpus > 0


def es_generating_gpus(config: Any) -> int:
    """GPUs that generate members. Barrier: the ESMember containers, one per member (at most
    modal.max_containers), the loop's GPU waiting on top. Pipelined: the loop's GPU (share 0) and
    modal.es_member_gpus member containers, at most one per member (pipeline.shares: member i on
    GPU i % (N + 1))."""
    if es_one_call(config):
        return 1   # the loop's own engine
    if es_pipelined(config):
        return min(config.modal.es_member_gpus + 1, config.es.population)
    return min(config.es.population, config.modal.max_containers)


def es_member_containers(config: Any) -> int:
    """ESMember containers up in an iteration (the loop's container apart)."""
    if es_one_call(config):
        return 0
    return es_generating_gpus(config) - 1 if es_pipelined(config) else es_generating_gpus(config)


def es_gpus_billed(config: Any) -> int:
    """GPU containers billed through an ES iteration: the loop's and the members'."""
    return es_member_containers(config) + 1


def es_lean_workers(config: Any) -> int:
    """Pipelined: Lean REPL workers, `verify.workers` per generating GPU, the loop's included (its
    share's verification pool, kept warm through the share: `verify_records(keep_warm=True)`, pipeline.py)."""
    return es_generating_gpus(config) * config.verify.workers


def es_kernel_latency_s(config: Any) -> float:
    """Pipelined: from a pass's fast-path verdict to its kernel verdict: its `lean -o`, then one checker
    process (its import and check) in fresh Sandboxes; 0 with the stage off."""
    m = config.modal
    return m.est_kernel_check_s_per_proof + m.est_kernel_import_s if config.verify.kernel_check else 0.0


def es_prices(config: Any) -> Any:
    """What the simulator bills: a GPU container, one warm REPL worker's Sandbox, one batch Sandbox (per hour)."""
    from prover_cli.on_modal.schedule import Prices

    functions, sandbox = unit_prices(config), unit_prices(config, sandbox=True)
    cores, mib = gpu_container_size(config)
    gpu = (functions["gpu"] * config.modal.gpus_per_container + cores * functions["cpu"]
           + mib / 1024 * functions["memory"])
    worker_cores, worker_mib = kernel_step_size(config)
    worker = worker_cores * sandbox["cpu"] + worker_mib / 1024 * sandbox["memory"]
    batch = config.modal.verify_cpus * sandbox["cpu"] + config.modal.verify_memory_gb * sandbox["memory"]
    return Prices(gpu_per_hour=gpu, lean_worker_per_hour=worker, sandbox_per_hour=batch)


def with_es_schedule(config: Any, member_gpus: int, per_gpu: int) -> Any:
    """`config` with another ES schedule (modal.es_member_gpus, modal.es_members_per_gpu)."""
    from dataclasses import replace

    return replace(config, modal=replace(config.modal, es_member_gpus=member_gpus, es_members_per_gpu=per_gpu))


def es_iteration_cost(config: Any) -> dict[str, Any]:
    """One ES iteration on Modal as the plan bills it (the same lines as `--dry-run`'s table, kernel
    stage included), with the simulated schedule's wall time and GPU-busy share. `config` is priced
    as given: resolve a calibration first (calibration.resolve) to use measured figures."""
    work = _work_per_iteration(config, "train_es")
    t = _timings(config, "train_es", work)
    usd = sum(sum(line.usd(config).values()) for line in _billed_lines(config, "train_es", work, t))
    pipelined = es_pipelined(config)
    _, gpus = _memory(config, "train_es")
    return {"schedule": "pipelined" if pipelined else "barrier", "iteration_s": t.iteration_s, "usd": usd,
            "fits": memory_problem(config, "train_es", gpus) is None, "memory_checked": bool(gpus),
            "gpu_busy_fraction": t.es.gpu_busy_fraction, "gpus_billed": es_gpus_billed(config),
            "resident": config.modal.es_members_per_gpu if pipelined else 1,
            "lean_workers": es_lean_workers(config) if pipelined else t.batches * config.verify.workers,
            "usd_per_1k_samples": 1000 * usd / work.samples if work.samples else 0.0, "config": config}


def cheapest_es_pipeline(config: Any, *, max_iteration_s: float,
                         resident_options: tuple[int, ...] = (1, 2, 4, 8)) -> dict[str, Any] | None:
    """The pipelined schedule (member containers 1..population - 1 beside the loop's GPU x members per
    GPU) of least USD per iteration whose iteration ends within `max_iteration_s` and whose GPUs hold
    its engines (`memory per GPU`; ties: fewer GPUs, then fewer members per GPU); None if none does."""
    best = None
    for gpus in range(1, max(2, config.es.population)):
        for resident in resident_options:
            cost = es_iteration_cost(with_es_schedule(config, gpus, resident))
            if not cost["fits"]:
                continue
            if cost["iteration_s"] <= max_iteration_s and (best is None or round(cost["usd"], 9) < round(best["usd"], 9)):
                best = cost
    return best


def es_simulation_inputs(config: Any, work: _Work, t: _Timings) -> tuple[Any, Any, Any]:
    """(IterationWork, Schedule, Prices) of one ES iteration as `modal.es_member_gpus` lays it out."""
    from prover_cli.on_modal.schedule import IterationWork, Schedule

    m, v = config.modal, config.verify
    calls = work.generation_calls   # es.population, or 1 with the LoRA path (every member in one call)
    proofs_per_member = work.proofs // calls if work.proofs else 0
    common = dict(members=calls, generation_s=t.generation_s, proofs_per_member=proofs_per_member,
                  proof_s=m.est_verify_s_per_proof, header_s=m.est_header_s, update_s=m.est_update_s)
    if es_one_call(config):
        # the loop's engine generates every member at once (its rounds are in generation_s), then the
        # proofs go to fresh batch Sandboxes as in the barrier schedule; no other GPU
        item = IterationWork(**common, proofs_per_batch=max(1, t.proofs_per_batch), batch_s=t.batch_s)
        schedule = Schedule("one call (LoRA)", gpus=1, lean_workers=max(1, m.verify_max_containers * v.workers),
                            barrier=True, proofs_per_header=0, loop_gpu=False,
                            sandboxes=m.verify_max_containers if work.proofs else 0)
    elif not es_pipelined(config):
        # today's: every member at once (in waves of max_containers), then fresh Sandboxes of
        # verify_batch_size proofs, each lasting the header, its proofs and its kernel stage
        item = IterationWork(**common, proofs_per_batch=max(1, t.proofs_per_batch), batch_s=t.batch_s)
        schedule = Schedule("barrier", gpus=es_generating_gpus(config), lean_workers=max(1, m.verify_max_containers
                            * v.workers), barrier=True, proofs_per_header=0, loop_gpu=True,
                            sandboxes=m.verify_max_containers if work.proofs else 0)
    else:
        # every generating GPU, the loop's (GPU 0) and each member container's, evaluates its share
        # one member after another (es_members_per_gpu at once), after applying the last update: a
        # member container's engines replay it; on the loop's GPU engine 0 made it, its other
        # engines replay it. A member's proofs go to its GPU's REPL workers as they arrive, each
        # worker importing the header once per iteration (its share's pool, kept warm through the
        # share) and billed for the whole iteration (an upper bound). No GPU waits.
        loop_catch_up_s = m.est_replay_s_per_iteration if m.es_members_per_gpu > 1 else 0.0
        item = IterationWork(**common, resident_slowdown=m.est_resident_slowdown, catch_up_s=m.est_replay_s_per_iteration,
                             loop_catch_up_s=loop_catch_up_s, kernel_latency_s=es_kernel_latency_s(config))
        schedule = Schedule("pipelined", gpus=es_generating_gpus(config), lean_workers=max(1, es_lean_workers(config)),
                            barrier=False, proofs_per_header=max(1, work.proofs), warm_lean=bool(work.proofs),
                            resident=m.es_members_per_gpu, loop_generates=True)
    return item, schedule, es_prices(config)


def _local_plan(config: Any, command: str, work: _Work) -> dict[str, Any]:
    device = config.model.device
    sampler = config.generate.backend
    reward = (f"Lean REPL pool in this process: {config.verify.workers} `{' '.join(config.verify.repl_command)}` processes"
              if config.data.task == "lean" else f"`{config.data.task}` checker in this process (pure Python)")
    if config.data.task == "lean":
        reward += ("; then the kernel stage on each pass: `lean -o` in a fresh process, then the pinned checker "
                   "(prover_check: one process per batch, one header import)"
                   if config.verify.kernel_check else "; kernel stage off (verify.kernel_check = false)")
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
    evaluations, eval_samples = heldout_evaluations(config, work.iterations)
    if evaluations:
        rows.append(["held-out", f"this machine, {sampler if command == 'train_es' else 'transformers'} sampler",
                     f"{evaluations} evaluations of {eval_samples or 'all valid-split'} samples (base, every "
                     f"{config.run.eval_every} {work.unit}s, the last)"])
    return {
        "ok": True,
        "command": command.replace("_", " "),
        "backend": "local",
        f"samples_per_{work.unit}": work.samples,
        f"{work.unit}s": work.iterations,
        "samples_total": work.samples * work.iterations,
        "heldout_evaluations": evaluations,
        # run.eval_problems = 0 evaluates every valid-split problem: a count only prepare-data knows, so "all"
        "heldout_samples_total": evaluations * eval_samples if eval_samples or not evaluations else "all",
        "tables": [{"title": f"plan: {command.replace('_', ' ')} on this machine (no cost estimate for local runs)",
                    "columns": ["stage", "where", "what"], "rows": rows}],
    }


UNIT_NAMES = {"gpu": "GPU-s", "cpu": "core-s", "memory": "GiB-s"}


@dataclass
class _Line:
    """One billed kind of container in one iteration: how many, for how long, on what."""

    name: str
    r: Resources
    containers: int
    calls: int | str
    container_s: float        # summed over its containers, busy and idle
    sandbox: bool = False     # Modal prices Sandbox CPU and memory apart from Function CPU and memory

    def seconds(self) -> dict[str, float]:
        return {"gpu": self.container_s * self.r.gpu_count, "cpu": self.container_s * self.r.cpu,
                "memory": self.container_s * self.r.memory_mb / 1024}

    def usd(self, config: Any) -> dict[str, float]:
        prices = unit_prices(config, sandbox=self.sandbox)
        return {kind: unit_s / HOURS * prices[kind] for kind, unit_s in self.seconds().items()}


def unit_prices(config: Any, *, sandbox: bool = False) -> dict[str, float]:
    """USD per GPU-hour (of `modal.gpu`: `gpu_price_per_hour`), core-hour and GiB-hour, from `[modal]`:
    a Sandbox's CPU and memory have their own keys (Modal bills them at a different rate than a Function's)."""
    m = config.modal
    gpu = gpu_price_per_hour(config)
    if sandbox:
        return {"gpu": gpu, "cpu": m.sandbox_cpu_price_per_core_hour, "memory": m.sandbox_memory_price_per_gib_hour}
    return {"gpu": gpu, "cpu": m.cpu_price_per_core_hour, "memory": m.memory_price_per_gib_hour}


def _billed_lines(config: Any, command: str, work: _Work, t: _Timings) -> list[_Line]:
    res = resources(config)
    lines: list[_Line] = []
    if command == "train_es" and es_pipelined(config):
        # N member containers, each evaluating its share of the members one
        # after another, and the loop's GPU waiting; REPL workers check each member's proofs as they arrive.
        members = t.gen_containers
        lines.append(_Line("train_es", res["train_es"], 1, 1, t.iteration_s))
        if members:
            lines.append(_Line("ESMember", res["es_member"], members, "-", members * t.iteration_s))
        if work.proofs:
            workers = es_lean_workers(config)
            lines.append(_Line("Lean REPL Sandbox (warm)", res["lean_worker"], workers, "-", workers * t.iteration_s,
                               sandbox=True))
    elif command == "train_es":
        # The loop holds its GPU for the whole iteration; so does every warm member container:
        # it generates for its wave(s), then idles through verification and the update.
        lines.append(_Line("train_es", res["train_es"], 1, 1, t.iteration_s))
        if t.gen_containers:   # none with the LoRA path: the loop's engine generates every member
            lines.append(_Line("ESMember", res["es_member"], t.gen_containers, work.generation_calls,
                               t.gen_containers * t.iteration_s))
    else:
        lines.append(_Line("train_grpo", res["train_grpo"], 1, 1, t.iteration_s))
    if t.batches and not (command == "train_es" and es_pipelined(config)):
        sandbox = res["verify_sandbox"]
        lines.append(_Line("verify Sandbox", sandbox, min(t.batches, sandbox.max_containers), t.batches,
                           t.batches * t.batch_s, sandbox=True))
    if t.kernel_passes:
        kernel = res["kernel_sandbox"]
        batch_passes, groups = kernel_batches(config, command, work, t)
        per_pass = kernel_s_per_pass(config, batch_passes)
        processes = groups * kernel_imports_per_batch(config, batch_passes)[0]
        lines.append(_Line("kernel Sandbox", kernel, min(groups * kernel_workers(config.verify), kernel.max_containers),
                           t.kernel_passes + processes, t.kernel_passes * per_pass, sandbox=True))
    return lines


def kernel_batches(config: Any, command: str, work: _Work, t: _Timings) -> tuple[int, int]:
    """(passes per kernel-stage batch, batches per iteration): a verification batch's passes, or in the
    pipelined ES schedule one member's (its proofs reach Lean together)."""
    rate = config.modal.est_pass_rate
    if command == "train_es" and es_pipelined(config) and work.proofs:
        per_member = work.proofs // config.es.population
        return math.ceil(per_member * rate), config.es.population
    return math.ceil(t.proofs_per_batch * rate), t.batches


def _imports_said(config: Any) -> str:
    from prover_cli.verify.kernel import pin_for

    pin = pin_for(config.verify.lean_toolchain)
    if pin is not None and pin.dialect == "batch":
        return f"prover_check imports once per {config.verify.kernel_batch_size} proofs (verify.kernel_batch_size)"
    return "SafeVerify imports four times per proof"


def kernel_check_core_s_per_proof(config: Any) -> float:
    """Expected core-seconds of the kernel stage per proof sent to Lean: the pass rate times one
    pass's amortised seconds (`kernel_s_per_pass`, over one verification batch's passes) times the
    cores of its Sandboxes (0 with verify.kernel_check = false)."""
    if not config.verify.kernel_check:
        return 0.0
    cores, _ = kernel_step_size(config)
    passes = math.ceil(min(config.modal.verify_batch_size, config.verify.kernel_batch_size) * config.modal.est_pass_rate)
    return config.modal.est_pass_rate * kernel_s_per_pass(config, passes) * cores


def _heldout_cost(config: Any, command: str, work: _Work, t: _Timings, res: dict[str, Any]) -> dict[str, Any]:
    """One held-out evaluation on Modal: two generation calls (sampled, greedy), then its proofs through Lean.
    GRPO: in the trainer's container (its GPU held meanwhile), its proofs in batch Sandboxes as a step's.
    ES, pipelined: on the loop's own GPU, with its live weights (es/train.py: no replay, no container
    of its own); the warm member containers wait meanwhile, so they are billed for its wall time.
    ES, barrier: on ONE GPU container of its own (`es_eval`, functions.py's es_heldout), theta rebuilt
    from the newest snapshot (the plan counts the worst case, `cold_member_replay`); the loop and the
    warm members wait. Both ES placements check its proofs as the Sandbox placement sizes the pool
    (sandbox.sandbox_concurrency): `verify.workers` REPL Sandboxes per `modal.verify_batch_size`
    proofs, each up for a batch's lifetime (header, its proofs, its kernel stage)."""
    from prover_cli.on_modal.gpu_memory import rounds

    evaluations, samples = heldout_evaluations(config, work.iterations)
    r = config.run
    calls = 1 if r.eval_temperature == 0 else 2
    capacity = _kv_capacity(config, command, heldout=True)
    problems = r.eval_problems or 0
    sequences = [problems] if calls == 1 else [problems * r.eval_n, problems]   # sampled, then greedy
    call_rounds = [rounds(n, capacity) if problems else 1 for n in sequences]
    evaluation = _Work(work.unit, evaluations, samples, 1, config.generate.max_tokens,
                       samples if config.data.task == "lean" else 0, rounds=sum(call_rounds))
    te = _timings(config, "train_grpo", evaluation)  # one container generates, then Lean checks
    es = command == "train_es"
    lines = [line for line in _billed_lines(config, "train_grpo", evaluation, te)
             if line.name != "train_grpo" and not (es and line.name == "verify Sandbox")]
    if es:
        workers = te.batches * config.verify.workers
        lean_s = te.verify_waves * te.batch_s
        in_loop = es_pipelined(config)
        replay_s = 0.0 if in_loop else cold_member_replay(config)[1]
        wall_s = replay_s + te.generation_s + lean_s
        lines.append(_Line("train_es", res["train_es"], 1, 1, wall_s))
        if not in_loop:
            lines.append(_Line("es_eval", res["es_eval"], 1, 1, wall_s))
        if t.gen_containers:
            lines.append(_Line("ESMember", res["es_member"], t.gen_containers, 0, t.gen_containers * wall_s))
        if evaluation.proofs:
            lines.append(_Line("eval REPL Sandbox", res["lean_worker"], workers, "-", te.batches * config.verify.workers
                               * te.batch_s, sandbox=True))
        lean = (f"{evaluation.proofs} proofs on {workers} REPL Sandboxes ({te.batches} batch(es) of "
                f"{te.proofs_per_batch}, {te.batch_s:.0f} s each)" if evaluation.proofs else "no Lean")
        members = f"{t.gen_containers} warm member container(s)" if t.gen_containers else ""
        held = (f"; on the loop's GPU with its live weights (no replay){f', {members} waiting' if members else ''}"
                if in_loop else
                f"; one GPU container (es_eval) replays up to {replay_s:.0f} s from the newest snapshot first; the loop"
                f"{f' and {members}' if members else ''} wait meanwhile")
    else:
        lean = f"{te.batches} Sandbox(es) of {te.batch_s:.0f} s" if te.batches else "no Lean"
        wall_s = te.iteration_s
        lines.append(_Line("train_grpo", res["train_grpo"], 1, 1, wall_s))
        held = "; in the trainer's container, with its colocated vLLM"
    usd = sum(sum(line.usd(config).values()) for line in lines)
    round_s = config.generate.max_tokens / decode_tokens_per_s(config)
    kv = (f"{capacity} sequences at a time (the engine's KV budget: `memory per GPU`)" if capacity else
          "the engine's KV budget not known here (one round per call assumed)")
    calls_said = " + ".join(f"{n or 'all'} {'sampled' if calls == 2 and i == 0 else 'greedy'} in {c} round(s)"
                            for i, (n, c) in enumerate(zip(sequences, call_rounds)))
    note = (f"{evaluations} evaluations (base, every {config.run.eval_every} {work.unit}s, the last) x "
            f"{samples or 'all valid-split'} samples ({config.run.eval_problems or 'all'} problems x "
            f"{'1 greedy' if calls == 1 else f'{config.run.eval_n} sampled + 1 greedy'}): {calls_said}, "
            f"{kv}, each round {round_s:.0f} s, = {te.generation_s:.0f} s of generation + {lean} = {wall_s:.0f} s, "
            f"{usd:.4f} USD each" + held)
    return {"evaluations": evaluations, "samples": samples, "usd": usd, "wall_s": wall_s, "note": note,
            "rounds": sum(call_rounds), "kv_sequences": capacity}


def _wall_note(config: Any, command: str, t: _Timings) -> str:
    m = config.modal
    if command != "train_es":
        return f"generation + {t.verify_waves} verification wave(s) = {t.iteration_s:.0f} s"
    r = t.es
    if es_one_call(config):
        return (f"one call (es.noise = \"lora\", schedule.simulate): every member a LoRA adapter on the loop's engine, "
                f"all {config.es.population} members' sequences in {t.generation_s:.0f} s of generation (its KV rounds), "
                f"then {t.verify_waves} verification wave(s) + the update ({m.est_update_s:g} s, modal.est_update_s) "
                f"= {t.iteration_s:.0f} s")
    if es_pipelined(config):
        return (f"pipelined (schedule.simulate): the loop's GPU and {es_member_containers(config)} member "
                f"container(s) each evaluate a share, {m.es_members_per_gpu} member(s) at once "
                f"(each further one {m.est_resident_slowdown:g} of a generation slower, "
                f"modal.est_resident_slowdown, ASSUMED); engines first apply the last update "
                f"({m.est_replay_s_per_iteration:g} s; on the loop's GPU only its engines after the first"
                f"{', none here' if m.es_members_per_gpu == 1 else ''}); {es_lean_workers(config)} warm REPL workers; "
                "generation ends "
                f"at {r.generation_end_s:.0f} s, the last verdict and the update ({m.est_update_s:g} s, "
                f"modal.est_update_s) end the iteration at {t.iteration_s:.0f} s")
    return (f"barrier (schedule.simulate): {t.gen_waves} generation wave(s) + {t.verify_waves} verification wave(s) "
            f"+ the update ({m.est_update_s:g} s, modal.est_update_s) = {t.iteration_s:.0f} s")


def _figure_value(config: Any, name: str, figures: Any) -> Any:
    m = config.modal
    if name == "kernel_peak_memory_gib":
        return round(figures.kernel_peak_memory_gib, 2) if figures.kernel_peak_memory_gib is not None else "-"
    if name in ("engine_overhead_gib", "es_init_gib"):
        return round(figures.memory[name], 2) if name in figures.memory else "-"
    return {"decode_tokens_per_s": decode_tokens_per_s(config), "header_s": m.est_header_s,
            "verify_s_per_proof": m.est_verify_s_per_proof, "kernel_check_s_per_proof": m.est_kernel_check_s_per_proof,
            "kernel_import_s": m.est_kernel_import_s, "resident_slowdown": m.est_resident_slowdown}[name]


def _memory_rows(gpus: list[Any]) -> list[list[Any]]:
    """Each GPU's breakdown; ES's loop and member GPUs once when they hold the same."""
    if not gpus:
        return [["-", "not checked: the model's shape is not known here", "-", "gpu_memory.KNOWN_MODELS"]]
    if len(gpus) == 2 and [row[1:] for row in gpus[0].rows()] == [row[1:] for row in gpus[1].rows()]:
        return [["each (loop, members)", *row[1:]] for row in gpus[0].rows()]
    return [row for gpu in gpus for row in gpu.rows()]


def _summary_rows(config: Any, command: str, work: _Work, c: _Costs, at_slowdown: dict[str, Any], figures: Any,
                  gpus: list[Any], credentials: bool, schedule: str) -> list[list[Any]]:
    """The dry run's first lines: the total, the USD per iteration (ES: at both resident slowdowns),
    the memory verdict and whether Modal credentials were found."""
    m, unit = config.modal, work.unit
    rows: list[list[Any]] = [
        ["USD in all", f"{c.total:.2f}", f"{work.iterations} {unit}s x {c.cost:.2f}, {c.heldout['evaluations']} held-out "
                                        f"evaluations x {c.heldout['usd']:.2f}, once per run {c.once_usd:.2f}"],
        [f"USD per {unit}", f"{c.cost:.2f}", f"{schedule}, {c.t.iteration_s:.0f} s"],
    ]
    if command == "train_es":
        resident = es_pipelined(config) and m.es_members_per_gpu > 1
        said = (f"{m.es_members_per_gpu} engines per GPU: each further one adds this fraction of a generation "
                f"(modal.est_resident_slowdown = {m.est_resident_slowdown:g}, {figures.sources['resident_slowdown']})"
                if resident else "one engine per GPU: no member shares a GPU, so the slowdown does not enter")
        for slowdown, k in at_slowdown.items():
            rows.append([f"USD per {unit} at resident slowdown {slowdown}", f"{k['usd_per_iteration']:.2f}",
                         f"{k['usd_total']:.2f} USD in all; {said}"])
    if gpus:
        worst = max(gpus, key=lambda gpu: gpu.used_gib / gpu.total_gib)
        rows.append(["memory per GPU", "fits", f"{worst.used_gib:.1f} of {worst.total_gib:.1f} GiB ({worst.gpu}) at "
                                               f"most, margin {worst.margin_gib:.1f} GiB (table below)"])
    else:
        rows.append(["memory per GPU", "not checked", f"the shape of {config.model.name} is not known here"])
    rows.append(["Modal credentials", "found" if credentials else "not found",
                 "a real run can start" if credentials else
                 "no MODAL_TOKEN_ID/MODAL_TOKEN_SECRET and no ~/.modal.toml: a real run stops before contacting "
                 "Modal (`modal token new`); this plan needs none"])
    return rows


def _unit_cost(command: str, work: _Work, t: _Timings, usd: float) -> dict[str, float]:
    """The same unit for ES and GRPO: the GPU-busy share of billed GPU-seconds, USD per 1,000 samples.
    GPU-busy counts generation (ES: and the members' catch-up; GRPO: and its forward and backward passes)."""
    if command == "train_es":
        busy = t.es.gpu_busy_fraction
    else:
        busy = (t.generation_s + work.train_s) / t.iteration_s if t.iteration_s else 0.0
    return {"gpu_busy_fraction": busy, "usd_per_1k_samples": 1000 * usd / work.samples if work.samples else 0.0}


SLOWDOWNS = (0.25, 0.75)   # the resident slowdown the plan prices at besides the configured one (issue #40)


@dataclass
class _Costs:
    t: _Timings
    lines: list[_Line]
    breakdown: dict[str, dict[str, float]]
    cost: float               # USD per iteration / step
    heldout: dict[str, Any]
    once_usd: float
    tail: _Line | None
    total: float              # the run: every iteration, the held-out evaluations, the once-per-run tail


def _costs(config: Any, command: str, work: _Work) -> _Costs:
    """What one iteration (and the run) costs as `config` prices it."""
    res = resources(config)
    t = _timings(config, command, work)
    lines = _billed_lines(config, command, work, t)
    # est_usd_breakdown: per resource, the unit-seconds behind it (GPU-s, core-s, GiB-s) and USD.
    breakdown: dict[str, dict[str, float]] = {}
    for kind, unit in (("gpu", "gpu_s"), ("cpu", "core_s"), ("memory", "gib_s")):
        unit_s = sum(line.seconds()[kind] for line in lines)
        breakdown[kind] = {unit: round(unit_s, 1), "container_s": round(sum(
            line.container_s for line in lines if line.seconds()[kind] > 0), 1),
            "usd": round(sum(line.usd(config)[kind] for line in lines), 4)}
    cost = sum(item["usd"] for item in breakdown.values())
    heldout = _heldout_cost(config, command, work, t, res)
    once_usd, tail = 0.0, None
    if command == "train_es":
        # After the last iteration every warm member idles out its scaledown_window, once per run.
        window = res["es_member"].scaledown_window_s or 0
        tail = _Line("ESMember idle after the run", res["es_member"], t.gen_containers, "once",
                     t.gen_containers * window)
        once_usd = sum(tail.usd(config).values())
    total = round(cost * work.iterations + once_usd + heldout["usd"] * heldout["evaluations"], 2)
    return _Costs(t, lines, breakdown, cost, heldout, once_usd, tail, total)


def with_resident_slowdown(config: Any, slowdown: float) -> Any:
    """`config` with another `modal.est_resident_slowdown`."""
    from dataclasses import replace

    return replace(config, modal=replace(config.modal, est_resident_slowdown=slowdown))


def _key_said(config: Any, dotted: str) -> str:
    """`modal.gpu = "H100" (configs/kimina-es.toml)`: a key, its value and where it was set."""
    section, key = dotted.split(".")
    value = getattr(getattr(config, section), key)
    origin = config.origins.get(dotted)
    return f"{dotted} = {value!r} ({origin or 'the default'})"


def memory_problem(config: Any, command: str, gpus: list[Any]) -> str | None:
    """Why this config's GPUs cannot hold what it puts on them (gpu_memory.py), naming the config
    file and the keys that size it; None when every GPU fits."""
    for gpu in gpus:
        problem = gpu.problem()
        if problem:
            fewer = ("one engine per GPU (modal.es_members_per_gpu = 1), "
                     if command == "train_es" and gpu.engines > 1 else "")
            fix = (f"{fewer}a lower generate.gpu_memory_utilization, or a GPU with more memory (modal.gpu)"
                   if command == "train_es" else
                   "a lower grpo.vllm_gpu_memory_utilization or a GPU with more memory (modal.gpu)")
            return (f"{config.source}: this config does not fit the GPU's memory: {problem}; set by "
                    f"{', '.join(_key_said(config, key) for key in gpu.keys)}. Use {fix} (docs/modal.md, "
                    "*Memory per GPU*)")
    return None


def gpu_memory_problem(config: Any, command: str) -> str | None:
    """Why a `train es` / `train grpo` run of this config would not fit its GPUs (the plan's refusal,
    calibration included), or None; remote.run_remote refuses such a run before anything is billed."""
    if command not in ("train_es", "train_grpo"):
        return None
    from prover_cli.on_modal.calibration import resolve

    figures = resolve(config)
    _, gpus = _memory(figures.config, command, figures.memory)
    return memory_problem(figures.config, command, gpus)


def _modal_plan(config: Any, command: str, work: _Work) -> dict[str, Any]:
    from prover_cli.backends import modal_credentials_present
    from prover_cli.errors import ConfigError
    from prover_cli.on_modal.calibration import resolve

    figures = resolve(config)       # measured figures (the doctor's calibration file) in place of estimates
    config = figures.config
    work = _work_per_iteration(config, command)   # the rounds at the measured decode speed
    m, v = config.modal, config.verify
    res = resources(config)
    facts, gpus = _memory(config, command, figures.memory)
    refused = memory_problem(config, command, gpus)
    if refused:
        raise ConfigError(refused)
    c = _costs(config, command, work)
    t, lines, breakdown, cost, heldout, once_usd = c.t, c.lines, c.breakdown, c.cost, c.heldout, c.once_usd
    at_slowdown = {}
    if command == "train_es":
        for slowdown in SLOWDOWNS:
            other = with_resident_slowdown(config, slowdown)
            k = _costs(other, command, _work_per_iteration(other, command))
            at_slowdown[f"{slowdown:g}"] = {"usd_per_iteration": round(k.cost, 4), "usd_total": k.total,
                                            "wall_s_per_iteration": round(k.t.iteration_s, 1)}

    rows: list[list[Any]] = []
    for line in lines:
        gpu = line.r.gpu.replace(":", " x ") if line.r.gpu else "-"
        rows.append([line.name, line.r.image, gpu, line.r.cpu, round(line.r.memory_mb / 1024), line.containers,
                     line.calls, round(line.container_s, 1), round(sum(line.usd(config).values()), 4)])
    rows.append(["download_model", res["download_model"].image, "-", res["download_model"].cpu,
                 round(res["download_model"].memory_mb / 1024), 1, "once", 0.0, 0.0])
    if c.tail is not None:
        tail = c.tail
        rows.append([tail.name, tail.r.image, tail.r.gpu.replace(":", " x ") if tail.r.gpu else "-", tail.r.cpu,
                     round(tail.r.memory_mb / 1024), tail.containers, "once", round(tail.container_s, 1),
                     round(once_usd, 4)])
    roles = {
        "train_es": ("the ES loop: holds theta, applies updates, writes the ledger (one writer); evaluates share 0 "
                     f"of the members on its own GPU ({m.es_members_per_gpu} at once) and the held-out evaluation"
                     if command == "train_es" and es_pipelined(config) else
                     "the ES loop: holds theta, applies updates, writes the ledger (one writer)"),
        "ESMember": ("GPU worker: applies the new ledger iteration, then evaluates its share of the members "
                     f"one after another ({m.es_members_per_gpu} at once), handing each member's proofs to its "
                     "REPL workers (pipeline.py)"
                     if es_pipelined(config) else
                     "warm GPU worker: replays only new ledger iterations, perturbs, samples; one member per call"),
        "Lean REPL Sandbox (warm)": "Lean: one REPL per Sandbox (no network, no Volumes), verify.workers per "
                                    "generating GPU (the loop's and each member container's), its header imported "
                                    "once per iteration, checking each member's proofs as they arrive",
        "train_grpo": "TRL GRPOTrainer: generates, scores, takes the optimizer step",
        "verify Sandbox": "Lean: one Sandbox per batch of proofs (no network, no Volumes), REPLs over stdin/stdout",
        "kernel Sandbox": "the kernel stage: per fast-path pass `lean -o`, per checker batch one checker process, "
                          "each in a fresh Sandbox given only files (no network, no Volumes)",
        "download_model": "base weights into the models Volume, once per run (not per step)",
        "ESMember idle after the run": "at most: each warm member idles out its scaledown_window once the run ends "
                                       "(the loop then lowers it to 2 s; not seen on Modal yet)",
    }
    roles_rows = [[r[0], roles[r[0]]] for r in rows]

    notes = [
        ["generation call", f"{work.decode_tokens} tokens at {decode_tokens_per_s(config):g} tokens/s "
                            f"({'modal.est_decode_tokens_per_s' if m.est_decode_tokens_per_s else f'the {m.gpu} estimate'}) "
                            f"= {t.generation_s:.0f} s (upper estimate: every sample runs to its token limit)"],
        ["verification batch", (f"pipelined: each proof on the first free of {es_lean_workers(config)} warm REPL "
                                f"workers (verify.workers = {v.workers} per generating GPU, one REPL per Sandbox of "
                                f"{res['lean_worker'].cpu:g} cores, {res['lean_worker'].memory_mb // 1024} GiB), "
                                f"{m.est_verify_s_per_proof:g} s each; the {m.est_header_s:g} s header once per worker "
                                "per iteration (its share's pool kept warm through the share)")
                               if command == "train_es" and es_pipelined(config) and work.proofs else
                               (f"{t.proofs_per_batch} proofs: {m.est_header_s:g} s header + "
                                f"{math.ceil(t.proofs_per_batch / v.workers) if t.batches else 0} rounds x "
                                f"{m.est_verify_s_per_proof:g} s = {t.batch_s:.0f} s; Sandbox killed after "
                                f"{res['verify_sandbox'].timeout_s} s, its in-flight proofs retried once")
                               if t.batches else f"none: `{config.data.task}` rewards are checked in Python"],
        ["kernel stage", (f"{t.kernel_passes} of {work.proofs} proofs per {work.unit} pass the fast path "
                          f"(modal.est_pass_rate = {m.est_pass_rate:g}); each: `lean -o` and its check, "
                          f"{m.est_kernel_check_s_per_proof:g} s (modal.est_kernel_check_s_per_proof, assumed), plus "
                          f"its share of the checker's header imports ({m.est_kernel_import_s:g} s each, "
                          f"modal.est_kernel_import_s, assumed; {_imports_said(config)}): "
                          f"{kernel_s_per_pass(config, kernel_batches(config, command, work, t)[0]):.1f} s per "
                          f"pass in Sandboxes of {res['kernel_sandbox'].cpu:g} cores "
                          f"= {kernel_check_core_s_per_proof(config):.1f} "
                          f"core-s expected per proof; {kernel_workers(v)} at a time per batch "
                          f"(verify.kernel_check_workers): a batch waits {t.kernel_s:.0f} s for its checks")
                         if t.kernel_passes else
                         ("off: verify.kernel_check = false, `verified` rests on the fast path alone"
                          if t.batches else "none: no proof goes to Lean")],
        [f"{work.unit} wall time", _wall_note(config, command, t)],
        ["prices", f"{gpu_price_per_hour(config):g} USD per GPU-hour ({m.gpu}, "
                   f"{'modal.gpu_price_per_hour' if m.gpu_price_per_hour else 'its Modal list price'}), "
                   f"{m.cpu_price_per_core_hour:g} per core-hour, "
                   f"{m.memory_price_per_gib_hour:g} per GiB-hour; Sandboxes {m.sandbox_cpu_price_per_core_hour:g} per "
                   f"core-hour, {m.sandbox_memory_price_per_gib_hour:g} per GiB-hour ([modal] keys)"],
        ["billed", "each container's GPUs, cores and GiB for as long as it is up, idle time of warm containers included"],
        ["not counted", "container start and model load (once per container), network"
                        + (", the trainer's activations in its memory" if command == "train_grpo"
                           else ", a cold member's replay (above)")],
    ]
    if command == "train_grpo":
        notes.insert(2, ["optimizer step", f"forward and backward over the step's {work.samples} completions: "
                                           f"{work.train_s:.0f} s ({work.train_note}), added to the step"])
    if work.rounds > 1:
        notes.insert(2, ["KV rounds", f"one generation call's {work.samples if command == 'train_grpo' else 'member batch of'} "
                                      f"sequences run in {work.rounds} rounds: the engine's KV cache holds "
                                      f"{_kv_capacity(config, command)} sequences of prompt + {work.decode_tokens} tokens "
                                      "at a time (`memory per GPU`)"])
    if heldout["evaluations"]:
        notes.append(["held-out evaluation", heldout["note"]])
    notes.insert(0, ["figures", figures.note])
    if command == "train_es" and es_pipelined(config):
        k, share = m.es_members_per_gpu, config.generate.gpu_memory_utilization
        notes.append(["resident engines", f"{k} engine(s) per generating GPU, the loop's included, each with 1/{k} "
                                          f"of generate.gpu_memory_utilization = {share:g}; each also keeps an fp32 "
                                          "master of the weights outside that budget (es/vllm_worker.py): "
                                          + ("`memory per GPU` adds it up" if gpus else
                                             "not checked here: the model's shape is not known (gpu_memory.py)")])
    if not gpus:
        notes.append(["warning", f"memory per GPU not checked: the shape of {config.model.name} is not known here "
                                 "(gpu_memory.KNOWN_MODELS, or a local checkpoint with its config.json)"])
    kernel_problem = kernel_memory_problem(config)
    if kernel_problem:
        notes.append(["warning", kernel_problem + " (a run refuses to start)"])
    if command == "train_es":
        bound = es_gap_bound_s(config)
        replay_iterations, replay_s = cold_member_replay(config)
        snapshots = (f"es.snapshot_every = {config.es.snapshot_every}" if config.es.snapshot_every
                     else "es.snapshot_every = 0: the whole ledger")
        notes.insert(3, ["warm members", f"scaledown_window = {res['es_member'].scaledown_window_s} s: the longest "
                                         f"legitimate gap between a member's calls is {bound:.0f} s (verification "
                                         f"waves at their Sandboxes' {res['verify_sandbox'].timeout_s} s timeout, "
                                         f"+ {t.kernel_s:.0f} s of kernel stage, + the update); estimated gap "
                                         f"{es_gap_s(config):.0f} s"])
        notes.insert(4, ["cold member", f"replays at most {replay_iterations} iterations ({snapshots}) at "
                                        f"{m.est_replay_s_per_iteration:g} s each = {replay_s:.0f} s on its GPU "
                                        "before it generates (worst case)"])
        if bound > MAX_SCALEDOWN_WINDOW_S:
            notes.append(["warning", f"a gap of up to {bound:.0f} s exceeds Modal's {MAX_SCALEDOWN_WINDOW_S} s "
                                     f"scaledown_window ceiling: members may go cold, each then replaying up to "
                                     f"{replay_s:.0f} s; lower verify.timeout_s or modal.verify_batch_size"])
    if v.workers > m.verify_cpus:
        notes.append(["warning", f"verify.workers = {v.workers} REPLs share modal.verify_cpus = {m.verify_cpus:g} cores"])
    if v.memory_limit_gb and v.workers * v.memory_limit_gb > m.verify_memory_gb:
        notes.append(["warning", f"verify.workers x verify.memory_limit_gb = {v.workers * v.memory_limit_gb:g} GiB "
                                 f"exceeds modal.verify_memory_gb = {m.verify_memory_gb}"])

    specs = image_specs(v.lean_toolchain, v.mathlib_rev)
    title = command.replace("_", " ")
    total = round(cost * work.iterations + once_usd + heldout["usd"] * heldout["evaluations"], 2)
    unit = _unit_cost(command, work, t, cost)
    run_per_1k = 1000 * total / (work.samples * work.iterations) if work.samples * work.iterations else 0.0
    method = "ES" if command == "train_es" else "GRPO"
    schedule = ("one call on the loop's engine (es.noise = \"lora\": members as LoRA adapters)"
                if command == "train_es" and es_one_call(config) else
                f"{'pipelined' if es_pipelined(config) else 'barrier'} (modal.es_member_gpus = {m.es_member_gpus})"
                if command == "train_es" else "one trainer container (colocated vLLM)")
    figure_rows = [[name, _figure_value(config, name, figures), figures.sources[name]] for name in figures.sources]
    credentials = modal_credentials_present()
    memory_rows = _memory_rows(gpus)
    summary = _summary_rows(config, command, work, c, at_slowdown, figures, gpus, credentials, schedule)
    return {
        "ok": True,
        "command": title,
        "backend": "modal",
        "app": m.app_name,
        "est_usd_total": total,
        f"est_usd_per_{work.unit}": round(cost, 4),
        "modal_credentials": credentials,
        **({"est_usd_at_resident_slowdown": at_slowdown, "resident_slowdown": {
            "value": m.est_resident_slowdown, "source": figures.sources["resident_slowdown"],
            "enters": es_pipelined(config) and m.es_members_per_gpu > 1}} if command == "train_es" else {}),
        "gpu_memory": {"fits": bool(gpus) and refused is None, "checked": bool(gpus),
                       "model": ({"name": facts.name, "params": facts.params, "tied": facts.tied, "source": facts.source}
                                 if facts else None),
                       "gpus": [gpu.to_json() for gpu in gpus]},
        f"samples_per_{work.unit}": work.samples,
        f"{work.unit}s": work.iterations,
        "samples_total": work.samples * work.iterations,  # the training budget `prover report` compares (held-out not in it)
        f"est_wall_s_per_{work.unit}": round(t.iteration_s, 1),
        f"est_gpu_hours_per_{work.unit}": round(breakdown["gpu"]["gpu_s"] / HOURS, 4),
        f"est_cpu_core_hours_per_{work.unit}": round(breakdown["cpu"]["core_s"] / HOURS, 4),
        "kernel_check": bool(v.kernel_check),
        "est_kernel_check_core_s_per_proof": round(kernel_check_core_s_per_proof(config), 1),
        "est_usd_breakdown": breakdown,
        "heldout_evaluations": heldout["evaluations"],
        "heldout_samples_per_evaluation": heldout["samples"] or ("all" if heldout["evaluations"] else 0),
        "est_usd_per_heldout_evaluation": round(heldout["usd"], 4),
        "est_usd_once": round(once_usd, 4),
        "est_gpu_busy_fraction": round(unit["gpu_busy_fraction"], 4),   # generation over billed GPU-seconds
        "est_usd_per_1k_samples": round(unit["usd_per_1k_samples"], 4),  # per training sample, per unit
        "est_usd_per_1k_samples_run": round(run_per_1k, 4),              # the whole run, evaluations included
        "schedule": schedule,
        "calibration": figures.path,
        "figures": {name: {"value": value, "source": source} for name, value, source in figure_rows},
        **({"cold_member_replay_iterations": cold_member_replay(config)[0],
            "cold_member_replay_s": round(cold_member_replay(config)[1], 1),
            "es_gap_bound_s": round(es_gap_bound_s(config), 1)} if command == "train_es" else {}),
        "images": {name: spec.to_json() for name, spec in specs.items()},  # every image the app declares
        "tables": [
            {"title": f"{title} on Modal: {total:.2f} USD in all, {cost:.2f} USD per {work.unit} (estimates)",
             "columns": ["", "value", "how"], "rows": summary},
            {"title": f"plan: {title} on Modal (app `{m.app_name}`), per {work.unit}; seconds and USD estimated",
             "columns": ["function", "image", "GPU", "CPU", "GiB", "parallel", "calls", "container-s", "USD"],
             "rows": rows},
            {"title": "memory per GPU (GiB; gpu_memory.py)", "columns": ["GPU", "held", "GiB", "how"],
             "rows": memory_rows},
            {"title": f"cost per {work.unit} by resource", "columns": ["resource", "amount", "container-s", "USD"],
             "rows": [[kind, f"{round(next(iter(item.values())))} {UNIT_NAMES[kind]}", round(item["container_s"]),
                       item["usd"]] for kind, item in breakdown.items()]},
            {"title": "unit cost (the same unit for ES and GRPO)",
             "columns": ["method", "schedule", f"samples per {work.unit}", "GPU-busy of billed GPU-s",
                         "USD per 1,000 samples", "USD per 1,000 samples, whole run"],
             "rows": [[method, schedule, work.samples, f"{100 * unit['gpu_busy_fraction']:.1f}%",
                       round(unit["usd_per_1k_samples"], 3), round(run_per_1k, 3)]]},
            {"title": "figures: measured or assumed", "columns": ["figure", "value", "source"], "rows": figure_rows},
            {"title": "what each function does", "columns": ["function", "role"], "rows": roles_rows},
            {"title": "images", "columns": ["image", "python packages", "system / toolchain"],
             "rows": [[name, ", ".join(spec.python_packages),
                       ", ".join([*spec.apt_packages, *(f"{k} {val}" for k, val in spec.toolchain.items())]) or "-"]
                      for name, spec in specs.items()]},
            {"title": "how the estimate is made", "columns": ["", ""], "rows": notes},
        ],
    }


# --------------------------------------------------------------------------------------------
# `prover doctor --backend modal`: the steps, what each starts, and what it costs
# --------------------------------------------------------------------------------------------
# The one command to run before a paid run: every image, one Lean Sandbox running the canary,
# the configured model on one GPU for one short prompt, and the Volumes' round trip. Its
# `--dry-run` is this function's output (no `modal` import); on_modal/doctor.py runs the steps.

DOCTOR_EST_MODEL_LOAD_S = 180.0  # container start + weights from the models Volume + engine start (estimate)
DOCTOR_EST_VOLUME_CALL_S = 15.0  # one small container: start, write or read a file, commit or reload


@dataclass(frozen=True)
class DoctorStep:
    name: str
    where: str
    what: str
    resources: Resources | None   # None: not a container of ours (the image builders)
    est_s: float | None
    sandbox: bool = False
    containers: int = 1

    def usd(self, config: Any, seconds: float | None) -> float | None:
        """What `seconds` of this step's containers cost at the `[modal]` prices (None: unpriced)."""
        if self.resources is None or seconds is None:
            return None
        line = _Line(self.name, self.resources, self.containers, 1, self.containers * seconds, sandbox=self.sandbox)
        return sum(line.usd(config).values())


def doctor_steps(config: Any) -> list[DoctorStep]:
    from prover_cli.on_modal.calibration import generation_batch
    from prover_cli.verify.canary import canaries_for

    m, res = config.modal, resources(config)
    canaries = len(canaries_for(config.verify))
    sandbox = res["verify_sandbox"]
    return [
        DoctorStep("images", "Modal's image builders",
                   "build (or find, when cached) the four images: " + ", ".join(image_specs(
                       config.verify.lean_toolchain, config.verify.mathlib_rev))
                   + " (a first build takes minutes: Mathlib's cache, vLLM's wheels)",
                   None, None),
        DoctorStep("lean sandbox", f"one Sandbox of the lean image, {sandbox.cpu:g} cores, "
                                   f"{sandbox.memory_mb // 1024} GiB, no network",
                   "start the image's REPL (`lake env repl` in the Mathlib project) in it and run the verify canary "
                   f"({canaries} proofs: honest ones must verify, each cheat be rejected); then, for the calibration, "
                   "the honest ones again on a fresh REPL (the header, then Lean seconds per proof with it warm) and "
                   "the honest kernel canary through the kernel stage (seconds and peak memory per step)",
                   sandbox, 2 * m.est_header_s + 2 * canaries * m.est_verify_s_per_proof, sandbox=True),
        DoctorStep("gpu model", f"one {gpu_spec(config)} container of the gpu image",
                   f"load {config.model.name} with the {config.generate.backend} sampler (downloading it into the "
                   f"models Volume once) and generate one ES member's call: {generation_batch(config)} sequences of up "
                   f"to {config.generate.max_tokens} tokens (generate.max_tokens), whose tokens/s the calibration "
                   "records",
                   res["doctor_gpu"], DOCTOR_EST_MODEL_LOAD_S + config.generate.max_tokens / decode_tokens_per_s(config)),
        DoctorStep("volumes", "two small containers of the orchestrator image",
                   f"write a probe file to {m.runs_volume} and {m.models_volume} and commit in one container; "
                   "reload and read it back in another (a separate Function), then remove it",
                   res["doctor_volumes"], DOCTOR_EST_VOLUME_CALL_S, containers=2),
    ]


def doctor_plan(config: Any) -> dict[str, Any]:
    """`prover doctor --backend modal --dry-run`: each step, where it runs, its estimated time and cost."""
    from prover_cli.on_modal.calibration import check_physics

    check_physics(config)   # a figure of 1e308 is refused, never priced
    steps = doctor_steps(config)
    rows, total = [], 0.0
    for step in steps:
        usd = step.usd(config, step.est_s)
        total += usd or 0.0
        rows.append([step.name, step.where, step.what, "-" if step.est_s is None else f"~{step.est_s:.0f} s",
                     "not priced" if usd is None else round(usd, 4)])
    return {
        "ok": True,
        "dry_run": True,
        "backend": "modal",
        "app": config.modal.app_name,
        "steps": [{"name": r[0], "where": r[1], "what": r[2], "est": r[3], "est_usd": r[4]} for r in rows],
        "est_usd_total": round(total, 4),
        "tables": [{"title": f"prover doctor --backend modal (app `{config.modal.app_name}`): what it would do; "
                             "nothing started", "columns": ["step", "where", "what", "est. time", "est. USD"],
                    "rows": rows}],
    }


# --------------------------------------------------------------------------------------------
# docs/modal.md: its figures are this plan's output, regenerated, never typed
# --------------------------------------------------------------------------------------------
#     python -m prover_cli.on_modal.plan docs/modal.md      # rewrite the generated blocks
# tests/test_modal_docs.py fails when a block differs from what the plan prints now.

BLOCK_START = "<!-- generated from the plan of {config}: python -m prover_cli.on_modal.plan docs/modal.md -->"
BLOCK_END = "<!-- end of generated block -->"


def _markdown(columns: list[str], rows: list[list[Any]]) -> list[str]:
    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|")

    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
            *("| " + " | ".join(cell(v) for v in row) + " |" for row in rows)]


def docs_block(config_path: str) -> str:
    """The Markdown figures for one config: the per-function table, the breakdown, the totals."""
    from prover_cli.config import load_config

    config = load_config(config_path, ["modal.calibration=none"])   # the estimates: the same on every machine
    command = "train_grpo" if config_path.endswith("grpo.toml") else "train_es"
    p = plan(config, command=command, backend="modal")
    unit = "step" if command == "train_grpo" else "iteration"
    tables = {table["title"].split(" (")[0].split(":")[0]: table for table in p["tables"]}
    summary, functions_table = p["tables"][0], tables["plan"]
    memory_table, breakdown_table = tables["memory per GPU"], tables[f"cost per {unit} by resource"]
    lines = [f"`{config_path}`, `prover {p['command']} --backend modal --dry-run`, per {unit}:", "",
             *_markdown(summary["columns"], summary["rows"][:-1]), "",   # not the credentials: they are this machine's
             *_markdown(functions_table["columns"], functions_table["rows"]), "",
             *_markdown(memory_table["columns"], memory_table["rows"]), "",
             *_markdown(breakdown_table["columns"], breakdown_table["rows"]), "",
             f"Per {unit}: {p[f'samples_per_{unit}']} samples, ~{p[f'est_wall_s_per_{unit}']:g} s, "
             f"**{p[f'est_usd_per_{unit}']:.2f} USD** (GPU {p['est_usd_breakdown']['gpu']['usd']:.2f}, "
             f"CPU {p['est_usd_breakdown']['cpu']['usd']:.2f}, memory {p['est_usd_breakdown']['memory']['usd']:.2f}); "
             f"**{p['est_usd_total']:.2f} USD** for {p[f'{unit}s']} {unit}s"
             + (f" and {p['heldout_evaluations']} held-out evaluations ({p['est_usd_per_heldout_evaluation']:.2f} USD "
                "each)." if p["heldout_evaluations"] else ".")
             + f" GPU-busy {100 * p['est_gpu_busy_fraction']:.1f} % of billed GPU-seconds; "
               f"{p['est_usd_per_1k_samples']:.2f} USD per 1,000 training samples ({p['schedule']})."]
    return "\n".join(lines)


def render_docs(text: str) -> str:
    """`text` with every generated block replaced by the plan's current output."""
    out, rest = [], text
    marker = BLOCK_START.split("{config}")[0]
    while marker in rest:
        before, _, after = rest.partition(marker)
        config_path, _, after = after.partition(BLOCK_START.split("{config}")[1])
        _, end, after = after.partition(BLOCK_END)
        if not end:
            raise ValueError(f"generated block for {config_path} has no {BLOCK_END!r}")
        out.append(before + BLOCK_START.format(config=config_path) + "\n" + docs_block(config_path) + "\n" + BLOCK_END)
        rest = after
    return "".join(out) + rest


if __name__ == "__main__":
    import sys
    from pathlib import Path

    for name in sys.argv[1:]:
        path = Path(name)
        path.write_text(render_docs(path.read_text(encoding="utf-8")), encoding="utf-8")
