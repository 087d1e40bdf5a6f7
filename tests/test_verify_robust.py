"""One bad record never stops a run; resume notices changes; REPLs die with their parent; a REPL
killed from outside is retried once. Real processes throughout (the stand-in REPL, `prover verify`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import PATIENCE_S, REPO, wait_until
from prover_cli.verify import verify_file, verify_records
from test_verify_file import proof, read_jsonl, write_config, write_proofs
from test_verify_pool import pid_alive




def log_entries(path):
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def load(cfg_path):
    from prover_cli.config import load_config

    return load_config(cfg_path, [])


# -- one bad record never stops a run ------------------------------------------------------------

def test_lone_surrogates_are_per_record_verdicts_and_carried_fields_are_escaped(tmp_path):
    cfg = load(write_config(tmp_path / "c.toml"))
    proofs = tmp_path / "p.jsonl"
    lines = [json.dumps(proof("ok")),
             json.dumps(proof("bad proof", "  linarith \ud800")),                 # untrusted: rejected
             json.dumps(proof("bad field", note="keep \udc80 this")),             # carried: escaped
             json.dumps(dict(proof("bad statement"), formal_statement="theorem x \ud800 : 1 = 1 := by")),
             json.dumps(proof("after"))]
    proofs.write_text("\n".join(lines) + "\n", encoding="ascii")   # json.dumps escapes to \ud800
    summary = verify_file(cfg, proofs_path=proofs, out_path=tmp_path / "v.jsonl")
    rows = {r["id"]: r for r in read_jsonl(tmp_path / "v.jsonl")}
    assert rows["ok"]["verdict"] == "verified" and rows["after"]["verdict"] == "verified"
    assert rows["bad proof"]["verdict"] == "rejected" and "lone surrogate" in rows["bad proof"]["reason"]
    assert rows["bad field"]["verdict"] == "verified" and rows["bad field"]["note"] == "keep \\udc80 this"
    assert rows["bad statement"]["verdict"] == "error" and "surrogate" in rows["bad statement"]["reason"]
    assert summary["proofs"] == 5


def test_an_exception_preparing_one_record_is_that_records_error(verify_config, monkeypatch):
    import prover_cli.verify.engine as engine

    real = engine.candidate_from_record

    def flaky(record, *args, **kwargs):
        if record["id"] == "boom":
            raise RuntimeError("something nobody foresaw")
        return real(record, *args, **kwargs)

    monkeypatch.setattr(engine, "candidate_from_record", flaky)
    verdicts = verify_records([proof("a"), proof("boom"), proof("b")], verify_config())
    assert [v["verdict"] for v in verdicts] == ["verified", "error", "verified"]
    assert "RuntimeError: something nobody foresaw" in verdicts[1]["reason"]


def test_an_exception_judging_one_proof_is_that_proofs_error(verify_config, monkeypatch):
    import prover_cli.verify.lean.pool as pool

    real = pool.judge_proof

    def flaky(response):
        if "unused variable" in json.dumps(response):   # the stand-in's answer to fake_warning
            raise ValueError("a judge bug")
        return real(response)

    monkeypatch.setattr(pool, "judge_proof", flaky)
    verdicts = verify_records([proof("a"), proof("bug", "  linarith\n  fake_warning"), proof("b")],
                              verify_config(workers=1))
    assert [v["verdict"] for v in verdicts] == ["verified", "error", "verified"]
    assert "ValueError: a judge bug" in verdicts[1]["reason"]


# -- resume notices what changed -------------------------------------------------------------------

def test_resume_rechecks_a_line_whose_record_or_policy_changed(tmp_path):
    proofs = tmp_path / "p.jsonl"
    out = tmp_path / "v.jsonl"
    write_proofs(proofs, [proof("same"), proof("edited"), proof("native", "  native_decide\n  fake_axiom_Lean__ofReduceBool")])
    native_on = load(write_config(tmp_path / "n.toml", allow_native_decide=True, kernel_check=False))
    first = verify_file(native_on, proofs_path=proofs, out_path=out)
    assert (first["verified"], first["checked"], first["rechecked"]) == (3, 3, 0)
    assert all(set(r["digest"]) == {"record", "policy"} for r in read_jsonl(out))

    again = verify_file(native_on, proofs_path=proofs, out_path=out)
    assert (again["checked"], again["resumed"], again["rechecked"]) == (0, 3, 0)

    # the proof of one id became `sorry`: that line is checked again and superseded
    write_proofs(proofs, [proof("same"), proof("edited", "  sorry"),
                          proof("native", "  native_decide\n  fake_axiom_Lean__ofReduceBool")])
    edited = verify_file(native_on, proofs_path=proofs, out_path=out)
    assert (edited["checked"], edited["rechecked"], edited["verified"], edited["rejected"]) == (1, 1, 2, 1)

    # the policy changed: every line is stale; under the default policy native_decide is rejected
    default = load(write_config(tmp_path / "d.toml"))
    strict = verify_file(default, proofs_path=proofs, out_path=out)
    assert strict["rechecked"] == 3 and strict["verified"] == 1 and strict["rejected"] == 2
    last = {r["id"]: r for r in read_jsonl(out)}
    assert last["native"]["verdict"] == "rejected" and last["edited"]["verdict"] == "rejected"


def test_set_option_max_heartbeats_in_inside_the_proof_is_verified(verify_config):
    # (directly before the target it is rejected: it would reach the statement, test_verify_allowlist.py)
    from test_verify_statement import STATEMENT, completion

    block = ("set_option maxHeartbeats 400000 in\ntheorem helper (y : ℝ) : y + 0 = y := by simp\n\n"
             + STATEMENT + "\n  set_option maxHeartbeats 400000 in\n  linarith")
    [verdict] = verify_records([completion(block)], verify_config())
    assert verdict["verdict"] == "verified", verdict["reason"]


# -- a REPL killed from outside: retried once, then `error` with the signal ------------------------

def _kill_repls_on_proof(log, gate, kills: int, stop: threading.Event) -> list[int]:
    """Kill -9 (from outside) the REPL process that receives the proof, `kills` times; the REPLs
    hold the proof (`--hold linarith GATE`) until then, so each kill lands before any answer
    whatever the machine's speed; then `gate` opens and a later REPL answers."""
    killed: list[int] = []

    def run() -> None:
        while not stop.is_set() and len(killed) < kills:
            for entry in log_entries(log):
                if entry.get("kind") == "cmd" and "linarith" in entry.get("cmd", "") \
                        and entry["pid"] not in killed:
                    os.kill(entry["pid"], signal.SIGKILL)
                    killed.append(entry["pid"])
                    break
            time.sleep(0.01)
        gate.touch()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return killed


