#!/usr/bin/env python3
"""A stand-in for the Lean REPL (leanprover-community/repl) in command mode. It is NOT Lean.

What it says is grounded in recorded real output, and it refuses what it has no record of:

- **Framing and JSON** as in the REPL's own test transcripts (`../shared/lean-repl-transcripts`):
  lines up to an empty line are joined with no separator and parsed as one request; answers are
  pretty-printed JSON and an empty line; environments and proof states are numbered 0, 1, 2, …
  per process; `"env": N` for an N never returned gets `{"message": "Unknown environment."}`.
- **Messages** in the wording recorded at each Lean version (`--lean-version`, default 4.15):
  `declaration uses 'sorry'` before 4.28 and ``declaration uses `sorry` `` from 4.28;
  `unknown identifier 'x'` before 4.27 and ``Unknown identifier `x` `` from 4.27 (the first
  recorded tag with it); `#print axioms` answers `'NAME' depends on axioms: [a, b]` with the
  axioms in `Name.lt` order, or `'NAME' does not depend on any axioms`; `#check @X` prints `@X :
  TYPE` only when X's first binder is implicit or an instance (`@id : {α : Sort u_1} → α → α`),
  else `X : TYPE`; `#check X` prints the signature (`demo (P Q R : Prop) : …`, `id.{u} {α : Sort
  u} (a : α) : α`). `tests/lean_corpus/` holds the recorded transcripts these come from, and
  `tests/test_lean_corpus.py` replays every entry through this program and compares exactly.
- **Fails closed**: a command whose form has no recorded behaviour (`#eval`, `#print X`, an
  attribute, `macro`, an option it does not know, `#check` of a term, …) is answered with a
  protocol error `{"message": "fake_repl: no recorded behaviour for …"}`, never with a guess.

What it computes from the text, so that it is never kinder than Lean on the verifier's rules:
declarations (`theorem`, `lemma`, `axiom`, `def`, `abbrev`, `instance`, `class`, `structure`,
`example`) with their binders, type and the scope they were declared in (every `variable` binder
and every open namespace count: stricter than Lean); name resolution through the enclosing and
open namespaces (`_root_.X` absolute); the axioms of each declaration (declared axioms, what its
text mentions, `sorryAx` for `sorry`, the native-evaluation axioms of the version for
`native_decide`, and `propext, Classical.choice, Quot.sound` for any proof that runs a tactic
outside a small axiom-free set); and the verifier's statement check `theorem _root_.A : type_of%
@B := @C`, accepted only when C's type is B's (binder names and kinds and universe names aside),
else a type mismatch error. `#print axioms` shortens axiom names by the open namespaces unless
`pp.fullNames` is set (some Lean versions do, through `MessageData.ofConstName`; stricter).

Outcomes of tactics come from *markers*, identifiers in the command text:

    fake_error          an error message ("unsolved goals", incomplete.expected.out)
    fake_kernel_error   "(kernel) declaration has metavariables" (app_type_mismatch)
    fake_sorry, sorry   (outside strings) sorries + the sorry warning; adds sorryAx
    fake_sorry_ws       only the warning, old straight-quote style: declaration uses 'sorry'
    fake_sorry_wb       only the warning, backtick style
    fake_sorries_only   only the `sorries` list, no warning
    fake_info           a harmless info message ("Try this", mathlib/exact)
    fake_warning        a harmless warning
    fake_noenv          an answer without `env`
    fake_protocol_error {"message": "Lean error: …"} (unknown_tactic)
    fake_hang           never answers
    fake_crash          prints half a response and exits with code 3
    fake_garbage        prints text that is not JSON
    fake_mem            allocates 8 GiB (dies under an address-space limit)
    fake_axiom_NAME     the declaration's axioms include NAME (`__` stands for `.`)
    fake_no_axioms      the declaration uses no axioms
    fake_axioms_garbled / _silent / _twice / _other / _error   `#print axioms` of a declaration
                        that depends on this one is unparseable / missing / doubled / about
                        `Other.NAME` / an error
    fake_header_error / fake_header_hang / fake_header_crash   the same, in an `import` command

Options: --delay S (sleep before each non-import answer), --header-delay S (before import
commands), --log PATH (append one JSON line per start and per request: pid, kind, cmd),
--spawn-child (run the REPL in a child process and wait for it, like `lake env repl`),
--hold TEXT PATH (a command whose text contains TEXT is logged, then not answered until PATH
exists: a test decides when, instead of racing a --delay; may be given more than once),
--lean-version X.Y (see above; native_decide adds `Lean.ofReduceBool` before 4.20, also
`Lean.trustCompiler` from 4.20 (the stand-in's cut-off), `NAME._native.native_decide.ax_1_1`
from 4.29), --quirk NAME (behave wrongly on one rule, to test the canary: `sorry-invisible`,
`check-ignores-context` (the statement check accepts any type), `native-axiom-renamed`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace

STANDARD_AXIOMS = ("propext", "Classical.choice", "Quot.sound")

# Responses copied verbatim from the transcripts (file, index of the response in it).
CANNED = {
    "error": ("incomplete.expected.out", 0, {"messages": [
        {"severity": "error", "pos": {"line": 1, "column": 15}, "endPos": {"line": 1, "column": 32},
         "data": "unsolved goals\n⊢ Nat"}], "env": 0}),
    "kernel_error": ("app_type_mismatch.expected.out", 0, {"messages": [
        {"severity": "error", "pos": {"line": 1, "column": 0}, "endPos": {"line": 1, "column": 7},
         "data": "(kernel) declaration has metavariables '_example'"}], "env": 0}),
    "sorry": ("tactic_sorry.expected.out", 0, {
        "sorries": [{"proofState": 0, "pos": {"line": 1, "column": 18}, "goal": "⊢ Nat",
                     "endPos": {"line": 1, "column": 23}}],
        "messages": [{"severity": "warning", "pos": {"line": 1, "column": 4},
                      "endPos": {"line": 1, "column": 5}, "data": "declaration uses `sorry`"}],
        "env": 0}),
    "info": ("mathlib/exact.expected.out", 2, {
        "proofStatus": "Completed", "proofState": 1,
        "messages": [{"severity": "info", "pos": {"line": 0, "column": 0}, "endPos": {"line": 0, "column": 0},
                      "data": "Try this:\n  [apply] exact Nat.one_pos"}],
        "goals": []}),
    "protocol_error": ("unknown_tactic.expected.out", 1, {"message": "Lean error:\n<input>:1:1: unknown tactic"}),
    "unknown_env": ("unknown_environment.expected.out", 0, {"message": "Unknown environment."}),
    "unknown_proof_state": ("unknown_proof_state.expected.out", 1, {"message": "Unknown proof state."}),
}

MARKER = re.compile(r"\bfake_[A-Za-z0-9_.]+")
IDENT_CHARS = r"A-Za-z0-9_'!?\u0370-\u03ff\u1f00-\u1fff\u2100-\u214f\u2080-\u209c\u1d62-\u1d6a"
IDENT = re.compile(rf"(?:_root_\.)?(?:«[^»]*»|[A-Za-z_\u0370-\u03ff\u1f00-\u1fff\u2100-\u214f][{IDENT_CHARS}]*)"
                   rf"(?:\.(?:«[^»]*»|[A-Za-z_\u0370-\u03ff\u1f00-\u1fff\u2100-\u214f][{IDENT_CHARS}]*))*")
NATIVE = re.compile(r"\bnative_decide\b|\bdecide\s*\+native\b|\bnative\s*:=\s*true\b")
SORRY = re.compile(r"(?<![A-Za-z0-9_.'])sorry(?![A-Za-z0-9_'!?])")
DECL_KEYWORDS = ("theorem", "lemma", "axiom", "def", "abbrev", "example", "instance", "class", "structure")
MODIFIERS = ("noncomputable", "private", "protected")
SCOPE_KEYWORDS = ("open", "namespace", "section", "end", "variable", "variables", "universe", "set_option", "import")
# Options whose `set_option` the stand-in has seen answered (headers, transcripts, the verifier).
KNOWN_OPTIONS = frozenset({
    "maxHeartbeats", "maxRecDepth", "synthInstance.maxHeartbeats", "synthInstance.maxSize",
    "maxSynthPendingDepth", "exponentiation.threshold", "pp.fullNames", "pp.universes",
    "autoImplicit", "relaxedAutoImplicit", "linter.unusedVariables",
})
# Tactics and term words a proof can consist of without using propext/choice/Quot.sound.
AXIOM_FREE = frozenset({"by", "sorry", "rfl", "decide", "trivial", "exact", "native_decide", "intro",
                        "fun", "elim", "True.intro", "id", "assumption", "done"})
BRACKETS = {"(": ")", "{": "}", "[": "]", "⦃": "⦄", "⟨": "⟩"}


# --------------------------------------------------------------------------------------------
# Text: comments and strings blanked (same offsets), positions
# --------------------------------------------------------------------------------------------

def blank(text: str) -> str:
    """`text` with comments and the contents of string literals replaced by spaces (newlines
    kept), so that offsets stay those of the original."""
    out, i, n = list(text), 0, len(text)

    def clear(a: int, b: int) -> None:
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "
    while i < n:
        if text.startswith("--", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            clear(i, j)
            i = j
        elif text.startswith("/-", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/-", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("-/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            clear(i, j)
            i = j
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            clear(i + 1, min(j, n))
            i = j + 1
        else:
            i += 1
    return "".join(out)


def position(text: str, offset: int) -> dict:
    line = text.count("\n", 0, offset) + 1
    return {"line": line, "column": offset - (text.rfind("\n", 0, offset) + 1)}


def message(severity: str, text: str, start: int, end: int, data: str) -> dict:
    return {"severity": severity, "pos": position(text, start), "endPos": position(text, end), "data": data}


def matching(text: str, i: int) -> int:
    """Offset just after the bracket group opening at `i` (nesting of all bracket kinds)."""
    stack = []
    for k in range(i, len(text)):
        ch = text[k]
        if ch in BRACKETS:
            stack.append(BRACKETS[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
            if not stack:
                return k + 1
    return len(text)


def top_level_find(text: str, needle: str, start: int = 0) -> int:
    """The first `needle` at bracket depth 0 from `start`, or -1."""
    depth = 0
    k = start
    while k < len(text):
        ch = text[k]
        if ch in BRACKETS:
            depth += 1
        elif ch in BRACKETS.values():
            depth -= 1
        elif depth == 0 and text.startswith(needle, k):
            return k
        k += 1
    return -1


def top_level_colon(text: str) -> int:
    """The first `:` at bracket depth 0 that is not part of `:=`, or -1."""
    k = top_level_find(text, ":")
    while k >= 0 and text.startswith(":=", k):
        k = top_level_find(text, ":", k + 2)
    return k


def squash(text: str) -> str:
    return " ".join(text.split())


def name_key(name: str) -> tuple:
    """Lean's `Name.lt`: the prefix first (so fewer components come first), then the last part."""
    parts = name.split(".")
    return (len(parts), parts)


