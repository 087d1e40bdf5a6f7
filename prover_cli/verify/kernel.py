"""The second, trusted stage: Lean's kernel re-checks a proof in processes that never ran its text.

The fast path (a REPL pool or a Kimina server) elaborates untrusted text and reports what Lean
said; once that text can run code inside the process (tactic configurations, term elaborators,
whatever the next review finds), every answer it reports can be forged and constants can be
added without the kernel (`debug.skipKernelTC`), which `#print axioms` does not see. So every
proof the fast path calls `verified` goes through three more steps, each a fresh process with a
directory of its own that receives only data (`isolated.py`):

1. **elaborate** the same code (trusted header + the checked body) with `lean -o`: the `.olean`
   file it writes is the only thing kept. Lean writes it only when there is no error
   (`src/util/shell.cpp`: `if (olean_fn && ok) write_module(...)`; exit code `ok ? 0 : 1`).
2. **the trusted target**: the header and `formal_statement` with `sorry`, compiled the same way
   in its own process from trusted text alone (once per problem, cached).
3. **check** with SafeVerify (GasStationManager/SafeVerify), pinned per toolchain (`PINS`): in a
   fresh process given only the two `.olean` files it (1) replays every constant of the proof's
   module through the kernel (`Environment.replay`, as lean4checker does), (2) compares the
   target theorem's type and universe parameters with the trusted statement's as `Expr`s
   (`equivThm`), and (3) collects the axioms of the target from the replayed environment
   (`CollectAxioms`) against propext, Quot.sound, Classical.choice. We read those axioms back
   from its output and hold them to `verify.allowed_axioms` as well.

Verdicts (`kernel_verdict`): a pass keeps `verified`; the checker (or the fresh elaboration)
saying no is `rejected` with its reason; a crash, a timeout, or output we cannot read is `error`.
Nothing from the fast path's answers is used: whatever happened while the untrusted text
elaborated, only a module whose constants the kernel accepts and whose target has the trusted
type and allowed axioms passes.

Why SafeVerify (docs/verify.md has the comparison): it does all three checks, works on the
`.olean` that `lean -o` writes, has a version for the toolchains provers are evaluated on (4.9,
4.14, 4.15 — Kimina-Prover-Preview's — 4.20, 4.21, 4.27, 4.29), and is what PutnamBench's
leaderboard and published miniF2F re-checks used. lean4checker (now `leanchecker` in Lean) only
replays; leanprover/comparator does all three but rebuilds the solution itself with `lake` inside
`landrun` (Landlock), starts at Lean 4.20 and needs lean4export; the REPL's `pickleTo` writes a
tuple no checker reads.

The checker's command line, exit codes and output lines below are read from its source at each
pinned commit (`Main.lean`); the Lean runtime prints an uncaught `IO` error as
`uncaught exception: <message>` and exits 1 (lean4 `src/Lean/Compiler/IR/EmitC.lean`,
`emitMainFn`; `src/runtime/io.cpp`, `lean_io_result_show_error`).
"""

from __future__ import annotations

import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from prover_cli.errors import BackendError
from prover_cli.verify.isolated import LocalRunner, RunResult, Runner, default_tmp_root
from prover_cli.verify.canary import Canary
from prover_cli.verify.rules import Verdict

CHECKER = "SafeVerify"
CHECKER_REPO = "GasStationManager/SafeVerify"
SAFEVERIFY_URL = f"https://github.com/{CHECKER_REPO}"
# What SafeVerify allows at every pinned commit (`AllowedAxioms` / `Settings.allowedAxioms`):
# verify.allowed_axioms may be narrower (we hold the checker's axiom list to it), never wider.
CHECKER_AXIOMS = frozenset({"propext", "Quot.sound", "Classical.choice"})


@dataclass(frozen=True)
class CheckerPin:
    """The SafeVerify commit built for one Lean toolchain (its `lean-toolchain` file says so)."""

    toolchain: str        # "v4.15.0"
    commit: str
    branch: str
    dialect: str          # "2024": positional args, stdout report; "2026": Cli flags, stderr report, --save JSON
    checks_imports: bool  # the submission must import at least what the target imports (2026 only)

    @property
    def describe(self) -> str:
        return f"{CHECKER_REPO}@{self.commit[:12]} ({self.branch}, Lean {self.toolchain})"


