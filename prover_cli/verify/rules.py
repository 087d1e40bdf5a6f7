"""Verdict rules: what counts as verified, and what this does not protect against.

What counts as verified
-----------------------
A proof is `verified` only when every check below passes; the first that fails decides the
verdict, and anything we cannot read is a failure (fail closed).

0. Before Lean: the untrusted text passes the denylist (`denylist.py`: `sorry`, `admit`, `axiom`,
   `#exit`, `set_option debug.*`, `implemented_by`, `native_decide`, notation, instances, macros,
   …) and, for `completion` input, the statement check (`statement.py`). Failing either is
   `rejected`, and the text never reaches Lean.
1. Lean's answer to the proof command is a command response with an integer `env`. A protocol
   error (`{"message": …}`), a missing `env`, a crash, EOF or unparseable output is `error`; no
   answer within `verify.timeout_s` is `timeout`.
2. No message has severity `error` (any severity other than `info`/`warning` counts as an error).
3. No sorry: the `sorries` list is empty and no message says "declaration uses 'sorry'" in
   either quote style (Lean <= 4.27 writes 'sorry', later versions `sorry`).
4. The target theorem exists under its own name and states the trusted statement: by
   construction for `proof` input; checked in the text for `completion` input (`statement.py`);
   and the `#print axioms` answer must name exactly the target (a `namespace` trick that makes
   `#print axioms X` resolve to `Foo.X` fails here).
5. `#print axioms <target>`, run in the environment the proof produced, answers with exactly one
   info message `'X' depends on axioms: [..]` or `'X' does not depend on any axioms`, and every
   axiom is in `verify.allowed_axioms` (plus `Lean.ofReduceBool` when
   `verify.allow_native_decide`). A missing, duplicated or unparseable answer is `rejected`.

What this does not protect against
----------------------------------
- A wrong trusted statement: a mis-formalized `formal_statement` or a hostile `header` is proved
  as written. The header and statement are trusted input.
- Bugs in Lean's kernel, in Mathlib's tactics or in the allowed axioms themselves.
- Elaborator tricks that need none of the denied words. The denylist is syntactic; the axiom
  check (rule 5) is the backstop for sorry/axioms/native code, not for `debug.skipKernelTC`-like
  switches, which is why those are denied by name.
- Resource abuse beyond the address-space limit and the wall-clock deadline: the REPL process is
  not sandboxed (file system, network). Run untrusted proofs in a container (the Modal image).
- Results of the test stand-in (`tests/fake_repl.py`): it speaks the REPL protocol but is not
  Lean, so its verdicts say nothing about proofs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

VERDICTS = ("verified", "rejected", "timeout", "error")

SORRY_WARNING = re.compile(r"declaration uses ['`]sorry['`]")
AXIOMS_MESSAGE = re.compile(
    r"\A\s*(?P<q>['`])(?P<name>.+)(?P=q) (?:depends on axioms: \[(?P<axioms>[^\[\]]*)\]"
    r"|(?P<none>does not depend on any axioms))\s*\Z", re.DOTALL)


@dataclass
class Verdict:
    """The outcome for one proof. A timeout or a crash is a verdict, not an exception."""

    status: str                       # one of VERDICTS
    reason: str                       # short, human readable: which check failed
    messages: list[dict[str, Any]] = field(default_factory=list)  # Lean's messages for the proof
    axioms: list[str] | None = None   # from `#print axioms`, when known
    time_s: float = 0.0

    def __post_init__(self) -> None:
        if self.status not in VERDICTS:  # a bug here, never user input
            raise ValueError(f"unknown verdict {self.status!r}")


def allowed_axioms(verify_config: Any) -> set[str]:
    allowed = set(verify_config.allowed_axioms)
    if verify_config.allow_native_decide:
        allowed.add("Lean.ofReduceBool")
    return allowed


# --------------------------------------------------------------------------------------------
# Reading REPL answers
# --------------------------------------------------------------------------------------------

def protocol_problem(response: Any) -> str | None:
    """Why `response` is not a command response (rule 1), or None."""
    if not isinstance(response, dict):
        return f"REPL answered with a JSON {type(response).__name__}, not an object"
    if "message" in response and "env" not in response:
        return f"REPL protocol error: {str(response['message']).strip()[:300]}"
    env = response.get("env")
    if not isinstance(env, int) or isinstance(env, bool):
        return "REPL answer has no integer `env`"
    for key in ("messages", "sorries"):
        value = response.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            return f"REPL answer has a malformed `{key}` field"
    return None


def is_error(message: dict[str, Any]) -> bool:
    return message.get("severity") not in ("info", "information", "warning")


def has_sorry_warning(message: dict[str, Any]) -> bool:
    return bool(SORRY_WARNING.search(str(message.get("data", ""))))


def parse_axioms_message(data: Any) -> tuple[str, list[str]] | None:
    """`'X' depends on axioms: [a, b]` -> ("X", ["a", "b"]); no axioms -> ("X", []); else None."""
    if not isinstance(data, str):
        return None
    match = AXIOMS_MESSAGE.match(data)
    if match is None:
        return None
    if match.group("none"):
        return match.group("name"), []
    axioms = [a.strip() for a in match.group("axioms").split(",")]
    if any(not a or any(c.isspace() for c in a) for a in axioms):
        return None
    return match.group("name"), axioms


def _where(message: dict[str, Any]) -> str:
    pos = message.get("pos")
    if isinstance(pos, dict) and "line" in pos:
        return f" (line {pos['line']})"
    return ""


def _first_line(text: Any, limit: int = 200) -> str:
    text = str(text).strip().replace("\n", " ⏎ ")
    return text if len(text) <= limit else text[:limit] + "…"


# --------------------------------------------------------------------------------------------
# The rules
# --------------------------------------------------------------------------------------------

def judge_proof(response: Any) -> Verdict | None:
    """Rules 1-3 on the answer to the proof command: a failing Verdict, or None when they hold."""
    problem = protocol_problem(response)
    if problem:
        return Verdict("error", problem)
    messages = response.get("messages", [])
    errors = [m for m in messages if is_error(m)]
    if errors:
        first = errors[0]
        return Verdict("rejected", f"Lean error{_where(first)}: {_first_line(first.get('data', ''))}", messages)
    sorries = response.get("sorries", [])
    if sorries:
        goal = _first_line(sorries[0].get("goal", ""), 120)
        return Verdict("rejected", f"proof contains sorry{_where(sorries[0])}: {goal}", messages)
    warnings = [m for m in messages if has_sorry_warning(m)]
    if warnings:
        return Verdict("rejected", f"Lean reports `declaration uses sorry`{_where(warnings[0])}", messages)
    return None


def judge_axioms(messages: list[dict[str, Any]], target: str, allowed: set[str],
                 proof_messages: list[dict[str, Any]]) -> Verdict:
    """Rules 4-5 on the messages that answer `#print axioms <target>`."""
    answers = [(m, parse_axioms_message(m.get("data"))) for m in messages]
    parsed = [(m, p) for m, p in answers if p is not None and m.get("severity") in ("info", "information")]
    if len(parsed) != 1:
        seen = "; ".join(_first_line(m.get("data", ""), 120) for m in messages) or "no message"
        what = "no parseable" if not parsed else f"{len(parsed)}"
        return Verdict("rejected", f"{what} `#print axioms {target}` answers ({seen})", proof_messages)
    _, (name, axioms) = parsed[0]
    if name != target:
        return Verdict("rejected", f"`#print axioms {target}` reported on `{name}`, not the target",
                       proof_messages, axioms)
    disallowed = [a for a in axioms if a not in allowed]
    if disallowed:
        what = "uses sorry (sorryAx)" if "sorryAx" in disallowed else "depends on axioms outside verify.allowed_axioms"
        return Verdict("rejected", f"{what}: {', '.join(disallowed)}", proof_messages, axioms)
    return Verdict("verified", "all checks passed", proof_messages, axioms)


def judge_axioms_response(response: Any, target: str, allowed: set[str],
                          proof_messages: list[dict[str, Any]]) -> Verdict:
    """Rules 4-5 when `#print axioms` ran as its own command (the REPL engine)."""
    problem = protocol_problem(response)
    if problem:
        return Verdict("error", f"`#print axioms {target}`: {problem}", proof_messages)
    messages = response.get("messages", [])
    errors = [m for m in messages if is_error(m)]
    if errors:
        return Verdict("rejected", f"`#print axioms {target}` failed: {_first_line(errors[0].get('data', ''))}",
                       proof_messages)
    return judge_axioms(messages, target, allowed, proof_messages)
