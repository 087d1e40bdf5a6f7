"""One signal policy for every command (issue 25): SIGTERM and SIGHUP stop a command as Ctrl-C does:
exit 130, the exact command that resumes (or reruns) it, what was written kept, the lock released.

Real `prover` processes throughout. Each is signalled once it holds the lock of its output (the
handlers are installed before that) and is busy: blocked reading an input that is a FIFO nobody
writes (a file being read), generating problems, or training."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, fake_repl_command, kernel_stand_in_sets
from prover_cli.fsio.lock import lock_path

TOY_TINY = ("data.task=toy", "model.name=tiny", "generate.max_tokens=2", "generate.temperature=1.0")


def sets(*overrides: str) -> list[str]:
    return [part for override in overrides for part in ("--set", override)]


def start(args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "prover_cli", *args], cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(REPO)))


def wait_until(ready, process: subprocess.Popen, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"never got ready: {process.communicate()}")
        time.sleep(0.02)


def holds(target: Path):
    """The command holds the lock of `target` (its record is written): its handlers are in place."""
    return lambda: lock_path(target).exists() and bool(lock_path(target).read_text().strip())


def stopped(process: subprocess.Popen, number: signal.Signals, args: list[str], *, resume: str = "",
            starts_over: bool = False) -> str:
    """Send the signal; assert the Ctrl-C path: 130, `Interrupted (SIG…).`, the exact command."""
    process.send_signal(number)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert f"Interrupted ({number.name})." in stderr and "Traceback" not in stderr and "unexpected" not in stderr
    command = shlex.join(["prover", *args] + ([resume] if resume else []))
    expected = f"Rerun with (it starts over): {command}" if starts_over else f"Resume with: {command}"
    assert expected in stderr.splitlines(), stderr
    return stderr


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def open_writer(path: Path):
    """Open a FIFO for writing: returns once the command has opened it to read (and then waits on it)."""
    return open(path, "w")


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGHUP])
def test_prepare_data(tmp_path, number):
    out = tmp_path / "problems.jsonl"
    args = ["prepare-data", "--preset", "countdown", "--out", str(out), *sets("task.countdown.problems=50000000")]
    process = start(args, tmp_path)
    wait_until(holds(out), process)
    stopped(process, number, args, starts_over=True)
    assert not out.exists() and not lock_path(out).exists()   # written whole or not at all


# Commands blocked reading their input (a FIFO nobody writes): (argv from input and output, the
# output's name, whether the command starts over rather than resumes).
READING = {
    "replay-seeds": (lambda source, out: ["replay-seeds", str(source), "--out", str(out)], "replayed", True),
    "generate": (lambda source, out: ["generate", "--problems", str(source), "--out", str(out), *sets(*TOY_TINY)],
                 "samples.jsonl", False),
    "eval": (lambda source, out: ["eval", "--out", str(out), *sets(*TOY_TINY, f"data.problems={source}", "eval.n=1",
                                                                  "eval.k=[1]")], "eval", False),
}


@pytest.mark.parametrize("command, number", [("replay-seeds", signal.SIGTERM), ("replay-seeds", signal.SIGHUP),
                                             ("generate", signal.SIGTERM), ("eval", signal.SIGHUP)])
def test_a_command_reading_its_input(tmp_path, command, number):
    argv, out_name, starts_over = READING[command]
    source, out = fifo(tmp_path / "input.jsonl"), tmp_path / out_name
    args = argv(source, out)
    process = start(args, tmp_path)
    wait_until(holds(out), process)
    with open_writer(source):
        stopped(process, number, args, starts_over=starts_over)
    assert not lock_path(out).exists()
    assert not out.exists() or not out.is_dir() or not any(out.iterdir())   # nothing half-written


def test_verify_sighup_kills_its_repls(tmp_path):
    from test_verify_file import proof, write_proofs
    from test_verify_pool import pid_alive
    from test_verify_robust import log_entries

    log = tmp_path / "repl.log"
    proofs = write_proofs(tmp_path / "p.jsonl", [proof("done"), proof("hang", "  fake_hang")])
    out = tmp_path / "v.jsonl"
    args = ["verify", str(proofs), "--out", str(out),
            *sets(f"verify.repl_command={json.dumps(fake_repl_command('--log', str(log)))}", "verify.workers=1",
                  "verify.timeout_s=600", "verify.canary=false", "verify.memory_limit_gb=0"), *kernel_stand_in_sets()]
    process = start(args, tmp_path)
    wait_until(lambda: any("fake_hang" in e.get("cmd", "") for e in log_entries(log)), process)
    # "done" passed the fast path; its kernel-stage verdict is written as soon as it is known,
    # while the REPL still hangs on the next proof
    wait_until(lambda: out.exists() and '"done"' in out.read_text(), process)
    stopped(process, signal.SIGHUP, args)
    assert not any(pid_alive(e["pid"]) for e in log_entries(log) if e.get("event") == "start")
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["done"]   # kept


@pytest.mark.slow
def test_train_es_sigterm_mid_run_keeps_a_resumable_ledger(tmp_path):
    from prover_cli.es.ledger import read_ledger

    run = tmp_path / "run"
    args = ["train", "es", "--config", str(REPO / "configs" / "toy.toml"),
            *sets(f"run.dir={run}", f"model.cache_dir={tmp_path.parent / 'tiny-model-cache'}", "es.iterations=500")]
    process = start(args, tmp_path)
    wait_until(lambda: (run / "ledger.json").exists() and '"iterations": [\n[' in (run / "ledger.json").read_text(),
               process)   # an iteration is committed: the ledger holds a record
    stopped(process, signal.SIGTERM, args, resume="--resume")
    _, records = read_ledger(run / "ledger.json")
    assert 1 <= len(records) < 500 and not lock_path(run).exists()
    again = subprocess.run([sys.executable, "-m", "prover_cli", *args], cwd=tmp_path, capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert again.returncode == 1 and "--resume" in again.stderr   # a plain rerun says how to go on


@pytest.mark.slow
def test_train_grpo_sighup_mid_run(tmp_path):
    run = tmp_path / "run"
    args = ["train", "grpo", "--config", str(REPO / "tests" / "configs" / "tiny.toml"),
            *sets(f"run.dir={run}", f"model.cache_dir={tmp_path.parent / 'tiny-model-cache'}", "data.task=toy",
                  "grpo.steps=500", "grpo.save_every=1", "grpo.max_completion_length=4")]
    process = start(args, tmp_path)
    wait_until(lambda: (run / "metrics.jsonl").exists() and (run / "metrics.jsonl").read_text().strip(), process)
    stopped(process, signal.SIGHUP, args, resume="--resume")
    assert not lock_path(run).exists()


# A child that logs from its main thread and from a worker thread all the time, is signalled at a
# random point (mostly inside logging, where the main thread spends its time), and then does what
# a command's cleanup does: joins the worker, which logs, and logs itself. Raising inside
# logging's hand-paired acquire/release leaves its lock held and the join waits for ever (issue
# #30: `prover verify` asleep in `poll` after Ctrl-C); each trial must end, at every point.
_LOGGING_CHILD = r'''
import faulthandler, logging, os, random, signal, sys, threading
faulthandler.dump_traceback_later(float(sys.argv[3]), exit=True)   # a hang ends with the tracebacks
from prover_cli.signals import stop_signals_as_interrupt
log = logging.getLogger("stress")
log.addHandler(logging.StreamHandler(open(os.devnull, "w")))
log.setLevel(logging.INFO)
rng = random.Random(int(sys.argv[2]))
interrupted = 0
for trial in range(int(sys.argv[1])):
    stop = threading.Event()
    def worker(stop=stop, trial=trial):   # this trial's event: a later trial rebinds the names
        while not stop.is_set():
            log.info("worker %d", trial)
    thread = threading.Thread(target=worker)
    thread.start()
    number = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)[trial % 3]
    sender = threading.Timer(rng.random() * 0.003, os.kill, (os.getpid(), number))
    try:
        with stop_signals_as_interrupt():
            try:
                sender.start()   # inside the try: a short timer can fire before start() returns
                while True:
                    log.info("main %d", trial)
            finally:
                stop.set()
                thread.join()
                log.info("cleaned up %d", trial)
    except KeyboardInterrupt:
        interrupted += 1
    sender.join()
print("interrupted", interrupted, flush=True)
'''


@pytest.mark.parametrize("seed", [0, 1])
def test_a_signal_at_any_point_of_a_logging_loop_neither_deadlocks_nor_is_lost(tmp_path, seed):
    child = tmp_path / "child.py"
    child.write_text(_LOGGING_CHILD, encoding="utf-8")
    trials = 150
    result = subprocess.run([sys.executable, str(child), str(trials), str(seed), "400"], text=True,
                            capture_output=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=500)
    assert result.returncode == 0, result.stderr[-4000:]   # faulthandler's exit on a hang: the stacks
    assert result.stdout.split() == ["interrupted", str(trials)]   # every signal interrupted its trial


def test_a_signal_held_off_logging_is_raised_where_the_main_thread_resumes_our_code():
    """The handler, called as the signal machinery would call it with the main thread inside
    logging's `Handler.handle` (the frame it was interrupted in), holds the signal; it is raised
    at the first line the main thread runs outside logging, and leaves no tracer behind."""
    import logging

    from prover_cli import signals

    seen = []

    class Probe(logging.Handler):
        def emit(self, record):
            if seen:
                seen.append(record.getMessage())
                return
            interrupted_in = sys._getframe(1)   # logging's Handler.handle, holding the handler lock
            assert interrupted_in.f_code.co_filename == logging.__file__
            signals._handler(signal.SIGTERM, interrupted_in)
            seen.append("held while inside logging")

    log = logging.getLogger("held-off")
    log.addHandler(Probe())
    log.propagate = False
    if sys.gettrace() is not None:
        pytest.skip("a tracer (coverage, a debugger) is in charge: the signal is raised at once then")
    with pytest.raises(KeyboardInterrupt) as raised:
        with signals.stop_signals_as_interrupt():
            log.warning("x")
            seen.append("never: raised before this line runs")
    assert seen == ["held while inside logging"]
    assert signals.signal_of(raised.value) == "SIGTERM"
    assert sys.gettrace() is None and signals._state["pending"] is None
    log.warning("the handler lock was released")   # from another thread: would hang if still held
    worker = __import__("threading").Thread(target=log.warning, args=("from a thread",))
    worker.start()
    worker.join(timeout=60)
    assert seen == ["held while inside logging", "the handler lock was released", "from a thread"]
