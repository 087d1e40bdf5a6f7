"""From record to code: `proof` is appended to the trusted statement; a `completion`'s last lean
block is checked against the trusted statement and rebuilt around it."""

from __future__ import annotations

import pytest

from prover_cli.config import DEFAULT_HEADER
from prover_cli.verify.text.statement import BadRecord, Rejected, candidate_from_record

STATEMENT = "theorem amc_p1 (x : ℝ) (h₀ : 2 * x = 4) : x = 2 := by"


def completion(block: str, fence: str = "lean4") -> dict:
    return {"id": "c", "formal_statement": STATEMENT,
            "completion": f"Reasoning first.\n```{fence}\n{block}\n```\nDone."}


def build(record: dict):
    return candidate_from_record(record, DEFAULT_HEADER)


HONEST_BLOCK = ("import Mathlib\nimport Aesop\nset_option maxHeartbeats 400000\n"
                "open BigOperators Real Nat Topology Rat\n\n"
                "/-- The answer is 2. -/\n" + STATEMENT + "\n  linarith\n")


def test_proof_input_is_statement_plus_proof():
    c = build({"id": "p", "formal_statement": STATEMENT, "proof": "  linarith -- easy"})
    assert c.body.startswith(STATEMENT + "\n  linarith") and "easy" not in c.body
    assert c.target == "amc_p1" and c.header == DEFAULT_HEADER


def test_record_header_overrides_the_default():
    c = build({"id": "p", "formal_statement": STATEMENT, "proof": "  linarith", "header": "import Lean\n"})
    assert c.header == "import Lean\n"


def test_honest_completion_is_rebuilt_around_the_trusted_statement():
    c = build(completion(HONEST_BLOCK))
    assert c.target == "amc_p1"
    assert STATEMENT in c.body and "linarith" in c.body
    assert "import" not in c.body and "open" not in c.body and "The answer" not in c.body


@pytest.mark.parametrize("fence", ["lean4", "lean"])
def test_both_fences_are_accepted(fence):
    assert "linarith" in build(completion(HONEST_BLOCK, fence)).body


def test_the_last_block_is_the_candidate():
    record = completion(HONEST_BLOCK)
    record["completion"] = "```lean4\n" + STATEMENT + "\n  nlinarith\n```\n" + record["completion"]
    assert "nlinarith" not in build(record).body
    record["completion"] += "\n```lean4\n" + STATEMENT + "\n  norm_num [h₀]\n```"
    assert "norm_num" in build(record).body


def test_whitespace_amount_and_lemma_keyword_do_not_matter():
    block = "lemma amc_p1 (x : ℝ)\n    (h₀ : 2 * x = 4) :\n  x = 2 := by\n  linarith"
    c = build(completion(block))
    assert STATEMENT in c.body


def test_helper_lemmas_may_precede_the_target():
    block = "theorem helper (y : ℝ) (hy : 2 * y = 4) : y = 2 := by linarith\n\n" + STATEMENT + "\n  exact helper x h₀"
    c = build(completion(block))
    assert c.body.index("helper") < c.body.index(STATEMENT)


REJECTED_COMPLETIONS = {
    "no block": "no code at all",
    "unterminated block": "```lean4\n" + STATEMENT + "\n  linarith\n",
    "numeral changed": "theorem amc_p1 (x : ℝ) (h₀ : 2 * x = 4) : x = 3 := by\n  linarith",
    "hypothesis added": "theorem amc_p1 (x : ℝ) (h₀ : 2 * x = 4) (h : False) : x = 2 := by\n  exact h.elim",
    "spacing changed": "theorem amc_p1 (x : ℝ) (h₀ : 2 * x = 4) : x = 2:= by\n  linarith",
    "renamed": "theorem amc_p2 (x : ℝ) (h₀ : 2 * x = 4) : x = 2 := by\n  linarith",
    "missing target": "theorem other : True := trivial",
    "declared twice": STATEMENT + "\n  linarith\n\n" + STATEMENT + "\n  linarith",
    "shadow in namespace": STATEMENT + "\n  linarith\n\ntheorem Foo.amc_p1 : True := trivial",
    "def with target name": "def amc_p1 : Nat := 0\n\n" + STATEMENT + "\n  linarith",
    "private target": "private " + STATEMENT + "\n  linarith",
    "extra import": "import Mathlib\nimport Cheats\n" + STATEMENT + "\n  linarith",
    "import in body": STATEMENT + "\n  linarith\nimport Mathlib",
    "def before target": "def two : ℝ := 2\n\n" + STATEMENT + "\n  linarith",
    "open before target": "theorem h1 : True := trivial\nopen Nat\n" + STATEMENT + "\n  linarith",
    "namespace before target": "namespace Foo\n" + STATEMENT + "\n  linarith\nend Foo",
    "variable before target": "theorem h1 : True := trivial\nvariable (bad : False)\n" + STATEMENT + "\n  linarith",
    "include before target": "theorem h1 : True := trivial\ninclude bad\n" + STATEMENT + "\n  linarith",
    "set_option before target": "theorem h1 : True := trivial\nset_option autoImplicit true in\n" + STATEMENT + "\n  linarith",
    "resource limit before target": "set_option maxHeartbeats 0 in\n" + STATEMENT + "\n  linarith",
    "command after an indented where": (STATEMENT + "\n  exact aux\n  where\n      aux : x = 2 := by linarith"
                                        "\n  frobnicate"),
    "helper shadows a statement name": "theorem h₀ : True := trivial\n" + STATEMENT + "\n  linarith",
    "debug option in block header": "import Mathlib\nset_option debug.skipKernelTC true\n" + STATEMENT + "\n  linarith",
    "sorry in proof": STATEMENT + "\n  sorry",
    "local notation": "local notation \"ℝ\" => Nat\n" + STATEMENT + "\n  linarith",
    "unlexable": STATEMENT + "\n  exact \"{x}\"",
}


