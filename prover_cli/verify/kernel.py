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

import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from prover_cli.errors import BackendError
from prover_cli.verify.isolated import RunResult, Runner, local_runner
from prover_cli.verify.canary import Canary
from prover_cli.verify.rules import HOLE, SAME, TRUSTED, Verdict, print_axioms_command, trusted_command
from prover_cli.verify.statement import BadRecord, trusted_signature

CHECKER = "SafeVerify"
CHECKER_REPO = "GasStationManager/SafeVerify"
SAFEVERIFY_URL = f"https://github.com/{CHECKER_REPO}"
OWN_CHECKER = "prover_check"
OWN_CHECKER_DIR = Path(__file__).resolve().parent / "checker"
# What the build directory holds, and the checker's identity: own_checker_sources(toolchain).
OWN_CHECKER_FILES = ("Main.lean", "ProverReplay.lean", "lakefile.toml")
# lean4checker at the release commit of each supported tag: the checker's `require` (lakefile.toml,
# written by the kernel image's build) and its replay. `replay'` (lean4checker's own,
# Lean4Checker/Replay.lean) where lean4checker's Main.lean calls it at that tag; the core
# `Environment.replay` where it calls that (read with `git show COMMIT:Main.lean`).
LEAN4CHECKER_REPO = "https://github.com/leanprover/lean4checker"
LEAN4CHECKER_COMMITS = {
    "v4.9.0": "b3178065f785a6637f112d7857c4b64b1de83cc7",
    "v4.14.0": "bee437b6b8584f779bc20ab8b7e27934d4f711ac",
    "v4.15.0": "be02a4748128f9bf6a192f4c3b000464f99b062f",
    "v4.20.0": "aeaca0f19e8ff3ab8e0c98a52985cba7dcfb2234",
    "v4.21.0": "ad292fe49208e0cbacf3c75533fdf81f42754f3f",
}
OWN_CHECKER_REPLAY = {"v4.9.0": "replay/core.lean", "v4.14.0": "replay/core.lean", "v4.15.0": "replay/core.lean",
                      "v4.20.0": "replay/prime.lean", "v4.21.0": "replay/prime.lean"}
# The Lean runtime prints a panic and goes on with a default value unless this is set
# (src/runtime/object.cpp `lean_panic_fn`: `if (g_exit_on_panic) std::exit(1)`, set from
# LEAN_ABORT_ON_PANIC): a checker that panics must stop, never answer.
CHECKER_ENV = ("LEAN_ABORT_ON_PANIC=1",)
# What both checkers allow (SafeVerify's `AllowedAxioms` / `Settings.allowedAxioms` at every pinned
# commit, `allowedAxioms` in checker/Main.lean): verify.allowed_axioms may be narrower (we hold the
# checker's axiom list to it), never wider.
CHECKER_AXIOMS = frozenset({"propext", "Quot.sound", "Classical.choice"})


def own_checker_sources(toolchain: str) -> dict[str, str]:
    """Our checker's files as built for `toolchain` (the kernel image writes exactly these):
    Main.lean, the tag's replay file as ProverReplay.lean, lakefile.toml with lean4checker's commit."""
    return {"Main.lean": (OWN_CHECKER_DIR / "Main.lean").read_text(encoding="utf-8"),
            "ProverReplay.lean": (OWN_CHECKER_DIR / OWN_CHECKER_REPLAY[toolchain]).read_text(encoding="utf-8"),
            "lakefile.toml": (OWN_CHECKER_DIR / "lakefile.toml").read_text(encoding="utf-8")
            .replace("@LEAN4CHECKER_REV@", LEAN4CHECKER_COMMITS[toolchain])}


def own_checker_digest(toolchain: str) -> str:
    """The identity of our checker for `toolchain`: sha256 of the files it is built from."""
    import hashlib

    digest = hashlib.sha256()
    for name, text in own_checker_sources(toolchain).items():
        digest.update(name.encode() + b"\0" + text.encode("utf-8") + b"\0")
    return digest.hexdigest()[:40]


@dataclass(frozen=True)
class CheckerPin:
    """The checker built for one Lean toolchain: a SafeVerify commit (its `lean-toolchain` file
    says so), or our own checker's source digest."""

    toolchain: str        # "v4.15.0"
    commit: str
    branch: str
    dialect: str          # "2024"/"2026": SafeVerify's; "batch": prover_check's JSON lines
    imports: str          # "none": no import check; "superset": at least the target's; "exact": equal

    @property
    def checker(self) -> str:
        return OWN_CHECKER if self.dialect == "batch" else CHECKER

    @property
    def program(self) -> str:
        """The executable's name (what `{checker}` in verify.kernel_checker_command becomes)."""
        return OWN_CHECKER if self.dialect == "batch" else "safe_verify"

    @property
    def describe(self) -> str:
        if self.dialect == "batch":
            return f"{OWN_CHECKER} {self.commit[:12]} (prover_cli/verify/checker, Lean {self.toolchain}; not compiled here)"
        return f"{CHECKER_REPO}@{self.commit[:12]} ({self.branch}, Lean {self.toolchain})"


