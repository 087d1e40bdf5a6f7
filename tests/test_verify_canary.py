"""The canary (prover_cli/verify/lean/canary.py): honest proofs verify and one cheat per rule is rejected
on the configured toolchain, or verification refuses to run naming the rule. Run here against the
REPL stand-in; the canary texts are real Lean, and each `--quirk` of the stand-in breaks one rule
the way a different Lean version could."""

from __future__ import annotations

import json

import pytest

from prover_cli.errors import BackendError
from prover_cli.verify import verify_records
from prover_cli.verify.lean.canary import CANARIES, canary_cache_key
from test_verify_file import proof


@pytest.fixture
def cache(tmp_path, monkeypatch):
    path = tmp_path / "canary-cache"
    monkeypatch.setenv("PROVER_CANARY_CACHE", str(path))
    return path


def canary_config(verify_config, *repl_args, **overrides):
    return verify_config(workers=1, canary=True, repl_args=list(repl_args), **overrides)


def test_canary_passes_on_the_stand_in_once_per_toolchain_then_is_cached(verify_config, cache, tmp_path):
    log = tmp_path / "repl.log"
    config = canary_config(verify_config, "--log", str(log))
    assert [v["verdict"] for v in verify_records([proof("a")], config)] == ["verified"]
    canary_cmds = [e for e in map(json.loads, log.read_text().splitlines()) if "prover_canary" in e.get("cmd", "")]
    assert len(canary_cmds) >= len(CANARIES)
    cached = json.loads((cache / f"{canary_cache_key(config)}.json").read_text())
    assert cached["ok"] is True and {r["canary"] for r in cached["results"]} == {c.name for c in CANARIES}
    log.unlink()
    assert [v["verdict"] for v in verify_records([proof("b")], config)] == ["verified"]
    assert "prover_canary" not in log.read_text()   # cached: not run again for this toolchain


@pytest.mark.parametrize("quirk, rule", [
    ("sorry-invisible", "a proof with `sorry` is rejected"),
    ("check-ignores-context", "a hypothesis added to the target is rejected"),
])
def test_a_rule_that_does_not_hold_stops_verification_and_is_named(verify_config, cache, quirk, rule):
    config = canary_config(verify_config, "--quirk", quirk)
    with pytest.raises(BackendError) as info:
        verify_records([proof("a")], config)
    assert "verification refuses to run" in str(info.value) and rule in str(info.value)
    assert not cache.exists() or not list(cache.iterdir())   # a failure is never cached


@pytest.mark.parametrize("version", ["4.15", "4.22", "4.29"])
def test_native_decide_canary_holds_for_every_supported_lean_version(verify_config, cache, version):
    config = canary_config(verify_config, "--lean-version", version, allow_native_decide=True, kernel_check=False)
    [verdict] = verify_records([proof("n", "  native_decide")], config)
    assert verdict["verdict"] == "verified"
    strict = canary_config(verify_config, "--lean-version", version)
    [verdict] = verify_records([proof("n", "  native_decide")], strict)
    assert verdict["verdict"] == "rejected"


def test_an_unknown_native_axiom_fails_the_canary_closed(verify_config, cache):
    config = canary_config(verify_config, "--quirk", "native-axiom-renamed", allow_native_decide=True, kernel_check=False)
    with pytest.raises(BackendError) as info:
        verify_records([proof("a")], config)
    assert "`native_decide` is verified under verify.allow_native_decide" in str(info.value)


def test_cli_refuses_to_verify_and_names_the_rule(tmp_path, cache):
    from typer.testing import CliRunner

    from prover_cli.cli import app
    from test_verify_file import write_config, write_proofs

    cfg = write_config(tmp_path / "c.toml", repl_args=["--quirk", "sorry-invisible"], canary=True)
    proofs = write_proofs(tmp_path / "p.jsonl", [proof("a")])
    result = CliRunner().invoke(app, ["verify", str(proofs), "--out", str(tmp_path / "v.jsonl"), "--config", str(cfg)])
    assert result.exit_code == 1
    assert "refuses to run" in result.stderr and "`sorry` is rejected" in result.stderr
    assert not (tmp_path / "v.jsonl").exists() or (tmp_path / "v.jsonl").read_text() == ""


def test_doctor_runs_the_canary(tmp_path):
    from prover_cli.config import VerifyConfig
    from prover_cli.doctor import check_canary
    from conftest import fake_repl_command

    config = VerifyConfig()
    config.repl_command, config.workers, config.memory_limit_gb = fake_repl_command(), 1, 0.0
    check = check_canary(config)
    assert check.ok and "canaries as expected" in check.detail
    config.repl_command = fake_repl_command("--quirk", "check-ignores-context")
    check = check_canary(config)
    assert not check.ok and "added to the target" in check.detail


def test_the_canary_covers_every_binder_shape_and_a_universe_polymorphic_target():
    honest = {c.name: c for c in CANARIES if c.expect == "verified"}
    statements = " ".join(c.statement for c in honest.values())
    assert len(honest) == 5
    assert "prover_canary_decide : 2 + 2 = 4" in statements              # no binders
    assert "prover_canary_helper_use (n : Nat)" in statements             # explicit first
    assert "prover_canary_implicit {n : Nat}" in statements               # implicit first
    assert "prover_canary_instance_first [Inhabited Nat]" in statements   # instance first
    assert "prover_canary_universe.{u} {α : Sort u}" in statements       # universe-polymorphic
    assert any(c.name == "universe specialised" and c.expect == "rejected" for c in CANARIES)


def test_a_failing_canary_names_the_rule_and_shows_what_lean_answered_next_to_what_we_expected(
        verify_config, cache):
    # a Lean that accepts any target for the statement check (the stand-in's quirk)
    config = canary_config(verify_config, "--quirk", "check-ignores-context")
    with pytest.raises(BackendError) as info:
        verify_records([proof("a")], config)
    message = str(info.value)
    assert "rule `a proof of a universe-polymorphic target for one universe only is rejected" in message
    assert "canary 'universe specialised': expected rejected, got verified; Lean answered: all checks passed" in message
    assert "trusted statement: `theorem prover_canary_universe_cheat.{u} {α : Sort u}" in message
    assert "checked: `theorem prover_canary_universe_cheat {α : Prop}" in message


def test_a_canary_rejected_by_lean_quotes_lean_in_the_reason(verify_config, cache):
    from prover_cli.verify.lean.canary import failures_message, run_canary
    from prover_cli.verify.lean.pool import ReplPool

    pool = ReplPool(verify_config(workers=1))
    try:
        results = {r["canary"]: r for r in run_canary(pool)}
    finally:
        pool.close()
    cheat = results["added hypothesis"]
    assert cheat["ok"] and cheat["got"] == "rejected"
    assert "Lean answered: type mismatch" in cheat["reason"]
    # were it expected to pass, the refusal would carry Lean's words
    message = failures_message([dict(cheat, ok=False, expect="verified")])
    assert "expected verified, got rejected; Lean answered: statement check:" in message and "type mismatch" in message
