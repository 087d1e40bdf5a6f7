"""The allowlist (prover_cli/verify/text/allowlist.py): commands and characters untrusted text may hold.
Each new cheat class of issue 11 has a case here; every real proof in ../shared/data passes."""

from __future__ import annotations

import json

import pytest

from prover_cli.config import DEFAULT_HEADER
from prover_cli.verify import verify_records
from prover_cli.verify.text.statement import Rejected, TextPolicy, candidate_from_record
from test_verify_statement import STATEMENT, completion

MINIF2F_HEADER = ("import Mathlib\nimport Aesop\n\nset_option maxHeartbeats 0\n\n"
                  "open BigOperators Real Nat Topology Rat\n\n")


def build(record: dict, **policy):
    return candidate_from_record(record, DEFAULT_HEADER, policy=TextPolicy(**policy))


def proof(text: str) -> dict:
    return {"id": "p", "formal_statement": STATEMENT, "proof": text}


def rejected(record: dict, **policy) -> str:
    with pytest.raises(Rejected) as info:
        build(record, **policy)
    return str(info.value)


HELPER = "theorem helper (y : ℝ) : y = y := rfl\n"

# completion blocks the old denylist let through (or would): each must be rejected by name
COMPLETION_CHEATS = {
    "variable?": ("variable? [Fact False]\n\n" + STATEMENT + "\n  linarith", "`variable?` command at line 1"),
    "variable? in": ("variable? [Subsingleton ℕ] in\n" + STATEMENT + "\n  linarith", "`variable?` command at line 1"),
    "variable! glued": (HELPER + "variable! (z : ℕ) in\n" + STATEMENT + "\n  linarith", "`variable!` command at line 2"),
    "command_elab": ("@[command_elab Lean.Parser.Command.printAxioms] def forge : Lean.Elab.Command.CommandElab"
                     " := fun _ => pure ()\n" + STATEMENT + "\n  linarith", "attribute `@[…]` at line 1"),
    "tactic attr": (HELPER + "@[tactic Lean.Parser.Tactic.omega] def t : Lean.Elab.Tactic.Tactic := fun _ => pure ()\n"
                    + STATEMENT + "\n  linarith", "attribute `@[…]` at line 2"),
    "term_elab": ("@[term_elab x] def e := 1\n" + STATEMENT + "\n  linarith", "attribute `@[…]` at line 1"),
    "delab": ("@[delab app.HAdd.hAdd] def d := 1\n" + STATEMENT + "\n  linarith", "attribute `@[…]`"),
    "norm_num ext": ("@[norm_num _ + _] def n := 1\n" + STATEMENT + "\n  linarith", "attribute `@[…]`"),
    "attribute cmd": (HELPER + "attribute [simp] helper\n" + STATEMENT + "\n  linarith",
                      "`attribute` command at line 2"),
    "after target": (STATEMENT + "\n  linarith\n\n@[command_elab Lean.Parser.Command.printAxioms] def f := 1",
                     "attribute `@[…]` at line 4"),
    "include": ("include h\n" + STATEMENT + "\n  linarith", "`include` command at line 1"),
    "omit": ("omit h in\n" + STATEMENT + "\n  linarith", "`omit` command at line 1"),
    "open": (HELPER + "open Lean\n" + STATEMENT + "\n  linarith", "`open` command at line 2"),
    "open header line": ("open Lean\n" + STATEMENT + "\n  linarith", "header line 1 of the completion's lean block, `open Lean`"),
    "universe": (HELPER + "universe u\n" + STATEMENT + "\n  linarith", "`universe` command at line 2"),
    "def": ("def two : ℝ := 2\n" + STATEMENT + "\n  linarith", "`def` command at line 1"),
    "instance": ("instance : Fact False := ⟨sorry⟩\n" + STATEMENT + "\n  linarith", "instance"),
    "mutual": ("mutual\n" + STATEMENT + "\n  linarith\nend", "`mutual` command at line 1"),
    "initialize": ("initialize pure ()\n" + STATEMENT + "\n  linarith", "initialize"),
    "elab_rules": ("elab_rules : tactic | _ => pure ()\n" + STATEMENT + "\n  linarith", "elab_rules"),
    "unknown command": ("assert_not_exists Foo\n" + STATEMENT + "\n  linarith", "`assert_not_exists` command"),
    "unknown at column 0": ("frobnicate_everything\n" + STATEMENT + "\n  linarith",
                            "`frobnicate_everything` at the start of a line"),
    "set_option non-resource": (HELPER + "set_option pp.all true in\n" + STATEMENT + "\n  linarith",
                                "`set_option pp.all` at line 2"),
    "set_option without in": (HELPER + "set_option maxHeartbeats 400000\n" + STATEMENT + "\n  linarith",
                              "`set_option maxHeartbeats` without `in` at line 2"),
    "local notation": ("local notation \"two\" => 2\n" + STATEMENT + "\n  linarith", "notation"),
    "header open adds a namespace": ("import Mathlib\nopen Real Lean\n\n" + STATEMENT + "\n  linarith",
                                     "header line 2 of the completion's lean block, `open Real Lean`"),
}


