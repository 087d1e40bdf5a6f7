"""What goes into the kernel stage and what comes out: a `KernelJob` (the trusted fields and the
exact code the fast path ran), the two Lean files built from it, the argv of each step, a
`KernelResult`, and the reading of `lean -o` and of what both checkers' readers share."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from prover_cli.verify.kernel.isolated import RunResult
from prover_cli.verify.kernel.pins import CHECKER_ENV, CheckerPin
from prover_cli.verify.text.rules import SAME, TRUSTED, print_axioms_command, trusted_command
from prover_cli.verify.text.statement import trusted_signature


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
class Elaborated:
    """A proof ready for the checker: the trusted target's .olean, the proof's, seconds so far."""

    target: bytes
    olean: bytes
    time_s: float


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
# What both checkers' readers share
# --------------------------------------------------------------------------------------------

def one_line(text: str, limit: int = 300) -> str:
    text = " ⏎ ".join(line.strip() for line in text.strip().splitlines() if line.strip())
    return text if len(text) <= limit else text[:limit] + "…"


def target_name(names: Iterable[str], target: str) -> str | None:
    """The target's full name among the trusted side's declarations (`NAME`, or `Ns.NAME` when the
    trusted header leaves a namespace open): exactly one, else None."""
    found = sorted({n for n in names if n == target or n.endswith("." + target)})
    return found[0] if len(found) == 1 else None


def axioms_verdict(axioms: list[str], target: str, allowed: frozenset, pin_text: str) -> KernelResult:
    disallowed = [a for a in axioms if a not in allowed]
    if disallowed:
        return KernelResult("rejected", f"kernel check ({pin_text}): `{target}` depends on axioms outside "
                            f"verify.allowed_axioms: {', '.join(disallowed)}", axioms)
    return KernelResult("passed", f"kernel check passed ({pin_text})", axioms)