# --------------------------------------------------------------------------------------------
# Scopes and declarations
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Scope:
    """Namespaces and sections, with their variables, open namespaces and options."""

    frames: tuple = (("root", "", (), (), ()),)   # (kind, name, variables, opens, options)

    def _top(self, index: int, value) -> "Scope":
        frame = list(self.frames[-1])
        frame[index] = frame[index] + tuple(value)
        return Scope(self.frames[:-1] + (tuple(frame),))

    def with_variables(self, binders) -> "Scope":
        return self._top(2, binders)

    def with_opens(self, names) -> "Scope":
        return self._top(3, names)

    def with_options(self, options) -> "Scope":
        return self._top(4, options)

    def push(self, kind: str, name: str) -> "Scope":
        return Scope(self.frames + ((kind, name, (), (), ()),))

    def pop(self) -> "Scope":
        return Scope(self.frames[:-1]) if len(self.frames) > 1 else self

    @property
    def namespaces(self) -> tuple:
        return tuple(p for kind, name, *_ in self.frames if kind == "namespace" for p in name.split("."))

    def qualify(self, name: str) -> str:
        if name.startswith("_root_."):
            return name[len("_root_."):]
        return ".".join(self.namespaces + (name,))

    @property
    def variables(self) -> tuple:
        return tuple(v for f in self.frames for v in f[2])

    @property
    def opens(self) -> tuple:
        return tuple(o for f in self.frames for o in f[3])

    def option(self, name: str) -> str | None:
        value = None
        for f in self.frames:
            for key, val in f[4]:
                if key == name:
                    value = val
        return value


