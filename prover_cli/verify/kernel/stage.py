"""The second, trusted stage: Lean's kernel re-checks a proof in processes that never ran its text.

The fast path (a REPL pool or a Kimina server) elaborates untrusted text and reports what Lean
said; once that text can run code inside the process (tactic configurations, term elaborators,
whatever the next review finds), every answer it reports can be forged and constants can be
added without the kernel (`debug.skipKernelTC`), which `#print axioms` does not see. So every
proof the fast path calls `verified` goes through more steps, each a fresh process with a
directory of its own that receives only data (`isolated.py`):

1. **elaborate** the same code (trusted header, the fast path's `_prover_hole`/`_prover_trusted`
   declarations, the checked body, which may hold no `import`, then the fast path's
   `_prover_same`: the body sees the environment it saw in the REPL) with `lean -o`: the `.olean`
   file it writes is the only thing kept. Lean writes it only when there is no error
   (`src/util/shell.cpp`: `if (olean_fn && ok) write_module(...)`).
2. **the trusted target**: the same file with `formal_statement` and `sorry` for the body,
   compiled the same way in its own process from trusted text alone (once per problem, cached).
   The checker compares the submission's `_prover_hole`/`_prover_trusted` with the target's
   own, in full (`prover_check`), or accepts SafeVerify's failure on `_prover_trusted`'s hole
   axiom alone (`_only_the_trusted_aux_failed`).
3. **check** the two `.olean` files with the checker pinned for the toolchain (`PINS`):
   - Lean 4.9 - 4.21 (the default 4.15 included): `prover_check`, our own program
     (`checker/Main.lean`), replaying through lean4checker at the tag's release commit (its
     `replay'` at 4.20/4.21, the core `Environment.replay` at 4.9 - 4.15, as lean4checker itself
     does there) and comparing: the submission's imports equal the header's by module name; no
     unsafe constant, no partial one but Lean's `_unsafe_rec` shim; every Nat literal reads back
     as itself; every declaration of the target module (any kind) equal in the submission; the
     target's axioms, walked through opaque values, within propext, Quot.sound, Classical.choice.
     It imports the header ONCE per batch of pairs. Every identifier it uses is evidenced at each
     tag (tests/test_checker_evidence.py), but IT HAS NEVER BEEN COMPILED WHERE THIS CODE IS
     DEVELOPED (no Lean there): the Modal kernel image builds it, and `prover doctor --backend
     modal` runs it against the kernel canaries (public attacks) first.
   - Lean 4.27, 4.29: REFUSED (`REFUSED_PINS`, #39): SafeVerify's 2026 commits check Nat literals
     for a `-` only, and not on the target's own declarations; no checker of ours is evidenced there.

Verdicts (`kernel_verdict`): a pass keeps `verified`; the checker (or the fresh elaboration)
saying no is `rejected` with its reason; a crash, a timeout, or output we cannot read is `error`
(a checker batch that fails is split until each proof has its own answer). Nothing from the fast
path's answers is used. What this guarantees rests on the checker: Lean code of ours that no test
here has run (tests use a stand-in, tests/fake_checker.py), and it does not rebuild Exprs or Levels
(a forged Level in a hand-written .olean is not defended: docs/verify.md).

The checkers' command lines, exit codes and output lines below are read from their source
(SafeVerify's `Main.lean` at each pinned commit; ours in `checker/Main.lean`); the Lean runtime
prints an uncaught `IO` error as `uncaught exception: <message>` and exits 1 (lean4
`src/Lean/Compiler/IR/EmitC.lean`, `emitMainFn`; `src/runtime/io.cpp`, `lean_io_result_show_error`).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Iterable, Sequence, cast

from prover_cli.errors import BackendError
from prover_cli.verify.kernel.installed_checker import checker_manifest_problem
from prover_cli.verify.kernel.isolated import Runner, local_runner
from prover_cli.verify.kernel.job import (BODY_IMPORT, MODULE, Elaborated, KernelJob, KernelResult, checker_argv,
                                          elaborate_argv, first_error, proof_source, read_elaboration, target_source)
from prover_cli.verify.kernel.pins import OWN_CHECKER, checker_command, effective_kernel_workers, policy_problem, require_pin
from prover_cli.verify.kernel.prover_check_reader import read_batch
from prover_cli.verify.kernel.safeverify_reader import read_checker
from prover_cli.verify.text.rules import Verdict
from prover_cli.verify.text.statement import BadRecord

if TYPE_CHECKING:
    from prover_cli.config import VerifyConfig


# --------------------------------------------------------------------------------------------
# The stage
# --------------------------------------------------------------------------------------------

class KernelStage:
    """Each proof: one `lean -o` process (`effective_kernel_workers` at a time). Then the checker: with our
    own (`prover_check`), one process per batch of up to verify.kernel_batch_size proofs, which
    imports the header once (`header_imports` counts what the checker reported); with
    SafeVerify, one process per proof (it takes one pair per run)."""

    def __init__(self, verify_config: VerifyConfig, runner: Runner | None = None):
        self.config = verify_config
        self.pin = require_pin(verify_config)
        problem = policy_problem(verify_config)
        if problem is not None:
            raise BackendError(f"verify.{problem[0]}: {problem[1]} with verify.kernel_check = true",
                               hint="set verify.kernel_check = false to accept such proofs without the kernel re-check")
        if runner is None:   # local: the installed checker must be built against the project's packages
            mismatch = checker_manifest_problem(verify_config, self.pin)
            if mismatch is not None:
                raise BackendError(f"verification refuses to use the kernel checker: {mismatch}",
                                   hint="rebuild the checker against the project's lake-manifest.json "
                                        "(docs/verify.md, *The kernel stage*), then run `prover doctor`")
        self.runner = runner or local_runner(verify_config)   # in the box verify.box asks for
        self.lean_command = list(verify_config.lean_command)
        self.checker_command = checker_command(verify_config, self.pin)
        self.timeout_s = float(verify_config.kernel_check_timeout_s)
        self.batch_size = int(verify_config.kernel_batch_size) if self.pin.dialect == "batch" else 1
        # checker batches `second_stage` may run at once (batching.py): 1 here; a runner that places
        # every step in a Sandbox of its own says how many its place was sized for (on_modal/sandbox.py,
        # `SandboxRunner.batches_at_once`: the call's verification batches)
        self.batches_at_once = max(1, int(getattr(self.runner, "batches_at_once", 1)))
        # every step of the stage, whichever batch it belongs to, holds one of effective_kernel_workers slots: the
        # processes (on Modal, Sandboxes) at once stay within verify.kernel_check_workers however many
        # batches run beside each other
        self._steps = threading.BoundedSemaphore(effective_kernel_workers(verify_config))
        self.header_imports = 0    # header imports the checker processes reported, in all
        self.checker_runs = 0      # checker processes started
        self._targets: dict[tuple[str, str], bytes | str] = {}   # (header, statement) -> olean, or why not
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._lock = threading.Lock()

    @property
    def identity(self) -> dict[str, Any]:
        """Recorded in every verdict's `verifier` (and in the policy digest)."""
        return {"checker": self.pin.checker, "commit": self.pin.commit, "toolchain": self.pin.toolchain}

    def check(self, jobs: Sequence[KernelJob], allowed: Iterable[str]) -> list[KernelResult]:
        """One result per job, in order. Never raises for a proof's sake: every failure is a
        result (BackendError only when the configured commands cannot be started at all)."""
        allowed = frozenset(allowed)
        if not jobs:
            return []
        prepared = self._map(self._guarded(self._prepare), list(jobs))
        results: list[KernelResult | None] = [p if isinstance(p, KernelResult) else None for p in prepared]
        ready = [k for k, p in enumerate(prepared) if isinstance(p, Elaborated)]
        # a checker process imports one header: proofs under different headers never share one
        by_header: dict[str, list[int]] = {}
        for k in ready:
            by_header.setdefault(jobs[k].header, []).append(k)
        batches = [group[i:i + self.batch_size] for group in by_header.values()
                   for i in range(0, len(group), self.batch_size)]
        answers = self._map(self._guarded(lambda batch: self._check_batch(
            [(jobs[k], prepared[k]) for k in batch], allowed)), batches)
        for batch, answer in zip(batches, answers):
            if not isinstance(answer, list):
                answer = [KernelResult(answer.status, answer.reason) for _ in batch]
            for k, result in zip(batch, answer):
                results[k] = result
        return results  # type: ignore[return-value]

    def check_one(self, job: KernelJob, allowed: Iterable[str]) -> KernelResult:
        return self.check([job], allowed)[0]

    def stop(self) -> None:
        """Kill the stage's processes that are running now (Ctrl-C, a fatal error elsewhere)."""
        kill_all = getattr(self.runner, "kill_all", None)   # a Runner need not own processes
        if kill_all is not None:
            kill_all()

    def _map(self, fn: Any, items: list) -> list:
        def in_a_slot(item: Any) -> Any:
            with self._steps:
                return fn(item)

        workers = min(effective_kernel_workers(self.config), len(items))
        if workers <= 1:
            return [in_a_slot(item) for item in items]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kernel-check") as pool:
            return list(pool.map(in_a_slot, items))

    @staticmethod
    def _guarded(fn: Any) -> Any:
        def run(item: Any) -> Any:
            try:
                return fn(item)
            except BackendError:
                raise
            except Exception as exc:   # a bug here is these proofs' error, never a pass
                return KernelResult("error", f"kernel check failed unexpectedly: {type(exc).__name__}: {exc}")
        return run

    def _prepare(self, job: KernelJob) -> Elaborated | KernelResult:
        if not job.statement.strip() or not job.target:
            return KernelResult("error", "kernel check: internal: no trusted statement to check the proof against")
        if BODY_IMPORT.search(job.body):
            return KernelResult("rejected", "kernel check: the proof has an `import` line; a proof module's imports "
                                "must be the trusted header's exactly")
        try:
            source = proof_source(job.header, job.statement, job.target, job.body)
        except BadRecord as exc:
            return KernelResult("error", f"kernel check: internal: the trusted statement cannot be restated: {exc}")
        target = self._target_olean(job)
        if isinstance(target, str):
            return KernelResult("error", target)
        start = time.monotonic()
        elaborated = self.runner.run(elaborate_argv(self.lean_command), {MODULE + ".lean": source.encode("utf-8")},
                                     (MODULE + ".olean",), self.timeout_s, what="verify.lean_command")
        olean = elaborated.files.get(MODULE + ".olean")
        failure = read_elaboration(elaborated, olean is not None)
        time_s = time.monotonic() - start
        if failure is not None:
            failure.time_s = round(time_s, 4)
            return failure
        return Elaborated(target, cast(bytes, olean), time_s)   # no failure: `lean -o` wrote it

    def _check_batch(self, items: list[tuple[KernelJob, Elaborated]], allowed: frozenset) -> list[KernelResult]:
        """The checker on these proofs; a batch whose process fails is split until each proof has
        its own answer (so one proof that crashes the checker is that proof's `error` alone)."""
        start = time.monotonic()
        with self._lock:
            self.checker_runs += 1
        if self.pin.dialect != "batch":
            [(job, ready)] = items
            checked = self.runner.run(checker_argv(self.checker_command, self.pin),
                                      {"Target.olean": ready.target, "Proof.olean": ready.olean},
                                      ("report.json",), self.timeout_s, what="verify.kernel_checker_command")
            results = [read_checker(self.pin, checked, job.target, allowed)]
        else:
            inputs: dict[str, bytes] = {}
            for k, (_, ready) in enumerate(items):   # a target's few bytes again per proof: the argv stays one
                inputs[f"T{k}.olean"] = ready.target
                inputs[f"P{k}.olean"] = ready.olean
            checked = self.runner.run(checker_argv(self.checker_command, self.pin), inputs, (), self.timeout_s,
                                      what="verify.kernel_checker_command")
            answer = read_batch(checked, [job.target for job, _ in items], allowed, f"{OWN_CHECKER} {self.pin.commit[:8]}")
            if isinstance(answer, str):
                if len(items) > 1:
                    half = len(items) // 2
                    return self._check_batch(items[:half], allowed) + self._check_batch(items[half:], allowed)
                answer = ([KernelResult("error", answer)], 0)
            results, imports = answer
            with self._lock:
                self.header_imports += imports
        share = (time.monotonic() - start) / len(items)
        for (_, ready), result in zip(items, results):
            result.time_s = round(ready.time_s + share, 4)
        return results

    def _target_olean(self, job: KernelJob) -> bytes | str:
        """The trusted target's .olean (compiled once per header and statement), or why not. A
        failure that says something about the statement (Lean's error) is kept; one that says
        something about the machine (a timeout, a signal) is not, so the next proof tries again."""
        key = (job.header, job.statement)
        with self._lock:
            if key in self._targets:
                return self._targets[key]
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key in self._targets:
                return self._targets[key]
            target, keep = self._compile_target(job)
            if keep:
                self._targets[key] = target
            return target

    def _compile_target(self, job: KernelJob) -> tuple[bytes | str, bool]:
        return compile_module(self.runner, self.lean_command, target_source(job.header, job.statement, job.target),
                              self.timeout_s, "the trusted statement")


