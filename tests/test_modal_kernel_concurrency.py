"""Issue #42: on Modal the kernel stage runs each verification batch's checker batches beside the
others' (sandbox.SandboxRunner.batches_at_once, verify/kernel/batching.py second_stage), and each
REPL Sandbox ends right after its last proof (ReplPool's release_idle, placed by
sandbox.verification_placement), as the plan prices it (plan/verification.py).

Against the Sandbox stand-in (tests/modal_standin.py: local processes, lifetimes recorded); no
real Sandbox is created. Concurrency is forced, not timed: the checker steps wait at a barrier
that only batches running side by side can pass, and a checker step waits until every REPL
Sandbox has ended, which only the release after the last proof allows."""

import threading
from pathlib import Path

import pytest

from conftest import PATIENCE_S, wait_until
from modal_standin import sandboxes_running
from prover_cli.config import config_from_dict
from prover_cli.on_modal import images, sandbox
from prover_cli.verify import engine
from prover_cli.verify.kernel.isolated import RunResult
from prover_cli.verify.placement import verification_at

FAKE_REPL = Path(__file__).resolve().parent / "fake_repl.py"


@pytest.fixture(autouse=True)
def standin(monkeypatch):
    yield from sandboxes_running(monkeypatch, FAKE_REPL)


def make_config(**modal_keys):
    return config_from_dict({"verify": {"workers": 1, "timeout_s": PATIENCE_S, "header_timeout_s": PATIENCE_S,
                                        "memory_limit_gb": 0.0, "canary": False},
                             "modal": {"verify_batch_size": 1, **modal_keys}})


def record(name, tactic="  norm_num"):
    return {"id": name, "problem_id": name, "formal_statement": f"theorem {name} : 1 + 1 = 2 := by",
            "proof": tactic}


def verify_on_modal(config, records):
    with verification_at(sandbox.verification_placement(config)):
        return engine.verify_records(records, config.verify, keep_warm=True)


def is_checker(argv):
    return images.KERNEL_PIN.program in argv


def checker_spy(monkeypatch, before):
    """SandboxRunner.run with `before(argv)` called ahead of every checker step."""
    real_run = sandbox.SandboxRunner.run

    def run(self, argv, inputs, outputs, timeout_s, what="command"):
        if is_checker(argv):
            before(argv)
        return real_run(self, argv, inputs, outputs, timeout_s, what)

    monkeypatch.setattr(sandbox.SandboxRunner, "run", run)


def kernel_boxes(standin, config):
    return [box for box in standin.created if box._kwargs == sandbox.kernel_sandbox_arguments(config)]


def repl_boxes(standin, config):
    return [box for box in standin.created if box._kwargs == sandbox.sandbox_arguments(config)]


def test_the_placement_sizes_the_kernel_stage_for_the_calls_batches():
    config = make_config(verify_batch_size=64, verify_max_containers=3)
    placed = sandbox.verification_placement(config)
    for proofs, batches in ((1, 1), (64, 1), (65, 2), (192, 3), (10_000, 3)):
        verify = placed.configure(config.verify, proofs)
        assert placed.kernel_runner(verify).batches_at_once == batches
    assert sandbox.SandboxRunner(config).batches_at_once == 1   # any other runner: one checker batch at a time


def test_three_batches_check_their_passes_side_by_side(standin, monkeypatch):
    """3 proofs, 3 batches of one: each pass starts a checker batch of its own at once, and all
    three must be in their checker step together to pass the barrier (one at a time never would)."""
    together = threading.Barrier(3, timeout=PATIENCE_S)
    checker_spy(monkeypatch, lambda argv: together.wait())
    config = make_config()
    verdicts = verify_on_modal(config, [record(n) for n in "abc"])
    assert [(v["id"], v["verdict"]) for v in verdicts] == [("a", "verified"), ("b", "verified"), ("c", "verified")]
    checkers = [box for box in kernel_boxes(standin, config) if "--as-lean" not in box._processes[0]._popen.args]
    assert len(checkers) == 3
    # the stand-in's lifetimes: the three checker Sandboxes were up at once
    assert max(box._created_s for box in checkers) < min(box._ended_s for box in checkers)