@dataclass(frozen=True)
class Binder:
    bracket: str            # "(", "{", "[", "⦃"
    names: tuple            # () for an anonymous instance binder
    type: str


@dataclass
class Decl:
    kind: str
    name: str                               # full name
    universes: tuple = ()                   # declared `.{u, v}`
    binders: tuple = ()
    type: str = ""
    markers: frozenset = frozenset()
    axioms: frozenset = frozenset()
    scope: Scope = field(default_factory=Scope)
    is_prop: bool = True

    def canonical(self) -> tuple:
        """What the statement check compares: binder types and the type, with universe names in
        order of appearance, and the scope's variables and open namespaces (stricter than Lean);
        binder names and kinds aside (Lean's `isDefEq` ignores them)."""
        types = [b.type for b in self.binders for _ in (b.names or ("",))]
        text = " ∀ ".join(squash(t) for t in [*map(lambda v: v.type, self.scope.variables), *types, self.type])
        return (rename_universes(text, self.universes), frozenset(self.scope.opens))


def rename_universes(text: str, declared: tuple = ()) -> str:
    """`Type*`/`Sort*`/`Type _` get fresh names and every universe is renamed u_1, u_2, … in order
    of appearance (what `#check @X` shows, and what makes two statements equal up to names)."""
    counter = iter(range(1, 1000))
    names: dict[str, str] = {}

    def fresh(_match) -> str:
        return f"{_match.group(1)} u_{next(counter)}"

    text = re.sub(r"\b(Type|Sort)\s*(?:\*|_(?![\w']))", fresh, text)

    def named(match) -> str:
        u = match.group(2)
        if u.startswith("u_") and u[2:].isdigit():
            return match.group(0)
        if u not in names:
            names[u] = f"u_{next(counter)}"
        return f"{match.group(1)} {names[u]}"

    return re.sub(r"\b(Type|Sort) ([A-Za-z_][\w']*)", named, text)


def parse_binders(sig: str) -> tuple[tuple, str] | None:
    """`(a b : T) {c : U} [C a] : V` -> (binders, "V"); None when the form is not one we model."""
    binders, i = [], 0
    while True:
        while i < len(sig) and sig[i] in " \t\r\n":
            i += 1
        if i < len(sig) and sig[i] in "({[⦃":
            end = matching(sig, i)
            inner = sig[i + 1:end - 1]
            colon = top_level_colon(inner)
            if colon < 0:
                if sig[i] != "[":
                    return None
                binders.append(Binder("[", (), squash(inner)))
            else:
                binders.append(Binder(sig[i], tuple(inner[:colon].split()), squash(inner[colon + 1:])))
            i = end
            continue
        break
    rest = sig[i:].strip()
    if rest.startswith(":"):
        return tuple(binders), squash(rest[1:])
    if rest == "":
        return tuple(binders), ""
    return None


def occurs(name: str, text: str) -> bool:
    return re.search(rf"(?<![\w.']){re.escape(name)}(?![\w'])", text) is not None


def group(binders: list) -> list:
    """Consecutive binders of the same kind and type, as Lean prints them: `(n m : ℕ)`."""
    out = []
    for bracket, name, type_ in binders:
        if out and out[-1][0] == bracket and out[-1][2] == type_ and bracket != "[":
            out[-1][1].append(name)
        else:
            out.append([bracket, [name], type_])
    return out


def close(bracket: str) -> str:
    return BRACKETS[bracket]


