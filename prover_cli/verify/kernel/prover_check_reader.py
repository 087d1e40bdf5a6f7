"""Reading `prover_check`'s answer on a batch of pairs (checker/Main.lean `checkAll`): one result
per pair, or why the batch as a whole has no answer (the stage then splits it)."""

from __future__ import annotations

import re

from prover_cli.verify.kernel.isolated import RunResult
from prover_cli.verify.kernel.job import KernelResult, axioms_verdict, one_line, target_name
from prover_cli.verify.kernel.pins import OWN_CHECKER


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
        tail = one_line(result.stderr or result.stdout, 200)
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
            full = target_name(theorems, targets[k])
            if full is None:
                out.append(KernelResult("error", f"kernel check: {OWN_CHECKER} passed the proof with no readable "
                                        f"axiom list for a single theorem `{targets[k]}`"))
            else:
                out.append(axioms_verdict(theorems[full], full, allowed, pin_text))
            theorems = {}
        elif verdict.group(2) != "passed" and verdict.group(3) and not theorems:
            reason = one_line(verdict.group(3))
            out.append(KernelResult("rejected", f"kernel check ({pin_text}): {reason}") if verdict.group(2) == "rejected"
                       else KernelResult("error", f"kernel check: {OWN_CHECKER}: {reason}"))
        else:
            return f"kernel check: {OWN_CHECKER} answered pair {k} with fields it never prints"
    if len(out) != len(targets) or theorems:
        return f"kernel check: {OWN_CHECKER} did not answer every pair of its batch ({len(out)} of {len(targets)})"
    return out, int(end.group(2))
