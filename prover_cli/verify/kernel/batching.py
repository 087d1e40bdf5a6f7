"""The kernel stage behind a backend (`second_stage`): each fast-path pass goes to the checker at
once when a batch slot is free (`stage.batches_at_once` of them: 1 locally, the call's verification
batches on Modal), else with the others that queued meanwhile (batches grow only while every slot
is busy); every other verdict goes straight through."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Iterable, cast

from prover_cli.verify.kernel.job import KernelJob
from prover_cli.verify.kernel.kernel_canary import ensure_kernel_canary
from prover_cli.verify.kernel.pins import effective_kernel_workers
from prover_cli.verify.kernel.stage import KernelStage, kernel_verdict
from prover_cli.verify.text.rules import Verdict

if TYPE_CHECKING:
    from prover_cli.config import VerifyConfig


class second_stage:
    """The stage behind a backend, for one batch: `submit` each fast-path verdict as it comes
    (anything but a pass goes straight to `on_result`; a pass goes to the checker at once when fewer
    than `stage.batches_at_once` batches are running, else it waits for a running one to end and goes
    with the others that queued meanwhile, up to the stage's `batch_size`: batches grow only while
    every slot is busy; several batches run beside each other, each proof's verdict its own, so the
    verdicts are those of one batch at a time, and a batch that fails fails only its own proofs);
    each kernel verdict is reported the moment its batch is known, from the thread that computed
    it, and every call of `on_result` holds one lock, so they never overlap. A failure of the stage
    itself (its command cannot start) is raised in the caller's thread at its next `submit` or at
    `finish`. On leaving with an exception (Ctrl-C, a fatal error of the backend), no further
    verdict is reported, queued checks are dropped and running processes killed: their proofs get
    no verdict, so a resumed run checks them again (a kill of ours is never a proof's `error`).
    With `canary_config`, the kernel canary runs (once, cached) before the first pass is checked,
    its fooled case through `canary_fast_path` (a fresh fast path: the batch's is busy)."""

    def __init__(self, stage: KernelStage, allowed: Iterable[str], canary_config: VerifyConfig | None = None,
                 canary_fast_path: Any = None):
        self.stage = stage
        self.allowed = frozenset(allowed)
        self.canary_config = canary_config
        self.canary_fast_path = canary_fast_path
        self.pending: set[Any] = set()
        self.buffer: list[tuple[KernelJob, Any, Any, Verdict, Any]] = []
        self.executor: ThreadPoolExecutor | None = None
        self.lock = threading.Lock()
        self.stopped = False
        self.failure: BaseException | None = None
        at_once = int(getattr(stage, "batches_at_once", 1))   # a stand-in stage may not say: 1
        self.slots = max(1, at_once) if stage.batch_size > 1 else effective_kernel_workers(stage.config)

    def __enter__(self) -> "second_stage":
        # batches_at_once batches at a time when batches are large (their steps share the stage's
        # effective_kernel_workers slots); one proof per batch (SafeVerify): effective_kernel_workers at a time
        workers = effective_kernel_workers(self.stage.config) if self.stage.batch_size == 1 else self.slots
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kernel-check")
        return self

    @property
    def _pool(self) -> ThreadPoolExecutor:
        """The executor __enter__ made (a cast: outside `with` it is None, and using it fails as it always did)."""
        return cast(ThreadPoolExecutor, self.executor)

    def submit(self, candidate: Any, verdict: Verdict, key_record: tuple[Any, Any], on_result: Any) -> None:
        self._raise_failure()
        key, record = key_record
        if verdict.status != "verified":
            with self.lock:
                on_result(key, record, verdict)
            return
        if self.canary_config is not None:
            ensure_kernel_canary(self.stage, self.canary_config, self.canary_fast_path)
            self.canary_config = None
        job = KernelJob(candidate.header, candidate.statement, candidate.target, candidate.body)
        with self.lock:
            self.buffer.append((job, key, record, verdict, on_result))
            # a full batch goes at once; so does any pass when a batch slot is free (a pass is never
            # held back waiting for others: batches grow only while every slot is busy)
            ready = len(self.buffer) >= self.stage.batch_size or len(self.pending) < self.slots
        if ready:
            self._flush()

    def _flush(self) -> None:
        with self.lock:
            batch, self.buffer = self.buffer[:self.stage.batch_size], self.buffer[self.stage.batch_size:]
            if not batch or self.stopped:
                return
            future = self._pool.submit(self.stage.check, [item[0] for item in batch], self.allowed)
            self.pending.add(future)
        future.add_done_callback(lambda done: self._report(done, batch))

    def _report(self, future: Any, batch: list) -> None:
        with self.lock:
            self.pending.discard(future)
            if self.stopped or future.cancelled():
                return
            try:
                for (_, key, record, fast, on_result), result in zip(batch, future.result()):
                    on_result(key, record, kernel_verdict(fast, result))
            except BaseException as exc:   # BackendError (the stage cannot run), or the callback's own
                if self.failure is None:
                    self.failure = exc
            more = bool(self.buffer) and len(self.pending) < self.slots and self.failure is None
        if more:   # what queued while this batch ran
            try:
                self._flush()
            except RuntimeError:   # the executor is shutting down: `finish` or `__exit__` has it
                pass

    def finish(self, on_result: Any) -> None:
        from concurrent.futures import wait

        self._raise_failure()
        while True:
            self._flush()
            with self.lock:
                pending = list(self.pending)
                left = bool(self.buffer) and not self.stopped
            if not pending and not left:
                break
            wait(pending)
            self._raise_failure()
        self._raise_failure()

    def _raise_failure(self) -> None:
        if self.failure is not None:
            raise self.failure

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is not None or self.failure is not None:
            with self.lock:
                self.stopped = True
                pending = list(self.pending)
            self.buffer = []
            for future in pending:
                future.cancel()
            self.stage.stop()
        self._pool.shutdown(wait=True, cancel_futures=True)
