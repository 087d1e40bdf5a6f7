"""One writer per output: a second process is refused with the holder's pid and command and
changes nothing; a lock left by a `kill -9`ed process is taken over. Real processes throughout."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import PATIENCE_S, REPO, fake_repl_command, kernel_stand_in_sets, wait_until
from prover_cli.fsio.lock import LockedError, hold_outputs, lock_path, output_lock

# A child process that takes the lock of argv[1], says so, and holds it until stdin closes.
HOLDER = textwrap.dedent("""
    import sys
    from prover_cli.fsio.lock import output_lock
    with output_lock(sys.argv[1]):
        print("locked", flush=True)
        sys.stdin.read()
""")


def start_holder(target: Path) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(target), "--marker"], cwd=REPO,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "locked"
    return child


def test_second_process_is_refused_with_the_holders_pid_and_command(tmp_path):
    run_dir = tmp_path / "runs" / "x"
    child = start_holder(run_dir)
    try:
        with pytest.raises(LockedError) as err:
            with output_lock(run_dir):
                pytest.fail("took a lock another live process holds")
        message = str(err.value)
        assert f"pid {child.pid}" in message and "--marker" in message and str(run_dir) in message
    finally:
        child.stdin.close()
        child.wait(timeout=PATIENCE_S)
    assert not lock_path(run_dir).exists()  # a clean release leaves nothing behind
    with output_lock(run_dir) as previous:
        assert previous is None


def test_lock_of_a_killed_process_is_taken_over(tmp_path):
    target = tmp_path / "verdicts.jsonl"
    child = start_holder(target)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=PATIENCE_S)
    assert lock_path(target).exists()  # left behind, with the dead holder's record
    with hold_outputs([target]) as taken_over:
        assert [(p.name, r["pid"]) for p, r in taken_over] == [("verdicts.jsonl", child.pid)]
        record = json.loads(lock_path(target).read_text())
        assert record["pid"] == os.getpid()


def test_reentrant_within_one_process_and_a_fresh_acquirer_after_release(tmp_path):
    target = tmp_path / "out.jsonl"
    with output_lock(target):
        with output_lock(tmp_path / "." / "out.jsonl"):  # same file, another spelling: re-entered
            pass
        assert lock_path(target).exists()  # the outer hold is still there
        child = subprocess.run([sys.executable, "-c", HOLDER, str(target)], cwd=REPO, input="",
                               capture_output=True, text=True)
        assert child.returncode == 1 and "LockedError" in child.stderr and f"pid {os.getpid()}" in child.stderr
    child = subprocess.run([sys.executable, "-c", HOLDER, str(target)], cwd=REPO, input="",
                           capture_output=True, text=True)
    assert child.returncode == 0 and child.stdout.strip() == "locked"


def proofs_file(path: Path, n: int) -> Path:
    from test_verify_statement import STATEMENT

    path.write_text("".join(json.dumps({"id": f"p{i}", "formal_statement": STATEMENT, "proof": "  linarith"}) + "\n"
                            for i in range(n)), encoding="utf-8")
    return path


def test_two_prover_verify_runs_on_one_out(tmp_path):
    """The first run holds its --out until the test lets its REPL start; the second is refused
    meanwhile, exits 1 naming the first's pid, and writes nothing: every id ends up once."""
    proofs = proofs_file(tmp_path / "samples.jsonl", 5)
    out = tmp_path / "verdicts.jsonl"
    go = tmp_path / "go"
    gated = ["sh", "-c", f'while [ ! -e "{go}" ]; do sleep 0.05; done; exec "$0" "$@"', *fake_repl_command()]
    args = ["verify", str(proofs), "--out", str(out), "--set", f"verify.repl_command={json.dumps(gated)}",
            "--set", "verify.workers=1", "--set", "verify.memory_limit_gb=0", *kernel_stand_in_sets()]
    first = subprocess.Popen([sys.executable, "-m", "prover_cli", *args], cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: lock_path(out).exists() and lock_path(out).read_text(), first, "the first run's lock")
        second = subprocess.run([sys.executable, "-m", "prover_cli", *args], cwd=tmp_path,
                                capture_output=True, text=True, timeout=PATIENCE_S)
        assert second.returncode == 1, second.stderr
        errors = [line for line in second.stderr.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and "in use by another prover process" in errors[0]
        assert f"pid {first.pid}" in errors[0] and "prover verify" in errors[0]
        assert not out.exists() or out.read_text() == ""  # the second wrote nothing
    finally:
        go.touch()
        stdout, stderr = first.communicate(timeout=PATIENCE_S)
    assert first.returncode == 0, stderr
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert sorted(ids) == [f"p{i}" for i in range(5)]
    assert not lock_path(out).exists()


def test_cli_train_and_generate_refused_while_the_run_dir_is_held(tmp_path):
    """In-process CLI calls against a run dir a child process holds: refused before any write."""
    from typer.testing import CliRunner

    from prover_cli.cli import app

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    child = start_holder(run_dir)
    try:
        runner = CliRunner()
        for args in (["train", "es", "--config", str(REPO / "configs" / "demo.toml")],
                     ["train", "grpo", "--config", str(REPO / "configs" / "demo.toml")],
                     ["generate", "--config", str(REPO / "configs" / "demo.toml")]):  # default out: <run.dir>/samples.jsonl
            result = runner.invoke(app, [*args, "--set", f"run.dir={run_dir}"])
            assert result.exit_code == 1, (args, result.stderr)
            assert f"pid {child.pid}" in result.stderr and "in use by another prover process" in result.stderr
        assert sorted(p.name for p in run_dir.iterdir()) == []  # nothing written: no config.toml, no ledger
        dry = runner.invoke(app, ["train", "es", "--config", str(REPO / "configs" / "demo.toml"),
                                  "--set", f"run.dir={run_dir}", "--dry-run"])
        assert dry.exit_code == 0, dry.stderr  # a plan writes nothing, so it needs no lock
    finally:
        child.stdin.close()
        child.wait(timeout=PATIENCE_S)


def test_ctrl_c_prints_the_resume_command_and_releases_the_lock(tmp_path):
    """A real SIGINT to a running `prover verify`: exit 130, the exact rerun command, no lock left."""
    proofs = proofs_file(tmp_path / "samples.jsonl", 2)
    out = tmp_path / "verdicts.jsonl"
    never = ["sh", "-c", "sleep 600", *fake_repl_command()]  # the REPL never answers: the run waits
    args = ["verify", str(proofs), "--out", str(out), "--set", f"verify.repl_command={json.dumps(never)}",
            "--set", "verify.workers=1", *kernel_stand_in_sets()]
    run = subprocess.Popen([sys.executable, "-m", "prover_cli", *args], cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: lock_path(out).exists() and lock_path(out).read_text(), run, "the run's lock")
    run.send_signal(signal.SIGINT)
    _, stderr = run.communicate(timeout=PATIENCE_S)
    assert run.returncode == 130, stderr
    assert "Interrupted." in stderr and "Traceback" not in stderr
    resume = next(line for line in stderr.splitlines() if line.startswith("Resume with: "))
    assert resume == "Resume with: " + shlex.join(["prover", *args])
    assert not lock_path(out).exists()


def test_a_ctrl_c_that_lands_in_exec_of_a_string_still_exits_130(tmp_path):
    """CPython marks a KeyboardInterrupt escaping `exec(<str>)` (dataclasses build methods that
    way, so a Ctrl-C during an import lands there) as unhandled; under `python -m` that made a
    handled interrupt end the process by SIGINT (-2) instead of 130, now and then."""
    (tmp_path / "interrupted_in_exec.py").write_text(textwrap.dedent("""
        import sys, typer
        from prover_cli.cli import _command

        @_command
        def verify():
            exec("raise KeyboardInterrupt")

        try:
            verify()
        except typer.Exit as exc:
            sys.exit(exc.exit_code)
    """), encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "interrupted_in_exec"], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])})
    assert run.returncode == 130, run.stderr
    assert "Interrupted." in run.stderr


