"""A completion that restates the trusted header's preamble (MOBench / PutnamBench answers, `def`,
`variable`, `structure` moved into `header` by prepare-data): an exact copy is dropped and not sent
again; anything else in its place is rejected before Lean (statement.py, `_trusted_copy`)."""

from __future__ import annotations

import json
import re

import pytest

from conftest import REPO
from prover_cli.config import DEFAULT_HEADER, load_config
from prover_cli.tasks.datasets import prepare_data
from prover_cli.verify import verify_records
from prover_cli.verify.text.statement import Rejected, candidate_from_record

FIXTURES = REPO / "tests" / "fixtures"
HEADER = ("import Mathlib\nimport Aesop\n\nset_option maxHeartbeats 400000\n\n"
          "open BigOperators Real Nat Topology Rat\n\n"
          "/-- The answer. -/\nabbrev puzzle_solution : ℕ := 3\n\n"
          "def double (n : ℕ) : ℕ := 2 * n\n\n")
STATEMENT = "theorem puzzle : double puzzle_solution = 6 := by"
PROOF = "\n  decide\n"


def record(block: str, header: str = HEADER) -> dict:
    return {"id": "r", "formal_statement": STATEMENT, "header": header,
            "completion": f"Let me restate the problem.\n```lean4\n{block}```\n"}


def build(block: str, header: str = HEADER):
    return candidate_from_record(record(block, header), DEFAULT_HEADER)


def rejected(block: str, header: str = HEADER) -> str:
    with pytest.raises(Rejected) as info:
        build(block, header)
    return str(info.value)


def test_an_exact_copy_of_the_trusted_header_is_dropped_and_not_sent_again():
    c = build(HEADER + STATEMENT + PROOF)
    assert c.header == HEADER
    assert "abbrev" not in c.body and "def double" not in c.body   # re-declaring would be a Lean error
    assert c.body.strip() == STATEMENT + PROOF.rstrip()


@pytest.mark.parametrize("prefix", [
    "abbrev puzzle_solution : ℕ := 3\n\ndef double (n : ℕ) : ℕ := 2 * n\n\n",          # preamble only
    "import Mathlib\n\nabbrev puzzle_solution : ℕ := 3 -- our answer\n\ndef double (n : ℕ) : ℕ := 2 * n\n",
    "def double (n : ℕ) : ℕ := 2 * n\n\n",                                             # a contiguous part
    "open BigOperators Real Nat Topology Rat\n/- restated -/ abbrev puzzle_solution : ℕ := 3\n"
    "def double (n : ℕ) : ℕ := 2 * n\n",
])
def test_a_copy_of_whole_trusted_commands_is_accepted(prefix):
    c = build(prefix + STATEMENT + PROOF)
    assert "abbrev" not in c.body and "def" not in c.body and STATEMENT in c.body


