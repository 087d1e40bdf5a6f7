"""The REPL pool: one bad proof affects only its own verdict; header once per process; restarts,
recycling, process-group kills; failures that are not the proof's fault stop the batch."""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict

import pytest

from prover_cli.config import DEFAULT_HEADER
from prover_cli.errors import BackendError
from prover_cli.verify import verify_records
from prover_cli.verify.lean.pool import ReplPool
from conftest import PATIENCE_S, fake_repl_command, wait_until
from test_verify_statement import STATEMENT


def proof(record_id: str, text: str = "  linarith", **extra) -> dict:
    return {"id": record_id, "formal_statement": STATEMENT, "proof": text, **extra}


def read_log(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def requests_by_pid(path) -> dict[int, list[dict]]:
    by_pid = defaultdict(list)
    for entry in read_log(path):
        if "kind" in entry:
            by_pid[entry["pid"]].append(entry)
    return by_pid


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# -- faults stay with their proof ----------------------------------------------------------------

def test_hang_is_a_timeout_within_the_deadline_and_the_batch_goes_on(verify_config):
    # 1 s is the deadline under test; the healthy proofs share it, against a stand-in that answers
    # in milliseconds. The header's deadline is the hang guard: a hang it ended would be far longer.
    config = verify_config(workers=1, timeout_s=1.0)
    records = [proof("a"), proof("hang", "  fake_hang"), proof("b"), proof("c")]
    start = time.monotonic()
    verdicts = verify_records(records, config)
    elapsed = time.monotonic() - start
    assert [v["verdict"] for v in verdicts] == ["verified", "timeout", "verified", "verified"]
    hang = verdicts[1]
    assert "verify.timeout_s = 1" in hang["reason"]
    assert 1.0 <= hang["time_s"] < config.header_timeout_s  # ended by its own deadline, no other
    assert elapsed < config.header_timeout_s


@pytest.mark.parametrize("marker, word", [
    ("fake_crash", "exited with code 3"),
    ("fake_garbage", "not JSON"),
])
def test_crash_or_garbage_is_an_error_for_that_proof_only(verify_config, tmp_path, marker, word):
    log = tmp_path / "repl.log"
    config = verify_config(workers=1, repl_args=["--log", str(log)])
    verdicts = verify_records([proof("a"), proof("bad", f"  {marker}"), proof("b"), proof("c")], config)
    assert [v["verdict"] for v in verdicts] == ["verified", "error", "verified", "verified"]
    assert word in verdicts[1]["reason"]
    by_pid = requests_by_pid(log)
    assert len(by_pid) == 2  # the broken process was replaced ...
    for entries in by_pid.values():  # ... and the new one ran the header again first
        assert entries[0]["kind"] == "header" and sum(e["kind"] == "header" for e in entries) == 1


def test_memory_limit_kills_only_the_greedy_proof(verify_config):
    config = verify_config(workers=1, memory_limit_gb=1.0)
    verdicts = verify_records([proof("hog", "  fake_mem"), proof("ok")], config)
    assert [v["verdict"] for v in verdicts] == ["error", "verified"]
    assert "MemoryError" in verdicts[0]["reason"]


def test_protocol_error_is_an_error_and_the_process_is_replaced(verify_config, tmp_path):
    log = tmp_path / "repl.log"
    config = verify_config(workers=1, repl_args=["--log", str(log)])
    verdicts = verify_records([proof("p", "  fake_protocol_error"), proof("ok")], config)
    assert [v["verdict"] for v in verdicts] == ["error", "verified"]
    assert len(requests_by_pid(log)) == 2


def test_timeout_kills_the_whole_process_group(verify_config, tmp_path):
    """`lake env repl` starts `repl` as a child: killing only lake would leave it running."""
    log = tmp_path / "repl.log"
    config = verify_config(workers=1, timeout_s=0.5, repl_args=["--spawn-child", "--log", str(log)])
    [verdict] = verify_records([proof("hang", "  fake_hang")], config)
    assert verdict["verdict"] == "timeout"
    spawned = [e for e in read_log(log) if e.get("event") == "spawned"]
    assert len(spawned) == 1
    child = spawned[0]["child"]
    wait_until(lambda: not pid_alive(child), what=f"the REPL's child {child} to end")
    assert not pid_alive(child)


# -- the header runs once per process -------------------------------------------------------------

def test_header_runs_once_per_process_and_proofs_use_its_env(verify_config, tmp_path):
    import threading

    log, gate = tmp_path / "repl.log", tmp_path / "gate"
    # the proofs are held until both REPLs have run their header: so both workers get proofs,
    # whatever the machine's speed (a --delay only made that likely)
    config = verify_config(workers=2, repl_args=["--log", str(log), "--hold", "linarith", str(gate)])

    def open_gate() -> None:
        try:
            wait_until(lambda: len({e["pid"] for e in read_log(log) if e.get("kind") == "header"}) == 2,
                       what="both REPLs' headers")
        finally:
            gate.touch()

    threading.Thread(target=open_gate, daemon=True).start()
    verdicts = verify_records([proof(f"p{k}") for k in range(12)], config)
    assert all(v["verdict"] == "verified" for v in verdicts)
    by_pid = requests_by_pid(log)
    assert len(by_pid) == 2  # both workers were used
    for entries in by_pid.values():
        assert [e["kind"] for e in entries].count("header") == 1
        assert entries[0]["kind"] == "header" and entries[0]["cmd"] == DEFAULT_HEADER
        # the trusted statement runs in the header's env (once per problem and process), the
        # proofs in the env it returns (1: the header's is 0)
        assert [e["env"] for e in entries if e["kind"] == "trusted"] == [0]
        assert all(e["env"] == 1 for e in entries if e["kind"] == "cmd")


def test_each_header_gets_its_own_env_in_the_same_process(verify_config, tmp_path):
    log = tmp_path / "repl.log"
    other = "import Mathlib\nopen Nat\n"
    records = [proof(f"p{k}", header=other if k % 2 else None) for k in range(6)]
    for record in records:
        if record["header"] is None:
            del record["header"]
    verdicts = verify_records(records, verify_config(workers=1, repl_args=["--log", str(log)]))
    assert all(v["verdict"] == "verified" for v in verdicts)
    [entries] = requests_by_pid(log).values()
    headers = [e for e in entries if e["kind"] == "header"]
    assert sorted(e["cmd"] for e in headers) == sorted([DEFAULT_HEADER, other])


def test_processes_are_recycled_after_max_proofs(verify_config, tmp_path):
    log = tmp_path / "repl.log"
    config = verify_config(workers=1, max_proofs_per_process=3, repl_args=["--log", str(log)])
    verdicts = verify_records([proof(f"p{k}") for k in range(7)], config)
    assert all(v["verdict"] == "verified" for v in verdicts)
    by_pid = requests_by_pid(log)
    # proof commands per process (the trusted statement, once per problem and process, aside)
    proofs = [sum(e["kind"] == "cmd" for e in entries) for entries in by_pid.values()]
    assert sorted(proofs) == [1, 3, 3]
    assert all([e["kind"] for e in entries].count("header") == 1 for entries in by_pid.values())


def test_no_repl_process_outlives_the_batch(verify_config, tmp_path):
    log = tmp_path / "repl.log"
    verify_records([proof("a"), proof("b"), proof("c")], verify_config(repl_args=["--log", str(log)]))
    pids = [e["pid"] for e in read_log(log) if e.get("event") == "start"]
    assert pids and not any(pid_alive(pid) for pid in pids)


# -- failures that are not the proof's fault stop the batch ---------------------------------------

@pytest.mark.parametrize("marker, word", [
    ("fake_header_error", "does not elaborate"),
    ("fake_header_crash", "failed while running the header"),
    ("fake_header_hang", "verify.header_timeout_s"),
])
def test_header_failure_stops_the_batch_with_a_backend_error(verify_config, marker, word):
    config = verify_config(workers=2, header_timeout_s=0.5)
    records = [proof(f"p{k}", header=f"import Mathlib\n-- x\n{marker}\n") for k in range(3)]
    with pytest.raises(BackendError) as info:
        verify_records(records, config)
    assert word in str(info.value)


def test_failing_callback_stops_hanging_workers_without_waiting_for_their_deadline(verify_config):
    from prover_cli.verify.text.statement import candidate_from_record

    config = verify_config(workers=3)   # the hanging proofs' deadline is the hang guard, PATIENCE_S
    records = [proof("ok"), proof("h1", "  fake_hang"), proof("h2", "  fake_hang")]
    candidates = [candidate_from_record(r, DEFAULT_HEADER) for r in records]
    pool = ReplPool(config)

    def explode(candidate, verdict):
        raise OSError("disk full")

    start = time.monotonic()
    with pytest.raises(OSError):
        pool.run(candidates, explode)
    pool.close()
    assert time.monotonic() - start < config.timeout_s  # the hanging proofs' deadline was not waited out
    assert not any(p.alive for p in pool.processes)


def test_unknown_repl_program_is_a_backend_error(verify_config):
    config = verify_config(repl_command=["/nonexistent/lake", "env", "repl"])
    with pytest.raises(BackendError) as info:
        verify_records([proof("a")], config)
    assert "cannot start" in str(info.value)


# -- a transport factory given to verify_records / verify_file reaches the pool ---------------

def test_transport_factory_is_passed_on_by_verify_records_and_verify_file(verify_config, tmp_path):
    """The configured REPL command cannot start; only the factory's transports (the stand-in)
    can answer, so a verdict proves the factory was used, on every entry point."""
    from prover_cli.config import Config
    from prover_cli.verify.engine import close_warm_verifiers, verify_file
    from prover_cli.verify.lean.transport import LocalTransport

    made = []

    def factory():
        made.append(1)
        return LocalTransport(fake_repl_command())

    config = verify_config(workers=1, repl_command=[str(tmp_path / "no-such-repl")])
    record = {"id": "a", "formal_statement": "theorem t : 1 + 1 = 2 := by", "proof": "  rfl"}
    assert verify_records([record], config, transport_factory=factory)[0]["verdict"] == "verified"
    assert len(made) == 1
    try:
        assert verify_records([record], config, keep_warm=True, transport_factory=factory)[0]["verdict"] == "verified"
        assert len(made) == 2
    finally:
        close_warm_verifiers()
    full = Config()
    full.verify = config
    proofs = tmp_path / "proofs.jsonl"
    proofs.write_text(json.dumps(record) + "\n", encoding="utf-8")
    summary = verify_file(full, proofs_path=proofs, out_path=tmp_path / "out.jsonl", transport_factory=factory)
    assert summary["verified"] == 1 and len(made) == 3
    with pytest.raises(BackendError):   # and without the factory the configured command is what runs
        verify_records([record], config)


def test_ctrl_c_while_a_worker_is_still_starting_its_repl_stops_at_once(verify_config):
    """A Ctrl-C that lands while a worker is between spawning its REPL and learning its process
    group used to find nothing to signal: the worker then waited out `verify.header_timeout_s`
    (seen as a 120 s hang of a real `prover verify` under load). The pool signals until every
    worker has returned."""
    import signal
    import threading

    from prover_cli.verify.text.statement import candidate_from_record
    from prover_cli.verify.lean.transport import LocalTransport

    config = verify_config(workers=1)   # header_timeout_s: the hang guard, the wait the bug would sit out
    starting, signalled = threading.Event(), threading.Event()

    class SlowToStart(LocalTransport):
        def start(self) -> None:
            # the window, held open by events rather than a sleep: the interrupt lands, and the pool
            # signals (finding no process), before this worker's REPL process exists
            starting.set()
            signalled.wait(PATIENCE_S)
            super().start()

        def signal_kill(self) -> None:
            super().signal_kill()
            signalled.set()

    never = ["sh", "-c", "sleep 600", *fake_repl_command()]   # a REPL that never answers its header
    pool = ReplPool(config, lambda: SlowToStart(never, None, 0.0))
    threading.Thread(target=lambda: (starting.wait(PATIENCE_S), os.kill(os.getpid(), signal.SIGINT)),
                     daemon=True).start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        pool.run([candidate_from_record(proof("a"), config.header)], lambda candidate, verdict: None)
    assert signalled.is_set()
    assert time.monotonic() - start < config.header_timeout_s   # not waited out
    assert not any(proc.alive for proc in pool.processes)
