"""One verification call on Modal's Sandboxes, event by event, as the code runs it: what the plan
bills for every call that verifies in batch Sandboxes (an ES iteration of the barrier or one-call
schedule, a GRPO step, a held-out evaluation).

    verification_as_run(config, proofs, problems) -> VerificationRun

What it follows (each with the plan's own per-step figures, `modal.est_*`):

- **the fast path** (verify/lean/pool.py, placed by on_modal/sandbox.py `sandbox_concurrency`):
  `verify.workers` REPL Sandboxes per planned batch (`verification_batches`), every one started at
  the call's start; each takes the next proof from one queue, imports the header
  (`est_header_s`) before its first proof and again after each recycle
  (`verify.max_proofs_per_process`, as placed: a batch's share per REPL), then `est_verify_s_per_proof`
  per proof. Each REPL Sandbox ends right after its last proof (the pool's `release_idle`), so it
  is billed from the call's start to its last proof.
- **the kernel stage** (verify/kernel/batching.py `second_stage`, stage.py `KernelStage`): each
  fast-path pass (every proof at `est_pass_rate` 1.0; else evenly spread) goes to the stage as
  its verdict comes. Up to `batches_at_once` checker batches run at once (the call's batches; 1
  kernel-stage slot per batch); a pass starts a batch at once when a slot is free, else waits and
  goes with the passes that queued meanwhile, up to `verify.kernel_batch_size` (a full batch goes
  at once; at the fast path's end whatever queued goes). A batch of n passes: n `lean -o` steps,
  then one checker process (its header import `est_kernel_import_s`, then each pass); every step
  is a fresh kernel Sandbox and holds one of `verify.kernel_check_workers` (as placed) slots.
  The first pass of each problem also compiles its trusted target (one more `lean -o` step).
  `est_kernel_check_s_per_proof` is split as its key says: the pass's replay inside the checker
  (`REPLAY_S`, 0.5 s) and its `lean -o` (the rest). SafeVerify (one pair per process, four
  imports in it) runs `kernel_check_workers` one-pass batches at once.

The call ends with its last verdict. Pure arithmetic: no Modal, no clock; only a run on real
hardware can confirm the figures (`prover doctor --backend modal`, scripts/gpu_first_contact.py).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from prover_cli.config import WORKERS_MAX, Config
from prover_cli.on_modal.plan.sizing import kernel_imports_per_batch, kernel_workers
from prover_cli.verify.kernel.pins import pin_for

REPLAY_S = 0.5   # of modal.est_kernel_check_s_per_proof: the pass's check inside the checker process (its key says so)


def verification_batches(config: Config, proofs: int | None) -> int:
    """The plan's batches for `proofs` proofs: ceil(proofs / modal.verify_batch_size), at most
    modal.verify_max_containers (`proofs` None, not known yet: as many as may run at once). The
    Sandbox placement sizes the REPL pool and the kernel stage by it (on_modal/sandbox.py)."""
    m = config.modal
    batches = m.verify_max_containers if proofs is None else math.ceil(proofs / m.verify_batch_size)
    return max(1, min(m.verify_max_containers, batches))


@dataclass(frozen=True)
class VerificationRun:
    """One call's verification: its wall time and what each kind of Sandbox is billed for."""

    batches: int                 # planned batches (REPL groups of verify.workers)
    repls: int                   # REPL Sandboxes at once
    wall_s: float                # from the call's start to its last verdict
    fast_path_end_s: float       # the last fast-path verdict
    repl_sandbox_s: float        # REPL Sandbox lifetimes, summed (each to its last proof)
    repl_sandboxes: int          # REPL Sandboxes created (recycles included)
    kernel_steps: int            # kernel Sandboxes: `lean -o` of each pass and target, checker processes
    checker_processes: int
    kernel_sandbox_s: float      # their lifetimes, summed
    checker_batches_at_once: int

    @property
    def kernel_tail_s(self) -> float:
        """How long the kernel stage runs after the last fast-path verdict."""
        return max(0.0, self.wall_s - self.fast_path_end_s)