# Read from the repository's branches (GasStationManager/SafeVerify, fetched 2026): each commit's
# `lean-toolchain` is the toolchain it is keyed by. The 2024 dialect (`Main.lean`, 146 lines) is
# the same program on every branch listed (v4.9.0 differs only in where CollectAxioms lives); the
# 2026 one added the import check, the prelude check, Nat-literal and rebuilt-Expr defences.
PINS: dict[str, CheckerPin] = {pin.toolchain: pin for pin in (
    CheckerPin("v4.9.0", "0c0f7dcf6cb66333a944d062ec4c431986da1ca6", "minif2f-deepseek-check", "2024", False),
    CheckerPin("v4.14.0", "bc5d45c35c286a8125f2e435353ec69e0ddf6b6f", "seed-prover-check", "2024", False),
    CheckerPin("v4.15.0", "577e95319a2bb1bb8df541f0c645811f6577a0ae", "minif2f-kimina-check", "2024", False),
    CheckerPin("v4.20.0", "59f3d1fd208d6149657fdc0777a6209cb3ed2820", "abc-trinity-check", "2024", False),
    CheckerPin("v4.21.0", "e072239e31072e71ae894ffb4d4bed9978465bbc", "v4.21", "2024", False),
    CheckerPin("v4.27.0", "b291b588a53999a7e837dda61c7dbfe8c550c814", "main", "2026", True),
    CheckerPin("v4.29.0", "241dfb0d986baf8a3ba76cba14f10c16e8793e84", "v4.29.0", "2026", True),
)}


def toolchain_version(lean_toolchain: str) -> str:
    """`leanprover/lean4:v4.15.0` -> `v4.15.0`."""
    return lean_toolchain.rpartition(":")[2].strip()


def pin_for(lean_toolchain: str) -> CheckerPin | None:
    return PINS.get(toolchain_version(lean_toolchain))


def pin_warning(verify_config: Any) -> str | None:
    """What the configured checker pin does not check, as a warning for doctor and the verify summary
    (None when the kernel stage is off, unpinned, or the pin has no known gap)."""
    pin = pin_for(verify_config.lean_toolchain) if verify_config.kernel_check else None
    if pin is None or pin.checks_imports:
        return None
    return (f"the kernel stage's {CHECKER} pin for Lean {pin.toolchain} ({pin.branch}) does not compare the "
            "proof module's imports with the target's: code a proof runs during elaboration could write a "
            "module that imports less than the header and redefines a constant the statement uses. The pins "
            "for Lean v4.27.0 and later refuse that; see docs/verify.md, *The kernel stage*")


def policy_problem(verify_config: Any) -> tuple[str, str] | None:
    """(key, why) when the verify policy accepts proofs the kernel stage always rejects, else None."""
    if verify_config.allow_native_decide:
        return ("allow_native_decide", f"{CHECKER} replays native evaluation through the kernel, which cannot "
                "run compiled code (`(kernel) (interpreter) unknown declaration`), and allows only propext, "
                "Quot.sound and Classical.choice: a native_decide proof never passes")
    extra = sorted(set(verify_config.allowed_axioms) - CHECKER_AXIOMS)
    if extra:
        return ("allowed_axioms", f"{CHECKER} allows only propext, Quot.sound and Classical.choice, so a proof "
                f"using {', '.join(extra)} never passes")
    return None


def kernel_workers(verify_config: Any) -> int:
    """How many proofs go through the stage at a time: verify.kernel_check_workers, else verify.workers."""
    return max(1, int(getattr(verify_config, "kernel_check_workers", 0) or verify_config.workers))


def require_pin(verify_config: Any) -> CheckerPin:
    pin = pin_for(verify_config.lean_toolchain)
    if pin is None:
        known = ", ".join(sorted(PINS, key=_version_key))
        raise BackendError(
            f"verify.kernel_check = true, but SafeVerify has no pinned build for verify.lean_toolchain = "
            f"{verify_config.lean_toolchain!r} (pinned: {known})",
            hint="use one of the pinned toolchains, or set verify.kernel_check = false (recorded in every "
                 "verdict and in the summary)")
    return pin


def _version_key(version: str) -> tuple:
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"[.\-v]+", version) if x)


# --------------------------------------------------------------------------------------------
# What goes in, what comes out
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class KernelJob:
    """One fast-path pass to re-check: all trusted fields plus the exact code the fast path ran."""

    header: str       # trusted
    statement: str    # trusted `formal_statement` (ends with `:= by` or `:=`)
    target: str       # the target theorem's name as written in the statement
    body: str         # what followed the header in the fast path (the untrusted part)


@dataclass
class KernelResult:
    status: str                        # "passed", "rejected" or "error"
    reason: str
    axioms: list[str] | None = None    # the target's axioms in the replayed environment, when read
    time_s: float = 0.0                # wall-clock seconds of this proof's steps (the target's excluded)


