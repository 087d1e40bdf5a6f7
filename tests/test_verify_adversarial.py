"""The verdict end to end (records -> verify_records -> REPL stand-in -> verdicts): every cheat class
is rejected, honest proofs are verified. The stand-in is not Lean: Lean-level outcomes (errors,
sorry warnings, axioms) are driven by its markers, documented in tests/fake_repl.py."""

from __future__ import annotations

import json

import pytest

from prover_cli.config import DEFAULT_HEADER
from prover_cli.verify import verify_records
from test_verify_denylist import CHEATS
from test_verify_statement import REJECTED_COMPLETIONS, STATEMENT, completion



def proof(record_id: str, text: str, statement: str = STATEMENT) -> dict:
    return {"id": record_id, "formal_statement": statement, "proof": text}


def logged_commands(log_path) -> list[str]:
    if not log_path.exists():
        return []
    return [e["cmd"] for e in map(json.loads, log_path.read_text().splitlines()) if "cmd" in e]


# -- cheats found in the text never reach the REPL ---------------------------------------------

def test_denylisted_cheats_are_rejected_and_never_run(verify_config, tmp_path):
    log = tmp_path / "repl.log"
    records = [proof(name, text) for name, text in sorted(CHEATS.items())]
    records += [dict(completion(block), id=f"completion {name}")
                for name, block in sorted(REJECTED_COMPLETIONS.items()) if "block" not in name]
    verdicts = verify_records(records, verify_config(repl_args=["--log", str(log)]))
    assert [v["id"] for v in verdicts] == [r["id"] for r in records]
    for verdict in verdicts:
        assert verdict["verdict"] == "rejected", (verdict["id"], verdict["reason"])
        assert verdict["axioms"] is None and verdict["messages"] == []
    assert logged_commands(log) == []  # nothing was sent, not even the header


def test_where_clause_and_option_cheats_never_run_and_a_harmless_clause_reaches_lean(verify_config, tmp_path):
    """A `where` clause cannot hide a command, an attribute or a denied word, and no option reaches
    the target's statement: rejected before the REPL. A harmless clause is sent with the proof; its
    verdict here is the stand-in's (marker-driven, not Lean's): the text checks let it through."""
    from test_verify_allowlist import OPTIONS_BEFORE_TARGET, WHERE_CHEATS, WHERE_HARMLESS

    log = tmp_path / "repl.log"
    records = [dict(completion(STATEMENT + tail), id=f"where {name}")
               for name, (tail, _) in sorted(WHERE_CHEATS.items())]
    records += [dict(completion(prefix + STATEMENT + "\n  linarith"), id=f"option {name}")
                for name, prefix in sorted(OPTIONS_BEFORE_TARGET.items())]
    verdicts = verify_records(records, verify_config(repl_args=["--log", str(log)]))
    assert [(v["id"], v["verdict"]) for v in verdicts] == [(r["id"], "rejected") for r in records]
    assert logged_commands(log) == []
    harmless = WHERE_HARMLESS["column 0"]
    [verdict] = verify_records([proof("where harmless", harmless.lstrip("\n"))],
                               verify_config(workers=1, repl_args=["--log", str(log)]))
    assert verdict["verdict"] == "verified", verdict["reason"]
    assert any("where\n  aux (y : ℝ)" in cmd for cmd in logged_commands(log))


# -- cheats only Lean can see: the answers decide ----------------------------------------------

LEAN_LEVEL = {
    # marker in the proof             expected verdict, a word of the reason
    "fake_error": ("rejected", "Lean error"),
    "fake_kernel_error": ("rejected", "(kernel)"),
    "fake_sorry": ("rejected", "sorry"),
    "fake_sorry_ws": ("rejected", "sorry"),        # warning only, Lean <= 4.27 quotes
    "fake_sorry_wb": ("rejected", "sorry"),        # warning only, newer backticks
    "fake_sorries_only": ("rejected", "sorry"),    # sorries list only
    "fake_axiom_sorryAx": ("rejected", "sorryAx"),
    "fake_axiom_myCheat": ("rejected", "myCheat"),
    "fake_axiom_Lean__ofReduceBool": ("rejected", "Lean.ofReduceBool"),
    "fake_axioms_garbled": ("rejected", "#print axioms"),
    "fake_axioms_silent": ("rejected", "#print axioms"),
    "fake_axioms_twice": ("rejected", "#print axioms"),
    "fake_axioms_error": ("rejected", "#print axioms"),
    "fake_axioms_other": ("rejected", "Other._prover_same"),   # an answer about another declaration
    "fake_noenv": ("error", "env"),
    "fake_protocol_error": ("error", "protocol"),
    "fake_info": ("verified", "all checks"),
    "fake_warning": ("verified", "all checks"),
    "fake_no_axioms": ("verified", "all checks"),
}