def compile_module(runner: Runner, lean_command: list[str], source: str, timeout_s: float,
                   what: str) -> tuple[bytes | str, bool]:
    """(the .olean `lean -o` writes for `source`, or why not; whether that answer is about the
    source, so worth keeping)."""
    result = runner.run(elaborate_argv(lean_command), {MODULE + ".lean": source.encode("utf-8")},
                        (MODULE + ".olean",), timeout_s, what="verify.lean_command")
    olean = result.files.get(MODULE + ".olean")
    if result.exit_code == 0 and olean:
        return olean, True
    why = first_error(result.stdout) or result.stderr.strip()[-300:] or result.describe()
    return (f"kernel check: {what} does not compile to an .olean with `lean -o` ({why})",
            result.exit_code == 1 and bool(first_error(result.stdout)))


# --------------------------------------------------------------------------------------------
# Verdicts
# --------------------------------------------------------------------------------------------

def kernel_verdict(fast: Verdict, result: KernelResult | None) -> Verdict:
    """The final verdict: the fast path's when it did not pass (or no stage ran); otherwise the
    kernel stage decides. Axioms shown are the replayed environment's, never the fast path's
    when the stage ran."""
    if fast.status != "verified" or result is None:
        return fast
    time_s = round(fast.time_s + result.time_s, 4)
    if result.status == "passed":
        return Verdict("verified", f"{fast.reason}; {result.reason}", fast.messages, result.axioms, time_s)
    status = "rejected" if result.status == "rejected" else "error"
    return Verdict(status, result.reason, fast.messages, result.axioms, time_s)