MODULE = "Proof"   # target and proof are compiled under the same module name (private names agree)


def target_source(header: str, statement: str) -> str:
    """The trusted target file: header and statement, `sorry` for the proof."""
    return f"{header.rstrip()}\n\n{statement.rstrip()} sorry\n"


def proof_source(header: str, body: str) -> str:
    """The file the fast path checked, as one module: the header, then the body."""
    return f"{header.rstrip()}\n\n{body.rstrip()}\n"


def elaborate_argv(lean_command: list[str]) -> list[str]:
    """`lean --root=DIR -o DIR/Proof.olean DIR/Proof.lean`: `--root` because Lean derives the
    module name from the file's path under the root (default: the working directory, which is the
    Lean project here) and refuses a file outside it."""
    return [*lean_command, "--root={dir}", "-o", "{dir}/" + MODULE + ".olean", "{dir}/" + MODULE + ".lean"]


def checker_argv(checker_command: list[str], pin: CheckerPin) -> list[str]:
    if pin.dialect == "2026":
        return [*checker_command, "--save", "{dir}/report.json", "{dir}/Target.olean", "{dir}/Proof.olean"]
    return [*checker_command, "{dir}/Target.olean", "{dir}/Proof.olean"]


# --------------------------------------------------------------------------------------------
# The stage
# --------------------------------------------------------------------------------------------

class KernelStage:
    """`kernel_workers` jobs at a time; each proof: one elaboration process, one checker process
    (SafeVerify takes one target/submission pair per run, so no batching within a process)."""

    def __init__(self, verify_config: Any, runner: Runner | None = None):
        self.config = verify_config
        self.pin = require_pin(verify_config)
        problem = policy_problem(verify_config)
        if problem is not None:
            raise BackendError(f"verify.{problem[0]}: {problem[1]} with verify.kernel_check = true",
                               hint="set verify.kernel_check = false to accept such proofs without the kernel re-check")
        self.runner = runner or LocalRunner(verify_config.project_dir or None,
                                            float(verify_config.memory_limit_gb), default_tmp_root())
        self.lean_command = list(verify_config.lean_command)
        self.checker_command = list(verify_config.kernel_checker_command)
        self.timeout_s = float(verify_config.kernel_check_timeout_s)
        self._targets: dict[tuple[str, str], bytes | str] = {}   # (header, statement) -> olean, or why not
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._lock = threading.Lock()

    @property
    def identity(self) -> dict[str, Any]:
        """Recorded in every verdict's `verifier` (and in the policy digest)."""
        return {"checker": CHECKER, "commit": self.pin.commit, "toolchain": self.pin.toolchain}

    def check(self, jobs: Sequence[KernelJob], allowed: Iterable[str]) -> list[KernelResult]:
        """One result per job, in order; `kernel_workers` at a time."""
        allowed = frozenset(allowed)
        if not jobs:
            return []
        workers = min(kernel_workers(self.config), len(jobs))
        if workers == 1:
            return [self.check_one(job, allowed) for job in jobs]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kernel-check") as pool:
            return list(pool.map(lambda job: self.check_one(job, allowed), jobs))

    def stop(self) -> None:
        """Kill the stage's processes that are running now (Ctrl-C, a fatal error elsewhere)."""
        kill_all = getattr(self.runner, "kill_all", None)
        if kill_all is not None:
            kill_all()

    def check_one(self, job: KernelJob, allowed: Iterable[str]) -> KernelResult:
        """Never raises for a proof's sake: every failure is a result (BackendError only when the
        configured commands cannot be started at all)."""
        allowed = frozenset(allowed)
        if not job.statement.strip() or not job.target:
            return KernelResult("error", "kernel check: internal: no trusted statement to check the proof against")
        target = self._target_olean(job)
        start = time.monotonic()
        if isinstance(target, str):
            return KernelResult("error", target)
        try:
            result = self._check(job, target, allowed)
        except BackendError:
            raise
        except Exception as exc:   # a bug here is this proof's error, never a pass
            result = KernelResult("error", f"kernel check failed unexpectedly: {type(exc).__name__}: {exc}")
        result.time_s = round(time.monotonic() - start, 4)
        return result

    def _check(self, job: KernelJob, target: bytes, allowed: frozenset) -> KernelResult:
        elaborated = self.runner.run(elaborate_argv(self.lean_command),
                                     {MODULE + ".lean": proof_source(job.header, job.body).encode("utf-8")},
                                     (MODULE + ".olean",), self.timeout_s, what="verify.lean_command")
        olean = elaborated.files.get(MODULE + ".olean")
        failure = read_elaboration(elaborated, olean is not None)
        if failure is not None:
            return failure
        checked = self.runner.run(checker_argv(self.checker_command, self.pin),
                                  {"Target.olean": target, "Proof.olean": olean},
                                  ("report.json",), self.timeout_s, what="verify.kernel_checker_command")
        return read_checker(self.pin, checked, job.target, allowed)

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
        result = self.runner.run(elaborate_argv(self.lean_command),
                                 {MODULE + ".lean": target_source(job.header, job.statement).encode("utf-8")},
                                 (MODULE + ".olean",), self.timeout_s, what="verify.lean_command")
        olean = result.files.get(MODULE + ".olean")
        if result.exit_code == 0 and olean:
            return olean, True
        why = first_error(result.stdout) or result.stderr.strip()[-300:] or result.describe()
        return (f"kernel check: the trusted statement does not compile to an .olean with `lean -o` ({why})",
                result.exit_code == 1 and bool(first_error(result.stdout)))