def check_at_printout(decl: Decl, universes_shown: bool) -> str:
    """`#check @X` (the term path of `elabCheckCore`): `@X : T` when the first parameter is
    implicit or an instance, `X : T` otherwise; T with `∀` for a proposition, `→` for a type."""
    variables = [b for b in decl.scope.variables]
    flat = [(b.bracket, n, b.type) for b in variables + list(decl.binders) for n in (b.names or ("inst",))]
    at = "@" if flat and flat[0][0] in "{[⦃" else ""
    levels = re.findall(r"u_\d+", rename_universes(" ".join(t for _, _, t in flat) + " " + decl.type,
                                                  decl.universes))
    levels = list(dict.fromkeys(levels))
    name = decl.name + (f".{{{', '.join(levels)}}}" if universes_shown and levels else "")
    parts, rest_types = [], [t for _, _, t in flat] + [decl.type]
    if decl.is_prop:
        pending = []
        for k, (bracket, n, type_) in enumerate(flat):
            later = " ".join(t for _, _, t in flat[k + 1:]) + " " + decl.type
            if bracket == "(" and not occurs(n, later):
                if pending:
                    parts.append("∀ " + " ".join(f"{b}{' '.join(ns)} : {t}{close(b)}" for b, ns, t in group(pending))
                                 + ",")
                    pending = []
                parts.append(f"{type_} →")
            else:
                pending.append((bracket, n, type_))
        if pending:
            parts.append("∀ " + " ".join(f"{b}{' '.join(ns)} : {t}{close(b)}" for b, ns, t in group(pending)) + ",")
        type_text = " ".join(parts + [decl.type])
    else:
        k = 0
        for bracket, ns, type_ in group([(b, n, t) for b, n, t in flat]):
            later = " ".join(rest_types[k + len(ns):])
            k += len(ns)
            if bracket == "(" and not any(occurs(n, later) for n in ns):
                parts.extend(f"{type_} →" for _ in ns)
            else:
                parts.append(f"{bracket}{' '.join(ns)} : {type_}{close(bracket)} →")
        type_text = " ".join(parts + [decl.type])
    return f"{at}{name} : {rename_universes(type_text, decl.universes)}"


def check_signature(decl: Decl) -> str:
    """`#check X` for an identifier: the signature, with the declaration's own universe names
    (`.{u}` written, or auto-bound from `Sort u`; `Type*` gets `u_1`)."""
    text = " ".join(b.type for b in decl.binders) + " " + decl.type
    text = re.sub(r"\b(Type|Sort)\s*\*", lambda m, c=iter(range(1, 99)): f"{m.group(1)} u_{next(c)}", text)
    levels = decl.universes or tuple(dict.fromkeys(re.findall(r"\b(?:Type|Sort) ([A-Za-z_][\w']*)", text)))
    binders = " ".join(f"{b.bracket}{' '.join(b.names) + ' : ' if b.names else ''}{b.type}{close(b.bracket)}"
                       for b in decl.binders)
    name = decl.name + (f".{{{', '.join(levels)}}}" if levels else "")
    return f"{name}{' ' + binders if binders else ''} : {decl.type}"


# --------------------------------------------------------------------------------------------
# The REPL
# --------------------------------------------------------------------------------------------

class Refused(Exception):
    """A command form with no recorded behaviour: answered with a protocol error."""


