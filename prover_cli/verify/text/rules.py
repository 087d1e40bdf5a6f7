"""Verdict rules: what counts as verified, and what this does not protect against.

What counts as verified
-----------------------
A proof is `verified` only when every check below passes; the first that fails decides the
verdict, and anything we cannot read is a failure (fail closed).

0. Before Lean: the untrusted text passes the denylist (`denylist.py`: `sorry`, `admit`, `axiom`,
   `#exit`, `set_option debug.*`, `implemented_by`, `native_decide`, notation, instances, macros,
   …), the allowlist (`allowlist.py`: only `theorem`/`lemma`, `open … in` and `set_option
   <resource limit> … in` commands, no attributes, literal tactic configurations, no
   control/zero-width/bidi characters; a `where` clause is read as part of its declaration, as
   Lean reads it) and, for `completion` input, the text statement check (`statement.py`: nothing
   before the target but helper lemmas, no `set_option … in` that reaches the target, no `open …
   in` that does unless the trusted header opens the same namespaces). Failing any is
   `rejected`, and the text never reaches Lean.
1. Lean's answer to the proof command is a command response with an integer `env`. A protocol
   error (`{"message": …}`), a missing `env`, a crash, EOF or unparseable output is `error`; no
   answer within `verify.timeout_s` is `timeout`.
2. No message has severity `error` (any severity other than `info`/`warning` counts as an error).
3. No sorry: the `sorries` list is empty and no message says "declaration uses 'sorry'" in
   either quote style (Lean <= 4.27 writes 'sorry', later versions `sorry`).
4. The target theorem states the trusted statement, and Lean says so: before the proof runs, the
   trusted statement is declared in the header's environment as `_prover_trusted` (proved by an
   axiom no policy allows: `trusted_command`); after it, Lean must accept `theorem
   _root_._prover_same : type_of% @_root_.<Ns.>_prover_trusted := @_root_.<Ns.>X`
   (`alias_command`), which the kernel checks: it holds exactly when the target X proves the
   trusted statement, whatever binder kinds, universe names, open namespaces, pp options or Lean
   version (an added hypothesis, an instance `variable`, a name resolved through another `open`,
   a universe-specialised target, a renamed or namespaced target: an error, so `rejected`, and
   the reason quotes Lean). `Ns.` is the namespace the trusted header leaves open, read from the
   `#print axioms _prover_trusted` answer. For `completion` input the text check
   (`statement.py`) comes first. No printout is compared: `#check` is not sent.
5. `#print axioms _root_._prover_same` (under `pp.fullNames`, so an `open Classical` cannot
   shorten `Classical.choice`), in the same command, answers with exactly one info message
   `'_prover_same' depends on axioms: [..]` or `… does not depend on any axioms` (the alias's
   axioms are the target's), and every
   axiom is in `verify.allowed_axioms` (plus the native-evaluation axioms, `NATIVE_AXIOMS` and
   `NATIVE_AUX_AXIOM`, when `verify.allow_native_decide`). A missing, duplicated or unparseable
   answer is `rejected`.
6. With `verify.kernel_check` (the default), the kernel stage (`kernel/`) passes too: the same
   code elaborated afresh with `lean -o` in a process of its own, the trusted target compiled
   from trusted text alone in another, and the checker pinned for the toolchain (`kernel.PINS`;
   kernel/stage.py's docstring says what each pin checks) given only the .olean files: it replays the
   constants through the kernel, finds the target with the trusted statement's type as an
   `Expr`, and collects its axioms, which must be allowed. Nothing from rules 1-5's answers is
   used. The checker saying no is `rejected`; a crash, a timeout or output we cannot read is
   `error`.

What this does not protect against
----------------------------------
- A wrong trusted statement: a mis-formalized `formal_statement` or a hostile `header` is proved
  as written. The header and statement are trusted input.
- Bugs in Lean's kernel, in Mathlib's tactics or in the allowed axioms themselves.
- Elaborator tricks that need none of the denied words and no command outside the allowlist can
  forge the answers rules 1-5 read; rule 6 does not read them. With `verify.kernel_check = false`
  the axiom check (rule 5) is the backstop for sorry/axioms/native code and Lean's statement check
  (rule 4) for the statement, neither for `debug.skipKernelTC`-like switches, which is why those
  are denied by name and code in tactic configurations is refused (allowlist.py).
- What rule 6 still rests on: Lean's kernel, the Mathlib .olean files the checker reads, the
  checker's reading of the proof's .olean (written by the untrusted process), and what the pin
  for the toolchain does or does not compare, on Lean code of its own that may never have run
  where this was tested (kernel/; docs/verify.md, *The kernel stage*, per toolchain).
- An unknown command keyword placed where Lean would not start a command by our reading of its
  layout rules (allowlist.py: columns, tactic blocks, `where` clauses); anything
  `verify.allow_commands` admits.
- Resource abuse beyond the address-space limit and the wall-clock deadline; and locally, what
  the box leaves a process (`verify.box`: box.py lists what it covers, `"none"` covers nothing).
  The Modal backend runs each step in a fresh Sandbox instead.
- Results of the test stand-ins (`tests/fake_repl.py`, `tests/fake_lean.py`, the checker
  stand-ins): they speak the real protocols but are not Lean or a checker, so their verdicts say
  nothing about proofs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, AbstractSet, Any

if TYPE_CHECKING:
    from prover_cli.config import VerifyConfig


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


# What native evaluation (`native_decide`, `decide +native`, `bv_decide`) adds to `#print axioms`,
# by Lean version (read in the Lean 4 source):
# - up to Lean 4.28: the kernel evaluates `Lean.reduceBool` through the axiom `Lean.ofReduceBool`;
#   recent versions (before 4.29) show `Lean.trustCompiler` as well, the axiom `reduceBool`
#   itself rests on;
# - from Lean 4.29 (lean4#12217, `Lean.Meta.nativeEqTrue`): the tactic runs the computation and
#   adds one auxiliary axiom per computation, named `<decl>._native.<tactic>.ax_<i>_<j>` (`<decl>`
#   the declaration being elaborated, `<tactic>` `native_decide` / `decide` / `bv_decide`).
# `verify.allow_native_decide` accepts exactly these; any other unknown axiom still fails closed.
NATIVE_AXIOMS = frozenset({"Lean.ofReduceBool", "Lean.trustCompiler"})
NATIVE_AUX_AXIOM = re.compile(r"\A[^\s\[\],]+\._native\.(?:native_decide|decide|bv_decide)\.ax(?:_\d+)+\Z")


class AllowedAxioms(frozenset):
    """The axioms a verified proof may use: a set, plus the per-computation native axioms of
    Lean >= 4.29 when `native` (they are named after the declaration, so no fixed list holds them)."""

    native: bool = False

    def __new__(cls, names, native: bool = False):
        allowed = super().__new__(cls, set(names) | (NATIVE_AXIOMS if native else set()))
        allowed.native = native
        return allowed

    def __contains__(self, name: object) -> bool:
        if frozenset.__contains__(self, name):
            return True
        return self.native and isinstance(name, str) and NATIVE_AUX_AXIOM.match(name) is not None


def allowed_axioms(verify_config: VerifyConfig) -> AllowedAxioms:
    # Typed access, no coercion: `bool("false")` would allow native axioms nobody chose.
    native, names = verify_config.allow_native_decide, verify_config.allowed_axioms
    if not isinstance(native, bool) or not isinstance(names, (list, tuple, set, frozenset)) \
            or not all(isinstance(n, str) for n in names):
        raise TypeError(f"verify config has ill-typed axiom keys: allowed_axioms={names!r}, "
                        f"allow_native_decide={native!r}")
    return AllowedAxioms(names, native=native)


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


def judge_axioms(messages: list[dict[str, Any]], target: str, allowed: AbstractSet[str],
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


# --------------------------------------------------------------------------------------------
# Rule 4: Lean compares the target with the trusted statement
# --------------------------------------------------------------------------------------------

# Names of the declarations the verifier adds. They start with `_` so that Lean treats them as
# internal (`Name.isInternal`: library search, `exact?`, completion skip them); the proof cannot
# usefully name them either: `_prover_trusted` is proved by `_prover_hole`, an axiom no policy
# allows, so a proof that uses either one fails rule 5.
HOLE = "_prover_hole"
TRUSTED = "_prover_trusted"
SAME = "_prover_same"

# `#print axioms` lists axioms with `MessageData.ofConstName` on some Lean versions, which an
# `open Classical` shortens to `choice`; `pp.fullNames` keeps every name whole (and exists on
# every Lean 4 release).
PRINT_AXIOMS_OPTIONS = "set_option pp.fullNames true in\n"


def print_axioms_command(name: str) -> str:
    return f"{PRINT_AXIOMS_OPTIONS}#print axioms {name}"


def trusted_command(signature: str) -> str:
    """Declares the trusted statement as `_prover_trusted` (its binders and type as the record
    states them, elaborated in the header's environment, before any untrusted text), proved by
    the hole axiom so that no `sorry` message appears, and asks for its axioms: the answer names
    it in full, which tells the namespace the trusted header leaves open (`Ns._prover_trusted`).

    `signature` is the statement after its name, up to `:=` (statement.trusted_signature)."""
    return (f"axiom {HOLE} {{p : Prop}} : p\n\n"
            f"theorem {TRUSTED}{signature}:= {HOLE}\n\n"
            f"{print_axioms_command(TRUSTED)}")


def alias_command(namespace: str, target: str, alias: str = SAME) -> str:
    """The statement check and the axiom check in one command: Lean elaborates and the kernel
    checks `theorem _root_.<alias> : <the trusted statement's type> := <the target>`, so it holds
    exactly when the target proves the trusted statement (up to definitional equality, which is
    what a proof means), whatever the printer, binder kinds, universe names, open namespaces or
    Lean version; then `#print axioms` of the alias lists the target's axioms. Both names are
    absolute (`_root_.`), so nothing the proof declares or opens can capture them."""
    return (f"theorem _root_.{alias} : type_of% @_root_.{namespace}{TRUSTED} := @_root_.{namespace}{target}\n\n"
            f"{print_axioms_command('_root_.' + alias)}")


def read_trusted_namespace(response: Any) -> tuple[str | None, str]:
    """The namespace prefix (`""` or `"Ns."`) from the answer to `trusted_command`, or
    (None, why): a protocol error, an error message (the statement does not elaborate in its
    header), or not exactly one `#print axioms` answer naming `_prover_trusted`."""
    problem = protocol_problem(response)
    if problem:
        return None, problem
    messages = response.get("messages", [])
    errors = [m for m in messages if is_error(m)]
    if errors:
        return None, f"{_where(errors[0]).strip()} {_first_line(errors[0].get('data', ''), 300)}".strip()
    names = [p[0] for m in messages if m.get("severity") in ("info", "information")
             and (p := parse_axioms_message(m.get("data"))) is not None]
    if len(names) != 1 or not (names[0] == TRUSTED or names[0].endswith("." + TRUSTED)):
        seen = "; ".join(_first_line(m.get("data", ""), 120) for m in messages) or "no message"
        return None, f"expected one `#print axioms {TRUSTED}` answer, got: {seen}"
    return names[0][:-len(TRUSTED)], ""


def judge_alias(response: Any, target: str, allowed: AbstractSet[str], proof_messages: list[dict[str, Any]],
                alias: str = SAME) -> Verdict:
    """Rules 4-5 on the answer to `alias_command`: an error is the statement check failing (Lean
    does not accept the target as a proof of the trusted statement: another statement, another
    name, a missing target); then exactly one `#print axioms` answer naming the alias, listing
    only allowed axioms. The reason quotes what Lean answered."""
    problem = protocol_problem(response)
    if problem:
        return Verdict("error", f"statement check: {problem}", proof_messages)
    messages = response.get("messages", [])
    errors = [m for m in messages if is_error(m)]
    if errors:
        said = " | ".join(_first_line(m.get("data", ""), 400) for m in errors)
        return Verdict("rejected", f"statement check: Lean does not accept `{target}` as a proof of the trusted "
                       f"statement; Lean answered: {said}", proof_messages)
    verdict = judge_axioms([m for m in messages if not is_error(m)], alias, allowed, proof_messages)
    verdict.reason = verdict.reason.replace(f"`#print axioms {alias}`", f"`#print axioms` of `{target}`")
    return verdict