class second_stage:
    """The stage behind a backend, for one batch: `submit` each fast-path verdict as it comes
    (passes go to `kernel_workers` threads, anything else straight to `on_result`); each kernel
    verdict is reported the moment it is known, from the thread that computed it, and every call
    of `on_result` holds one lock, so they never overlap (a verdict file gets whole lines while a
    slow proof still blocks the fast path). `finish` waits for the rest. A failure of the stage
    itself (its command cannot start) is raised in the caller's thread at its next `submit` or at
    `finish`. On leaving with an exception (Ctrl-C, a fatal error of the backend), no further
    verdict is reported, queued checks are dropped and running processes killed: their proofs get
    no verdict, so a resumed run checks them again (a kill of ours is never a proof's `error`).
    With `canary_config`, the kernel canary runs (once, cached) before the first pass is checked,
    its fooled case through `canary_fast_path` (a fresh fast path: the batch's is busy)."""

    def __init__(self, stage: KernelStage, allowed: Iterable[str], canary_config: Any = None,
                 canary_fast_path: Any = None):
        self.stage = stage
        self.allowed = frozenset(allowed)
        self.canary_config = canary_config
        self.canary_fast_path = canary_fast_path
        self.pending: set[Any] = set()
        self.executor: ThreadPoolExecutor | None = None
        self.lock = threading.Lock()
        self.stopped = False
        self.failure: BaseException | None = None

    def __enter__(self) -> "second_stage":
        self.executor = ThreadPoolExecutor(max_workers=kernel_workers(self.stage.config),
                                           thread_name_prefix="kernel-check")
        return self

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
        future = self.executor.submit(self.stage.check_one, job, self.allowed)
        with self.lock:
            self.pending.add(future)
        future.add_done_callback(lambda done: self._report(done, key, record, verdict, on_result))

    def _report(self, future: Any, key: Any, record: Any, fast: Verdict, on_result: Any) -> None:
        with self.lock:
            self.pending.discard(future)
            if self.stopped or future.cancelled():
                return
            try:
                on_result(key, record, kernel_verdict(fast, future.result()))
            except BaseException as exc:   # BackendError (the stage cannot run), or the callback's own
                if self.failure is None:
                    self.failure = exc

    def finish(self, on_result: Any) -> None:
        from concurrent.futures import wait

        while True:
            with self.lock:
                pending = list(self.pending)
            if not pending:
                break
            wait(pending)
        self._raise_failure()

    def _raise_failure(self) -> None:
        if self.failure is not None:
            raise self.failure

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is not None or self.failure is not None:
            with self.lock:
                self.stopped = True
                pending = list(self.pending)
            for future in pending:
                future.cancel()
            self.stage.stop()
        self.executor.shutdown(wait=True, cancel_futures=True)


# --------------------------------------------------------------------------------------------
# Reading `lean -o`
# --------------------------------------------------------------------------------------------

# Lean prints each message as `FILE:LINE:COL: error: TEXT` (later lines of TEXT follow as they are).
_ERROR_LINE = re.compile(r"^(?:.*?)(?P<where>[^/\s:]+:\d+:\d+): error: (?P<text>.*)$", re.MULTILINE)


def first_error(stdout: str) -> str:
    match = _ERROR_LINE.search(stdout)
    if match is None:
        return ""
    return f"{match.group('where')}: {match.group('text').strip()}"[:300]