# Read from the repository's branches (GasStationManager/SafeVerify, fetched 2026): each commit's
# `lean-toolchain` is the toolchain it is keyed by. The 2024 dialect (`Main.lean`, 146 lines) is
# the same program on every branch listed (v4.9.0 differs only in where CollectAxioms lives): no
# import check, no rebuild, no Nat-literal check, theorems and defs of the target compared only,
# unsafe constants dropped by `Environment.replay` without a word. The 2026 one (PRs #18 - #20 and
# later) added the import superset check, Init checks, Nat-literal and rebuilt-Expr/Level
# defences, the second kernel check of theorems, and inductives/constructors compared.
SAFEVERIFY_PINS: dict[str, CheckerPin] = {pin.toolchain: pin for pin in (
    CheckerPin("v4.9.0", "0c0f7dcf6cb66333a944d062ec4c431986da1ca6", "minif2f-deepseek-check", "2024", "none"),
    CheckerPin("v4.14.0", "bc5d45c35c286a8125f2e435353ec69e0ddf6b6f", "seed-prover-check", "2024", "none"),
    CheckerPin("v4.15.0", "577e95319a2bb1bb8df541f0c645811f6577a0ae", "minif2f-kimina-check", "2024", "none"),
    CheckerPin("v4.20.0", "59f3d1fd208d6149657fdc0777a6209cb3ed2820", "abc-trinity-check", "2024", "none"),
    CheckerPin("v4.21.0", "e072239e31072e71ae894ffb4d4bed9978465bbc", "v4.21", "2024", "none"),
    CheckerPin("v4.27.0", "b291b588a53999a7e837dda61c7dbfe8c550c814", "main", "2026", "superset"),
    CheckerPin("v4.29.0", "241dfb0d986baf8a3ba76cba14f10c16e8793e84", "v4.29.0", "2026", "superset"),
)}
# The checker the stage uses per toolchain: ours where the SafeVerify pin is of the 2024 dialect
# (it accepts the public attacks in KERNEL_ATTACKS). SafeVerify's 2026 commits are REFUSED (#39):
# read at b291b588 and 241dfb0d (`SafeVerify/Util.lean` `validateNewDefinitionNatLiterals`,
# `Main.lean` `replayFile`), their Nat-literal check refuses only a literal that prints with `-`
# (a non-canonical positive one, `unsafeCast (2^40 : Int) : Nat`, passes), runs only on the
# submission's constants whose names the target lacks (the target theorem's own proof is never
# looked at), and their rebuild covers def/thm/opaque only; our own literal check cannot run beside
# them (prover_check has no evidence at Lean 4.27/4.29: tests/test_checker_evidence.py). So a
# kernel stage on those toolchains refuses to start rather than pass what it does not check.
OWN_CHECKER_TOOLCHAINS = tuple(LEAN4CHECKER_COMMITS)
PINS: dict[str, CheckerPin] = {t: CheckerPin(t, own_checker_digest(t), "in-tree", "batch", "exact")
                               for t in OWN_CHECKER_TOOLCHAINS}
REFUSED_PINS: dict[str, str] = {
    t: (f"SafeVerify at {pin.commit[:8]} ({pin.branch}), the only checker built for Lean {t}, refuses a Nat literal "
        "only when it prints with `-` (a non-canonical positive literal, enough for `False`, passes), checks literals "
        "only on declarations the target does not name (never the target theorem's proof), and skips partial "
        "constants unless given --disallow-partial; this project's checker has no evidence for Lean "
        f"{t} (docs/verify.md, *The kernel stage*)")
    for t, pin in SAFEVERIFY_PINS.items() if pin.dialect == "2026"}


def toolchain_version(lean_toolchain: str) -> str:
    """`leanprover/lean4:v4.15.0` -> `v4.15.0`."""
    return lean_toolchain.rpartition(":")[2].strip()


def pin_for(lean_toolchain: str) -> CheckerPin | None:
    return PINS.get(toolchain_version(lean_toolchain))


def pin_warning(verify_config: Any) -> str | None:
    """What the configured checker does not guarantee, as a warning for doctor and the verify
    summary (None when the kernel stage is off or unpinned)."""
    pin = pin_for(verify_config.lean_toolchain) if verify_config.kernel_check else None
    if pin is None:
        return None
    if pin.dialect == "batch":
        return (f"the kernel stage's checker for Lean {pin.toolchain} is {OWN_CHECKER}, Lean code of this project "
                "that has not been compiled or run where it was written: its guarantees hold once `prover doctor "
                "--backend modal` has built it and it refused every kernel canary, and it rebuilds no Level "
                "(a forged one in a hand-written .olean is not defended); see docs/verify.md, *The kernel stage*")
    if pin.imports == "superset":
        return (f"the kernel stage's {CHECKER} pin for Lean {pin.toolchain} ({pin.branch}) accepts a proof module "
                "that imports more than the header (a superset): extra imports are kept out by the no-`import` "
                "rule on the body and by a library the elaboration cannot write; see docs/verify.md")
    return None