@pytest.mark.parametrize("name", sorted(COMPLETION_CHEATS))
def test_commands_outside_the_allowlist_are_rejected_with_command_and_line(name):
    block, expected = COMPLETION_CHEATS[name]
    reason = rejected(completion(block))
    assert expected in reason, reason


PROOF_CHEATS = {
    "attribute in proof": ("  linarith\n@[command_elab Lean.Parser.Command.printAxioms] def f := 1",
                           "attribute `@[…]` at line 2 of the proof"),
    "indented variable ends the tactic block": ("  linarith\n  variable [Fact False]", "`variable` command at line 2"),
    "plausible": ("  plausible", "denied `plausible`"),
    "slim_check": ("  slim_check", "denied `slim_check`"),
    "open at column 0": ("  linarith\nopen Foo in\ntheorem x : True := trivial", "`open` command at line 2"),
    "open without in at column 0": ("  linarith\nopen Foo\ntheorem x : True := trivial", "`open` command at line 2"),
    "bare open in proof": ("  open Real\n  simp", "`open` command at line 1"),
    "section": ("  linarith\nsection\nend", "`section` command at line 2"),
    "set_option non-resource in proof": ("  set_option trace.Meta.synthInstance true in\n  simp",
                                         "`set_option trace.Meta.synthInstance`"),
    "bidi override": ("  linarith\u202e -- looks harmless", "character U+202E at line 1"),
    "zero width": ("  exact\u200bh", "character U+200B at line 1"),
    "control char": ("  simp\n  \x07linarith", "character U+0007 at line 2"),
    "lone surrogate": ("  linarith \ud800", "lone surrogate"),
}


@pytest.mark.parametrize("name", sorted(PROOF_CHEATS))
def test_proof_text_outside_the_allowlist_is_rejected(name):
    text, expected = PROOF_CHEATS[name]
    reason = rejected(proof(text))
    assert expected in reason, reason


def test_suspicious_characters_inside_comments_and_strings_are_fine():
    build(proof("  -- a comment with \u202e and \u200b\n  simp"))
    build(proof('  show "\u200b" = "\u200b"\n  rfl'))


def test_resource_limits_are_allowed_before_a_helper_and_inside_proofs():
    block = "set_option maxHeartbeats 400000 in\n" + HELPER + "\n" + STATEMENT + "\n  linarith"
    assert build(completion(block)).body.startswith("set_option maxHeartbeats 400000 in\n" + HELPER)
    block = STATEMENT + "\n  set_option maxHeartbeats 0 in\n  linarith"
    assert "  set_option maxHeartbeats 0 in\n  linarith" in build(completion(block)).body
    build(proof("  set_option synthInstance.maxHeartbeats 40000 in\n  simp"))
    build(proof("  open Real in\n  simp"))   # one tactic, indented: local


# `set_option … in` that ends where the target starts applies to the target's statement: rejected
# (docs/verify.md, *`completion` input*), whatever the option and however it is chained.
OPTIONS_BEFORE_TARGET = {
    "maxHeartbeats 0": "set_option maxHeartbeats 0 in\n",
    "after a helper": HELPER + "\nset_option maxHeartbeats 400000 in\n",
    "maxRecDepth": "set_option maxRecDepth 10000 in\n",
    "synthInstance.maxHeartbeats": "set_option synthInstance.maxHeartbeats 0 in\n",
    "synthInstance.maxSize": "set_option synthInstance.maxSize 100000 in\n",
    "maxSynthPendingDepth": "set_option maxSynthPendingDepth 3 in\n",
    "exponentiation.threshold": "set_option exponentiation.threshold 1000 in\n",
    "right after the imports": "import Mathlib\n\nset_option maxHeartbeats 400000 in\n",
    "two options chained": "set_option maxRecDepth 10000 in\nset_option maxHeartbeats 0 in\n",
    "behind an allowed open": "set_option maxHeartbeats 0 in\nopen Real in\n",
    "in front of an allowed open": "open Real in\nset_option maxHeartbeats 0 in\n",
}