# -- the target's identity and nesting (issue 25) ----------------------------------------------------

def _verify_args(proofs: Path, out: Path) -> list[str]:
    return ["verify", str(proofs), "--out", str(out), "--set",
            f"verify.repl_command={json.dumps(fake_repl_command())}", "--set", "verify.workers=1",
            "--set", "verify.memory_limit_gb=0", "--set", "verify.canary=false"]


def test_a_hard_link_or_a_deleted_lock_file_does_not_let_a_second_writer_in(tmp_path):
    """The holder flocks the output file itself: another name for it (a hard link) and a lock
    file deleted by hand are both refused, naming the holder's pid (read from /proc/locks)."""
    from typer.testing import CliRunner

    from prover_cli.cli import app

    out = tmp_path / "verdicts.jsonl"
    out.write_text("")
    link = tmp_path / "also-verdicts.jsonl"
    os.link(out, link)
    proofs = proofs_file(tmp_path / "samples.jsonl", 2)
    child = start_holder(out)
    try:
        runner = CliRunner()
        through_link = runner.invoke(app, _verify_args(proofs, link))
        assert through_link.exit_code == 1, through_link.stderr
        assert "hard link" in through_link.stderr and f"pid {child.pid}" in through_link.stderr
        lock_path(out).unlink()   # deleted by hand while the holder runs
        after_delete = runner.invoke(app, _verify_args(proofs, out))
        assert after_delete.exit_code == 1, after_delete.stderr
        assert f"pid {child.pid}" in after_delete.stderr and "unexpected" not in after_delete.stderr
        assert out.read_text() == ""   # neither wrote a verdict
        assert not lock_path(out).exists() and not lock_path(link).exists()   # and they left no lock file
    finally:
        child.stdin.close()
        child.wait(timeout=PATIENCE_S)