class FakeRepl:
    def __init__(self, delay_s: float, header_delay_s: float, log_path: str | None,
                 lean_version: tuple[int, int] = (4, 15), quirks: set[str] = frozenset(),
                 holds: tuple[tuple[str, str], ...] = ()):
        self.lean_version = lean_version
        self.holds = tuple(holds)
        self.quirks = set(quirks)
        self.delay_s = delay_s
        self.header_delay_s = header_delay_s
        self.log_path = log_path
        # env -> (parent env or None, {full name: Decl}, scope after the command)
        self.envs: dict[int, tuple[int | None, dict, Scope]] = {}
        self.proof_states = 0
        self.log({"event": "start", "ppid": os.getppid()})

    def log(self, entry: dict) -> None:
        if self.log_path:
            with open(self.log_path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"pid": os.getpid(), **entry}) + "\n")

    # -- wording by version (recorded in the transcripts by tag) ---------------------------------
    def sorry_warning(self) -> str:
        return "declaration uses `sorry`" if self.lean_version >= (4, 28) else "declaration uses 'sorry'"

    def unknown_identifier(self, name: str) -> str:
        return f"Unknown identifier `{name}`" if self.lean_version >= (4, 27) else f"unknown identifier '{name}'"

    # -- one request ---------------------------------------------------------------------------
    def answer(self, text: str) -> dict | None:
        try:
            request = json.loads(text)
        except json.JSONDecodeError as exc:
            return {"message": f"fake_repl: could not parse the request as JSON: {exc}"}
        if not isinstance(request, dict):
            return {"message": "fake_repl: the request is not a JSON object"}
        if "cmd" not in request:
            self.log({"kind": "other"})
            if "tactic" in request:
                return canned("unknown_proof_state")
            return {"message": "fake_repl: only command mode is implemented"}
        cmd = str(request["cmd"])
        parent = request.get("env")
        is_header = bool(re.match(r"\s*import\s", blank(cmd)))
        # for the tests' log: the verifier's own commands by their form (rules.trusted_command,
        # rules.alias_command), anything else is "cmd"
        kind = ("header" if is_header else "trusted" if re.search(r"\btheorem _prover_trusted\b", cmd)
                else "alias" if "type_of%" in cmd else "check" if "#check" in cmd
                else "axioms" if cmd.lstrip().startswith(("#print axioms", "set_option pp.fullNames")) else "cmd")
        self.log({"kind": kind, "env": parent, "cmd": cmd})
        if parent is not None and parent not in self.envs:
            return canned("unknown_env")
        markers = set(MARKER.findall(cmd))
        time.sleep(self.header_delay_s if is_header else self.delay_s)
        for text, gate in self.holds:
            while text in cmd and not os.path.exists(gate):
                time.sleep(0.01)
        prefix = "fake_header_" if is_header else "fake_"
        if prefix + "hang" in markers:
            while True:
                time.sleep(3600)
        if prefix + "crash" in markers:
            sys.stdout.write('{"messages":\n [{"severity": "error",\n')
            sys.stdout.flush()
            os._exit(3)
        if "fake_garbage" in markers:
            sys.stdout.write("PANIC at Lean.Elab fake_garbage: this is not JSON\n\n")
            sys.stdout.flush()
            return None
        if "fake_mem" in markers:
            hog = bytearray(8 << 30)  # MemoryError under RLIMIT_AS -> traceback on stderr, exit 1
            del hog
        if "fake_protocol_error" in markers:
            return canned("protocol_error")
        try:
            return Command(self, cmd, parent, markers, is_header).run()
        except Refused as exc:
            return {"message": f"fake_repl: no recorded behaviour for {exc} (the stand-in fails closed)"}

    # -- names -----------------------------------------------------------------------------------
    def lookup(self, name: str, env: int | None, declared: dict) -> Decl | None:
        if name in declared:
            return declared[name]
        while env is not None:
            parent, names, _ = self.envs[env]
            if name in names:
                return names[name]
            env = parent
        return None

    def resolve(self, name: str, env: int | None, declared: dict, scope: Scope) -> Decl | None:
        """Lean's name resolution, roughly: the enclosing namespaces (innermost first), the open
        namespaces, then the root; `_root_.X` is absolute. Ambiguity is not modelled."""
        name = name.lstrip("@")
        if name.startswith("_root_."):
            candidates = [name[len("_root_."):]]
        else:
            ns = scope.namespaces
            candidates = [".".join(ns[:k] + (name,)) for k in range(len(ns), 0, -1)]
            candidates += [f"{o}.{name}" for o in scope.opens] + [name]
        for candidate in candidates:
            decl = self.lookup(candidate, env, declared)
            if decl is not None:
                return decl
        return None

    def native_axioms(self, qual: str) -> set[str]:
        """What native evaluation adds, by Lean version (rules.NATIVE_AXIOMS; the 4.20 cut-off for
        `Lean.trustCompiler` is the stand-in's approximation)."""
        if "native-axiom-renamed" in self.quirks:   # a future Lean that names them otherwise
            return {f"{qual}._native_v2.native_decide.axiom_1"}
        if self.lean_version >= (4, 29):
            return {f"{qual}._native.native_decide.ax_1_1"}
        if self.lean_version >= (4, 20):
            return {"Lean.ofReduceBool", "Lean.trustCompiler"}
        return {"Lean.ofReduceBool"}

    # -- the loop: the REPL's framing -----------------------------------------------------------
    def serve(self) -> None:
        for text in requests(sys.stdin):
            self.reply(text)

    def reply(self, text: str) -> None:
        response = self.answer(text)
        if response is not None:
            sys.stdout.write(json.dumps(response, ensure_ascii=False, indent=1) + "\n\n")
            sys.stdout.flush()


def canned(name: str) -> dict:
    return json.loads(json.dumps(CANNED[name][2]))  # a fresh copy