@pytest.mark.parametrize("name", sorted(OPTIONS_BEFORE_TARGET))
def test_set_option_in_directly_before_the_target_is_rejected(name):
    reason = rejected(completion(OPTIONS_BEFORE_TARGET[name] + STATEMENT + "\n  linarith"))
    assert "applies to the target theorem" in reason and "set_option" in reason, reason


def test_set_option_before_the_target_follows_allow_commands():
    block = "set_option maxHeartbeats 0 in\n" + STATEMENT + "\n  linarith"
    assert build(completion(block), allow_commands=("set_option",)).body.startswith("set_option maxHeartbeats 0 in")


def test_every_open_in_a_chain_before_the_target_is_checked():
    """`open Lean in` + `open Real in` + `theorem`: both apply to the target (the first one used to
    be skipped, as only the `open` right before the target was read)."""
    for chain in ("open Lean in\nopen Real in\n", "open Real in\nopen Lean in\n"):
        assert "`open Lean in`" in rejected(completion(chain + STATEMENT + "\n  linarith"))
    assert build(completion("open Real in\nopen Nat in\n" + STATEMENT + "\n  linarith"))


def test_docs_say_set_option_before_the_target_is_rejected():
    from conftest import REPO

    docs = (REPO / "docs" / "verify.md").read_text(encoding="utf-8")
    assert "| `set_option <opt> <value> in`" in docs
    row = next(line for line in docs.splitlines() if line.startswith("   | `set_option <opt> <value> in`"))
    assert "not directly before the target" in row and "right before the target" not in row
    assert "`set_option … in` directly before the target" in docs


# -- `where` after a declaration's body: Lean reads it as the declaration's `where` clause ------
# Command.lean `declValSimple` (`" :=" >> declBody >> Termination.suffix >> optional
# Term.whereDecls`, lean4 00298d032ca2), Term.lean `whereDecls` (`"where" >> sepBy1Indent
# letRecDecl "; "`, lean4 0dbbe18d70d1), Extra.lean `sepBy1Indent` (`withPosition` + `checkColGe`,
# lean4 6cd7da88d627): no column check on `where`, so it ends the tactic block wherever it stands,
# and the clause goes on while lines start at or right of its first declaration's column.

WHERE_HARMLESS = {
    "column 0": "\n  exact aux x h₀\nwhere\n  aux (y : ℝ) (h : 2 * y = 4) : y = 2 := by linarith",
    "declaration on the where line": ("\n  exact aux x h₀\nwhere aux (y : ℝ) (h : 2 * y = 4) : y = 2 := by"
                                      "\n    linarith"),
    "two declarations": ("\n  exact aux x (two h₀)\nwhere\n  two {y : ℝ} (h : 2 * y = 4) : y * 2 = 4 := by linarith"
                         "\n  aux (y : ℝ) (h : y * 2 = 4) : y = 2 := by\n    linarith"),
    "indented where": "\n  exact aux x h₀\n  where\n    aux (y : ℝ) (h : 2 * y = 4) : y = 2 := by linarith",
    "tactic block left of the clause's column": ("\n  exact aux x h₀\nwhere aux (y : ℝ) (h : 2 * y = 4) :"
                                                 " y = 2 := by\n    have := h\n    linarith"),
}


@pytest.mark.parametrize("name", sorted(WHERE_HARMLESS))
def test_a_where_clause_after_the_tactic_block_belongs_to_the_theorem(name):
    tail = WHERE_HARMLESS[name]
    assert build(completion(STATEMENT + tail)).body.endswith(STATEMENT + tail)
    assert build(proof(tail.lstrip("\n"))).body == STATEMENT + "\n" + tail.lstrip("\n")