@pytest.mark.parametrize("marker", sorted(LEAN_LEVEL))
def test_lean_level_outcomes(verify_config, marker):
    status, word = LEAN_LEVEL[marker]
    [verdict] = verify_records([proof(marker, f"  linarith\n  {marker}")], verify_config(workers=1))
    assert (verdict["verdict"], marker) == (status, marker) and word in verdict["reason"], verdict["reason"]
    if status == "verified":
        assert set(verdict["axioms"]) <= {"propext", "Classical.choice", "Quot.sound"}


def test_native_decide_policy_admits_its_axiom_only_when_on(verify_config):
    records = [proof("nd", "  native_decide\n  fake_axiom_Lean__ofReduceBool")]
    assert verify_records(records, verify_config(workers=1))[0]["verdict"] == "rejected"
    # native_decide cannot pass the kernel stage (its replay cannot run native code): the fast path alone
    [verdict] = verify_records(records, verify_config(workers=1, allow_native_decide=True, kernel_check=False))
    assert verdict["verdict"] == "verified" and "Lean.ofReduceBool" in verdict["axioms"]


def test_sorry_that_passes_the_text_is_still_caught_by_the_answers(verify_config):
    # If the denylist ever missed a sorry, rules 3 and 5 still see it: the stand-in answers a
    # `sorry` like the tactic_sorry transcript and lists sorryAx.
    from prover_cli.verify.lean.pool import ReplPool
    from prover_cli.verify.text.statement import Candidate

    pool = ReplPool(verify_config(workers=1))
    got = []
    try:
        pool.run([Candidate("s", DEFAULT_HEADER, STATEMENT + "\n  sorry", "amc_p1", STATEMENT)],
                 lambda c, v: got.append(v))
    finally:
        pool.close()
    assert got[0].status == "rejected" and "sorry" in got[0].reason


# -- honest proofs are verified, comments and identifiers with denied words included -----------

def test_honest_proofs_with_denied_words_in_comments_and_names_are_verified(verify_config):
    from test_verify_denylist import HONEST

    records = [proof(f"honest {k}", text) for k, text in enumerate(HONEST)]
    for verdict in verify_records(records, verify_config()):
        assert verdict["verdict"] == "verified", (verdict["id"], verdict["reason"])
        assert set(verdict["axioms"]) <= {"propext", "Classical.choice", "Quot.sound"}


def _jsonl(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_lean_workbook_proofs_as_completions_are_verified(verify_config, shared):
    """100 real Goedel-Prover files (header, comments, theorem, proof) as model completions."""
    rows = _jsonl(shared("data", "proofs", "lean_workbook_goedel_kimina_fixtures.jsonl"))
    records = [{"id": r["id"], "formal_statement": r["formal_statement"],
                "completion": f"Here is the proof.\n```lean4\n{r['full_code']}\n```"} for r in rows]
    verdicts = verify_records(records, verify_config())
    assert len(verdicts) == 100
    bad = [(v["id"], v["reason"]) for v in verdicts if v["verdict"] != "verified"]
    assert bad == []


def test_minif2f_human_proofs_as_proofs_are_verified(verify_config, shared):
    rows = _jsonl(shared("data", "minif2f", "minif2f_valid_few_shot_proofs.jsonl"))
    records = [{"id": r["name"], "formal_statement": r["formal_statement"], "proof": r["formal_proof"]}
               for r in rows]
    verdicts = verify_records(records, verify_config())
    assert len(verdicts) == 67 and all(v["verdict"] == "verified" for v in verdicts), \
        [(v["id"], v["reason"]) for v in verdicts if v["verdict"] != "verified"]


def test_mutated_real_proofs_are_rejected(verify_config, shared):
    """The data README's suggestions: statement edits, renames, sorry bodies, added axioms."""
    row = _jsonl(shared("data", "proofs", "lean_workbook_goedel_kimina_fixtures.jsonl"))[0]
    code, name, statement = row["full_code"], row["id"], row["formal_statement"]
    body = code[code.index(statement) + len(statement):]
    mutants = {
        "sorry body": code.replace(body, "\n  sorry\n"),
        "numeral in statement": code.replace("≥ 1/4", "≥ 1/3", 1),
        "renamed": code.replace(f"theorem {name}", f"theorem {name}_x", 1),
        "added axiom": code.replace(f"theorem {name}", f"axiom cheat : False\ntheorem {name}", 1),
        "admit tail": code.rstrip() + "\n  admit\n",
    }
    assert all(m != code for m in mutants.values())
    records = [{"id": k, "formal_statement": statement, "completion": f"```lean4\n{m}\n```"}
               for k, m in mutants.items()]
    for verdict in verify_records(records, verify_config()):
        assert verdict["verdict"] == "rejected", (verdict["id"], verdict["reason"])
