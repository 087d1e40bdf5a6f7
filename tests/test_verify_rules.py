"""The verdict rules on REPL answers: axioms messages, errors, sorries, names."""

from __future__ import annotations

import pytest

from prover_cli.config import VerifyConfig
from prover_cli.verify.text.rules import (
    Verdict,
    alias_command,
    allowed_axioms,
    judge_alias,
    judge_proof,
    parse_axioms_message,
    protocol_problem,
    read_trusted_namespace,
    trusted_command,
)

ALLOWED = {"propext", "Classical.choice", "Quot.sound"}


@pytest.mark.parametrize("data, parsed", [
    ("'foo' depends on axioms: [propext, Classical.choice, Quot.sound]",
     ("foo", ["propext", "Classical.choice", "Quot.sound"])),
    ("'foo' does not depend on any axioms", ("foo", [])),
    ("`foo` does not depend on any axioms", ("foo", [])),                  # newer quoting
    ("'Scope.fromBytes'_append' depends on axioms: [propext]", ("Scope.fromBytes'_append", ["propext"])),
    ("'foo' depends on axioms: [propext,\n  Classical.choice,\n  Quot.sound]\n",   # wrapped list
     ("foo", ["propext", "Classical.choice", "Quot.sound"])),
    ("'foo' depends on axioms: propext", None),
    ("'foo' depends on axioms: []", None),
    ("foo depends on axioms: [propext]", None),
    ("Try this: exact h", None),
    ("'foo' depends on axioms: [propext] and more", None),
    (None, None),
])
def test_parse_axioms_message(data, parsed):
    assert parse_axioms_message(data) == parsed


def info(data):
    return {"severity": "info", "pos": {"line": 1, "column": 0}, "endPos": {"line": 1, "column": 13}, "data": data}


def test_alias_answer_must_be_one_message_naming_the_alias_with_allowed_axioms():
    ok = {"env": 3, "messages": [info("'_prover_same' depends on axioms: [propext]")]}
    assert judge_alias(ok, "t", ALLOWED, []).status == "verified"
    other = {"env": 3, "messages": [info("'Foo._prover_same' depends on axioms: [propext]")]}
    assert "not the target" in judge_alias(other, "t", ALLOWED, []).reason
    cheat = {"env": 3, "messages": [info("'_prover_same' depends on axioms: [propext, sorryAx]")]}
    verdict = judge_alias(cheat, "t", ALLOWED, [])
    assert verdict.status == "rejected" and "sorryAx" in verdict.reason and verdict.axioms == ["propext", "sorryAx"]
    assert judge_alias({"env": 3}, "t", ALLOWED, []).status == "rejected"
    twice = {"env": 3, "messages": [info("'_prover_same' depends on axioms: [propext]")] * 2}
    assert judge_alias(twice, "t", ALLOWED, []).status == "rejected"
    warned = {"env": 3, "messages": [dict(info("'_prover_same' depends on axioms: [propext]"), severity="warning")]}
    assert judge_alias(warned, "t", ALLOWED, []).status == "rejected"
    assert judge_alias({"message": "Unknown environment."}, "t", ALLOWED, []).status == "error"


def test_an_error_in_the_alias_is_the_statement_check_failing_and_quotes_lean():
    mismatch = {"env": 4, "messages": [
        {"severity": "error", "pos": {"line": 1, "column": 60}, "endPos": {"line": 1, "column": 70},
         "data": "type mismatch\n  @t\nhas type\n  False → 1 = 2 : Prop\nbut is expected to have type\n  1 = 2 : Prop"},
        info("'_prover_same' depends on axioms: [sorryAx]")]}
    verdict = judge_alias(mismatch, "t", ALLOWED, [])
    assert verdict.status == "rejected" and verdict.reason.startswith("statement check:")
    assert "Lean answered: type mismatch" in verdict.reason and "False → 1 = 2" in verdict.reason


