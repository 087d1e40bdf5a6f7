"""What one function, class or Sandbox asks for, and what a GPU, a core and a GiB cost:
the leaves every other part of the plan sizes and prices from."""

from __future__ import annotations

import math
from dataclasses import dataclass

from prover_cli.config import MODAL_GPUS, Config, VerifyConfig
from prover_cli.on_modal.calibration import check_physical_key, resolve
from prover_cli.verify.kernel.pins import effective_kernel_workers as workers
from prover_cli.verify.kernel.pins import pin_for

MINUTES = 60
HOURS = 60 * MINUTES
MAX_TIMEOUT_S = 24 * HOURS            # Modal's ceiling for one call; training loops resume past it
MAX_SCALEDOWN_WINDOW_S = 60 * MINUTES  # Modal refuses a scaledown_window outside [2, 3600] s

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


def verify_batch_timeout_s(config: Config) -> int:
    """Long enough for the header plus every proof of a batch hitting its own timeout, no more:
    a wedged Sandbox is then killed and its proofs retried once, never waited on forever."""
    v, m = config.verify, config.modal
    rounds = math.ceil(m.verify_batch_size / v.workers)
    return int(v.header_timeout_s + rounds * (v.timeout_s + 5) + 2 * MINUTES)


def kernel_workers(verify_config: VerifyConfig) -> int:
    return workers(verify_config)


def kernel_imports_per_batch(config: Config, passes: int) -> tuple[int, float]:
    """(checker processes, header imports) for `passes` proofs of one verification batch, by the
    design of the pinned checker: prover_check imports once per process of up to
    verify.kernel_batch_size proofs; SafeVerify (2026) takes one pair per process and imports the
    header four times in it (`checkImportSuperset` twice, then one `replayFile` per side; its
    Main.lean at b291b588)."""
    pin = pin_for(config.verify.lean_toolchain)
    if pin is not None and pin.dialect == "batch":
        processes = math.ceil(passes / config.verify.kernel_batch_size)
        return processes, float(processes)
    return passes, 4.0 * passes


def kernel_s_per_pass(config: Config, passes_per_batch: int) -> float:
    """Seconds of kernel-stage work per fast-path pass, amortised over a verification batch's
    passes: the per-proof part (modal.est_kernel_check_s_per_proof) plus the batch's header
    imports (modal.est_kernel_import_s each) shared among its passes."""
    passes = max(1, passes_per_batch)
    _, imports = kernel_imports_per_batch(config, passes)
    return config.modal.est_kernel_check_s_per_proof + imports * config.modal.est_kernel_import_s / passes


def kernel_step_size(config: Config) -> tuple[float, int]:
    """(cores, MiB) of one kernel-stage Sandbox: what one REPL of a verification Sandbox gets."""
    v, m = config.verify, config.modal
    memory_mb = (m.kernel_sandbox_memory_gb * 1024 if m.kernel_sandbox_memory_gb
                 else max(4 * 1024, int(m.verify_memory_gb * 1024 / v.workers)))
    return max(1.0, m.verify_cpus / v.workers), memory_mb


def kernel_memory_problem(config: Config) -> str | None:
    """Why a kernel-stage Sandbox of this config would run out of memory, by the doctor's measured
    peak (the calibration file), or None: no kernel stage, no measured peak, or it fits."""
    if config.data.task != "lean" or not config.verify.kernel_check:
        return None
    figures = resolve(config)
    sandbox_gib = kernel_step_size(config)[1] / 1024
    if figures.kernel_peak_memory_gib is None or figures.kernel_peak_memory_gib <= sandbox_gib:
        return None
    return (f"the kernel stage's measured peak memory, {figures.kernel_peak_memory_gib:.1f} GiB per step "
            f"({figures.path}), exceeds its Sandbox's {sandbox_gib:g} GiB: set modal.kernel_sandbox_memory_gb "
            f"to at least {math.ceil(figures.kernel_peak_memory_gib)}")


def kernel_step_timeout_s(config: Config) -> int:
    """The step's own deadline (verify.kernel_check_timeout_s) plus the Sandbox's start."""
    return int(config.verify.kernel_check_timeout_s + 5 * MINUTES)


def gpu_spec(config: Config) -> str:
    """Modal's GPU string: `H100:1`."""
    return f"{config.modal.gpu}:{config.modal.gpus_per_container}"


def gpu_price_per_hour(config: Config) -> float:
    """USD per GPU-hour: `modal.gpu_price_per_hour`, or (0) Modal's list price of `modal.gpu`."""
    m = config.modal
    return check_physical_key(config, "gpu_price_per_hour") or MODAL_GPUS[m.gpu].usd_per_hour


def decode_tokens_per_s(config: Config) -> float:
    """One sequence's decode speed: `modal.est_decode_tokens_per_s`, or (0) the estimate for `modal.gpu`."""
    m = config.modal
    return check_physical_key(config, "est_decode_tokens_per_s") or MODAL_GPUS[m.gpu].est_decode_tokens_per_s


def gpu_container_size(config: Config) -> tuple[float, int]:
    """(cores, MiB) every container of the gpu and trl images reserves (and is billed for)."""
    return config.modal.gpu_container_cpus, config.modal.gpu_container_memory_gb * 1024


UPDATE_MARGIN_S = 2 * MINUTES  # the loop's update, ledger write and commit between verification and the next call


def cold_member_replay(config: Config) -> tuple[int, float]:
    """(iterations, seconds) a cold member replays at worst before it can generate: up to
    `es.snapshot_every` iterations after the newest snapshot, or the whole ledger without one."""
    es = config.es
    iterations = min(es.snapshot_every, es.iterations - 1) if es.snapshot_every else es.iterations - 1
    return iterations, iterations * config.modal.est_replay_s_per_iteration


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

    def usd(self, config: Config) -> dict[str, float]:
        prices = unit_prices(config, sandbox=self.sandbox)
        return {kind: unit_s / HOURS * prices[kind] for kind, unit_s in self.seconds().items()}


def unit_prices(config: Config, *, sandbox: bool = False) -> dict[str, float]:
    """USD per GPU-hour (of `modal.gpu`: `gpu_price_per_hour`), core-hour and GiB-hour, from `[modal]`:
    a Sandbox's CPU and memory have their own keys (Modal bills them at a different rate than a Function's)."""
    m = config.modal
    gpu = gpu_price_per_hour(config)
    if sandbox:
        return {"gpu": gpu, "cpu": m.sandbox_cpu_price_per_core_hour, "memory": m.sandbox_memory_price_per_gib_hour}
    return {"gpu": gpu, "cpu": m.cpu_price_per_core_hour, "memory": m.memory_price_per_gib_hour}