@pytest.mark.parametrize("kills, expected", [(1, "verified"), (2, "error")])
def test_a_repl_killed_from_outside_is_retried_once(verify_config, tmp_path, kills, expected):
    log, gate = tmp_path / "repl.log", tmp_path / "gate"
    stop = threading.Event()
    killed = _kill_repls_on_proof(log, gate, kills, stop)
    try:
        [verdict] = verify_records([proof("oom")], verify_config(
            workers=1, repl_args=["--log", str(log), "--hold", "linarith", str(gate)]))
    finally:
        stop.set()
        gate.touch()
    assert len(killed) == kills
    assert verdict["verdict"] == expected, verdict["reason"]
    if expected == "error":
        assert "SIGKILL" in verdict["reason"] and "twice" in verdict["reason"]
    starts = [e for e in log_entries(log) if e.get("event") == "start"]
    assert len(starts) == 2   # the first REPL and one fresh REPL for the retry, never a third


def test_a_repl_that_crashes_by_itself_is_not_retried(verify_config, tmp_path):
    log = tmp_path / "repl.log"
    [verdict] = verify_records([proof("c", "  fake_crash")], verify_config(workers=1, repl_args=["--log", str(log)]))
    assert verdict["verdict"] == "error" and "exited with code 3" in verdict["reason"]
    assert len([e for e in log_entries(log) if e.get("event") == "start"]) == 1


# -- REPLs die with their parent -------------------------------------------------------------------

def _start_prover_verify(tmp_path):
    """`prover verify` on one proof that hangs in the REPL; returns (process, REPL pid)."""
    log = tmp_path / "repl.log"
    cfg = write_config(tmp_path / "c.toml", repl_args=["--log", str(log), "--spawn-child"], timeout_s=600.0,
                       workers=1)
    proofs = write_proofs(tmp_path / "p.jsonl", [proof("hang", "  fake_hang")])
    argv = [sys.executable, "-m", "prover_cli", "verify", str(proofs), "--out", str(tmp_path / "v.jsonl"),
            "--config", str(cfg), "--json"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    victim = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def hung_and_spawner():   # both log lines: the spawner's may come after its child's, on a slow machine
        entries = log_entries(log)
        hung = [e["pid"] for e in entries if e.get("kind") == "cmd" and "fake_hang" in e.get("cmd", "")]
        spawner = [e["pid"] for e in entries if e.get("event") == "spawned"]
        return hung and spawner and [hung[0], *spawner]

    try:
        pids = wait_until(hung_and_spawner, victim, "the REPL to receive the proof")
    except BaseException:
        victim.kill()
        raise
    return victim, pids


def _all_gone(pids) -> bool:
    wait_until(lambda: not any(pid_alive(pid) for pid in pids), what="the REPL processes to end")
    return True


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_hung_repls_die_with_prover_verify(tmp_path, how):
    victim, repl_pids = _start_prover_verify(tmp_path)
    assert all(pid_alive(pid) for pid in repl_pids)
    victim.send_signal(how)
    victim.communicate(timeout=PATIENCE_S)
    if how == signal.SIGTERM:   # handled like Ctrl-C (KeyboardInterrupt), not the default death by signal
        assert victim.returncode not in (0, -signal.SIGTERM), victim.returncode
    assert _all_gone(repl_pids), "a REPL process outlived `prover verify`"
    assert not [r for r in read_jsonl(tmp_path / "v.jsonl")] if (tmp_path / "v.jsonl").exists() else True