def read_elaboration(result: RunResult, wrote_olean: bool) -> KernelResult | None:
    """None when `lean -o` succeeded (exit 0 and an .olean); else the proof's result."""
    if result.timed_out or result.signal is not None:
        return KernelResult("error", f"kernel check: `lean -o` on the proof {result.describe()}")
    if result.exit_code == 0 and wrote_olean:
        return None
    if result.exit_code == 1:
        why = first_error(result.stdout)
        if why:
            return KernelResult("rejected", "kernel check: the proof does not elaborate in a fresh Lean "
                                f"process (`lean -o`): {why}")
    tail = (result.stderr.strip() or result.stdout.strip())[-300:]
    return KernelResult("error", f"kernel check: `lean -o` on the proof {result.describe()}"
                        + ("" if wrote_olean or result.exit_code != 0 else " but wrote no .olean")
                        + (f": {tail}" if tail else ""))


# --------------------------------------------------------------------------------------------
# Reading SafeVerify
# --------------------------------------------------------------------------------------------

UNCAUGHT = "uncaught exception: "


def _exception(stderr: str) -> str | None:
    """The message of the uncaught `IO` error the Lean runtime printed last, or None."""
    at = stderr.rfind(UNCAUGHT)
    if at < 0 or (at > 0 and stderr[at - 1] != "\n"):
        return None
    return stderr[at + len(UNCAUGHT):].strip()


def _one_line(text: str, limit: int = 300) -> str:
    text = " ⏎ ".join(line.strip() for line in text.strip().splitlines() if line.strip())
    return text if len(text) <= limit else text[:limit] + "…"


def _target_name(names: Iterable[str], target: str) -> str | None:
    """The target's full name among the trusted side's declarations (`NAME`, or `Ns.NAME` when the
    trusted header leaves a namespace open): exactly one, else None."""
    found = sorted({n for n in names if n == target or n.endswith("." + target)})
    return found[0] if len(found) == 1 else None


def _axioms_verdict(axioms: list[str], target: str, allowed: frozenset, pin_text: str) -> KernelResult:
    disallowed = [a for a in axioms if a not in allowed]
    if disallowed:
        return KernelResult("rejected", f"kernel check ({pin_text}): `{target}` depends on axioms outside "
                            f"verify.allowed_axioms: {', '.join(disallowed)}", axioms)
    return KernelResult("passed", f"kernel check passed ({pin_text})", axioms)


# Messages SafeVerify (or Lean's replay inside it) raises about the *submission*, per dialect.
# 2024 (`Main.lean` at the 2024 pins): replayFile's own throws, and `Environment.replay`'s
# (`src/Lean/Replay.lean`: "(kernel) …" from KernelException.toMessageData, "Invalid/No such
# constructor/recursor …").
_REJECT_2024 = re.compile(
    r"\A(?:\(kernel\) |Invalid constructor |No such constructor |Invalid recursor |No such recursor "
    r"|unsafe/partial function .+ detected"
    r"|.+ is not in the allowed set of standard axioms"
    r"|\S+ \S+ is not the same kind as the requirement "
    r"|theorem .+ does not have the same type as the requirement"
    r"|definition .+ does not match the requirement"
    r"|.+ not found in submission)", re.DOTALL)
# 2026 (`Main.lean` at b291b58 / 241dfb0): the summary failure and the submission-only throws;
# replay and kernel failures count when they happened while replaying the submission.
_REJECT_2026_ALWAYS = re.compile(
    r"\A(?:SafeVerify check failed\.|Submission '.*' is missing \d+ transitive imports"
    r"|'.*' has no imports \(possible prelude file\)|suspicious Nat literal in new declaration )", re.DOTALL)
_REJECT_2026_REPLAY = re.compile(
    r"\A(?:\(kernel\) |Invalid constructor |No such constructor |Invalid recursor |No such recursor "
    r"|unsafe constant .+ detected|partial constant .+ detected|kernel verification failed for ')", re.DOTALL)


def read_checker(pin: CheckerPin, result: RunResult, target: str, allowed: frozenset) -> KernelResult:
    """The checker's answer on (Target.olean, Proof.olean) as a result; anything unexpected is `error`."""
    pin_text = f"{CHECKER} {pin.commit[:8]}"
    if result.timed_out or result.signal is not None:
        return KernelResult("error", f"kernel check: {CHECKER} {result.describe()}")
    if pin.dialect == "2024":
        return _read_2024(result, target, allowed, pin_text)
    if pin.dialect == "2026":
        return _read_2026(result, target, allowed, pin_text)
    return KernelResult("error", f"kernel check: unknown checker dialect {pin.dialect!r}")