class Command:
    """One `{"cmd": …}`: split into Lean commands, each elaborated in order."""

    def __init__(self, repl: FakeRepl, text: str, parent: int | None, markers: set[str], is_header: bool):
        self.repl, self.text, self.parent, self.markers, self.is_header = repl, text, parent, markers, is_header
        self.code = blank(text)
        self.scope = repl.envs[parent][2] if parent is not None else Scope()
        self.declared: dict[str, Decl] = {}
        self.messages: list[dict] = []
        self.sorries: list[dict] = []

    # -- splitting ---------------------------------------------------------------------------
    def commands(self) -> list[tuple[int, int]]:
        """(start, end) of each command: a line whose first token is a command keyword starts one
        (at any indentation: Lean ends a tactic block at a keyword it cannot continue with),
        except an indented `open … in` / `set_option … in`, which are tactics."""
        starts = []
        for match in re.finditer(r"(?m)^([ \t]*)(\S+)", self.code):
            word = re.match(r"#?[\w.'?!]+|@\[", match.group(2))
            word = word.group(0) if word else match.group(2)[:1]
            line_end = self.code.find("\n", match.start())
            line = self.code[match.start():line_end if line_end >= 0 else len(self.code)]
            indented = bool(match.group(1))
            tactic_form = word in ("open", "set_option") and indented and line.rstrip().endswith(" in")
            keyword = word in DECL_KEYWORDS + SCOPE_KEYWORDS + MODIFIERS and not tactic_form
            if word.startswith("#") or word == "@[" or keyword or (not indented and self._is_unknown_command(word)):
                starts.append(match.start(2))
        starts = starts or [0]
        bounds = starts + [len(self.code)]
        return [(bounds[k], bounds[k + 1]) for k in range(len(starts))]

    @staticmethod
    def _is_unknown_command(word: str) -> bool:
        """A column-0 word that Lean would read as a command we do not model (`macro`, `syntax`,
        `attribute`, `elab`, …); other column-0 words are left to the declaration before them."""
        return word in ("attribute", "macro", "macro_rules", "syntax", "elab", "elab_rules", "notation",
                        "infix", "infixl", "infixr", "prefix", "postfix", "initialize", "mutual", "inductive",
                        "opaque", "deriving", "export", "omit", "include", "run_cmd", "local", "scoped")

    # -- elaboration ---------------------------------------------------------------------------
    def run(self) -> dict:
        pending_opens: tuple = ()
        pending_options: tuple = ()
        pending_variables: tuple = ()
        for start, end in self.commands():
            chunk = self.code[start:end]
            word = re.match(r"#?[\w.'?!]+|@\[|\S", chunk.lstrip())
            word = word.group(0) if word else ""
            if not chunk.strip():
                continue
            if word == "import":
                if not self.is_header or self.parent is not None:
                    raise Refused("`import` in a command that runs in an environment")
                continue
            if word == "open" or word == "set_option":
                words = chunk.split()
                local = words[-1:] == ["in"]
                if word == "open":
                    names = tuple(w for w in words[1:] if w not in ("in", "scoped"))
                    if local:
                        pending_opens += names
                    else:
                        self.scope = self.scope.with_opens(names)
                else:
                    if len(words) < 3 or words[1] not in KNOWN_OPTIONS:
                        raise Refused(f"`set_option {words[1] if len(words) > 1 else ''}`")
                    if local:
                        pending_options += ((words[1], words[2]),)
                    else:
                        self.scope = self.scope.with_options(((words[1], words[2]),))
                continue
            scope = self.scope
            if pending_opens:
                scope = scope.with_opens(pending_opens)
            if pending_options:
                scope = scope.with_options(pending_options)
            if pending_variables:
                scope = scope.with_variables(pending_variables)
            pending_opens, pending_options, pending_variables = (), (), ()
            if word in ("namespace", "section"):
                self.scope = self.scope.push(word, " ".join(chunk.split()[1:2]))
            elif word == "noncomputable" and chunk.split()[1:2] == ["section"]:
                self.scope = self.scope.push("section", " ".join(chunk.split()[2:3]))
            elif word == "end":
                self.scope = self.scope.pop()
            elif word in ("variable", "variables"):
                local = chunk.split()[-1] == "in"
                binders = chunk.strip()[len(word):]
                parsed = parse_binders(binders[:-2] if local else binders)
                if parsed is None:
                    raise Refused(f"`{squash(chunk)[:60]}`")
                if local:
                    pending_variables = parsed[0]
                else:
                    self.scope = self.scope.with_variables(parsed[0])
            elif word == "universe":
                pass
            elif word in DECL_KEYWORDS or word in MODIFIERS:
                self.declaration(start, end, scope)
            elif word == "#print" and chunk.split()[1:2] == ["axioms"] and len(chunk.split()) == 3:
                self.print_axioms(chunk.split()[2], start, scope)
            elif word == "#check" and len(chunk.split()) == 2 and IDENT.fullmatch(chunk.split()[1].lstrip("@")):
                self.check(chunk.split()[1], start, scope)
            else:
                raise Refused(f"`{squash(chunk)[:60]}`")
        response: dict = {}
        if self.is_header and "fake_header_error" in self.markers or not self.is_header and "fake_error" in self.markers:
            self.messages += canned("error")["messages"]
        if "fake_kernel_error" in self.markers:
            self.messages += canned("kernel_error")["messages"]
        if "fake_sorry_ws" in self.markers:
            self.messages.append(dict(canned("sorry")["messages"][0], data="declaration uses 'sorry'"))
        if "fake_sorry_wb" in self.markers:
            self.messages.append(canned("sorry")["messages"][0])
        if "fake_sorries_only" in self.markers:
            self.sorries += canned("sorry")["sorries"]
        if "fake_info" in self.markers:
            self.messages += canned("info")["messages"]
        if "fake_warning" in self.markers:
            self.messages.append({"severity": "warning", "pos": {"line": 1, "column": 4},
                                  "endPos": {"line": 1, "column": 5}, "data": "unused variable `h`\nnote: fake_repl"})
        if self.sorries:
            response["sorries"] = self.sorries
        if self.messages:
            response["messages"] = self.messages
        if "fake_noenv" in self.markers:
            return response
        env = len(self.repl.envs)
        self.repl.envs[env] = (self.parent, self.declared, self.scope)
        response["env"] = env
        return response

    def _proof_state(self) -> int:
        self.repl.proof_states += 1
        return self.repl.proof_states - 1

    def declaration(self, start: int, end: int, scope: Scope) -> None:
        code = self.code[start:end]
        head = re.match(rf"((?:(?:{'|'.join(MODIFIERS)})\s+)*)({'|'.join(DECL_KEYWORDS)})\b\s*", code)
        if head is None:
            raise Refused(f"`{squash(code)[:60]}`")
        kind = head.group(2)
        i = head.end()
        name_match = IDENT.match(code, i) if kind not in ("example",) else None
        if kind == "instance" and name_match is not None and code[name_match.end():].lstrip()[:1] not in (":", "(", "{", "[", "⦃"):
            name_match = None
        name = name_match.group(0) if name_match else f"_{kind}"
        name_start = start + (name_match.start() if name_match else head.start(2))
        name_end = start + (name_match.end() if name_match else head.end(2))
        i = name_match.end() if name_match else i
        universes: tuple = ()
        if code.startswith(".{", i):
            close_at = code.index("}", i)
            universes = tuple(u.strip() for u in code[i + 2:close_at].split(","))
            i = close_at + 1
        if kind in ("class", "structure"):
            where = top_level_find(code, " where", i)
            sig_end = where if where >= 0 else len(code)
            value = code[sig_end:]
        else:
            assign = top_level_find(code, ":=", i)
            sig_end = assign if assign >= 0 else len(code)
            value = code[assign + 2:] if assign >= 0 else ""
        signature = code[i:sig_end]
        qual = scope.qualify(name)
        markers = frozenset(self.markers)
        alias = re.fullmatch(r"\s*:\s*type_of%\s*@?(\S+)\s*", signature)
        if alias:
            self.alias(kind, qual, alias.group(1), value, start + sig_end + 2, start + end, markers, scope,
                       name_start, name_end)
            return
        parsed = parse_binders(signature)
        if parsed is None:
            raise Refused(f"the signature `{squash(signature)[:60]}`")
        binders, type_text = parsed
        if kind == "def" and not type_text and re.fullmatch(r"\s*\d+\s*", value):
            type_text = "Nat"
        is_prop = kind in ("theorem", "lemma") or (kind == "axiom" and not re.fullmatch(r"Type.*|Sort.*", type_text)
                                                   and bool(binders or re.search(r"[=≠<≤→∀∃]|\bFalse\b|\bTrue\b|^\w+$",
                                                                                 type_text)) and type_text != "Type")
        if kind == "axiom" and re.fullmatch(r"[A-Z]\w*", type_text) and type_text not in ("False", "True"):
            is_prop = False
        decl = Decl(kind, qual, universes, binders, type_text, markers, frozenset(), scope, is_prop)
        decl.axioms = frozenset(self.axioms_of(decl, signature, value))
        self.sorry_messages(decl, value, start + (len(code) - len(value)), name_start, name_end)
        self.declared[qual] = decl

    def axioms_of(self, decl: Decl, signature: str, value: str) -> set[str]:
        """What `#print axioms` lists for a declaration (see the module docstring)."""
        axioms: set[str] = set()
        if decl.kind == "axiom":
            axioms.add(decl.name)
        mentioned = set(IDENT.findall(signature + " " + value))
        for ident in mentioned:
            used = self.repl.resolve(ident, self.parent, self.declared, decl.scope)
            if used is not None and used is not decl:
                axioms |= used.axioms
        if (SORRY.search(value) or "fake_sorry" in decl.markers) and "sorry-invisible" not in self.repl.quirks:
            axioms.add("sorryAx")
        if NATIVE.search(value):
            axioms |= self.repl.native_axioms(decl.name)
        bound = {n for b in decl.scope.variables + decl.binders for n in b.names}
        words = set(re.findall(r"[A-Za-z_][\w.'!?]*", value)) - {"by"}
        tactics = {w for w in words if self.repl.resolve(w, self.parent, self.declared, decl.scope) is None
                   and not w.startswith("fake_") and w.split(".")[0] not in bound}
        runs_tactics = value.strip().startswith("by") and bool(tactics - AXIOM_FREE)
        if runs_tactics and "fake_no_axioms" not in decl.markers and decl.kind not in ("axiom", "class", "structure"):
            axioms |= set(STANDARD_AXIOMS)
        axioms |= {m[len("fake_axiom_"):].replace("__", ".") for m in decl.markers if m.startswith("fake_axiom_")}
        if "fake_no_axioms" in decl.markers:
            axioms -= set(STANDARD_AXIOMS)
        return axioms

    def sorry_messages(self, decl: Decl, value: str, value_offset: int, name_start: int, name_end: int) -> None:
        if "sorry-invisible" in self.repl.quirks:
            return
        found = list(SORRY.finditer(value)) + list(re.finditer(r"\bfake_sorry\b", value))
        for match in found:
            a, b = value_offset + match.start(), value_offset + match.end()
            self.sorries.append({"proofState": self._proof_state(), "pos": position(self.text, a),
                                 "goal": self.goal(decl), "endPos": position(self.text, b)})
        if found:
            self.messages.append(message("warning", self.text, name_start, name_end, self.repl.sorry_warning()))

    def goal(self, decl: Decl) -> str:
        hyps = [(n, b.type) for b in decl.scope.variables + decl.binders for n in (b.names or ("inst✝",))]
        lines, k = [], 0
        while k < len(hyps):
            names, type_ = [hyps[k][0]], hyps[k][1]
            while k + 1 < len(hyps) and hyps[k + 1][1] == type_:
                k += 1
                names.append(hyps[k][0])
            lines.append(f"{' '.join(names)} : {type_}")
            k += 1
        return "\n".join(lines + [f"⊢ {decl.type}"])

    def alias(self, kind: str, qual: str, source: str, value: str, value_start: int, end: int, markers, scope,
              name_start: int, name_end: int) -> None:
        """`theorem A : type_of% @B := @C`: A gets B's type; C must have it (else a type mismatch
        error, and A is added with `sorryAx`, as Lean's error recovery does)."""
        expected = self.repl.resolve(source, self.parent, self.declared, scope)
        term = value.strip()
        if expected is None:
            self._error(value_start - 2, value_start - 2, self.repl.unknown_identifier(source.lstrip("@")))
            self.declared[qual] = Decl(kind, qual, markers=markers, axioms=frozenset({"sorryAx"}), scope=scope)
            return
        offset = value_start + (len(value) - len(value.lstrip()))
        decl = replace(expected, kind=kind, name=qual, markers=markers, scope=expected.scope)
        if not re.fullmatch(r"@?\S+", term):
            raise Refused(f"the alias value `{term[:60]}`")
        proof = self.repl.resolve(term, self.parent, self.declared, scope)
        if proof is None:
            self._error(offset, offset + len(term), self.repl.unknown_identifier(term.lstrip("@")))
            decl.axioms = frozenset({"sorryAx"})
        elif proof.canonical() != expected.canonical() and "check-ignores-context" not in self.repl.quirks:
            self._error(offset, offset + len(term),
                        f"type mismatch\n  {term}\nhas type\n  {type_only(proof)} : Prop\nbut is expected to have "
                        f"type\n  {type_only(expected)} : Prop")
            decl.axioms = frozenset({"sorryAx"})
        else:
            decl.axioms = proof.axioms
            decl.markers = proof.markers | markers
        self.declared[qual] = decl

    def _error(self, start: int, end: int, data: str) -> None:
        self.messages.append(message("error", self.text, start, end, data))

    def print_axioms(self, name: str, start: int, scope: Scope) -> None:
        decl = self.repl.resolve(name, self.parent, self.declared, scope)
        if decl is None:
            self._error(start, start + 6, f"unknown constant '{name.removeprefix('_root_.')}'")
            return
        markers = decl.markers
        if "fake_axioms_silent" in markers:
            return
        if "fake_axioms_error" in markers:
            self._error(start, start + 6, "fake_repl: #print axioms failed")
            return
        if "fake_axioms_garbled" in markers:
            self.messages.append(message("info", self.text, start, start + 6, f"'{decl.name}' depends on axioms: propext"))
            return
        shown = f"Other.{decl.name}" if "fake_axioms_other" in markers else decl.name
        full = scope.option("pp.fullNames") == "true"
        names = []
        for axiom in sorted(decl.axioms, key=name_key):
            short = axiom
            if not full:   # `MessageData.ofConstName` on some versions: shortened by open namespaces
                for o in scope.opens:
                    if axiom.startswith(o + ".") and axiom != o + ".":
                        short = axiom[len(o) + 1:]
            names.append(short)
        data = (f"'{shown}' depends on axioms: [{', '.join(names)}]" if names
                else f"'{shown}' does not depend on any axioms")
        answer = message("info", self.text, start, start + 6, data)
        self.messages.extend([answer, dict(answer)] if "fake_axioms_twice" in markers else [answer])

    def check(self, term: str, start: int, scope: Scope) -> None:
        decl = self.repl.resolve(term, self.parent, self.declared, scope)
        if decl is None:
            at = start + self.code[start:].index(term.lstrip("@"))
            bare = term.lstrip("@")
            self._error(at, at + len(bare), self.repl.unknown_identifier(bare))
            return
        if term.startswith("@"):
            data = check_at_printout(decl, scope.option("pp.universes") == "true")
        else:
            data = check_signature(decl)
        self.messages.append(message("info", self.text, start, start + 6, data))


