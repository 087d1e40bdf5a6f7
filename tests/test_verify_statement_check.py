"""The statement check Lean performs (rule 4, pool.py): the trusted statement is declared as
`_prover_trusted` in the header's environment before the proof runs, and after the proof Lean must
accept `theorem _root_._prover_same : type_of% @_root_._prover_trusted := @_root_.<target>`. The text
checks are widened here (`verify.allow_commands`) so that the cheats reach the (stand-in) REPL and
only the Lean-side check can catch them. The stand-in compares the two declarations' texts and
scopes (tests/fake_repl.py), so it is not kinder than Lean on these."""

from __future__ import annotations

import json
import time

import pytest

from conftest import PATIENCE_S, fake_repl_command
from prover_cli.config import DEFAULT_HEADER
from prover_cli.verify import verify_records
from prover_cli.verify.lean.repl import ReplProcess
from prover_cli.verify.text.rules import alias_command, judge_alias, read_trusted_namespace, trusted_command
from prover_cli.verify.text.statement import trusted_signature
from test_verify_statement import STATEMENT, completion

WIDE = ["variable", "open", "namespace", "end", "section"]
ALLOWED = {"propext", "Classical.choice", "Quot.sound"}


def test_stand_in_statement_check_follows_the_statement_text_and_its_scope():
    proc = ReplProcess(fake_repl_command())
    proc.start()
    try:
        deadline = time.monotonic() + PATIENCE_S   # answers that should come: the hang guard
        header = proc.request({"cmd": DEFAULT_HEADER}, deadline)["env"]
        trusted = proc.request({"cmd": trusted_command(trusted_signature(STATEMENT)), "env": header}, deadline)
        namespace, _ = read_trusted_namespace(trusted)
        assert namespace == ""

        def verdict(cmd: str) -> str:
            env = proc.request({"cmd": cmd, "env": trusted["env"]}, deadline)["env"]
            answer = proc.request({"cmd": alias_command(namespace, "amc_p1"), "env": env}, deadline)
            return judge_alias(answer, "amc_p1", ALLOWED, []).reason

        assert verdict(STATEMENT + "\n  linarith") == "all checks passed"
        assert verdict("theorem helper : True := trivial\n" + STATEMENT + "\n  linarith") == "all checks passed"
        assert "type mismatch" in verdict("variable [Fact False]\n" + STATEMENT + "\n  linarith")
        assert "type mismatch" in verdict("open Lean\n" + STATEMENT + "\n  linarith")
        assert "type mismatch" in verdict(STATEMENT.replace("(h₀", "(h : False) (h₀") + "\n  linarith")
        assert "unknown identifier '_root_.amc_p1'" in verdict("namespace Foo\n" + STATEMENT + "\n  linarith")
        assert "unknown identifier '_root_.amc_p1'" in verdict(STATEMENT.replace("amc_p1", "amc_p2") + "\n  linarith")
    finally:
        proc.kill()


LEAN_ONLY_CHEATS = {
    # completion block (text checks widened)   a word of the reason
    "instance variable": ("variable [Fact False]\n\n" + STATEMENT + "\n  linarith", "statement check"),
    "variable in": ("variable (h : False) in\n" + STATEMENT + "\n  linarith", "statement check"),
    "open changes names": ("theorem helper : True := trivial\nopen Lean\n\n" + STATEMENT + "\n  linarith",
                           "statement check"),
    "namespace": ("namespace Foo\n\n" + STATEMENT + "\n  linarith", "_root_.amc_p1"),
    "section variable": ("section\nvariable [Subsingleton ℕ]\n" + STATEMENT + "\n  linarith\nend", "statement check"),
}


@pytest.mark.parametrize("name", sorted(LEAN_ONLY_CHEATS))
def test_cheats_the_text_checks_let_through_are_rejected_by_lean(name, verify_config):
    block, word = LEAN_ONLY_CHEATS[name]
    [verdict] = verify_records([completion(block)], verify_config(workers=1, allow_commands=WIDE))
    assert verdict["verdict"] == "rejected", verdict["reason"]
    assert word in verdict["reason"]


def test_honest_proofs_pass_the_statement_check_and_the_statement_runs_once_per_problem(verify_config, tmp_path):
    log = tmp_path / "repl.log"
    records = [{"id": f"p{k}", "formal_statement": STATEMENT, "proof": "  linarith"} for k in range(4)]
    records.append(dict(completion("theorem helper : True := trivial\n\n"
                                   + STATEMENT + "\n  set_option maxHeartbeats 400000 in\n  linarith"), id="c"))
    verdicts = verify_records(records, verify_config(workers=1, repl_args=["--log", str(log)]))
    assert [v["verdict"] for v in verdicts] == ["verified"] * 5, [v["reason"] for v in verdicts]
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    trusted = [e for e in entries if e.get("kind") == "trusted"]
    aliases = [e for e in entries if e.get("kind") == "alias"]
    assert len(trusted) == 1            # the trusted statement, once per problem (and process)
    assert len(aliases) == 5            # the statement and axiom check, one per proof
    proofs = [e for e in entries if e.get("kind") == "cmd"]
    assert {e["env"] for e in proofs} == {1}   # every proof runs where the trusted statement was declared


def test_unexpected_axioms_output_fails_closed(verify_config):
    # the proof declares the target with a marker that garbles the alias's `#print axioms` answer
    [verdict] = verify_records([{"id": "g", "formal_statement": STATEMENT,
                                 "proof": "  linarith\n  fake_axioms_garbled"}], verify_config(workers=1))
    assert verdict["verdict"] == "rejected" and "no parseable" in verdict["reason"]


def test_a_trusted_statement_that_does_not_elaborate_is_an_error_of_the_record(verify_config):
    from prover_cli.verify.lean.pool import ReplPool
    from prover_cli.verify.text.statement import Candidate

    # the body is fine; the trusted statement alone gets an error from the stand-in
    statement = "theorem amc_p1 (x : ℝ) (h₀ : 2 * x = 4 ∨ fake_error) : x = 2 := by"
    body = STATEMENT + "\n  linarith"
    pool = ReplPool(verify_config(workers=1))
    got = []
    try:
        pool.run([Candidate("s", DEFAULT_HEADER, body, "amc_p1", statement)], lambda c, v: got.append(v))
    finally:
        pool.close()
    assert got[0].status == "error" and "trusted statement does not elaborate" in got[0].reason


def test_check_answers_have_the_shape_of_the_recorded_transcript(shared):
    """`#check` in the real REPL (dup_msg transcript): one info message with pos/endPos, then env;
    an unknown name is an error message with an env. The stand-in answers in the same shape."""
    from prover_cli.verify.lean.repl import parse_responses

    transcript = shared("lean-repl-transcripts", "dup_msg.expected.out")
    _, known, unknown = parse_responses(transcript.read_bytes())
    proc = ReplProcess(fake_repl_command())
    proc.start()
    try:
        deadline = time.monotonic() + PATIENCE_S   # answers that should come: the hang guard
        env = proc.request({"cmd": "theorem f : True := trivial"}, deadline)["env"]
        ours = proc.request({"cmd": "#check @f", "env": env}, deadline)
        theirs_missing = proc.request({"cmd": "#check @g", "env": env}, deadline)
    finally:
        proc.kill()
    for real, fake in ((known, ours), (unknown, theirs_missing)):
        assert set(fake) == set(real) == {"messages", "env"}
        assert [set(m) for m in fake["messages"]] == [set(m) for m in real["messages"]]
        assert [m["severity"] for m in fake["messages"]] == [m["severity"] for m in real["messages"]]
