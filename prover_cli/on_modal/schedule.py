"""One ES iteration as a discrete-event schedule: who waits for whom, and what that costs.

    python benchmarks/bench_pipeline.py --config kimina-es    # the barrier and the pipeline side by side
    plan.es_simulation_inputs(config, ...) -> simulate(...)   # how `--dry-run` prices an ES iteration

An ES iteration is `members` generations (one per perturbation) and then Lean verdicts on every
member's proofs. Two schedules, simulated event by event from the same timings:

- **barrier** (`modal.es_member_gpus = 0`): up to `gpus` member containers generate at once, in
  waves; only when the last member is done do its proofs go to Lean, in fresh Sandboxes of
  `batch_size` proofs that each import the header first. Every member GPU (and the loop's) is up
  for the whole iteration, so it idles while Lean verifies.
- **pipelined**: each GPU runs member after member (perturb in place, generate), or several at
  once (`resident` engines sharing it: a member's batch of a few sequences of a 1.5B model leaves
  an H100 mostly idle, at a cost `resident_slowdown` that only a measurement can give); a member's proofs
  go to Lean the moment its samples arrive, on Lean workers that stay warm across iterations (the
  header imported once per worker, not once per batch), so Lean runs under the generation instead
  of after it. Fewer GPUs, each busy nearly all the time; with `loop_generates` the loop's own
  GPU is GPU 0, so no GPU waits (its catch-up is `loop_catch_up_s`: 0 when the update moved its
  only engine).

Lean runs in one of two ways. Warm workers (`Schedule.sandboxes == 0`): each proof goes to the
earliest free worker, first come first served; a worker pays `header_s` before every
`proofs_per_header` proofs it checks (0 = warm, never), and a verdict comes `kernel_latency_s`
after its fast path (the kernel stage's fresh Sandboxes, which the caller prices). Batches
(`Schedule.sandboxes > 0`, the barrier as it runs today): proofs are grouped in arrival order into
batches of `proofs_per_batch`, each a fresh Sandbox that lasts `batch_s` (header, its proofs on its
REPLs, its kernel stage), `sandboxes` at a time.
GPU-busy is generation, perturbation and catch-up seconds over billed GPU-seconds. Costs: GPUs for
the whole iteration; warm Lean workers for the whole iteration (`warm_lean`) or while they check;
batch Sandboxes for their lifetime.

Pure arithmetic: no Modal, no clock. The timings are the plan's estimates (`modal.est_*`) unless
a calibration replaces them; only a run on real hardware can confirm them.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Iterable

HOURS = 3600.0


@dataclass(frozen=True)
class IterationWork:
    """What one ES iteration has to do, in seconds of each resource."""

    members: int                 # perturbations scored per iteration (es.population)
    generation_s: float          # one member's generation on one GPU: its whole batch of sequences
    proofs_per_member: int       # proofs one member sends to Lean
    proof_s: float               # one proof's Lean seconds with the header already imported
    header_s: float              # one header import (Mathlib) on a Lean worker
    perturb_s: float = 0.0       # perturb in place before a member's generation (pipelined GPUs)
    update_s: float = 0.0        # the loop's update and ledger write after the last verdict
    resident_slowdown: float = 0.0  # each further member generating on the same GPU at once adds
                                    # this fraction of generation_s (an assumption until measured)
    catch_up_s: float = 0.0      # a member container applies the last update before its first member
    loop_catch_up_s: float = 0.0  # the same on the loop's own GPU (`loop_generates`): 0 with one engine
                                  # (the update moved it), a replay when its other engines catch up
    kernel_latency_s: float = 0.0   # warm workers: a proof's verdict comes this long after its fast path
    proofs_per_batch: int = 0    # batches: proofs per fresh Sandbox
    batch_s: float = 0.0         # batches: one batch's wall time (the plan: a whole verification call, verification.py)


@dataclass(frozen=True)
class Schedule:
    """How the work is laid out on machines."""

    name: str
    gpus: int                    # GPUs that generate
    lean_workers: int            # proofs checked at once (warm workers; with batches: informational)
    barrier: bool                # proofs wait for the last member's generation
    proofs_per_header: int       # a worker re-imports the header after this many proofs (0: warm, never)
    loop_gpu: bool = False       # the loop holds a GPU of its own besides the generating ones
    warm_lean: bool = False      # Lean workers are billed for the whole iteration (they stay up)
    resident: int = 1            # members generating on one GPU at once (engines sharing it)
    loop_generates: bool = False  # GPU 0 is the loop's own: it pays `loop_catch_up_s`, not `catch_up_s`
    sandboxes: int = 0           # > 0: Lean in fresh batch Sandboxes, this many at once


@dataclass(frozen=True)
class Prices:
    gpu_per_hour: float          # one GPU with its container's cores and memory
    lean_worker_per_hour: float  # one Lean worker's cores and memory
    sandbox_per_hour: float = 0.0   # one batch Sandbox's cores and memory


@dataclass(frozen=True)
class Result:
    schedule: Schedule
    iteration_s: float
    generation_end_s: float
    gpu_busy_s: float
    gpu_billed_s: float
    lean_busy_s: float           # checking and importing headers (batches: Sandbox lifetimes)
    lean_billed_s: float
    usd: float
    batches: int = 0             # batch Sandboxes started

    @property
    def gpu_busy_fraction(self) -> float:
        return self.gpu_busy_s / self.gpu_billed_s if self.gpu_billed_s else 0.0


def simulate(work: IterationWork, schedule: Schedule, prices: Prices) -> Result:
    if schedule.gpus < 1 or schedule.lean_workers < 1:
        raise ValueError("a schedule needs at least one GPU and one Lean worker")
    if schedule.resident < 1:
        raise ValueError("at least one member per GPU")
    if schedule.sandboxes and work.proofs_per_batch < 1:
        raise ValueError("batch Sandboxes need proofs_per_batch >= 1")
    # --- GPUs: the next members (up to `resident` at once) on the earliest free GPU ---------
    perturb = 0.0 if schedule.barrier else work.perturb_s
    gpus = [(work.loop_catch_up_s if schedule.loop_generates and index == 0 else work.catch_up_s, index)
            for index in range(schedule.gpus)]
    done: list[float] = []
    gpu_busy, left = sum(start for start, _ in gpus), work.members
    while left:
        free, index = heapq.heappop(gpus)
        group = min(schedule.resident, left)
        took = perturb + work.generation_s * (1 + work.resident_slowdown * (group - 1))
        done += [free + took] * group
        gpu_busy += took
        left -= group
        heapq.heappush(gpus, (free + took, index))
    generation_end = max(done, default=0.0)
    arrivals = sorted(generation_end if schedule.barrier else t for t in done for _ in range(work.proofs_per_member))
    lean_busy, last_verdict, batches = 0.0, 0.0, 0
    if schedule.sandboxes:
        # --- Lean in batches: a fresh Sandbox per batch, started when its last proof arrived --
        slots = [0.0] * schedule.sandboxes
        for first in range(0, len(arrivals), work.proofs_per_batch):
            ready = arrivals[min(first + work.proofs_per_batch, len(arrivals)) - 1]
            start = max(ready, heapq.heappop(slots))
            heapq.heappush(slots, start + work.batch_s)
            last_verdict = max(last_verdict, start + work.batch_s)
            lean_busy += work.batch_s
            batches += 1
        lean_billed = lean_busy
    else:
        # --- Lean on workers: first come first served on the earliest free worker -----------
        workers = [(0.0, index, 0) for index in range(schedule.lean_workers)]   # (free at, index, proofs since header)
        for arrival in arrivals:
            free, index, since_header = heapq.heappop(workers)
            start = max(arrival, free)
            needs_header = schedule.proofs_per_header and since_header % schedule.proofs_per_header == 0
            cost = work.proof_s + (work.header_s if needs_header else 0.0)
            lean_busy += cost
            last_verdict = max(last_verdict, start + cost + work.kernel_latency_s)
            heapq.heappush(workers, (start + cost, index, since_header + 1))
    iteration_s = max(generation_end, last_verdict) + work.update_s
    billed_gpus = schedule.gpus + (1 if schedule.loop_gpu else 0)
    gpu_billed = billed_gpus * iteration_s
    if schedule.sandboxes:
        lean_usd = lean_billed / HOURS * prices.sandbox_per_hour
    else:
        lean_billed = schedule.lean_workers * iteration_s if schedule.warm_lean else lean_busy
        lean_usd = lean_billed / HOURS * prices.lean_worker_per_hour
    usd = gpu_billed / HOURS * prices.gpu_per_hour + lean_usd
    return Result(schedule, iteration_s, generation_end, gpu_busy, gpu_billed, lean_busy, lean_billed, usd, batches)


def cheapest_pipeline(work: IterationWork, prices: Prices, *, max_iteration_s: float,
                      gpu_options: Iterable[int] | None = None, worker_options: Iterable[int] | None = None,
                      resident_options: Iterable[int] = (1,)) -> Result | None:
    """The pipelined schedule of least USD per iteration whose iteration ends within
    `max_iteration_s` (ties: fewer GPUs, fewer members per GPU, fewer workers); None when none does."""
    gpu_options = list(gpu_options or range(1, work.members + 1))
    worker_options = list(worker_options or _worker_options(work))
    best: Result | None = None
    for gpus in gpu_options:
        for resident in resident_options:
            for workers in worker_options:
                schedule = Schedule("pipelined", gpus, workers, barrier=False, proofs_per_header=0, warm_lean=True,
                                    resident=resident)
                result = simulate(work, schedule, prices)
                if result.iteration_s > max_iteration_s:
                    continue
                key = (round(result.usd, 9), gpus, resident, workers)
                if best is None or key < (round(best.usd, 9), best.schedule.gpus, best.schedule.resident,
                                          best.schedule.lean_workers):
                    best = result
    return best


def _worker_options(work: IterationWork) -> list[int]:
    """Worker counts worth trying: enough to keep up with one GPU's output, up to one per proof."""
    total = max(1, work.members * work.proofs_per_member)
    options, n = set(), 1
    while n < total:
        options.add(n)
        n = math.ceil(n * 1.25) if n >= 4 else n + 1
    options.add(total)
    return sorted(options)

