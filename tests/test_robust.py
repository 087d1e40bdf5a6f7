"""Every command as careful as `prover verify` (issue 25): the right verdict wins, faults and bad
input are named (never "unexpected"), one bad line costs one line. Signals: tests/test_signals.py."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import REPO
from prover_cli.cli import app
from test_verify_file import proof, write_config, write_proofs

runner = CliRunner()


def one_line(text: str) -> str:
    """Rich wraps long lines at the terminal width: compare the words."""
    return " ".join(text.split())


# -- 1. eval scores the verdict that is current: the last line of an id ------------------------------

def test_eval_scores_the_last_verdict_of_an_id_as_verify_reports_it(tmp_path):
    """Verify 20 proofs, verify them again into the same --out under a stricter policy: verify
    appends 20 rechecked lines and reports 0 verified; eval --verdicts must say the same."""
    proofs = write_proofs(tmp_path / "samples.jsonl",
                          [proof(f"p{i // 2}/{i % 2}", problem_id=f"p{i // 2}") for i in range(20)])
    config = write_config(tmp_path / "c.toml")
    out = tmp_path / "verdicts.jsonl"
    first = runner.invoke(app, ["verify", str(proofs), "--out", str(out), "--config", str(config), "--json"])
    assert first.exit_code == 0 and json.loads(first.stdout)["verified"] == 20, first.stderr
    strict = runner.invoke(app, ["verify", str(proofs), "--out", str(out), "--config", str(config), "--json",
                                 "--set", 'verify.allowed_axioms=["propext"]'])
    summary = json.loads(strict.stdout)
    assert summary["verified"] == 0 and summary["rechecked"] == 20, strict.stderr
    assert len(out.read_text().splitlines()) == 40   # both verdicts of every id are in the file

    scored = runner.invoke(app, ["eval", "--verdicts", str(out), "--k", "1,2", "--json", "--set", "eval.plot=false"])
    assert scored.exit_code == 0, scored.stderr
    result = json.loads(scored.stdout)
    assert result["verified"] == 0 and result["pass@1"] == 0.0 and result["pass@2"] == 0.0
    assert result["samples"] == 20 and result["superseded_lines"] == 20


# -- 2. final/ is the newest complete model, whatever was killed when; a finished run rewrites nothing -

@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.getbasetemp() / "tiny-model-cache"  # shared with the other modules


def files_with_identity(directory: Path) -> dict[str, tuple[int, int, bytes]]:
    """name -> (inode, mtime, bytes): a rewrite with the same bytes still shows."""
    return {str(p.relative_to(directory)): (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_an_extended_grpo_run_killed_before_its_final_save_resumes_to_the_newest_checkpoint(tmp_path, cache_dir):
    import shutil

    from prover_cli import grpo
    from prover_cli.config import load_config
    from prover_cli.model_dir import same_weights

    run = tmp_path / "run"

    def config(steps):
        return load_config(REPO / "tests" / "configs" / "tiny.toml",
                           [f"run.dir={run}", f"model.cache_dir={cache_dir}", "grpo.max_completion_length=8",
                            "data.task=toy", f"grpo.steps={steps}", "grpo.save_every=1"])   # toy: a gradient at once

    grpo.train_grpo(config(2))
    shutil.copytree(run / "final", tmp_path / "final-at-2")
    grpo.train_grpo(config(4), resume=True)
    assert same_weights(run / "final", run / "checkpoints" / "checkpoint-4")
    # the state a kill -9 leaves once checkpoint-4 is complete but before the final save
    shutil.rmtree(run / "final")
    shutil.copytree(tmp_path / "final-at-2", run / "final")
    assert not same_weights(run / "final", run / "checkpoints" / "checkpoint-4")

    result = grpo.train_grpo(config(4), resume=True)
    assert result["complete"] is True
    assert same_weights(run / "final", run / "checkpoints" / "checkpoint-4")
    settled = files_with_identity(run / "final")
    grpo.train_grpo(config(4), resume=True)
    assert files_with_identity(run / "final") == settled   # a finished run's final/ is not rewritten


@pytest.mark.slow
def test_a_resumed_finished_es_run_rewrites_nothing_in_final_and_mends_a_stale_one(tmp_path, cache_dir):
    import shutil

    from prover_cli.config import config_from_dict
    from prover_cli.es.train import train_es
    from prover_cli.model_dir import same_weights

    run = tmp_path / "run"

    def config(iterations):
        return config_from_dict({
            "model": {"name": "tiny", "cache_dir": str(cache_dir), "device": "cpu", "dtype": "float32"},
            "data": {"task": "toy"}, "generate": {"temperature": 0.0, "top_p": 1.0, "max_tokens": 4, "n": 1},
            "es": {"population": 2, "sigma": 0.01, "learning_rate": 0.01, "iterations": iterations,
                   "problems_per_iteration": 2}, "run": {"dir": str(run), "seed": 1}})

    train_es(config(2))
    shutil.copytree(run / "final", tmp_path / "final-at-2")
    train_es(config(3), resume=True)
    shutil.copytree(run / "final", tmp_path / "final-at-3")
    settled = files_with_identity(run / "final")
    train_es(config(3), resume=True)
    assert files_with_identity(run / "final") == settled   # tokenizer.json included, byte for byte

    shutil.rmtree(run / "final")   # a kill after the ledger reached 3 but before the final save
    shutil.copytree(tmp_path / "final-at-2", run / "final")
    train_es(config(3), resume=True)
    assert same_weights(run / "final", tmp_path / "final-at-3")


# -- a REPL killed from outside during its header: one retry, as during a proof ----------------------

@pytest.mark.parametrize("kills", [1, 2])
def test_a_repl_killed_during_its_header_is_retried_once(verify_config, tmp_path, kills):
    import threading
    import time

    from prover_cli.errors import BackendError
    from prover_cli.verify import verify_records
    from test_verify_robust import log_entries

    log = tmp_path / "repl.log"
    killed: list[int] = []
    stop = threading.Event()

    def kill_on_header() -> None:
        while not stop.is_set() and len(killed) < kills:
            for entry in log_entries(log):
                if entry.get("kind") == "header" and entry["pid"] not in killed:
                    os.kill(entry["pid"], signal.SIGKILL)
                    killed.append(entry["pid"])
                    break
            time.sleep(0.01)

    threading.Thread(target=kill_on_header, daemon=True).start()
    config = verify_config(workers=1, timeout_s=20.0, repl_args=["--log", str(log), "--header-delay", "0.5"])
    try:
        if kills == 1:
            [verdict] = verify_records([proof("p")], config)
            assert verdict["verdict"] == "verified", verdict["reason"]
        else:   # killed again in the fresh REPL's header: the machine is at fault, no verdict is written
            with pytest.raises(BackendError, match="killed by SIGKILL while running the header"):
                verify_records([proof("p")], config)
    finally:
        stop.set()
    assert len(killed) == kills
    assert len([e for e in log_entries(log) if e.get("event") == "start"]) == 2


# -- the REPL's grandchild dies with its wrapper ----------------------------------------------------

def test_the_repl_under_lake_dies_when_its_wrapper_is_killed(tmp_path):
    """`lake env repl`: the wrapper's child (lake, here the stand-in's --spawn-child parent) has
    PR_SET_PDEATHSIG, the REPL under it has not; the wrapper's sentinel kills their group."""
    import time

    from conftest import fake_repl_command
    from prover_cli.verify.transport import LocalTransport
    from test_verify_pool import pid_alive
    from test_verify_robust import log_entries

    log = tmp_path / "repl.log"
    transport = LocalTransport(fake_repl_command("--spawn-child", "--log", str(log)))
    transport.start()
    try:
        deadline = time.monotonic() + 30
        while not [e for e in log_entries(log) if e.get("event") == "start"]:
            assert time.monotonic() < deadline, "the REPL never started"
            time.sleep(0.02)
        [repl] = [e["pid"] for e in log_entries(log) if e.get("event") == "start"]
        [spawner] = [e["pid"] for e in log_entries(log) if e.get("event") == "spawned"]
        os.kill(transport.pid, signal.SIGKILL)   # the wrapper alone
        deadline = time.monotonic() + 10
        while (pid_alive(repl) or pid_alive(spawner)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not pid_alive(spawner) and not pid_alive(repl), "the REPL outlived its wrapper"
    finally:
        transport.kill()