def test_the_commands_lean_compares_with_refer_to_absolute_names():
    command = alias_command("Ns.", "amc_p1")
    assert command.startswith("theorem _root_._prover_same : type_of% @_root_.Ns._prover_trusted := "
                              "@_root_.Ns.amc_p1\n")
    assert command.endswith("set_option pp.fullNames true in\n#print axioms _root_._prover_same")
    trusted = trusted_command(" (x : ℝ) (h : x = 2) : x + 0 = 2 ")
    assert trusted.startswith("axiom _prover_hole {p : Prop} : p\n\ntheorem _prover_trusted (x : ℝ) (h : x = 2) "
                              ": x + 0 = 2 := _prover_hole\n")
    assert trusted.endswith("set_option pp.fullNames true in\n#print axioms _prover_trusted")


@pytest.mark.parametrize("data, namespace", [
    ("'_prover_trusted' depends on axioms: [_prover_hole]", ""),
    ("'GameState._prover_trusted' depends on axioms: [GameState._prover_hole, propext]", "GameState."),
    ("'_prover_trusted' depends on axioms: [_prover_hole, propext, Classical.choice, Quot.sound]", ""),
    ("'Other' depends on axioms: [propext]", None),
    ("'X_prover_trusted' depends on axioms: [propext]", None),
    ("_prover_trusted : 1 = 1", None),
])
def test_the_trusted_answer_gives_the_namespace_the_header_leaves_open(data, namespace):
    assert read_trusted_namespace({"env": 1, "messages": [info(data)]})[0] == namespace
    assert read_trusted_namespace({"env": 1, "messages": [info(data)] * 2})[0] is None
    error = {"severity": "error", "pos": {"line": 3, "column": 0}, "data": "unknown identifier 'Foo'"}
    missing, why = read_trusted_namespace({"env": 1, "messages": [error, info(data)]})
    assert missing is None and "unknown identifier" in why


def test_unknown_severity_counts_as_an_error():
    response = {"env": 1, "messages": [{"severity": "trace", "data": "x"}]}
    assert judge_proof(response).status == "rejected"
    assert judge_proof({"env": 1, "messages": [info("fine")]}) is None


@pytest.mark.parametrize("response, problem", [
    ({"message": "Unknown environment."}, "protocol error"),
    ({"messages": []}, "no integer `env`"),
    ({"env": True}, "no integer `env`"),
    ({"env": 1, "messages": "oops"}, "malformed `messages`"),
    ([1, 2], "not an object"),
])
def test_protocol_problems(response, problem):
    assert problem in protocol_problem(response)
    assert judge_proof(response).status == "error"


def test_native_decide_policy_adds_the_native_axioms_of_every_supported_lean_version():
    config = VerifyConfig()
    default = allowed_axioms(config)
    native_names = ["Lean.ofReduceBool", "Lean.trustCompiler",                  # Lean <= 4.28
                    "amc_p1._native.native_decide.ax_1_1",                      # Lean >= 4.29
                    "Foo.bar._native.native_decide.ax_2_10", "t._native.bv_decide.ax_1_5"]
    assert not any(name in default for name in native_names)
    config.allow_native_decide = True
    native = allowed_axioms(config)
    assert set(native) == ALLOWED | {"Lean.ofReduceBool", "Lean.trustCompiler"}
    assert all(name in native for name in native_names)
    # anything else still fails closed, lookalikes included
    for other in ["Lean.ofReduceNat", "sorryAx", "myCheat", "t._native.native_decide.ax",
                  "t._native.native_decide.ax_1_1.extra", "t._native.other_tactic.ax_1_1",
                  "_native.native_decide.ax_1_1", "a b._native.native_decide.ax_1_1"]:
        assert other not in native, other


def test_allowed_axioms_read_the_typed_config_without_coercion():
    from types import SimpleNamespace

    with pytest.raises(AttributeError):   # no fallback to a default policy
        allowed_axioms(SimpleNamespace(allowed_axioms=["propext"]))
    for key, value in [("allow_native_decide", "false"), ("allow_native_decide", 1),
                       ("allowed_axioms", "propext"), ("allowed_axioms", [None])]:
        config = VerifyConfig()
        setattr(config, key, value)
        with pytest.raises(TypeError):    # `bool("false")` would admit the native axioms
            allowed_axioms(config)


def test_verdict_status_is_checked():
    with pytest.raises(ValueError):
        Verdict("maybe", "no such verdict")