def _unreadable(result: RunResult, why: str) -> KernelResult:
    tail = _one_line(result.stderr or result.stdout, 200)
    return KernelResult("error", f"kernel check: {CHECKER} {result.describe()}, {why}"
                        + (f" ({tail})" if tail else ""))


def _read_2024(result: RunResult, target: str, allowed: frozenset, pin_text: str) -> KernelResult:
    """stdout: `Replaying T` … `Finished with no errors.`; a failure in the submission is
    `found a problem in S` then `uncaught exception: MSG` on stderr, exit 1."""
    if result.exit_code == 1:
        message = _exception(result.stderr)
        if message is None:
            return _unreadable(result, "with no exception message")
        about_submission = re.search(r"(?m)^found a problem in .*Proof\.olean$", result.stderr) is not None
        if about_submission and _REJECT_2024.match(message):
            return KernelResult("rejected", f"kernel check ({pin_text}): {_one_line(message)}")
        return KernelResult("error", f"kernel check: {CHECKER} failed on "
                            f"{'the proof' if about_submission else 'the trusted target or its input'}: "
                            f"{_one_line(message)}")
    if result.exit_code != 0:
        return _unreadable(result, "an exit code it never returns")
    lines = result.stdout.splitlines()
    if not lines or lines[-1].strip() != "Finished with no errors." or UNCAUGHT in result.stderr:
        return _unreadable(result, "but no `Finished with no errors.`")
    sections = _sections_2024(lines)
    if sections is None:
        return _unreadable(result, "with a report we cannot read")
    target_blocks, proof_blocks = sections
    full = _target_name([name for kind, name, _ in target_blocks if kind == "theorem"], target)
    if full is None:
        return _unreadable(result, f"with no single theorem `{target}` in the trusted target's report")
    found = [axioms for kind, name, axioms in proof_blocks if name == full and kind == "theorem"]
    if len(found) != 1 or found[0] is None:
        return _unreadable(result, f"with no readable axiom list for `{full}` in the proof's report")
    return _axioms_verdict(found[0], full, allowed, pin_text)


def _sections_2024(lines: list[str]) -> tuple[list, list] | None:
    """The two `Replaying X` sections (target, then proof), each a list of (kind, name, axioms)
    blocks: `---`, kind, name, the type (any lines), [`:= value`], `#[axioms]`."""
    starts = [k for k, line in enumerate(lines) if re.fullmatch(r"Replaying .*(Target|Proof)\.olean", line)]
    if len(starts) != 2 or not lines[starts[0]].endswith("Target.olean") or not lines[starts[1]].endswith("Proof.olean"):
        return None
    out = []
    for begin, end in ((starts[0], starts[1]), (starts[1], len(lines) - 1)):
        section = lines[begin + 1:end]
        while section and section[-1] == "------------------":
            section = section[:-1]
        marks = [k for k, line in enumerate(section) if line == "---"]
        blocks = []
        for j, at in enumerate(marks):
            block = section[at + 1:marks[j + 1] if j + 1 < len(marks) else len(section)]
            if len(block) < 4:
                return None
            axioms = re.fullmatch(r"#\[(.*)\]", block[-1].strip())
            names = None
            if axioms is not None:
                names = [a.strip() for a in axioms.group(1).split(",")] if axioms.group(1).strip() else []
            blocks.append((block[0].strip(), block[1].strip(), names))
        out.append(blocks)
    return out[0], out[1]