def verification_as_run(config: Config, proofs: int, problems: int = 1) -> VerificationRun:
    """`proofs` proofs of `problems` problems, all sent at the call's start (module docstring)."""
    m, v = config.modal, config.verify
    batches = verification_batches(config, proofs)
    repls = min(WORKERS_MAX, v.workers * batches, max(proofs, 1))
    per_process = min(v.max_proofs_per_process, math.ceil(m.verify_batch_size / v.workers))
    # -- the fast path: one queue, the earliest free REPL takes the next proof -----------------
    free = [(0.0, k) for k in range(repls)]
    done_in = [0] * repls
    last_end = [0.0] * repls
    created = 0
    verdicts: list[float] = []
    for _ in range(proofs):
        at, k = heapq.heappop(free)
        header = done_in[k] % per_process == 0
        created += header
        end = at + (m.est_header_s if header else 0.0) + m.est_verify_s_per_proof
        done_in[k] += 1
        last_end[k] = end
        verdicts.append(end)
        heapq.heappush(free, (end, k))
    verdicts.sort()
    fast_end = verdicts[-1] if verdicts else 0.0
    rate = m.est_pass_rate
    passes = [t for i, t in enumerate(verdicts) if math.floor((i + 1) * rate) > math.floor(i * rate)]
    if not v.kernel_check or not passes:
        return VerificationRun(batches, repls, fast_end, fast_end, sum(last_end), created, 0, 0, 0.0, 0)
    # -- the kernel stage: second_stage's slots and buffer, KernelStage's step slots ----------
    pin = pin_for(v.lean_toolchain)
    batch_dialect = pin is not None and pin.dialect == "batch"
    steps_at_once = min(WORKERS_MAX, kernel_workers(v) * batches)           # as sandbox_concurrency places it
    size = v.kernel_batch_size if batch_dialect else 1
    slots = batches if batch_dialect else steps_at_once                     # SandboxRunner.batches_at_once
    replay_s = min(REPLAY_S, m.est_kernel_check_s_per_proof)
    lean_o_s = m.est_kernel_check_s_per_proof - replay_s
    imports = kernel_imports_per_batch(config, size)[1] if batch_dialect else kernel_imports_per_batch(config, 1)[1]
    step_free = [0.0] * steps_at_once                                       # when each step slot is free
    workers = [0.0] * slots                                                 # second_stage's executor threads
    targets_left = problems
    busy_s, steps, checkers = 0.0, 0, 0
    running: list[float] = []                                               # end times of submitted batches
    last = 0.0

    def start(at: float, n: int) -> float:
        nonlocal targets_left, busy_s, steps, checkers, last
        begin = max(at, heapq.heappop(workers))
        ready = begin
        for _ in range(n):                                                  # each pass's `lean -o` (and a target's)
            extra = 1 if targets_left > 0 else 0
            targets_left -= extra
            slot = max(begin, heapq.heappop(step_free))
            took = lean_o_s * (1 + extra)
            heapq.heappush(step_free, slot + took)
            ready = max(ready, slot + took)
            busy_s += took
            steps += 1 + extra
        slot = max(ready, heapq.heappop(step_free))                         # then one checker process
        took = imports * m.est_kernel_import_s + replay_s * n
        heapq.heappush(step_free, slot + took)
        busy_s += took
        steps += 1
        checkers += 1
        heapq.heappush(workers, slot + took)
        last = max(last, slot + took)
        return slot + took

    buffer: list[float] = []
    pending = list(passes)

    def flush(at: float) -> None:
        n = min(size, len(buffer))
        del buffer[:n]
        running.append(start(at, n))

    def ended_by(at: float) -> None:
        """Batches that ended by `at`: each frees a slot, and what queued goes then (`_report`)."""
        while running and min(running) <= at:
            end = min(running)
            running.remove(end)
            if buffer and len(running) < slots:
                flush(end)

    while pending:
        at = pending[0]
        ended_by(at)
        buffer.append(pending.pop(0))
        if len(buffer) >= size or len(running) < slots:
            flush(at)
    # the fast path has ended (`finish`): one batch of what queued now, the rest as slots free
    ended_by(fast_end)
    if buffer:
        flush(fast_end)
    while buffer:
        end = min(running)
        running.remove(end)
        if len(running) < slots:
            flush(end)
    return VerificationRun(batches, repls, max(fast_end, last), fast_end, sum(last_end), created, steps, checkers,
                           busy_s, slots)
