"""The REPL stand-in (tests/fake_repl.py) against recorded real Lean output (tests/lean_corpus/).

Every corpus entry is real output from a public repository, with the repository, commit and paths
beside it: the leanprover-community/repl test transcripts at several Lean releases (exact JSON,
positions included) and `#guard_msgs` expectations from Lean's own tests and others (message
text). Each entry is replayed through the stand-in, which must answer exactly that; and the
stand-in must refuse, with a protocol error, every command form it has no recorded behaviour for.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conftest import PATIENCE_S, fake_repl_command
from prover_cli.verify.lean.repl import ReplProcess

CORPUS = Path(__file__).resolve().parent / "lean_corpus"
ENTRIES = sorted(CORPUS.glob("*.json"))


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def replay(entry: dict) -> list:
    version = entry.get("replay_version") or entry["lean"]
    args = ["--lean-version", version] if version[:1].isdigit() else []
    proc = ReplProcess(fake_repl_command(*args))
    proc.start()
    try:
        return [proc.request(request, time.monotonic() + PATIENCE_S) for request in entry["requests"]]
    finally:
        proc.kill()


@pytest.mark.parametrize("path", ENTRIES, ids=[p.stem for p in ENTRIES])
def test_every_corpus_entry_names_its_source(path):
    entry = load(path)
    source = entry["source"]
    assert source["repository"].count("/") == 1 and len(source["commit"]) == 40 and source["paths"]
    assert entry["what"] and entry["lean"] and entry["kind"] in ("repl", "messages")
    assert len(entry["requests"]) == len(entry["responses" if entry["kind"] == "repl" else "messages"])


@pytest.mark.parametrize("path", ENTRIES, ids=[p.stem for p in ENTRIES])
def test_the_stand_in_reproduces_the_corpus_entry(path):
    entry = load(path)
    got = replay(entry)
    if entry["kind"] == "repl":
        assert got == entry["responses"]
        return
    for request, expected, answer in zip(entry["requests"], entry["messages"], got):
        assert "env" in answer, (request, answer)
        if expected is not None:
            assert [[m["severity"], m["data"]] for m in answer.get("messages", [])] == expected, request


def test_the_corpus_covers_the_toolchains_and_shapes_the_issue_names():
    entries = [load(p) for p in ENTRIES]
    versions = {e["lean"] for e in entries}
    assert {"4.9.0", "4.15.0", "4.33.0-rc2"} <= versions          # DeepSeek/Goedel's, Kimina's, current
    text = json.dumps(entries, ensure_ascii=False)
    for shape in ("declaration uses 'sorry'", "declaration uses `sorry`",   # both sorry warnings
                  "unknown identifier 'g'", "Unknown identifier `g`",       # both wordings
                  "@id : {α : Sort u_1} → α → α",                            # `@` only for an implicit first binder
                  "f : Nat",                                                 # no binders
                  "depends on axioms: [A0, A1, A2]", "[Lean.ofReduceBool, Lean.trustCompiler]",
                  "depends on axioms: [sorryAx]", "(config := {decide := true})"):
        assert shape in text, shape


@pytest.mark.parametrize("cmd", [
    "#eval 1 + 1",                                   # runs code
    "#print Nat.add",                                # only `#print axioms` is modelled
    "#check (1 : Nat)",                              # only `#check NAME` / `#check @NAME`
    "set_option pp.maxSteps 100 in\n#check @f",      # an option never seen answered
    "set_option pp.all true in\n#check @f",
    "attribute [simp] f",
    "@[simp] theorem g : 1 = 1 := rfl",
    "macro \"x\" : term => `(1)",
    "theorem g (ε > 0) : ε = ε := rfl",              # a binder form it does not model
    "import Mathlib",                                # an import after the first command
])
def test_the_stand_in_refuses_what_it_has_no_record_of(cmd):
    proc = ReplProcess(fake_repl_command())
    proc.start()
    try:
        env = proc.request({"cmd": "def f := 2"}, time.monotonic() + PATIENCE_S)["env"]
        answer = proc.request({"cmd": cmd, "env": env}, time.monotonic() + PATIENCE_S)
    finally:
        proc.kill()
    assert set(answer) == {"message"} and "no recorded behaviour" in answer["message"], answer