WHERE_CHEATS = {
    # a line left of the clause's column ends the theorem: Lean reads a command there
    "command left of the clause": ("\n  exact aux\nwhere\n    aux : x = 2 := by linarith\n  frobnicate",
                                   "`frobnicate` left of the `where` clause's column (4) at line 5"),
    # an indented `where` ends the tactic block too, so the block's column no longer holds
    "indented where, command at the block's column": (
        "\n  exact aux\n  where\n      aux : x = 2 := by linarith\n  frobnicate",
        "`frobnicate` left of the `where` clause's column (6) at line 5"),
    "command at column 0 after the clause": ("\n  exact aux\nwhere\n  aux : x = 2 := by linarith\nfrobnicate",
                                             "`frobnicate` at the start of a line at line 5"),
    # Lean reads a column-0 declaration as part of the clause; we ask for indentation (fail closed)
    "declaration at column 0": ("\n  exact aux\nwhere\naux : x = 2 := by linarith",
                                "`aux` at the start of a line at line 4"),
    "left of the clause's tactic block and of its column": (
        "\n  exact aux\nwhere aux : x = 2 := by\n    linarith\n  frobnicate",
        "`frobnicate` left of the `where` clause's column (4) at line 5"),
    "second where": ("\n  exact aux\nwhere\n    aux : x = 2 := by linarith\n  where\n  frobnicate",
                     "`where` left of the `where` clause's column (4) at line 5"),
    # a clause's declarations are held to every rule the proof is
    "attribute on a local definition": ("\n  exact aux\nwhere\n  @[csimp] aux : x = 2 := by linarith", "csimp"),
    "implemented_by": ("\n  exact aux\nwhere\n  @[implemented_by f] aux : x = 2 := by linarith",
                       "implemented_by"),
    "sorry in decreasing_by": ("\n  exact aux 0\nwhere\n  aux (n : ℕ) : x = 2 := aux (n + 1)\n  decreasing_by sorry",
                               "denied `sorry`"),
    "code in a configuration": ("\n  exact aux\nwhere\n  aux : x = 2 := by linarith (config := myCfg)",
                                "with a value that is not a literal"),
    "def in the clause": ("\n  exact aux\nwhere\n  aux : x = 2 := by linarith\n  def two : ℝ := 2",
                          "`def` command at line 5"),
}


@pytest.mark.parametrize("name", sorted(WHERE_CHEATS))
def test_a_where_clause_cannot_hide_a_command_or_a_denied_construct(name):
    tail, expected = WHERE_CHEATS[name]
    reason = rejected(completion(STATEMENT + tail))
    assert expected in reason, reason


def test_where_outside_a_declaration_body_is_not_a_where_clause():
    assert "`where` at the start of a line at line 1" in rejected(
        completion("where\n  aux : True := trivial\n" + STATEMENT + "\n  linarith"))


def test_allow_commands_widens_the_allowlist_by_keyword():
    block = HELPER + "open Real\n\n" + STATEMENT + "\n  linarith"
    assert "`open` command" in rejected(completion(block))
    c = build(completion(block), allow_commands=("open",))
    assert c.body.startswith(HELPER + "open Real\n")
    # and only by that keyword
    assert "`def` command" in rejected(completion("def two : ℝ := 2\n" + block), allow_commands=("open",))


def test_pre_checks_refuse_oversized_text_before_reading_it():
    reason = rejected(proof("  simp\n" * 100), max_proof_chars=100)
    assert "verify.max_proof_chars = 100" in reason


def test_denied_commands_never_reach_the_repl(verify_config, tmp_path):
    log = tmp_path / "repl.log"
    records = [dict(completion(block), id=name) for name, (block, _) in sorted(COMPLETION_CHEATS.items())]
    records += [dict(proof(text), id=name) for name, (text, _) in sorted(PROOF_CHEATS.items())]
    verdicts = verify_records(records, verify_config(repl_args=["--log", str(log)]))
    assert [v["verdict"] for v in verdicts] == ["rejected"] * len(records)
    assert not log.exists() or "cmd" not in log.read_text()


# -- every real proof in ../shared/data passes the allowlist (measured, not sampled) -----------

def _jsonl(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_no_real_proof_in_shared_data_is_rejected_by_the_text_checks(shared):
    few_shot = _jsonl(shared("data", "minif2f", "minif2f_valid_few_shot_proofs.jsonl"))
    workbook = _jsonl(shared("data", "proofs", "lean_workbook_goedel_kimina_fixtures.jsonl"))
    records = [{"id": r["name"], "formal_statement": r["formal_statement"], "proof": r["formal_proof"],
                "header": MINIF2F_HEADER} for r in few_shot]
    # the same proofs as model output: the statement and proof inside a lean4 block
    records += [{"id": r["name"] + " as completion", "formal_statement": r["formal_statement"],
                 "header": MINIF2F_HEADER,
                 "completion": f"```lean4\n{MINIF2F_HEADER}{r['formal_statement']}{r['formal_proof']}\n```"}
                for r in few_shot]
    # the Lean Workbook files as they are (header, comments, theorem, proof), under both headers
    for header in (MINIF2F_HEADER, DEFAULT_HEADER):
        records += [{"id": r["id"], "formal_statement": r["formal_statement"], "header": header,
                     "completion": f"```lean4\n{r['full_code']}\n```"} for r in workbook]
    assert len(records) == 67 * 2 + 100 * 2
    problems = []
    for record in records:
        try:
            candidate_from_record(record, DEFAULT_HEADER)
        except Exception as exc:  # noqa: BLE001 - any failure is a finding
            problems.append((record["id"], str(exc)))
    assert problems == []
