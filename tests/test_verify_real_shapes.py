"""Issue 20, sections 2 and 3: text that could run code inside Lean is rejected (tactic
configurations, `eval%`, commands Lean starts at a line left of a tactic block, keywords that
register code), a REPL that may have run such code is not reused, and the honest shapes real
provers emit are accepted.

The honest shapes are excerpts of proofs that real Lean accepted: Kimina-Prover-72B's miniF2F
solutions (MoonshotAI/Kimina-Prover-Preview, commit 7abd61a5d9861bf5c15b195c216c1bb233ac32e4,
`minif2f_test_solved_filtered_0710.zip`, files `src/<name>.lean`, Lean v4.15.0 per its
`lean-toolchain`; Apache-2.0, `LICENSE` in `minif2f_test_solved.zip`) and the REPL's recorded
Mathlib test (`simp (config := {decide := true})`, tests/lean_corpus). The lines are quoted as
they are there; the proofs around them are shortened to what the rule reads.
"""

from __future__ import annotations

import json

import pytest

from prover_cli.verify import verify_records
from test_verify_allowlist import build, proof, rejected
from test_verify_statement import STATEMENT, completion


# -- 2. text that runs code ----------------------------------------------------------------------

CODE_IN_CONFIGS = {
    # a function in a configuration runs when the tactic does
    "linarith discharger": "  linarith (config := { discharger := Lean.Elab.Tactic.evalTactic default })",
    "solve_by_elim suspend": "  solve_by_elim (config := { suspend := fun _ => pure true })",
    "field with a function": "  simp (discharger := fun _ => pure ())",
    "a config named by a term": "  norm_num (config := unsafeBaseIO (pure {}))",
    "anonymous constructor": "  simp (config := ⟨true, false⟩)",
    "nested record with code": "  simp (config := { decide := true, maxSteps := (id 5) })",
    "eval%": "  exact eval% (2 + 2 = 4)",
    "named argument with a term": "  exact Nat.le_of_lt_succ (m := x)",   # looks the same: rejected too
}


@pytest.mark.parametrize("name", sorted(CODE_IN_CONFIGS))
def test_option_values_that_are_not_literals_are_rejected(name):
    reason = rejected(proof(CODE_IN_CONFIGS[name]))
    assert "not a literal" in reason or "`eval%`" in reason, reason


@pytest.mark.parametrize("text", [
    "  simp (config := {decide := true})",                        # recorded: the REPL's Mathlib test
    "  simp_rw (config := {decide := true}) [h₀]",
    "  simp (config := { decide := true, maxSteps := 100000 }) at h₀ ⊢\n  linarith",
    "  simp +arith at h₀\n  linarith",
    "  decide (config := { kernel := true })",
    "  simp (config := { zeta := false, proj := .default })",   # hypothetical `.name` value: literal
    "  norm_num [Nat.mod_eq_of_lt] at h₀ ⊢\n  omega",
    "  have h : x % 2 = x%2 := rfl\n  linarith",                  # `%` after an identifier is modulo
])
def test_literal_options_pass(text):
    build(proof(text))


BLOCK_ESCAPES = {
    # a line left of the tactic block's column ends the block: Lean reads a command there
    "unknown command at column 1": ("  nlinarith [sq_nonneg (x - 2)]\n frobnicate_all foo", "left of the tactic"),
    "tactic at column 1": ("  norm_num\n linarith", "left of the tactic block"),
    "block opened on the by line": ("  have h : x = 2 := by linarith\n  exact h\n foo", "left of the tactic"),
    # commands that register or run code without `@[`, `elab` or `macro`, at any indentation
    "count_heartbeats in": ("  linarith\ncount_heartbeats in\ntheorem t : True := trivial", "`count_heartbeats`"),
    "grind_propagator": ("  linarith\n  grind_propagator ↓Not foo", "`grind_propagator`"),
    "cbv_eval": ("  linarith\n  cbv_eval foo", "`cbv_eval`"),
    "set_library_suggestions": ("  linarith\n  set_library_suggestions foo", "`set_library_suggestions`"),
}


@pytest.mark.parametrize("name", sorted(BLOCK_ESCAPES))
def test_commands_lean_would_start_in_a_proof_are_rejected(name):
    text, word = BLOCK_ESCAPES[name]
    reason = rejected(proof(text))
    assert word in reason, reason


def test_a_completion_line_left_of_its_tactic_block_is_rejected_but_brackets_may_wrap():
    assert "left of the tactic block" in rejected(completion(
        STATEMENT + "\n    nlinarith [sq_nonneg (x - 2)]\n  frobnicate"))
    # inside brackets the layout does not count (Lean: no column check inside parentheses)
    build(completion(STATEMENT + "\n  nlinarith [sq_nonneg (x - 2),\n sq_nonneg (x + 2)]"))


def _repl_starts(log) -> int:
    return sum(1 for line in log.read_text().splitlines() if json.loads(line).get("event") == "start")


@pytest.mark.parametrize("overrides, text, recycled", [
    ({}, "  linarith", False),
    # native_decide never passes the kernel stage: its policy needs verify.kernel_check = false
    ({"allow_native_decide": True, "kernel_check": False}, "  linarith", False),
    ({"allow_native_decide": True, "kernel_check": False}, "  native_decide", True),  # compiled code ran in the REPL
    ({"allow_commands": ["open"]}, "  linarith", False),              # scopes run nothing
])
def test_a_repl_that_may_have_run_code_is_not_reused(verify_config, tmp_path, overrides, text, recycled):
    log = tmp_path / "repl.log"
    records = [dict(proof(text), id="a"), dict(proof("  linarith"), id="b")]
    config = verify_config(workers=1, repl_args=["--log", str(log)], **overrides)
    verify_records(records, config)
    assert _repl_starts(log) == (2 if recycled else 1)
    assert build(proof(text), **{k: tuple(v) if isinstance(v, list) else v
                                  for k, v in overrides.items() if k != "kernel_check"}).may_run_code is recycled