def _read_2026(result: RunResult, target: str, allowed: frozenset, pin_text: str) -> KernelResult:
    """stderr: progress lines, `Found a problem in S with declaration N: F`, then `SafeVerify check
    passed.` (exit 0) or `uncaught exception: …` (exit 1); `--save` writes the per-target JSON."""
    if result.exit_code == 1:
        message = _exception(result.stderr)
        if message is None:
            return _unreadable(result, "with no exception message")
        replaying = re.findall(r"(?m)^Replaying (.*)$", result.stderr.split(UNCAUGHT)[0])
        in_submission = bool(replaying) and replaying[-1].endswith("Proof.olean")
        if _REJECT_2026_ALWAYS.match(message) or (in_submission and _REJECT_2026_REPLAY.match(message)):
            problems = [re.sub(r"^Found a problem in .* with (declaration .*)$", r"\1", p) for p in re.findall(
                r"(?m)^(Found a problem in .* with declaration .*|\S+ used disallowed axioms\. .*)$", result.stderr)]
            summary = message.startswith("SafeVerify check failed") and problems
            return KernelResult("rejected", f"kernel check ({pin_text}): "
                                + _one_line("; ".join(problems[:3]) if summary else message))
        return KernelResult("error", f"kernel check: {CHECKER} failed"
                            f"{' on the proof' if in_submission else ''}: {_one_line(message)}")
    if result.exit_code != 0:
        return _unreadable(result, "an exit code it never returns")
    if not re.search(r"(?m)^SafeVerify check passed\.$", result.stderr) or UNCAUGHT in result.stderr \
            or re.search(r"(?m)^Found a problem in ", result.stderr):
        return _unreadable(result, "but no `SafeVerify check passed.`")
    try:
        report = json.loads(result.files["report.json"].decode("utf-8"))
    except (KeyError, UnicodeDecodeError, ValueError):
        return _unreadable(result, "but no readable --save report")
    entries = [e for e in report if isinstance(e, list) and len(e) == 2 and isinstance(e[0], str)
               and isinstance(e[1], dict)] if isinstance(report, list) else []
    full = _target_name([name for name, outcome in entries
                         if ((outcome.get("targetInfo") or {}).get("constInfo") or {}).get("kind") == "theorem"],
                        target)
    if full is None:
        return _unreadable(result, f"with no single theorem `{target}` in its report")
    outcome = next(o for name, o in entries if name == full)
    solution = outcome.get("solutionInfo")
    axioms = solution.get("axioms") if isinstance(solution, dict) else None
    if outcome.get("failureMode") is not None or not isinstance(axioms, list) \
            or not all(isinstance(a, str) for a in axioms):
        return _unreadable(result, f"with an unreadable outcome for `{full}`")
    return _axioms_verdict(list(axioms), full, allowed, pin_text)


# --------------------------------------------------------------------------------------------
# Which checker is installed (for `prover doctor`)
# --------------------------------------------------------------------------------------------

def checker_program(command: list[str]) -> str:
    """The checker executable in its argv (`lake env safe_verify` -> `safe_verify`)."""
    rest = list(command)
    if rest[:2] == ["lake", "env"]:
        rest = rest[2:]
    return rest[0] if rest else ""


def describe_installed_checker(command: list[str], cwd: str | None = None) -> dict[str, Any]:
    """{found, path, toolchain, commit} of the checker `command` runs: the binary on PATH, and
    the SafeVerify checkout it was built in (`<checkout>/.lake/build/bin/safe_verify`), whose
    `lean-toolchain` and git HEAD say which version it is."""
    import os
    import shutil
    from pathlib import Path

    program = checker_program(command)
    path = shutil.which(program) if program else None
    if path is None and program and os.path.isfile(os.path.join(cwd or ".", program)):
        path = os.path.join(cwd or ".", program)
    info: dict[str, Any] = {"program": program, "found": path is not None, "path": path,
                            "toolchain": None, "commit": None}
    if path is None:
        return info
    here = Path(os.path.realpath(path)).parent
    for directory in (here, *here.parents):
        toolchain_file = directory / "lean-toolchain"
        if toolchain_file.is_file():
            info["checkout"] = str(directory)
            info["toolchain"] = toolchain_version(toolchain_file.read_text(encoding="utf-8", errors="replace").strip())
            info["commit"] = _git_head(directory / ".git")
            break
    return info


def _git_head(git_dir: Any) -> str | None:
    """The commit a checkout is at, read from `.git` without running git (None when unknown)."""
    try:
        head = (git_dir / "HEAD").read_text(encoding="utf-8").strip()
        if re.fullmatch(r"[0-9a-f]{40}", head):
            return head
        ref = head.removeprefix("ref: ").strip()
        loose = git_dir / ref
        if loose.is_file():
            return loose.read_text(encoding="utf-8").strip()
        for line in (git_dir / "packed-refs").read_text(encoding="utf-8").splitlines():
            sha, _, name = line.partition(" ")
            if name.strip() == ref:
                return sha
    except (OSError, ValueError):
        pass
    return None


# --------------------------------------------------------------------------------------------
# The stage's canary: does it hold on this toolchain?
# --------------------------------------------------------------------------------------------

def _k(name: str, rest: str) -> str:
    return f"theorem prover_kernel_canary_{name}{rest}"