def test_verdicts_are_those_of_one_batch_at_a_time(standin, monkeypatch):
    records = [record("a"), record("b", "  fake_error"), record("c"), record("d"), record("e", "  fake_error"),
               record("f")]
    config = make_config(verify_batch_size=2)
    side_by_side = verify_on_modal(config, records)
    monkeypatch.setattr(sandbox, "batches_sized", lambda config, placed: 1)   # the stage as it ran before
    one_at_a_time = verify_on_modal(config, records)

    def said(verdicts):
        return [(v["id"], v["verdict"], v["reason"], v["axioms"]) for v in verdicts]

    assert said(side_by_side) == said(one_at_a_time)
    assert [v["verdict"] for v in side_by_side] == ["verified", "rejected", "verified", "verified", "rejected",
                                                     "verified"]


def test_a_checker_batch_that_fails_fails_its_own_proofs_closed(standin, monkeypatch):
    """The first checker step to start raises (a bug, a lost Sandbox): its proof is `error`, never
    verified; the batches beside it keep their own verdicts."""
    lock, failed = threading.Lock(), []

    def first_fails(argv):
        with lock:
            first = not failed
            failed.append(argv)
        if first:
            raise RuntimeError("the checker's Sandbox vanished")

    checker_spy(monkeypatch, first_fails)
    config = make_config()
    verdicts = verify_on_modal(config, [record(n) for n in "abc"])
    statuses = sorted(v["verdict"] for v in verdicts)
    assert statuses == ["error", "verified", "verified"], [v["reason"] for v in verdicts]
    [error] = [v for v in verdicts if v["verdict"] == "error"]
    assert "kernel check failed unexpectedly" in error["reason"] and "vanished" in error["reason"]


def test_every_repl_sandbox_ends_after_its_last_proof_before_the_kernel_stage_ends(standin, monkeypatch):
    """The checker steps wait until every REPL Sandbox has ended: only a REPL released after its last
    proof lets them go on (before #42 the REPLs lived until the call's end, after the kernel stage)."""
    config = make_config(verify_batch_size=2)

    def repls_ended(argv):
        boxes = repl_boxes(standin, config)
        wait_until(lambda: boxes and all(box.poll() is not None for box in repl_boxes(standin, config)),
                   what="every REPL Sandbox ended")

    checker_spy(monkeypatch, repls_ended)
    verdicts = verify_on_modal(config, [record(n) for n in "abcd"])
    assert [v["verdict"] for v in verdicts] == ["verified"] * 4
    repls, kernels = repl_boxes(standin, config), kernel_boxes(standin, config)
    assert 2 <= len(repls) <= 4 and kernels   # 2 REPLs at once, each recycled after the 2 proofs of its share
    last_kernel_end = max(box._ended_s for box in kernels)
    assert all(box._ended_s is not None and box._ended_s < last_kernel_end for box in repls)


def test_a_warm_share_keeps_its_repls_and_a_local_run_is_unchanged(standin):
    """Only a placement that bills idle processes releases them: the pipelined share's warm pool
    (keep_warm) and a local run keep theirs."""
    config = make_config()
    assert sandbox.verification_placement(config).keep_warm is False
    assert sandbox.warm_share_placement(config).keep_warm is True


def test_a_failed_kernel_sandbox_is_an_error_also_beside_other_batches(standin, monkeypatch):
    """A checker step that dies (the stand-in's SIGKILL answer) fails closed as the others go on."""
    lock, seen = threading.Lock(), []
    real_run = sandbox.SandboxRunner.run

    def run(self, argv, inputs, outputs, timeout_s, what="command"):
        if is_checker(argv):
            with lock:
                first = not seen
                seen.append(argv)
            if first:
                return RunResult(exit_code=None, signal=9, wall_s=0.0)
        return real_run(self, argv, inputs, outputs, timeout_s, what)

    monkeypatch.setattr(sandbox.SandboxRunner, "run", run)
    verdicts = verify_on_modal(make_config(), [record(n) for n in "abc"])
    assert sorted(v["verdict"] for v in verdicts) == ["error", "verified", "verified"]
