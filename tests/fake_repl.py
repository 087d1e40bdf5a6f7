#!/usr/bin/env python3
"""A stand-in for the Lean REPL (leanprover-community/repl) in command mode. It is NOT Lean.

It speaks the REPL's real framing, as recorded in ../shared/lean-repl-transcripts: it reads lines
until an empty line and joins them with no separator, parses that as one JSON request, and writes
pretty-printed JSON followed by an empty line. Environments are numbered 0, 1, 2, … per process;
`"env": N` for an N it never returned gets `{"message": "Unknown environment."}`, as the REPL does.

It decides nothing by reading Lean. Outcomes come from *markers*, identifiers in the command text
(they survive comment blanking because they are code), and the message shapes it prints are
copied from the real transcripts (CANNED below; `tests/test_verify_repl.py` checks each against
its transcript):

    fake_error          an error message ("unsolved goals", incomplete.expected.out)
    fake_kernel_error   "(kernel) declaration has metavariables" (app_type_mismatch)
    fake_sorry, sorry   (outside strings) sorries + "declaration uses `sorry`" (tactic_sorry); adds sorryAx
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
    fake_axiom_NAME     `#print axioms` of a theorem declared by this command lists NAME too
                        (`__` in NAME stands for `.`: fake_axiom_Lean__ofReduceBool)
    fake_no_axioms      … says "does not depend on any axioms"
    fake_axioms_garbled … prints an unparseable axioms line
    fake_axioms_silent  … prints nothing
    fake_axioms_twice   … prints two answers
    fake_axioms_other   … reports on `Other.NAME` instead of NAME
    fake_header_error / fake_header_hang / fake_header_crash   the same, in an `import` command

Declarations are found with a regex (`theorem NAME`, `lemma NAME`, and the alias form
`theorem A : type_of% @B := @B`, whose `#check` prints B's type and which is an "unknown
identifier" error when B does not resolve, as in Lean); `#print axioms NAME` answers for any NAME declared in the
command or in the environment chain it runs in, with [propext, Classical.choice, Quot.sound] unless
a marker says otherwise, and "Unknown identifier" for anything else.

`#check @NAME` answers `@FULLNAME : TYPE` where TYPE is computed from the declaration's text (the
part between its name and `:=`) and from the scope it was declared in: `variable` binders (all of
them: stricter than Lean, which includes only some) and open namespaces, so an added hypothesis,
an instance `variable`, an `open` or a `namespace` changes the printout as Lean's would (or more).
Names resolve through the enclosing namespaces and open namespaces, so `namespace Foo` before the
target makes `#print axioms NAME` report on `Foo.NAME`. `axiom NAME` declarations are recorded and
a theorem whose proof mentions one (or a theorem that depends on one) lists it in `#print axioms`;
`native_decide` adds the axioms of the `--lean-version` given (default 4.15: Lean.ofReduceBool;
4.20-4.28: also Lean.trustCompiler; >= 4.29: `NAME._native.native_decide.ax_1_1`).

Options: --delay S (sleep before each non-import answer), --header-delay S (before import
commands), --log PATH (append one JSON line per start and per request: pid, kind, cmd), --spawn-child (run the
REPL in a child process and wait for it, like `lake env repl`, to test process-group kills),
--lean-version X.Y (see above), --quirk NAME (behave wrongly on one rule, to test the canary:
`sorry-invisible`, `check-ignores-context`, `native-axiom-renamed`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from typing import NamedTuple

STANDARD_AXIOMS = ["propext", "Classical.choice", "Quot.sound"]

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
EVENT = re.compile(r"(?m)^[ \t]*(?P<kw>variables|variable\?|variable|open|namespace|section|end)\b(?P<rest>[^\n]*)"
                   r"|(?<![\w.'])(?P<decl>theorem|lemma|axiom)\s+(?P<name>[^\s(:{\[]+)")
CHECK = re.compile(r"#check\s+@(\S+)")
DECL_WORD = re.compile(r"\b(?:theorem|lemma|axiom)\b")
COMMENT = re.compile(r"--[^\n]*|/-.*?-/", re.DOTALL)
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.'!?]*")
NATIVE = re.compile(r"\bnative_decide\b|\bdecide\s*\+native\b|\bnative\s*:=\s*true\b")
ALIAS = re.compile(r"\btheorem\s+(\S+)\s*:\s*type_of%\s*@(\S+)\s*:=\s*@(\S+)")
PRINT_AXIOMS = re.compile(r"#print\s+axioms\s+(\S+)")
STRING = re.compile(r'"(?:\\.|[^"\\])*"')
SORRY = re.compile(r"(?<![A-Za-z0-9_.'])sorry(?![A-Za-z0-9_'!?])")


class Scope(NamedTuple):
    """Open namespaces, sections, variables: what a declaration is elaborated in."""

    frames: tuple = (("root", "", (), ()),)   # (kind, name, variables, opens)

    def _top(self, **change) -> "Scope":
        kind, name, variables, opens = self.frames[-1]
        frame = (kind, name, change.get("variables", variables), change.get("opens", opens))
        return Scope(self.frames[:-1] + (frame,))

    def with_variable(self, binder: str) -> "Scope":
        return self._top(variables=self.frames[-1][2] + (binder,))

    def with_opens(self, names: tuple) -> "Scope":
        return self._top(opens=self.frames[-1][3] + tuple(names))

    def push(self, kind: str, name: str) -> "Scope":
        return Scope(self.frames + ((kind, name, (), ()),))

    def pop(self) -> "Scope":
        return Scope(self.frames[:-1]) if len(self.frames) > 1 else self

    @property
    def namespaces(self) -> tuple:
        return tuple(part for kind, name, _, _ in self.frames if kind == "namespace" for part in name.split("."))

    def qualify(self, name: str) -> str:
        if name.startswith("_root_."):
            return name[len("_root_."):]
        return ".".join(self.namespaces + (name,))

    def all_variables(self) -> tuple:
        return tuple(v for frame in self.frames for v in frame[2])

    def all_opens(self) -> tuple:
        return tuple(o for frame in self.frames for o in frame[3])


class Decl(NamedTuple):
    markers: frozenset
    axioms: frozenset
    signature: str     # the text between the name and `:=`, whitespace collapsed
    scope: Scope
    alias_of: "Decl | None" = None   # `theorem A : type_of% @B := @B`: A's type is B's type


def canned(name: str) -> dict:
    return json.loads(json.dumps(CANNED[name][2]))  # a fresh copy


class FakeRepl:
    def __init__(self, delay_s: float, header_delay_s: float, log_path: str | None,
                 lean_version: tuple[int, int] = (4, 15), quirks: set[str] = frozenset()):
        self.lean_version = lean_version
        self.quirks = set(quirks)
        self.delay_s = delay_s
        self.header_delay_s = header_delay_s
        self.log_path = log_path
        # env -> (parent env or None, {full name: Decl}, scope after the command)
        self.envs: dict[int, tuple[int | None, dict, Scope]] = {}
        self.errors: list[dict] = []   # error messages of the command being elaborated
        self.log({"event": "start", "ppid": os.getppid()})

    def log(self, entry: dict) -> None:
        if self.log_path:
            with open(self.log_path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"pid": os.getpid(), **entry}) + "\n")

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
        is_header = bool(re.search(r"(?m)^\s*import\s", cmd))
        kind = ("header" if is_header else "axioms" if cmd.lstrip().startswith("#print axioms")
                else "check" if CHECK.search(cmd) and not DECL_WORD.search(cmd) else "cmd")
        self.log({"kind": kind, "env": parent, "cmd": cmd})
        if parent is not None and parent not in self.envs:
            return canned("unknown_env")
        markers = set(MARKER.findall(cmd))
        time.sleep(self.header_delay_s if is_header else self.delay_s)
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
        return self.command(cmd, parent, markers, is_header)

    def command(self, cmd: str, parent: int | None, markers: set[str], is_header: bool) -> dict:
        response: dict = {}
        messages: list = []
        sorries: list = []
        declared: dict[str, Decl] = {}
        uses_sorry = "fake_sorry" in markers or bool(SORRY.search(STRING.sub('""', cmd)))
        uses_sorry = uses_sorry and "sorry-invisible" not in self.quirks
        own_markers = set(markers) | ({"fake_axiom_sorryAx"} if uses_sorry else set())
        self.errors = []
        scope = self.elaborate(cmd, parent, own_markers, declared)
        messages += self.errors
        if is_header and "fake_header_error" in markers or not is_header and "fake_error" in markers:
            messages += canned("error")["messages"]
        if "fake_kernel_error" in markers:
            messages += canned("kernel_error")["messages"]
        if uses_sorry:
            sorry = canned("sorry")
            sorries += sorry["sorries"]
            messages += sorry["messages"]
        if "fake_sorry_ws" in markers:
            messages.append(dict(canned("sorry")["messages"][0], data="declaration uses 'sorry'"))
        if "fake_sorry_wb" in markers:
            messages.append(canned("sorry")["messages"][0])
        if "fake_sorries_only" in markers:
            sorries += canned("sorry")["sorries"]
        if "fake_info" in markers:
            messages += canned("info")["messages"]
        if "fake_warning" in markers:
            messages.append({"severity": "warning", "pos": {"line": 1, "column": 4},
                             "endPos": {"line": 1, "column": 5}, "data": "unused variable `h`\nnote: fake_repl"})
        for match in PRINT_AXIOMS.finditer(cmd):
            messages += self.print_axioms(match.group(1), parent, declared, scope,
                                          cmd[:match.start()].count("\n") + 1)
        for match in CHECK.finditer(cmd):
            messages += self.check(match.group(1), parent, declared, scope, cmd[:match.start()].count("\n") + 1)
        if sorries:
            response["sorries"] = sorries
        if messages:
            response["messages"] = messages
        if "fake_noenv" in markers:
            return response
        env = len(self.envs)
        self.envs[env] = (parent, declared, scope)
        response["env"] = env
        return response

    # -- declarations and scopes: what `#check` and `#print axioms` see ------------------------
    def elaborate(self, cmd: str, parent: int | None, markers: set[str], declared: dict) -> Scope:
        """Walk the command's scope commands and declarations in order (comments and strings
        removed), recording each declaration with the scope it was declared in."""
        scope = self.envs[parent][2] if parent is not None else Scope()
        text = STRING.sub('""', COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), cmd))
        alias_of = {m.group(1): m.group(3) for m in ALIAS.finditer(text)}
        events = list(EVENT.finditer(text))
        pending_opens: tuple[str, ...] = ()
        for k, event in enumerate(events):
            end = events[k + 1].start() if k + 1 < len(events) else len(text)
            keyword, rest = event.group("kw") or event.group("decl"), event.group("rest") or ""
            if keyword in ("variable", "variable?", "variables"):
                scope = scope.with_variable(" ".join(rest.split()))
            elif keyword == "open":
                names = tuple(w for w in rest.split() if w not in ("in", "scoped"))
                if rest.split()[-1:] == ["in"]:
                    pending_opens += names
                else:
                    scope = scope.with_opens(names)
            elif keyword in ("namespace", "section"):
                scope = scope.push(keyword, rest.strip())
            elif keyword == "end":
                scope = scope.pop()
            else:   # theorem / lemma / axiom NAME
                name = event.group("name")
                qual = scope.qualify(name)
                body = text[event.end():end]
                signature, _, proof = body.partition(":=")
                decl_scope = scope.with_opens(pending_opens) if pending_opens else scope
                pending_opens = ()
                if keyword == "axiom":
                    declared[qual] = Decl(frozenset(), frozenset({qual}), " ".join(signature.split()), decl_scope)
                    continue
                if name in alias_of:
                    target = self.resolve(alias_of[name], parent, declared, scope)
                    if target is None:   # Lean: `type_of% @B` with an unknown B does not elaborate
                        line = text[:event.start()].count("\n") + 1
                        self.errors.append({"severity": "error", "pos": {"line": line, "column": 0},
                                            "endPos": {"line": line, "column": 7},
                                            "data": f"unknown identifier '{alias_of[name]}'"})
                        continue
                    declared[qual] = Decl(frozenset(markers), target[1].axioms, " ".join(signature.split()),
                                          decl_scope, alias_of=target[1])
                    continue
                axioms = set() if "fake_no_axioms" in markers else set(STANDARD_AXIOMS)
                axioms |= {m[len("fake_axiom_"):].replace("__", ".") for m in markers if m.startswith("fake_axiom_")}
                for ident in set(IDENT.findall(proof)):   # what the proof uses brings its axioms
                    used = self.resolve(ident, parent, declared, scope)
                    if used is not None:
                        axioms |= used[1].axioms
                if NATIVE.search(proof):
                    axioms |= self.native_axioms(qual)
                declared[qual] = Decl(frozenset(markers), frozenset(axioms), " ".join(signature.split()),
                                      decl_scope)
        return scope

    def native_axioms(self, qual: str) -> set[str]:
        """What native evaluation adds, by Lean version (see rules.NATIVE_AXIOMS; the stand-in's
        4.20 cut-off for `Lean.trustCompiler` is an approximation)."""
        if "native-axiom-renamed" in self.quirks:   # a future Lean that names them otherwise
            return {f"{qual}._native_v2.native_decide.axiom_1"}
        if self.lean_version >= (4, 29):
            return {f"{qual}._native.native_decide.ax_1_1"}
        if self.lean_version >= (4, 20):
            return {"Lean.ofReduceBool", "Lean.trustCompiler"}
        return {"Lean.ofReduceBool"}

    def resolve(self, name: str, env: int | None, declared: dict, scope: "Scope") -> tuple[str, "Decl"] | None:
        """Lean's name resolution, roughly: the namespaces we are in (innermost first), the open
        namespaces, then the root."""
        if name.startswith("_root_."):
            candidates = [name[len("_root_."):]]
        else:
            candidates = [".".join(scope.namespaces[:k] + (name,)) for k in range(len(scope.namespaces), 0, -1)]
            candidates += [f"{o}.{name}" for o in scope.all_opens()] + [name]
        for candidate in candidates:
            decl = self.lookup(candidate, env, declared)
            if decl is not None:
                return candidate, decl
        return None

    def lookup(self, name: str, env: int | None, declared: dict) -> "Decl | None":
        if name in declared:
            return declared[name]
        while env is not None:
            parent, names, _ = self.envs[env]
            if name in names:
                return names[name]
            env = parent
        return None

    def print_axioms(self, name: str, env: int | None, declared: dict, scope: "Scope", line: int) -> list[dict]:
        pos = {"pos": {"line": line, "column": 0}, "endPos": {"line": line, "column": 13}}
        found = self.resolve(name, env, declared, scope)
        if found is None:
            return [{"severity": "error", **pos, "data": f"Unknown constant `{name}`"}]
        qual, decl = found
        markers = decl.markers
        if "fake_axioms_silent" in markers:
            return []
        if "fake_axioms_error" in markers:
            return [{"severity": "error", **pos, "data": "fake_repl: #print axioms failed"}]
        if "fake_axioms_garbled" in markers:
            return [{"severity": "info", **pos, "data": f"'{qual}' depends on axioms: propext"}]
        shown = f"Other.{qual}" if "fake_axioms_other" in markers else qual
        axioms = sorted(decl.axioms, key=lambda a: (a not in STANDARD_AXIOMS, STANDARD_AXIOMS.index(a)
                                                    if a in STANDARD_AXIOMS else 0, a))
        data = (f"'{shown}' depends on axioms: [{', '.join(axioms)}]" if axioms
                else f"'{shown}' does not depend on any axioms")
        answers = [{"severity": "info", **pos, "data": data}]
        return answers * 2 if "fake_axioms_twice" in markers else answers

    def check(self, name: str, env: int | None, declared: dict, scope: "Scope", line: int) -> list[dict]:
        """`#check @NAME`: `@FULLNAME : TYPE`, TYPE computed from the declaration's text and the
        scope it was declared in (its variables and open namespaces, which Lean would turn into
        binders and resolved names), so anything that changes those changes the printout."""
        pos = {"pos": {"line": line, "column": 0}, "endPos": {"line": line, "column": 6}}
        found = self.resolve(name, env, declared, scope)
        if found is None:
            return [{"severity": "error", **pos, "data": f"Unknown identifier `{name}`"}]
        qual, decl = found
        if "fake_check_garbled" in decl.markers:
            return [{"severity": "info", **pos, "data": "fake_repl: not a #check answer"}]
        if "check-ignores-context" in self.quirks:   # a printer that hides binders (kinder than Lean)
            return [{"severity": "info", **pos, "data": f"@{qual} : fake_repl_same_type"}]
        return [{"severity": "info", **pos, "data": f"@{qual} : {self.type_text(decl)}"}]

    def type_text(self, decl: "Decl") -> str:
        """The printed type: the scope's variables as binders, the signature, the open namespaces;
        an alias prints its own variables, then the type of what it aliases (as Lean would)."""
        binders = "".join(f"{v} → " for v in decl.scope.all_variables())
        if decl.alias_of is not None:
            return binders + self.type_text(decl.alias_of)
        opens = decl.scope.all_opens()
        context = f" [open {' '.join(opens)}]" if opens else ""
        signature = decl.signature
        signature = signature[1:].strip() if signature.startswith(":") else signature
        return f"{binders}∀ {signature}{context}"

    # -- the loop: the REPL's framing -----------------------------------------------------------
    def serve(self) -> None:
        lines: list[str] = []
        for raw in sys.stdin:
            line = raw.rstrip("\n")
            if line.strip():
                lines.append(line)
                continue
            if lines:
                self.reply("".join(lines))
                lines = []
        if lines:  # the REPL answers a last request that has no blank line after it
            self.reply("".join(lines))

    def reply(self, text: str) -> None:
        response = self.answer(text)
        if response is not None:
            sys.stdout.write(json.dumps(response, ensure_ascii=False, indent=1) + "\n\n")
            sys.stdout.flush()


def main(argv: list[str]) -> int:
    delay_s = header_delay_s = 0.0
    log_path = None
    lean_version = (4, 15)
    quirks: set[str] = set()
    spawn_child = False
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
        elif arg == "--quirk":
            quirks.add(args.pop(0))
        elif arg == "--lean-version":
            lean_version = tuple(int(x) for x in args.pop(0).split(".")[:2])
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
    FakeRepl(delay_s, header_delay_s, log_path, lean_version, quirks).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