@pytest.mark.parametrize("name", sorted(REJECTED_COMPLETIONS))
def test_bad_completions_are_rejected(name):
    block = REJECTED_COMPLETIONS[name]
    record = completion(block)
    if name in ("no block", "unterminated block"):
        record["completion"] = block
    with pytest.raises(Rejected):
        build(record)


@pytest.mark.parametrize("record, field", [
    ({"formal_statement": STATEMENT, "proof": "x"}, "id"),
    ({"id": "a", "proof": "x"}, "formal_statement"),
    ({"id": "a", "formal_statement": STATEMENT}, "proof"),
    ({"id": "a", "formal_statement": STATEMENT, "proof": "x", "completion": "y"}, "proof"),
    ({"id": "a", "formal_statement": STATEMENT, "proof": 3}, "proof"),
    ({"id": "a", "formal_statement": "example : True := by", "proof": "x"}, "theorem NAME"),
    ({"id": "a", "formal_statement": STATEMENT, "proof": "x", "header": 5}, "header"),
    ({"id": "a", "formal_statement": "theorem t (x : ℝ) : x = 2", "proof": " ∨ True := by simp"}, ":= by"),
    ({"id": "a", "formal_statement": "theorem t : 1 = 1 : = by", "proof": "rfl"}, ":= by"),
])
def test_unusable_records_name_the_field(record, field):
    with pytest.raises(BadRecord) as info:
        build(record)
    assert field in str(info.value)


def test_a_where_clause_after_the_target_is_sent_as_part_of_its_proof():
    """Lean reads a `where` after the tactic block as the theorem's own clause (docs/verify.md,
    *`where` clauses*): it stays after the trusted statement, with the proof, and is not taken for
    a command after the target."""
    clause = "\nwhere\n  aux (y : ℝ) (h : 2 * y = 4) : y = 2 := by linarith"
    block = "theorem amc_p1 (x : ℝ)\n    (h₀ : 2 * x = 4) : x = 2 := by\n  exact aux x h₀" + clause
    assert build(completion(block)).body == STATEMENT + "\n  exact aux x h₀" + clause


def test_a_where_clause_of_a_helper_does_not_end_the_helper():
    block = ("theorem helper (y : ℝ) (hy : 2 * y = 4) : y = 2 := by\n  exact aux y hy\nwhere\n"
             "  aux (z : ℝ) (h : 2 * z = 4) : z = 2 := by linarith\n\n" + STATEMENT + "\n  exact helper x h₀")
    assert build(completion(block)).body.endswith(STATEMENT + "\n  exact helper x h₀")


def test_text_policy_reads_the_typed_config_without_fallbacks():
    from types import SimpleNamespace

    from prover_cli.config import VerifyConfig
    from prover_cli.verify.text.statement import TextPolicy

    config = VerifyConfig()
    config.allow_commands, config.max_proof_chars = ["open"], 1000
    assert TextPolicy.from_config(config) == TextPolicy(False, ("open",), 1000)
    with pytest.raises(AttributeError):   # a key missing is a bug, not the default policy
        TextPolicy.from_config(SimpleNamespace(allow_native_decide=False, allow_commands=[]))
    for key, value in [("allow_native_decide", "false"), ("allow_commands", "open"), ("max_proof_chars", "9"),
                       ("max_proof_chars", True), ("allow_commands", [None])]:
        config = VerifyConfig()
        setattr(config, key, value)
        with pytest.raises(TypeError):    # `bool("false")` would turn native_decide on
            TextPolicy.from_config(config)