def type_only(decl: Decl) -> str:
    return check_at_printout(decl, False).split(" : ", 1)[1]


def requests(stream):
    """The REPL's framing: lines up to a blank line, joined with no separator, are one request
    (the REPL also answers a last request that has no blank line after it)."""
    lines: list[str] = []
    for raw in stream:
        line = raw.rstrip("\n")
        if line.strip():
            lines.append(line)
            continue
        if lines:
            yield "".join(lines)
            lines = []
    if lines:
        yield "".join(lines)


def main(argv: list[str]) -> int:
    delay_s = header_delay_s = 0.0
    log_path = None
    lean_version = (4, 15)
    quirks: set[str] = set()
    spawn_child = False
    holds: list[tuple[str, str]] = []
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--delay":
            delay_s = float(args.pop(0))
        elif arg == "--header-delay":
            header_delay_s = float(args.pop(0))
        elif arg == "--log":
            log_path = args.pop(0)
        elif arg == "--spawn-child":
            spawn_child = True
        elif arg == "--hold":
            holds.append((args.pop(0), args.pop(0)))
        elif arg == "--quirk":
            quirks.add(args.pop(0))
        elif arg == "--lean-version":
            lean_version = tuple(int(x) for x in args.pop(0).lstrip("v").split(".")[:2])
        else:
            print(f"fake_repl: unknown argument {arg!r}", file=sys.stderr)
            return 2
    if spawn_child:
        child_args = [a for a in argv if a != "--spawn-child"]
        child = subprocess.Popen([sys.executable, os.path.abspath(__file__), *child_args])
        if log_path:
            with open(log_path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"pid": os.getpid(), "event": "spawned", "child": child.pid}) + "\n")
        return child.wait()
    FakeRepl(delay_s, header_delay_s, log_path, lean_version, quirks, holds).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