def policy_problem(verify_config: Any) -> tuple[str, str] | None:
    """(key, why) when the verify policy accepts proofs the kernel stage always rejects, else None."""
    if verify_config.allow_native_decide:
        return ("allow_native_decide", "the kernel checker replays native evaluation through the kernel, which cannot "
                "run compiled code (`(kernel) (interpreter) unknown declaration`), and allows only propext, "
                "Quot.sound and Classical.choice: a native_decide proof never passes")
    extra = sorted(set(verify_config.allowed_axioms) - CHECKER_AXIOMS)
    if extra:
        return ("allowed_axioms", f"the kernel checker allows only propext, Quot.sound and Classical.choice, so a proof "
                f"using {', '.join(extra)} never passes")
    return None


def kernel_workers(verify_config: Any) -> int:
    """How many proofs go through the stage at a time: verify.kernel_check_workers, else verify.workers."""
    return max(1, int(verify_config.kernel_check_workers or verify_config.workers))


def checker_command(verify_config: Any, pin: CheckerPin) -> list[str]:
    """verify.kernel_checker_command with `{checker}` replaced by the pinned checker's program."""
    return [arg.replace("{checker}", pin.program) for arg in verify_config.kernel_checker_command]


def require_pin(verify_config: Any) -> CheckerPin:
    pin = pin_for(verify_config.lean_toolchain)
    refused = REFUSED_PINS.get(toolchain_version(verify_config.lean_toolchain))
    if pin is None and refused is not None:
        raise BackendError(f"verify.kernel_check = true, but the kernel stage refuses verify.lean_toolchain = "
                           f"{verify_config.lean_toolchain!r}: {refused}",
                           hint="use a toolchain prover_check covers (" + ", ".join(OWN_CHECKER_TOOLCHAINS)
                                + "), or set verify.kernel_check = false (recorded in every verdict and in the summary)")
    if pin is None:
        known = ", ".join(sorted(PINS, key=_version_key))
        raise BackendError(
            f"verify.kernel_check = true, but no kernel checker is pinned for verify.lean_toolchain = "
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


# The declarations the fast path adds around the untrusted text (rules.py, rule 4) are added here
# too, in the same order: the hole axiom and `_prover_trusted` before the body, `_prover_same`
# after it. So the body elaborates in the same environment in both stages, and a payload that asks
# the environment (`(← getEnv).contains `_prover_trusted`) sees the same answer in each. The
# trusted target has them as well: the checker compares the submission's with the target's own
# compiled ones (checker/Main.lean `isTrustedAux`; SafeVerify: `_read_2026`), never trusts them.
def trusted_before(statement: str) -> str:
    """What the REPL pool runs between the header and the body (`rules.trusted_command`)."""
    return trusted_command(trusted_signature(statement))


def trusted_after(target: str) -> str:
    """The pool's `_prover_same` after the body. The pool writes `_root_.<Ns.>` from the REPL's
    answer; no process's answer is read here, so the names resolve as Lean resolves them after the
    body (the checker compares this theorem's type with the one compiled from trusted text)."""
    return f"theorem _root_.{SAME} : type_of% @{TRUSTED} := @{target}\n\n{print_axioms_command('_root_.' + SAME)}"


def target_source(header: str, statement: str, target: str) -> str:
    """The trusted target file: the header, the fast path's declarations, the statement with
    `sorry` for the proof."""
    return (f"{header.rstrip()}\n\n{trusted_before(statement)}\n\n{statement.rstrip()} sorry\n\n"
            f"{trusted_after(target)}\n")


def proof_source(header: str, statement: str, target: str, body: str) -> str:
    """The file the fast path checked, as one module: the header, the fast path's declarations
    before the body, the body, the fast path's declaration after it."""
    return f"{header.rstrip()}\n\n{trusted_before(statement)}\n\n{body.rstrip()}\n\n{trusted_after(target)}\n"


def elaborate_argv(lean_command: list[str]) -> list[str]:
    """`lean --root=DIR -o DIR/Proof.olean DIR/Proof.lean`: `--root` because Lean derives the
    module name from the file's path under the root (default: the working directory, which is the
    Lean project here) and refuses a file outside it."""
    return [*lean_command, "--root={dir}", "-o", "{dir}/" + MODULE + ".olean", "{dir}/" + MODULE + ".lean"]


def checker_argv(checker_command: list[str], pin: CheckerPin) -> list[str]:
    """The checker's argv, run through `env` with CHECKER_ENV: prover_check takes the directory
    holding its pairs (`T{k}.olean`, `P{k}.olean`); SafeVerify one pair, `--disallow-partial` given
    to the 2026 dialect (without it `replayFile` drops partial constants silently)."""
    run = ["env", *CHECKER_ENV, *checker_command]
    if pin.dialect == "batch":
        return [*run, "{dir}"]
    if pin.dialect == "2026":
        return [*run, "--disallow-partial", "--save", "{dir}/report.json", "{dir}/Target.olean", "{dir}/Proof.olean"]
    return [*run, "{dir}/Target.olean", "{dir}/Proof.olean"]


# An `import` can only come first in a Lean file, so a body holding one either fails to parse or,
# after a header of imports alone, adds a module to the proof's imports: refused before Lean
# either way (a line inside a comment or string too: fail closed).
BODY_IMPORT = re.compile(r"(?m)^[ \t]*import\b")


@dataclass
class _Elaborated:
    """A proof ready for the checker: the trusted target's .olean, the proof's, seconds so far."""

    target: bytes
    olean: bytes
    time_s: float


# --------------------------------------------------------------------------------------------
# The stage
# --------------------------------------------------------------------------------------------

class KernelStage:
    """Each proof: one `lean -o` process (`kernel_workers` at a time). Then the checker: with our
    own (`prover_check`), one process per batch of up to verify.kernel_batch_size proofs, which
    imports the header once (`header_imports` counts what the checker reported); with
    SafeVerify, one process per proof (it takes one pair per run)."""

    def __init__(self, verify_config: Any, runner: Runner | None = None):
        self.config = verify_config
        self.pin = require_pin(verify_config)
        problem = policy_problem(verify_config)
        if problem is not None:
            raise BackendError(f"verify.{problem[0]}: {problem[1]} with verify.kernel_check = true",
                               hint="set verify.kernel_check = false to accept such proofs without the kernel re-check")
        if runner is None:   # local: the installed checker must be built against the project's packages
            problem = checker_manifest_problem(verify_config, self.pin)
            if problem is not None:
                raise BackendError(f"verification refuses to use the kernel checker: {problem}",
                                   hint="rebuild the checker against the project's lake-manifest.json "
                                        "(docs/verify.md, *The kernel stage*), then run `prover doctor`")
        self.runner = runner or local_runner(verify_config)   # in the box verify.box asks for
        self.lean_command = list(verify_config.lean_command)
        self.checker_command = checker_command(verify_config, self.pin)
        self.timeout_s = float(verify_config.kernel_check_timeout_s)
        self.batch_size = int(verify_config.kernel_batch_size) if self.pin.dialect == "batch" else 1
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
        ready = [k for k, p in enumerate(prepared) if isinstance(p, _Elaborated)]
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
        workers = min(kernel_workers(self.config), len(items))
        if workers <= 1:
            return [fn(item) for item in items]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kernel-check") as pool:
            return list(pool.map(fn, items))

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

    def _prepare(self, job: KernelJob) -> _Elaborated | KernelResult:
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
        return _Elaborated(target, olean, time_s)

    def _check_batch(self, items: list[tuple[KernelJob, _Elaborated]], allowed: frozenset) -> list[KernelResult]:
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


class second_stage:
    """The stage behind a backend, for one batch: `submit` each fast-path verdict as it comes
    (anything but a pass goes straight to `on_result`; a pass goes to the checker at once when no
    batch is running, else it waits for the running one and goes with the others that queued
    meanwhile, up to the stage's `batch_size`: batches grow only while the checker is busy);
    each kernel verdict is reported the moment its batch is known, from the thread that computed
    it, and every call of `on_result` holds one lock, so they never overlap. A failure of the stage
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
        self.buffer: list[tuple[KernelJob, Any, Any, Verdict, Any]] = []
        self.executor: ThreadPoolExecutor | None = None
        self.lock = threading.Lock()
        self.stopped = False
        self.failure: BaseException | None = None

    def __enter__(self) -> "second_stage":
        # one batch at a time when batches are large (each already runs kernel_workers `lean -o`)
        workers = kernel_workers(self.stage.config) if self.stage.batch_size == 1 else 1
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kernel-check")
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
        with self.lock:
            self.buffer.append((job, key, record, verdict, on_result))
            # a full batch goes at once; so does any pass when no batch is running (a pass is never
            # held back waiting for others: batches grow only while the checker is busy)
            ready = len(self.buffer) >= self.stage.batch_size or not self.pending
        if ready:
            self._flush()

    def _flush(self) -> None:
        with self.lock:
            batch, self.buffer = self.buffer[:self.stage.batch_size], self.buffer[self.stage.batch_size:]
            if not batch or self.stopped:
                return
            future = self.executor.submit(self.stage.check, [item[0] for item in batch], self.allowed)
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
            more = bool(self.buffer) and not self.pending and self.failure is None
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
    lines = result.stdout.split("\n")   # "\n" only: a U+2028 in a printed name is no line break
    if lines and lines[-1] == "":
        lines.pop()
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


def _is_aux(name: str, which: str = TRUSTED) -> bool:
    return name == which or name.endswith("." + which)


def _only_the_trusted_aux_failed(result: RunResult) -> bool:
    """Whether a `SafeVerify check failed.` run failed for the fast path's `_prover_trusted`
    alone: SafeVerify checks the axioms of every theorem of the submission (`runSafeVerify`, at
    b291b588 and 241dfb0d), and `_prover_trusted` is proved by the hole axiom by construction. Its
    `--save` report is written before that throw ("always, even on failure"): every outcome must be
    `failureMode: null` but `_prover_trusted`'s, which must be `"axioms"` (`CheckFailure.axioms`
    under `deriving ToJson`: a constructor without fields is its name as a string; that check
    comes after kind and theorem type, so those matched the target's own `_prover_trusted`); and
    the only `N used disallowed axioms. #[…]` line must be `_prover_trusted`'s, listing only the
    hole axiom and allowed ones. Every throw before that summary (imports, replay, the kernel's
    second check, Nat literals) has another message. Anything else: False (fail closed)."""
    if _exception(result.stderr) is None or not _exception(result.stderr).startswith("SafeVerify check failed."):
        return False
    try:
        report = json.loads(result.files["report.json"].decode("utf-8"))
    except (KeyError, UnicodeDecodeError, ValueError):
        return False
    if not isinstance(report, list) or not all(isinstance(e, list) and len(e) == 2 and isinstance(e[0], str)
                                               and isinstance(e[1], dict) for e in report):
        return False
    failed = [(name, outcome.get("failureMode")) for name, outcome in report if outcome.get("failureMode") is not None]
    if len(failed) != 1 or not _is_aux(failed[0][0]) or failed[0][1] != "axioms":
        return False
    violations = re.findall(r"(?m)^(\S+) used disallowed axioms\. #\[(.*)\]$", result.stderr)
    if len(violations) != 1 or violations[0][0] != failed[0][0]:
        return False
    axioms = [a.strip() for a in violations[0][1].split(",") if a.strip()]
    return any(_is_aux(a, HOLE) for a in axioms) and all(_is_aux(a, HOLE) or a in CHECKER_AXIOMS for a in axioms)


def _read_2026(result: RunResult, target: str, allowed: frozenset, pin_text: str) -> KernelResult:
    """stderr: progress lines, `Found a problem in S with declaration N: F`, then `SafeVerify check
    passed.` (exit 0) or `uncaught exception: …` (exit 1); `--save` writes the per-target JSON.
    A failure caused by the fast path's `_prover_trusted` alone is read as a pass
    (`_only_the_trusted_aux_failed`)."""
    if result.exit_code == 1 and _only_the_trusted_aux_failed(result):
        return _read_2026_report(result, target, allowed, pin_text)
    if result.exit_code == 1:
        message = _exception(result.stderr)
        if message is None:
            return _unreadable(result, "with no exception message")
        replaying = re.findall(r"(?m)^Replaying (.*)$", result.stderr.split(UNCAUGHT)[0])
        in_submission = bool(replaying) and replaying[-1].endswith("Proof.olean")
        if _REJECT_2026_ALWAYS.match(message) or (in_submission and _REJECT_2026_REPLAY.match(message)):
            problems = [re.sub(r"^Found a problem in .* with (declaration .*)$", r"\1", p) for p in re.findall(
                r"(?m)^(Found a problem in .* with declaration .*|\S+ used disallowed axioms\. .*)$", result.stderr)]
            # `_prover_trusted`'s own line is expected (the hole axiom): the others say what failed
            problems = [p for p in problems if not re.match(rf"(?:declaration )?(?:\S+\.)?{TRUSTED}[: ]", p)] or problems
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
    return _read_2026_report(result, target, allowed, pin_text)


def _read_2026_report(result: RunResult, target: str, allowed: frozenset, pin_text: str) -> KernelResult:
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
# Reading prover_check (checker/Main.lean)
# --------------------------------------------------------------------------------------------

BATCH_AXIOMS = re.compile(r"axioms (\d+) (\S+)((?: \S+)*)")
BATCH_VERDICT = re.compile(r"pair (\d+) (passed|rejected|error)(?: (.+))?")
BATCH_END = re.compile(r"checked (\d+) imports ([01])")


def read_batch(result: RunResult, targets: list[str], allowed: frozenset,
               pin_text: str) -> tuple[list[KernelResult], int] | str:
    """(one result per pair, header imports the process reported), or why the batch as a whole
    has no answer. stdout (checker/Main.lean `checkAll`), split on "\n" only (a U+2028 or U+0085
    is no line break to the checker): per pair K in order, `axioms K THEOREM AXIOM...` lines then
    `pair K passed`, or `pair K rejected|error REASON`; then `checked N imports 0|1`; exit 0."""
    if result.timed_out or result.signal is not None or result.exit_code != 0:
        tail = _one_line(result.stderr or result.stdout, 200)
        return f"kernel check: {OWN_CHECKER} {result.describe()}" + (f" ({tail})" if tail else "")
    lines = result.stdout.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    end = BATCH_END.fullmatch(lines.pop()) if lines else None
    if end is None or int(end.group(1)) != len(targets):
        return f"kernel check: {OWN_CHECKER} did not answer every pair of its batch ({len(lines)} lines)"
    out: list[KernelResult] = []
    theorems: dict[str, list[str]] = {}
    for line in lines:
        k = len(out)
        axioms, verdict = BATCH_AXIOMS.fullmatch(line), BATCH_VERDICT.fullmatch(line)
        if axioms and int(axioms.group(1)) == k and axioms.group(2) not in theorems:
            theorems[axioms.group(2)] = axioms.group(3).split()
        elif verdict is None or int(verdict.group(1)) != k or k >= len(targets):
            return f"kernel check: {OWN_CHECKER} printed a line it never prints, or out of order (pair {k})"
        elif verdict.group(2) == "passed" and verdict.group(3) is None:
            full = _target_name(theorems, targets[k])
            if full is None:
                out.append(KernelResult("error", f"kernel check: {OWN_CHECKER} passed the proof with no readable "
                                        f"axiom list for a single theorem `{targets[k]}`"))
            else:
                out.append(_axioms_verdict(theorems[full], full, allowed, pin_text))
            theorems = {}
        elif verdict.group(2) != "passed" and verdict.group(3) and not theorems:
            reason = _one_line(verdict.group(3))
            out.append(KernelResult("rejected", f"kernel check ({pin_text}): {reason}") if verdict.group(2) == "rejected"
                       else KernelResult("error", f"kernel check: {OWN_CHECKER}: {reason}"))
        else:
            return f"kernel check: {OWN_CHECKER} answered pair {k} with fields it never prints"
    if len(out) != len(targets) or theorems:
        return f"kernel check: {OWN_CHECKER} did not answer every pair of its batch ({len(out)} of {len(targets)})"
    return out, int(end.group(2))


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
            info["commit"] = _git_head(directory / ".git") or _source_digest(directory)
            break
    return info


# --------------------------------------------------------------------------------------------
# The checker's packages against the project's (lake-manifest.json)
# --------------------------------------------------------------------------------------------

# The packages whose .olean files both the checker's build and the project's proofs use: a checker
# built against other revisions reads a Mathlib it was not built with (SafeVerify requires Mathlib,
# which requires Batteries; prover_check requires nothing, so it has nothing to compare).
SHARED_PACKAGES = ("mathlib", "batteries")
MANIFEST = "lake-manifest.json"


def manifest_revisions(path: Path) -> dict[str, str]:
    """{package name: rev} of a lake-manifest.json (its `packages`: objects with `name` and
    `rev`, as Lake writes them); ConfigError naming the file and the key when it is not one."""
    from prover_cli.errors import ConfigError

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: not JSON ({exc})") from None
    packages = data.get("packages") if isinstance(data, dict) else None
    if not isinstance(packages, list):
        raise ConfigError(f"{path}: key `packages` must be a list (a lake-manifest.json)")
    for k, package in enumerate(packages):
        if not isinstance(package, dict) or not isinstance(package.get("name"), str) \
                or not isinstance(package.get("rev"), str):
            raise ConfigError(f"{path}: `packages[{k}]` must have string `name` and `rev` (a lake-manifest.json)")
    return {package["name"]: package["rev"] for package in packages}


def manifest_mismatch(checker_manifest: Path, project_manifest: Path) -> str | None:
    """Why the checker's shared packages are not the project's revisions (both files and both
    revisions named), or None. A package the checker's build does not require is not compared."""
    checker, project = manifest_revisions(checker_manifest), manifest_revisions(project_manifest)
    bad = [f"{name} {checker[name][:12]} in {checker_manifest}, "
           + (f"{project[name][:12]} in {project_manifest}" if name in project else f"absent from {project_manifest}")
           for name in SHARED_PACKAGES if name in checker and checker[name] != project.get(name)]
    return f"the kernel checker was built against other packages than the project's: {'; '.join(bad)}" if bad else None


def checker_manifest_problem(verify_config: Any, pin: CheckerPin) -> str | None:
    """The installed checker's packages against verify.project_dir's lake-manifest.json: why they
    differ, or None (also None when no checkout of the checker is found: `prover doctor` reports
    that its version is unknown). ConfigError when a manifest is not one."""
    info = describe_installed_checker(checker_command(verify_config, pin), verify_config.project_dir or None)
    if not info.get("checkout"):
        return None
    checker = Path(info["checkout"]) / MANIFEST
    project = Path(verify_config.project_dir or ".") / MANIFEST
    if not checker.is_file():
        if pin.dialect == "batch":
            return None   # prover_check's lakefile requires no package: it reads the project's
        return f"no {MANIFEST} beside the kernel checker ({checker}): which Mathlib it was built against is unknown"
    if not project.is_file():
        revisions = manifest_revisions(checker)
        if not any(name in revisions for name in SHARED_PACKAGES):
            return None
        return f"the kernel checker's {checker} pins Mathlib, but the project has no {project}"
    return manifest_mismatch(checker, project)


def _source_digest(directory: Any) -> str | None:
    """Our checker's identity in a build directory holding its source (as `own_checker_digest`)."""
    import hashlib

    try:
        digest = hashlib.sha256()
        for name in OWN_CHECKER_FILES:
            digest.update(name.encode() + b"\0" + (directory / name).read_bytes() + b"\0")
    except OSError:
        return None
    return digest.hexdigest()[:40]


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


@dataclass(frozen=True)
class KernelAttack:
    """A public attack on checkers, as two files: the trusted target and what the attack's
    elaboration leaves (the submission, compiled with `lean -o` like any proof). The checker must
    reject it; a rejection anywhere else (the submission does not compile) tests nothing, so it
    fails the canary too."""

    name: str
    rule: str
    source: str        # repository, path, commit the texts are adapted from
    theorem: str
    target: str
    submission: str
    exact_imports: bool = False   # only a checker promising equal imports is held to it


_CHAR_OFNAT = """prelude
set_option genCtorIdx false
set_option linter.all false

unsafe axiom lcErased : Type
unsafe axiom lcAny : Type
unsafe axiom lcVoid : Type

universe u

inductive False : Prop

inductive True' : Prop where
  | intro : True'

inductive Unit'' where
  | intro : Unit''

inductive Nat where
  | zero : Nat
  | succ (n : Nat) : Nat

structure Char : Type where
  mk ::
  n : False

structure Box : Type where
  mk ::
  f : True'

inductive List (α : Type u) where
  | nil : List α
  | cons (hd : α) (tl : List α) : List α

structure String where
  ofList ::
  data : List Char

noncomputable def Char.ofNat (n : Nat) : Box := Box.mk True'.intro

noncomputable def M (l : List Char) : Type :=
  @List.rec Char (fun _ => Type) Unit'' (fun _ _ _ => Char) l

noncomputable def head (l : List Char) : M l :=
  @List.rec Char M Unit''.intro (fun hd _ _ => hd) l

noncomputable def confused : Char := head (String.data "\\x02")

theorem prover_attack_char_ofnat : False := Char.n confused
"""

_PROJ_ELAB = """import Lean
open Lean Elab Term

structure S : Type where
  a : Nat{extra}

def T : Type := S

elab "pr% " s:term : term => do
  return Expr.proj `S 0 (← elabTerm s none)

theorem prover_attack_proj_trick : ∀ (s : T), (pr% s) = (0 : Nat) := {proof}
"""

# The olean_issue payload, with the module written by the payload itself (issue #39): a command run
# during `lean -o` may write Proof.olean and exit 0 before Lean writes its own, so the checker alone
# carries the guarantee. This one writes the file's constants but the unsafe one, so the unsafe
# check cannot be what refuses it: the Nat-literal check must. {value}: the forged literal;
# -4294967296 as olean_issue, or 1099511627776 (2^40), a positive value held as a big-number object
# (an Int that large is one), which prints as a natural number: `lean_nat_big_le` and
# `lean_nat_big_sub` take a big number for larger than any small one (src/runtime/object.cpp,
# reasoned, not run), so `decide` proves both facts below. NOT COMPILED HERE (no Lean); the doctor's
# kernel canary compiles it on the kernel image and fails, naming it, if it does not compile.
_HAND_BUILT = """import Lean

open Lean Elab Command

unsafe def badNatUnsafe : Nat := unsafeCast ({value} : Int)

@[implemented_by badNatUnsafe] opaque badNatVal : Nat

run_elab
  addDecl <| .defnDecl {{
    name        := .str .anonymous "badNat"
    levelParams := []
    type        := .const ``Nat []
    value       := .lit <| .natVal badNatVal
    hints       := .opaque
    safety      := .safe
  }}

theorem {theorem} : False := by
{proof}
  omega

run_cmd do
  let env ← getEnv
  let data ← mkModuleData env
  let mut names := #[]
  let mut consts := #[]
  for name in data.constNames, ci in data.constants do
    if !ci.isUnsafe then
      names := names.push name
      consts := consts.push ci
  saveModuleData (((← getFileName).dropRight 5) ++ ".olean") env.mainModule
    {{ data with constNames := names, constants := consts }}
  IO.Process.exit 0
"""


def _hand_built(theorem: str, value: str, facts: tuple[str, str]) -> str:
    proof = "\n".join(f"  have h{k} : {fact} := by decide" for k, fact in enumerate(facts))
    return _HAND_BUILT.format(theorem=theorem, value=value, proof=proof)


# Each text is the public test case with its theorem renamed (and comments dropped); the Level
# `unsafeCast` case of SafeVerify PR #19 (commit 5cafc55) has no public source text (the PR lists
# it among its test results; no file at b291b588 holds it), so it is a stand-in test only
# (tests/fake_checker.py) and no canary here.
KERNEL_ATTACKS: tuple[KernelAttack, ...] = (
    KernelAttack("olean_issue", "a Nat literal forged with `unsafeCast` at elaboration time is refused (Nat-literal "
                 "check, no unsafe constant)",
                 "leanprover/comparator tests/projects/olean_issue (e0a37c608aca, at 19e111e2141c)",
                 # the target imports Lean as the submission does: the import check must not be what decides
                 "prover_attack_olean_issue", "import Lean\n\ntheorem prover_attack_olean_issue : False := sorry\n",
                 """import Lean

open Lean

unsafe def badNatUnsafe : Nat := unsafeCast (-4294967296 : Int)

@[implemented_by badNatUnsafe] opaque badNatVal : Nat

run_elab
  addDecl <| .defnDecl {
    name        := .str .anonymous "badNat"
    levelParams := []
    type        := .const ``Nat []
    value       := .lit <| .natVal badNatVal
    hints       := .opaque
    safety      := .safe
  }

theorem prover_attack_olean_issue : False := by
  have truly_marvelous_0 : ¬badNat ≤ 9223372036854775807 := by decide
  have truly_marvelous_1 : ¬9223372036854775807 < badNat := by decide
  omega
"""),
    KernelAttack("char_ofnat_issue", "a `prelude` module that redefines `False` and `Char` is refused (imports)",
                 "leanprover/comparator tests/projects/char_ofnat_issue (8c0e44e73c53, at 19e111e2141c)",
                 "prover_attack_char_ofnat", "theorem prover_attack_char_ofnat : False := sorry\n", _CHAR_OFNAT),
    KernelAttack("proj_trick", "a structure of the target redefined in the submission is refused (header "
                 "declarations of every kind compared)",
                 "leanprover/comparator tests/projects/proj_trick (322d8cae1136, at 19e111e2141c)",
                 "prover_attack_proj_trick", _PROJ_ELAB.format(extra="", proof="sorry"),
                 _PROJ_ELAB.format(extra="\n  h : False", proof="by\n  intro s\n  exact (S.h s).elim")),
    KernelAttack("dropped imports", "a submission that imports less than the target is refused (imports)",
                 "GasStationManager/SafeVerify PR #19, case 2 `Missing Mathlib import` (check added in bea2fbd)",
                 "prover_attack_dropped_imports", "import Lean\n\ntheorem prover_attack_dropped_imports : True := sorry\n",
                 "theorem prover_attack_dropped_imports : True := trivial\n"),
    KernelAttack("opaque_value", "an axiom reached only through an opaque's value is found (the axiom walk reads "
                 "opaque values)",
                 "leanprover/comparator tests/projects/opaque_value (a4f69682, test corrected at 066c3bc)",
                 "prover_attack_opaque_value", "theorem prover_attack_opaque_value : False := sorry\n",
                 "axiom f : False\nopaque v : False := f\ntheorem prover_attack_opaque_value : False := v\n"),
    KernelAttack("olean_issue hand-built", "a forged negative Nat literal in a module with no unsafe constant is "
                 "refused (Nat-literal check alone)",
                 "leanprover/comparator tests/projects/olean_issue (e0a37c608aca), written by its own payload (#39)",
                 "prover_attack_olean_hand_built", "import Lean\n\ntheorem prover_attack_olean_hand_built : False := sorry\n",
                 _hand_built("prover_attack_olean_hand_built", "-4294967296",
                             ("¬badNat ≤ 9223372036854775807", "¬9223372036854775807 < badNat"))),
    KernelAttack("non-canonical literal", "a positive Nat literal that does not read back as itself is refused "
                 "(`(toString n).toNat? == some n`, not only a `-`)",
                 "this project (#39), from comparator's olean_issue with 2^40 for the forged value",
                 "prover_attack_noncanonical", "import Lean\n\ntheorem prover_attack_noncanonical : False := sorry\n",
                 _hand_built("prover_attack_noncanonical", "1099511627776",
                             ("badNat - 1099511627776 = 0", "¬badNat ≤ 1099511627776"))),
    KernelAttack("extra import", "a submission that imports more than the target is refused (imports equal)",
                 "this project (issue #32): SafeVerify's 2026 check accepts a superset",
                 "prover_attack_extra_import", "theorem prover_attack_extra_import : True := sorry\n",
                 "import Lean\n\ntheorem prover_attack_extra_import : True := trivial\n", exact_imports=True),
)


def attacks_for(pin: CheckerPin) -> tuple[KernelAttack, ...]:
    return tuple(a for a in KERNEL_ATTACKS if not a.exact_imports or pin.imports == "exact")


def check_attack(stage: KernelStage, attack: KernelAttack) -> KernelResult:
    """The attack's two files compiled afresh, then the checker on them (a batch of its own: its
    imports are not the configured header's)."""
    start = time.monotonic()
    compiled = [compile_module(stage.runner, stage.lean_command, text, stage.timeout_s, what)[0]
                for text, what in ((attack.target, "the attack's target"), (attack.submission, "the attack"))]
    bad = next((c for c in compiled if isinstance(c, str)), None)
    if bad is not None:
        return KernelResult("error", f"{bad}: the attack must compile for the canary to test the checker",
                            time_s=round(time.monotonic() - start, 4))
    job = KernelJob("", attack.target, attack.theorem, "")
    [result] = stage._check_batch([(job, _Elaborated(compiled[0], compiled[1], time.monotonic() - start))],
                                  CHECKER_AXIOMS)
    return result


def run_kernel_canary(stage: KernelStage, header: str, fast_path: Any = None) -> list[dict[str, Any]]:
    """Every kernel canary through `stage` (in parallel), then every public attack the pin is
    held to (`attacks_for`): one result each, with its seconds. `fast_path(candidate) ->
    Verdict`, when given, judges the fooled case first."""
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
    for attack in attacks_for(stage.pin):
        result = check_attack(stage, attack)
        by_checker = result.status == "rejected" and result.reason.startswith("kernel check (")
        out.append({"canary": f"attack: {attack.name}", "rule": attack.rule, "expect": "rejected",
                    "got": result.status, "reason": result.reason, "fast_path": None, "time_s": result.time_s,
                    "source": attack.source, "ok": by_checker})
    return out


KERNEL_CANARY_VERSION = 5   # 3: the public attacks (KERNEL_ATTACKS); 4: the fast path's declarations in both modules; 5: #39's three


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
                     f"got {r['got']}: {r['reason'][:400]})" for r in results if not r["ok"])


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