def test_outputs_inside_a_held_run_dir_and_run_dirs_holding_a_held_output_are_refused(tmp_path):
    """verify/generate/replay-seeds writing inside a run dir `train es` holds would mix into its
    files; so would `train es` on a run dir that holds an output another command writes."""
    from typer.testing import CliRunner

    from prover_cli.cli import app

    run_dir = tmp_path / "runs" / "es"
    run_dir.mkdir(parents=True)
    proofs = proofs_file(tmp_path / "samples.jsonl", 2)
    runner = CliRunner()
    child = start_holder(run_dir)
    try:
        for args in (_verify_args(proofs, run_dir / "verdicts.jsonl"),
                     ["generate", "--problems", str(proofs), "--out", str(run_dir / "sub" / "samples.jsonl")],
                     ["replay-seeds", str(tmp_path / "ledger.json"), "--out", str(run_dir / "replayed")]):
            result = runner.invoke(app, args)
            assert result.exit_code == 1, (args, result.stderr)
            assert f"inside {run_dir}" in " ".join(result.stderr.split()) and f"pid {child.pid}" in result.stderr
        assert sorted(p.name for p in run_dir.iterdir()) == []
    finally:
        child.stdin.close()
        child.wait(timeout=PATIENCE_S)
    child = start_holder(run_dir / "eval" / "verdicts.jsonl")
    try:
        result = runner.invoke(app, ["train", "es", "--config", str(REPO / "configs" / "toy.toml"),
                                     "--set", f"run.dir={run_dir}"])
        assert result.exit_code == 1, result.stderr
        assert "which another prover process writes" in result.stderr and f"pid {child.pid}" in result.stderr
    finally:
        child.stdin.close()
        child.wait(timeout=PATIENCE_S)


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_while_the_lock_is_being_taken_leaves_no_lock_file(tmp_path, monkeypatch, number):
    """The signal lands after the lock file is written but before anything owns its release (the
    window behind a flaky `prepare-data` SIGHUP test): it is held, raised once the lock is owned,
    and the `finally` removes the lock file."""
    import prover_cli.fsio.lock as lock_module
    from prover_cli.signals import stop_signals_as_interrupt

    real_acquire = lock_module._acquire

    def acquire_then_signalled(path, target):
        taken = real_acquire(path, target)
        os.kill(os.getpid(), number)   # delivered to this (main) thread at once
        return taken

    monkeypatch.setattr(lock_module, "_acquire", acquire_then_signalled)
    target = tmp_path / "out.jsonl"
    body_ran = False
    with stop_signals_as_interrupt():
        with pytest.raises(KeyboardInterrupt):
            with output_lock(target):
                body_ran = True
    assert not body_ran
    assert not lock_path(target).exists()
    assert lock_module._HELD == {}
    monkeypatch.setattr(lock_module, "_acquire", real_acquire)
    with output_lock(target):   # and the next writer gets in
        assert lock_path(target).exists()