ADVERSARIAL = {
    "another answer": ("abbrev puzzle_solution : ℕ := 4\n\ndef double (n : ℕ) : ℕ := 2 * n\n\n",
                       "`4` at line 1 where the header has `3`"),
    "another answer, second command": ("abbrev puzzle_solution : ℕ := 3\n\ndef double (n : ℕ) : ℕ := 3 * n\n\n",
                                       "`def` command at line 3"),
    "an added instance variable before": ("variable [Fact False]\n\n" + HEADER[HEADER.index("/--"):],
                                          "`variable` command at line 1"),
    "an added instance variable after": (HEADER + "variable [Fact False]\n\n", "`variable`"),
    "a binder glued to the copy": (HEADER.replace("2 * n\n", "2 * n\nvariable [Fact False]\n"), "`variable`"),
    "reordered": ("def double (n : ℕ) : ℕ := 2 * n\n\nabbrev puzzle_solution : ℕ := 3\n\n",
                  "`abbrev` command at line 3"),
    "the copy continued on its line": (HEADER.replace("2 * n\n", "2 * n + 0\n"), "`def` command at line 11"),
    "a leading term continues the header": ("  + 0\n\n", "`+` at line 1"),
    "an indented name continues the header": (HEADER + "  Finset\n\n", "`Finset` at line 13"),
    "an indented name after the imports": ("import Mathlib\n  Finset\n\n", "`Finset`, is not a line of the trusted"),
    "the copy cut inside a command": ("abbrev puzzle_solution : ℕ :=\n\n", "`abbrev` command at line 1"),
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_anything_but_an_exact_copy_is_rejected(name):
    prefix, expected = ADVERSARIAL[name]
    reason = rejected(prefix + STATEMENT + PROOF)
    assert expected in reason, reason


def test_the_copy_is_not_a_way_past_the_other_rules():
    assert "`sorry`" in rejected(HEADER + STATEMENT + "\n  sorry\n")
    assert "`instance`" in rejected(HEADER + "instance : Fact False := ⟨by decide⟩\n\n" + STATEMENT + PROOF)
    # header text the denylist refuses is fine inside the trusted copy only
    header = HEADER + "noncomputable instance inst_nat : Inhabited ℕ := ⟨0⟩\n\n"
    assert "instance" not in build(header + STATEMENT + PROOF, header).body
    assert "`instance`" in rejected(header[header.index("noncomputable instance"):].replace("⟨0⟩", "⟨1⟩")
                                         + STATEMENT + PROOF, header)


def test_a_comment_in_front_of_a_trusted_open_line_is_still_a_copy():
    """MOBench's own row headers have `/- special open -/ open Finset` (blanked: an indented `open`)."""
    header = "import Mathlib\nimport Aesop\n\n/- special open -/ open Finset\n\nabbrev s : ℕ := 3\n\n"
    statement = "theorem t : s = 3 := by"
    rec = {"id": "r", "formal_statement": statement, "header": header,
           "completion": f"```lean4\n{header}{statement}\n  rfl\n```"}
    c = candidate_from_record(rec, DEFAULT_HEADER)
    assert "open" not in c.body and "abbrev" not in c.body
    rec["completion"] = rec["completion"].replace("open Finset", "open Finset Real")
    with pytest.raises(Rejected):
        candidate_from_record(rec, DEFAULT_HEADER)


def test_restated_fixture_rows_verify_through_the_stand_in(verify_config, tmp_path):
    """Every row prepare-data keeps from the fixtures, restated the way chat models do (header +
    informal prefix + statement + proof), verifies on the stand-in; none did for MOBench's
    preamble rows before (measured: 1 of 4 MOBench rows, 1 of 2 PutnamBench rows with answers)."""
    config = load_config(None)
    records = []
    sources = [("mobench.jsonl", {}), ("deepseek_proofnet.jsonl", {}), ("goedel_v2_minif2f.jsonl", {}),
               ("goedel_v1_workbook.jsonl", {}), ("putnambench", {"fill_answers": True})]
    for name, data_overrides in sources:
        for key, value in data_overrides.items():
            setattr(config.data, key, value)
        out = tmp_path / f"{name}.problems.jsonl"
        prepare_data(config, source=str(FIXTURES / name), out_path=out)
        for line in out.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            statement = row["formal_statement"]
            proof = "\n  simp\n" if statement.rstrip().endswith("by") else "\n  by simp\n"
            block = row.get("header", "") + row.get("informal_prefix", "") + statement.rstrip() + proof
            records.append({"id": f"{name}:{row['id']}", "formal_statement": statement,
                            "header": row.get("header"), "completion": f"Here it is.\n```lean4\n{block}```"})
    with_preamble = [r for r in records if re.search(r"(?m)^(noncomputable |)(abbrev|def|variable|structure)\b",
                                                     r["header"] or "")]
    assert len(with_preamble) >= 4    # MOBench's abbrev/def/variable+structure rows, Putnam's answer
    verdicts = verify_records(records, verify_config())
    assert {v["id"]: v["verdict"] for v in verdicts} == {r["id"]: "verified" for r in records}


def test_a_resource_limit_after_the_header_lines_is_not_taken_for_a_copy_of_the_header_option():
    """`set_option maxHeartbeats 400000 in` right after the header lines starts like the header's
    own `set_option maxHeartbeats 400000`, but it is not a copy of it: it stays, and meets the
    rules (before a helper: allowed; before the target: rejected, it would reach the statement)."""
    helper = "theorem helper : True := trivial\n\n"
    c = build("import Mathlib\n\nset_option maxHeartbeats 400000 in\n" + helper + STATEMENT + PROOF)
    assert c.body.startswith("set_option maxHeartbeats 400000 in\n" + helper)
    c = build(HEADER + "set_option maxHeartbeats 400000 in\n" + helper + STATEMENT + PROOF)
    assert c.body.strip().startswith("set_option maxHeartbeats 400000 in\n" + helper)
    for head in ("import Mathlib\n\n", HEADER):
        assert "applies to the target theorem" in rejected(head + "set_option maxHeartbeats 400000 in\n"
                                                           + STATEMENT + PROOF)