# Lean core only (no Mathlib names), so they mean the same under any header; `expect` as the
# final verdict. Each goes straight to the stage, as if the fast path had been fooled into calling
# it verified, except the false statement, which goes through a fast path first when one is given
# (with a REPL that forges its answers, only the stage stands between it and `verified`).
FOOLED = "false statement"
KERNEL_CANARIES: tuple[Canary, ...] = (
    Canary("honest", "an honest proof passes the kernel stage (elaboration, replay, statement, axioms read)",
           _k("honest", " : 2 + 2 = 4 := by"), _k("honest", " : 2 + 2 = 4 := by") + "\n  decide", "verified"),
    Canary(FOOLED, "a false statement the fast path called verified does not pass the kernel stage",
           _k("false", " : 2 + 2 = 5 := by"), _k("false", " : 2 + 2 = 5 := by") + "\n  decide", "rejected"),
    Canary("another statement", "a module whose target states something else is rejected (statement as Expr)",
           _k("other", " : 2 + 2 = 4 := by"), _k("other", " : 2 + 2 = 4 ∧ True := by") + "\n  exact ⟨rfl, trivial⟩",
           "rejected"),
    Canary("declared axiom", "a proof through a declared axiom is rejected (axioms of the replayed environment)",
           _k("axiom", " : 2 + 2 = 5 := by"),
           "axiom prover_kernel_canary_ax : 2 + 2 = 5\n\n" + _k("axiom", " : 2 + 2 = 5 := by")
           + "\n  exact prover_kernel_canary_ax", "rejected"),
    Canary("sorry", "a proof with `sorry` is rejected (sorryAx in the replayed environment)",
           _k("sorry", " : 2 + 2 = 5 := by"), _k("sorry", " : 2 + 2 = 5 := by") + "\n  sorry", "rejected"),
)


def run_kernel_canary(stage: KernelStage, header: str, fast_path: Any = None) -> list[dict[str, Any]]:
    """Every kernel canary through `stage` (in parallel): one result each, with its seconds.
    `fast_path(candidate) -> Verdict`, when given, judges the fooled case first."""
    from prover_cli.verify.statement import Candidate

    fast: dict[str, Verdict] = {}
    if fast_path is not None:
        canary = next(c for c in KERNEL_CANARIES if c.name == FOOLED)
        fast[FOOLED] = fast_path(Candidate(id=f"kernel canary: {FOOLED}", header=header, body=canary.body,
                                           target=canary.target, statement=canary.statement))
    staged = [c for c in KERNEL_CANARIES if fast.get(c.name) is None or fast[c.name].status == "verified"]
    results = dict(zip((c.name for c in staged), stage.check(
        [KernelJob(header, c.statement, c.target, c.body) for c in staged], CHECKER_AXIOMS)))
    out = []
    for canary in KERNEL_CANARIES:
        first = fast.get(canary.name) or Verdict("verified", "straight to the stage")
        verdict = kernel_verdict(first, results.get(canary.name))
        out.append({"canary": canary.name, "rule": canary.rule, "expect": canary.expect, "got": verdict.status,
                    "reason": verdict.reason, "fast_path": fast[canary.name].status if canary.name in fast else None,
                    "time_s": results[canary.name].time_s if canary.name in results else 0.0,
                    "ok": verdict.status == canary.expect})
    return out


KERNEL_CANARY_VERSION = 2


def ensure_kernel_canary(stage: KernelStage, verify_config: Any, fast_path: Any = None) -> None:
    """Run the kernel canary once per toolchain and checker (a pass is cached on disk beside the
    fast path's canary; a failure never is); BackendError naming the rule when one fails."""
    import hashlib

    from prover_cli.verify.canary import cache_dir, cached_pass, project_files, store_pass

    project, files = project_files(verify_config)
    fields = {"kernel_canary": KERNEL_CANARY_VERSION, "pin": stage.pin.commit, "lean": stage.lean_command,
              "checker": stage.checker_command, "project": str(project), "files": files,
              "header": verify_config.header, "runner": getattr(stage.runner, "canary_key", "local"),
              "fast_path": fast_path is not None}
    key = hashlib.sha256(json.dumps(fields, sort_keys=True).encode("utf-8")).hexdigest()[:24]
    path = cache_dir() / f"kernel-{key}.json"
    if cached_pass(path):
        return
    results = run_kernel_canary(stage, verify_config.header, fast_path)
    if not all(r["ok"] for r in results):
        raise BackendError("verification refuses to run: " + kernel_canary_failures(results),
                           hint="run `prover doctor`; check the pinned checker (verify.kernel_checker_command) "
                                "and verify.lean_command")
    store_pass(path, fields, results)


def kernel_canary_failures(results: list[dict[str, Any]]) -> str:
    return "; ".join(f"rule `{r['rule']}` does not hold (kernel canary {r['canary']!r}: expected {r['expect']}, "
                     f"got {r['got']}: {r['reason'][:200]})" for r in results if not r["ok"])


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
