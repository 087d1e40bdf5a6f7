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
`theorem A : type_of% @B := @B`); `#print axioms NAME` answers for any NAME declared in the
command or in the environment chain it runs in, with [propext, Classical.choice, Quot.sound] unless
a marker says otherwise, and "Unknown identifier" for anything else.

Options: --delay S (sleep before each non-import answer), --header-delay S (before import
commands), --log PATH (append one JSON line per start and per request: pid, kind, cmd), --spawn-child (run the
REPL in a child process and wait for it, like `lake env repl`, to test process-group kills).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

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
DECL = re.compile(r"\b(?:theorem|lemma)\s+([^\s(:{\[]+)")
ALIAS = re.compile(r"\btheorem\s+(\S+)\s*:\s*type_of%\s*@(\S+)\s*:=\s*@(\S+)")
PRINT_AXIOMS = re.compile(r"#print\s+axioms\s+(\S+)")
STRING = re.compile(r'"(?:\\.|[^"\\])*"')
SORRY = re.compile(r"(?<![A-Za-z0-9_.'])sorry(?![A-Za-z0-9_'!?])")


def canned(name: str) -> dict:
    return json.loads(json.dumps(CANNED[name][2]))  # a fresh copy


class FakeRepl:
    def __init__(self, delay_s: float, header_delay_s: float, log_path: str | None):
        self.delay_s = delay_s
        self.header_delay_s = header_delay_s
        self.log_path = log_path
        # env -> (parent env or None, {declared name: markers of the declaring command})
        self.envs: dict[int, tuple[int | None, dict[str, set[str]]]] = {}
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
        kind = "header" if is_header else ("axioms" if cmd.lstrip().startswith("#print axioms") else "cmd")
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
        declared: dict[str, set[str]] = {}
        alias_of = {m.group(1): m.group(3) for m in ALIAS.finditer(cmd)}
        uses_sorry = "fake_sorry" in markers or bool(SORRY.search(STRING.sub('""', cmd)))
        own_markers = set(markers) | ({"fake_axiom_sorryAx"} if uses_sorry else set())
        for match in DECL.finditer(cmd):
            name = match.group(1)
            if name in alias_of:
                declared[name] = self.lookup(alias_of[name], parent, declared) or set()
            else:
                declared[name] = own_markers
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
            messages += self.print_axioms(match.group(1), parent, declared, cmd[:match.start()].count("\n") + 1)
        if sorries:
            response["sorries"] = sorries
        if messages:
            response["messages"] = messages
        if "fake_noenv" in markers:
            return response
        env = len(self.envs)
        self.envs[env] = (parent, declared)
        response["env"] = env
        return response

    def lookup(self, name: str, env: int | None, declared: dict[str, set[str]]) -> set[str] | None:
        if name in declared:
            return declared[name]
        while env is not None:
            parent, names = self.envs[env]
            if name in names:
                return names[name]
            env = parent
        return None

    def print_axioms(self, name: str, env: int | None, declared: dict[str, set[str]], line: int) -> list[dict]:
        pos = {"pos": {"line": line, "column": 0}, "endPos": {"line": line, "column": 13}}
        markers = self.lookup(name, env, declared)
        if markers is None:
            return [{"severity": "error", **pos, "data": f"Unknown identifier `{name}`"}]
        if "fake_axioms_silent" in markers:
            return []
        if "fake_axioms_error" in markers:
            return [{"severity": "error", **pos, "data": "fake_repl: #print axioms failed"}]
        if "fake_axioms_garbled" in markers:
            return [{"severity": "info", **pos, "data": f"'{name}' depends on axioms: propext"}]
        shown = f"Other.{name}" if "fake_axioms_other" in markers else name
        axioms = [] if "fake_no_axioms" in markers else list(STANDARD_AXIOMS)
        axioms += sorted(m[len("fake_axiom_"):].replace("__", ".") for m in markers
                         if m.startswith("fake_axiom_"))
        data = (f"'{shown}' depends on axioms: [{', '.join(axioms)}]" if axioms
                else f"'{shown}' does not depend on any axioms")
        answers = [{"severity": "info", **pos, "data": data}]
        return answers * 2 if "fake_axioms_twice" in markers else answers

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
    FakeRepl(delay_s, header_delay_s, log_path).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