def test_a_widened_command_that_can_run_code_marks_the_record():
    block = "@[simp] theorem helper (y : ℝ) : y = y := rfl\n\n" + STATEMENT + "\n  linarith"
    assert build(completion(block), allow_commands=("@[",)).may_run_code
    assert not build(completion("open Real in\n" + STATEMENT + "\n  linarith"), allow_commands=("open",)).may_run_code


# -- 3. honest shapes real provers emit (Kimina-Prover-72B, accepted by Lean) --------------------

KIMINA_HEADER = "import Mathlib\nimport Aesop\n\nset_option maxHeartbeats 400000\n\nopen BigOperators Real Nat Topology Rat\n"

HONEST = {
    # numbertheory_2pownm1prime_nprime.lean: a header that re-opens one namespace the trusted one opens
    "re-open one namespace": "import Mathlib\n\nset_option maxHeartbeats 0\n\nopen Nat\n\n" + STATEMENT + "\n  linarith",
    # amc12b_2002_p4.lean (and 7 more): the trusted namespaces in another order, imports swapped
    "re-open in another order": ("import Aesop\nimport Mathlib\n\nset_option maxHeartbeats 0\n\n"
                                 "open BigOperators Nat Rat Real Topology\n\n\n" + STATEMENT + "\n  linarith"),
    # imo_1969_p2.lean: `open Finset in` right after the imports, before a helper (lines 3-6)
    "open in after the imports": ("import Mathlib\n\nopen Finset in\n"
                                  "theorem lemma_8naaj5 {N : ℕ} (hN : N > 0) (z : ℕ → ℂ)\n"
                                  "    (hsum : ∑ i ∈ range N, z i = 0) :\n"
                                  "    ‖z 0‖ ≤ ∑ i ∈ Icc 1 (N - 1), ‖z i‖ := by\n  sorry_free_placeholder\n\n"
                                  + STATEMENT + "\n  linarith"),
    # imo_1969_p2.lean lines 447-448 / 469: `open Real in` before a declaration, Real opened by the header
    "open in before the target": "open Real in\n" + STATEMENT + "\n  linarith",
    # aime_1995_p7.lean lines 63-65: a helper's signature continued at column 0
    "signature continued at column 0": (
        "theorem aime_1995_p7_helper_2 (m n k : ℕ) (hpos : 0 < m ∧ 0 < n ∧ 0 < k)\n"
        "(hrel : Nat.Coprime m n) (hdiff : (m / n : ℝ) - sqrt k = 13 / 4 - sqrt 10) :\n"
        "m = 13 ∧ n = 4 ∧ k = 10 := by\n  rcases hpos with ⟨hm, hn, hk⟩\n  nlinarith\n\n" + STATEMENT + "\n  linarith"),
    # a tactic-level `open … in` inside a helper before the target
    "tactic open in a helper": ("theorem helper (y : ℝ) (h : 0 ≤ y) : Real.sqrt (y ^ 2) = y := by\n"
                                "  open Real in\n  exact sqrt_sq h\n\n" + STATEMENT + "\n  linarith"),
}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_shapes_pass_the_text_checks(name):
    record = {"id": name, "formal_statement": STATEMENT, "header": KIMINA_HEADER,
              "completion": f"```lean4\n{HONEST[name].replace('sorry_free_placeholder', 'simp')}\n```"}
    build(record)


def test_honest_shapes_verify_through_the_stand_in(verify_config):
    records = [{"id": name, "formal_statement": STATEMENT, "header": KIMINA_HEADER,
                "completion": f"```lean4\n{block.replace('sorry_free_placeholder', 'simp')}\n```"}
               for name, block in sorted(HONEST.items())]
    verdicts = verify_records(records, verify_config(workers=1))
    assert {v["id"]: v["verdict"] for v in verdicts} == {r["id"]: "verified" for r in records}, \
        [v["reason"] for v in verdicts]


STILL_REJECTED = {
    # aime_1995_p7.lean line 3: `Set` is a namespace the trusted header does not open
    "header opens a new namespace": ("import Mathlib\n\nopen Real Set\n\n" + STATEMENT + "\n  linarith",
                                     "`open Real Set`, is not a line of the trusted header"),
    "open in before the target, new namespace": ("open Lean in\n" + STATEMENT + "\n  linarith",
                                                 "applies to the target theorem"),
    "open without in after the imports": ("import Mathlib\n\ntheorem helper : True := trivial\nopen Lean\n\n"
                                          + STATEMENT + "\n  linarith", "`open` command"),
    "column 0 outside a signature": ("theorem helper (y : ℝ) : y = y := by\n  rfl\nfoo\n\n" + STATEMENT + "\n  linarith",
                                     "`foo` at the start of a line"),
    "column 0 name the signature did not bind": ("theorem helper (y : ℝ) :\nfrobnicate = y := by\n  rfl\n\n"
                                                 + STATEMENT + "\n  linarith", "`frobnicate` at the start of a line"),
}


@pytest.mark.parametrize("name", sorted(STILL_REJECTED))
def test_what_could_change_the_statement_or_start_a_command_stays_rejected(name):
    block, word = STILL_REJECTED[name]
    record = {"id": name, "formal_statement": STATEMENT, "header": KIMINA_HEADER, "completion": f"```lean4\n{block}\n```"}
    reason = rejected(record)
    assert word in reason, reason
