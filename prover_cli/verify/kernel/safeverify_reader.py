"""Reading SafeVerify's answer on one (Target.olean, Proof.olean) pair, in both of its dialects
(2024 and 2026, `CheckerPin.dialect`): anything unexpected is `error`, never a pass."""

from __future__ import annotations

import json
import re

from prover_cli.verify.kernel.isolated import RunResult
from prover_cli.verify.kernel.job import KernelResult, axioms_verdict, one_line, target_name
from prover_cli.verify.kernel.pins import CHECKER, CHECKER_AXIOMS, CheckerPin
from prover_cli.verify.text.rules import HOLE, TRUSTED


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
    tail = one_line(result.stderr or result.stdout, 200)
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
            return KernelResult("rejected", f"kernel check ({pin_text}): {one_line(message)}")
        return KernelResult("error", f"kernel check: {CHECKER} failed on "
                            f"{'the proof' if about_submission else 'the trusted target or its input'}: "
                            f"{one_line(message)}")
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
    full = target_name([name for kind, name, _ in target_blocks if kind == "theorem"], target)
    if full is None:
        return _unreadable(result, f"with no single theorem `{target}` in the trusted target's report")
    found = [axioms for kind, name, axioms in proof_blocks if name == full and kind == "theorem"]
    if len(found) != 1 or found[0] is None:
        return _unreadable(result, f"with no readable axiom list for `{full}` in the proof's report")
    return axioms_verdict(found[0], full, allowed, pin_text)


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
    exception = _exception(result.stderr)
    if exception is None or not exception.startswith("SafeVerify check failed."):
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
                                + one_line("; ".join(problems[:3]) if summary else message))
        return KernelResult("error", f"kernel check: {CHECKER} failed"
                            f"{' on the proof' if in_submission else ''}: {one_line(message)}")
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
    full = target_name([name for name, outcome in entries
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
    return axioms_verdict(list(axioms), full, allowed, pin_text)
