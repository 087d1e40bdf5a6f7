"""Verification in Modal Sandboxes (prover_cli/on_modal/sandbox.py), against the Sandbox stand-in.

The stand-in (tests/modal_standin.py) has modal 1.6's `Sandbox.create` / `exec` / stream / `poll`
/ `terminate` interface and runs the REPL stand-in (tests/fake_repl.py) as local processes, so
the library's own `verify_records` / `verify_file`, pool, deadlines and verdict rules run
unchanged, placed in Sandboxes (`sandbox.verification_placement`). This is not Modal: no real
Sandbox has been created by these tests. That the summary and verdicts equal a local run's is
tests/test_verify_same_across_backends.py.
"""

import contextlib
import dataclasses
import json
import re
import signal
import threading
import time
from pathlib import Path

import modal
import pytest

from conftest import PATIENCE_S, wait_until
from modal_standin import SANDBOXES, SandboxStandIn, sandboxes_running
from prover_cli.config import config_from_dict
from prover_cli.errors import BackendError
from prover_cli.on_modal import images, plan, sandbox
from prover_cli.verify import engine
from prover_cli.verify.placement import verification_at

FAKE_REPL = Path(__file__).resolve().parent / "fake_repl.py"


@pytest.fixture(autouse=True)
def standin(monkeypatch):
    yield from sandboxes_running(monkeypatch, FAKE_REPL)


def make_config(verify=None, **modal_keys):
    # the canaries have their own tests: here they would add Sandboxes to every count
    # deadlines for answers that should come: the hang guard (a timeout test sets its own)
    return config_from_dict({"verify": {"workers": 1, "timeout_s": PATIENCE_S, "header_timeout_s": PATIENCE_S,
                                        "memory_limit_gb": 0.0, "canary": False, **(verify or {})},
                             "modal": {"verify_batch_size": 2, **modal_keys}})


def repl_boxes(standin, config):
    """The verification Sandboxes (REPLs), not the kernel stage's one-step Sandboxes."""
    return [box for box in standin.created if box._kwargs == sandbox.sandbox_arguments(config)]


def kernel_boxes(standin, config):
    return [box for box in standin.created if box._kwargs == sandbox.kernel_sandbox_arguments(config)]


def record(name, tactic="  norm_num"):
    return {"id": name, "problem_id": name, "formal_statement": f"theorem {name} : 1 + 1 = 2 := by",
            "proof": tactic}


def on_modal(config):
    """The placement functions.verification_in_sandboxes enters for this config."""
    return verification_at(sandbox.verification_placement(config))


def verify_records_on_modal(config, records):
    with on_modal(config):
        return engine.verify_records(records, config.verify, keep_warm=True)   # as tasks/lean.py calls it


def repl_starts(standin):
    """REPL processes started in any Sandbox (the wrapper exec'ing the image's REPL)."""
    return [argv for argv in standin.ran if tuple(argv[-len(images.REPL_COMMAND):]) == tuple(images.REPL_COMMAND)]


def assert_one_sandbox_per_repl(standin, config):
    boxes = repl_boxes(standin, config)
    assert len(boxes) == len(repl_starts(standin))
    assert all(len(box._processes) == 1 for box in boxes)   # never a second process in a REPL's Sandbox
    assert all(box.poll() is not None for box in boxes)     # each ended with its process


# --------------------------------------------------------------------------------------------
# What each Sandbox is created with
# --------------------------------------------------------------------------------------------

def test_sandbox_arguments_isolate_the_batch_and_bound_it():
    config = make_config(verify_cpus=4.0, verify_memory_gb=16)
    arguments = sandbox.sandbox_arguments(config)
    assert arguments["image"] is images.lean_image and arguments["app"] is images.lean_app
    assert arguments["block_network"] is True
    assert arguments["volumes"] == {} and arguments["secrets"] == []
    assert arguments["cpu"] == (4.0, 4.0) and arguments["memory"] == (16 * 1024, 16 * 1024)  # hard limits
    # one REPL per Sandbox: its share of a batch's cores and memory (here verify.workers = 1)
    shared = sandbox.sandbox_arguments(make_config(verify={"workers": 4}, verify_cpus=8.0, verify_memory_gb=64))
    assert shared["cpu"] == (2.0, 2.0) and shared["memory"] == (16 * 1024, 16 * 1024)
    assert arguments["timeout"] == plan.verify_batch_timeout_s(config)
    assert arguments["workdir"] == images.LEAN_PROJECT_DIR
    # every argument is one the real `modal.Sandbox.create` takes (the stand-in refuses others)
    SandboxStandIn.create(**arguments).terminate()
    with pytest.raises(TypeError, match="unexpected"):
        SandboxStandIn.create(block_netwrok=True)


def test_each_repl_process_runs_in_a_sandbox_of_its_own(standin):
    config = make_config()
    records = [record("a"), record("b"), record("c", "  fake_error"), record("d"), record("e")]
    verdicts = verify_records_on_modal(config, records)
    assert [(v["id"], v["verdict"]) for v in verdicts] == [
        ("a", "verified"), ("b", "verified"), ("c", "rejected"), ("d", "verified"), ("e", "verified")]
    # ceil(5 / 2) batches x verify.workers = 1: 3 REPL processes at once, each recycled after the 2
    # proofs one REPL of a batch checks; however the 5 proofs fall on them, 3 or 4 processes start
    assert_one_sandbox_per_repl(standin, config)
    assert 3 <= len(repl_boxes(standin, config)) <= 4
    # the kernel stage: each of the 4 passes re-elaborated, each target compiled once (8 steps),
    # and the checker (prover_check: passes that queued while it ran go in one process, so 1 to 4
    # runs), every step in a fresh Sandbox
    checker_runs = len(kernel_boxes(standin, config)) - 4 * 2
    assert 1 <= checker_runs <= 4
    assert len(standin.created) == len(repl_boxes(standin, config)) + 4 * 2 + checker_runs
    for box in standin.created:
        assert box.poll() is not None  # terminated once its process (or step) is done
    assert all(v["verifier"]["repl_command"] == images.REPL_COMMAND for v in verdicts)
    assert all(v["reason"].endswith(f"kernel check passed (prover_check {images.KERNEL_PIN.commit[:8]})")
               for v in verdicts if v["verdict"] == "verified")


@pytest.mark.parametrize("warm", [True, False])
def test_a_pipelined_share_keeps_its_repl_sandboxes_warm_through_its_members(standin, warm):
    """One ES share's members verified one call each (pipeline.py's verification thread): warm
    through the share, its verify.workers REPL Sandbox imports the header once and serves every
    call, and ends with the share; per call (the placement's own rule) each call starts its own."""
    from prover_cli.on_modal.pipeline import warm_through_the_share

    config = config_from_dict({"data": {"task": "lean"}, **{k: v for k, v in dataclasses.asdict(make_config()).items()
                                                            if k in ("verify", "modal")}})
    calls = [[record("a"), record("b")], [record("c"), record("d")], [record("e")]]
    with on_modal(config):
        with warm_through_the_share(config) if warm else contextlib.nullcontext():
            verdicts = [v for batch in calls for v in engine.verify_records(batch, config.verify, keep_warm=True)]
            started_in_the_share = len(repl_starts(standin))
    assert [v["verdict"] for v in verdicts] == ["verified"] * 5
    boxes = [box for box in standin.created if box._kwargs["image"] is images.lean_image]
    assert started_in_the_share == len(boxes) == (1 if warm else 3)   # one header import per REPL start
    if warm:
        assert boxes[0]._kwargs["timeout"] == sandbox.warm_share_timeout_s(config) > plan.verify_batch_timeout_s(config)
    assert all(box.poll() is not None for box in boxes)   # none outlives the share


def test_the_pool_is_sized_as_the_plans_batches():
    """verify.workers REPLs per batch of modal.verify_batch_size proofs, at most
    modal.verify_max_containers batches at once; each REPL recycled after its share of a batch."""
    config = make_config(verify={"workers": 4, "max_proofs_per_process": 200}, verify_batch_size=64,
                         verify_max_containers=3)
    placed = sandbox.verification_placement(config)
    assert [placed.configure(config.verify, n).workers for n in (1, 64, 65, 192, 10_000, None)] == [4, 4, 8, 12, 12, 12]
    assert placed.configure(config.verify, 10).max_proofs_per_process == 16     # 64 / 4
    assert placed.configure(config.verify, 10).kernel_check_workers == 4        # 0 = verify.workers, per batch
    assert placed.keep_warm is False and config.verify.workers == 4             # the caller's config is untouched


class FirstCreates:
    """A barrier for the first `n` Sandboxes only (the REPLs'); later ones (the kernel stage's) pass."""

    def __init__(self, n: int):
        self.barrier, self.n, self.count, self.lock = threading.Barrier(n, timeout=PATIENCE_S), n, 0, threading.Lock()

    def wait(self) -> None:
        with self.lock:
            self.count += 1
            first = self.count <= self.n
        if first:
            self.barrier.wait()


def test_repl_sandboxes_start_concurrently(standin):
    """Three batches' worth of REPLs: each create() waits until all three Sandboxes are being created at once."""
    standin.barrier = FirstCreates(3)
    config = make_config()
    verdicts = verify_records_on_modal(config, [record(n) for n in "abcdef"])
    assert [v["verdict"] for v in verdicts] == ["verified"] * 6


# --------------------------------------------------------------------------------------------
# A dying Sandbox takes only its in-flight proof, which is checked once more in a fresh one
# --------------------------------------------------------------------------------------------

def bodies_sent(name):
    """How often proof `name` itself was sent (not its statement check, `... := by sorry`)."""
    return sum(1 for data in SANDBOXES.sent if f'"cmd": "theorem {name} :'.encode() in data
               and b"norm_num" in data)


def test_a_sandbox_that_dies_costs_only_its_in_flight_proof_a_retry(standin):
    standin.die_on, standin.deaths_left = b'"cmd": "theorem boom :', 1
    config = make_config(verify_batch_size=3)   # one batch: one REPL, the proofs in input order
    records = [record("a"), record("boom"), record("c", "  fake_error")]
    verdicts = verify_records_on_modal(config, records)
    assert [(v["id"], v["verdict"]) for v in verdicts] == [("a", "verified"), ("boom", "verified"),
                                                             ("c", "rejected")]
    assert bodies_sent("a") == 1          # done before the death: not checked again
    assert bodies_sent("boom") == 2       # in flight: once in the dead Sandbox, once in a fresh one
    assert len(repl_boxes(standin, config)) == 2
    assert_one_sandbox_per_repl(standin, config)


def test_a_proof_whose_sandbox_dies_twice_gets_an_error_verdict_naming_it(standin):
    standin.die_on, standin.deaths_left = b'"cmd": "theorem boom :', 10
    config = make_config(verify_batch_size=2)
    records = [record("ok"), record("boom"), record("later")]
    verdicts = verify_records_on_modal(config, records)
    got = {v["id"]: v for v in verdicts}
    assert got["ok"]["verdict"] == "verified" and got["later"]["verdict"] == "verified"
    assert got["boom"]["verdict"] == "error" and "Sandbox ended" in got["boom"]["reason"]
    assert "twice" in got["boom"]["reason"]
    assert bodies_sent("boom") == 2       # retried once, never more


def test_verify_file_on_modal_is_the_librarys_and_resumes_from_its_verdict_file(standin, tmp_path):
    standin.die_on, standin.deaths_left = b'"cmd": "theorem boom :', 1
    config = make_config(verify_batch_size=2)
    ids = ["a", "boom", "c", "d", "e"]
    proofs = tmp_path / "in.jsonl"
    proofs.write_text("".join(json.dumps(record(i)) + "\n" for i in ids))
    with on_modal(config):
        result = engine.verify_file(config, proofs_path=proofs, out_path=tmp_path / "out.jsonl")
    verdicts = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert sorted(v["id"] for v in verdicts) == sorted(ids)   # one line per proof, written as known
    assert {v["verdict"] for v in verdicts} == {"verified"}
    assert (result["ok"], result["proofs"], result["verified"], result["checked"], result["resumed"]) == \
        (True, 5, 5, 5, 0)
    assert bodies_sent("a") == 1 and bodies_sent("boom") == 2
    assert not list(tmp_path.glob("*.shards"))   # no second implementation's files
    before = len(standin.created)
    with on_modal(config):
        again = engine.verify_file(config, proofs_path=proofs, out_path=tmp_path / "out.jsonl")
    assert (again["resumed"], again["checked"], again["verified"]) == (5, 0, 5)
    assert len(standin.created) == before   # nothing to check: no Sandbox


def test_sandboxes_that_cannot_start_stop_the_run_and_claim_nothing(standin, tmp_path, monkeypatch):
    """No capacity: the run fails with the reason (as a local REPL that cannot start), the verdict
    file records no verdict for those proofs, the reward is never a silent 0; a rerun checks them."""
    real_create = SandboxStandIn.create.__func__
    capacity = {"gone": True, "refused": 0}

    def create(cls, *args, **kwargs):
        if capacity["gone"] and kwargs == sandbox.sandbox_arguments(config):
            capacity["refused"] += 1
            raise modal.exception.Error("no capacity")
        return real_create(cls, *args, **kwargs)

    monkeypatch.setattr(SandboxStandIn, "create", classmethod(create))
    config = make_config(verify_batch_size=2)
    proofs = tmp_path / "in.jsonl"
    proofs.write_text("".join(json.dumps(record(i)) + "\n" for i in "abc"))
    out = tmp_path / "out.jsonl"
    with on_modal(config), pytest.raises(BackendError, match=r"cannot create a verification Sandbox \(2 tries\).*no capacity"):
        engine.verify_file(config, proofs_path=proofs, out_path=out)
    assert capacity["refused"] >= 2 and (not out.exists() or out.read_text() == "")
    with pytest.raises(BackendError, match="cannot create a verification Sandbox"):
        verify_records_on_modal(config, [record("a")])
    capacity["gone"] = False
    with on_modal(config):
        result = engine.verify_file(config, proofs_path=proofs, out_path=out)
    assert (result["verified"], result["checked"], result["resumed"]) == (3, 3, 0)


def test_lean_versions_other_than_the_image_fail_closed(standin):
    config = make_config()
    config.verify.lean_toolchain = "leanprover/lean4:v4.16.0"
    with pytest.raises(BackendError, match="v4.16.0.*the Lean image has 'leanprover/lean4:v4.15.0'"):
        verify_records_on_modal(config, [record("a")])
    assert standin.created == []


# --------------------------------------------------------------------------------------------
# SandboxTransport: the Transport protocol over exec streams
# --------------------------------------------------------------------------------------------

def test_transport_speaks_the_repl_protocol_and_signal_kill_ends_the_process_group(standin):
    from prover_cli.verify.lean.repl import ReplProcess, ReplTimeout

    box = sandbox.SandboxBox(make_config())
    proc = ReplProcess(box.transport())
    proc.kill()   # before start: a no-op, as the pool does with a fresh worker
    proc.start()
    assert proc.alive and proc.pid is None  # the process is in the Sandbox, not here
    assert proc.request({"cmd": "import Mathlib"}, time.monotonic() + PATIENCE_S)["env"] == 0
    with pytest.raises(ReplTimeout):
        proc.request({"cmd": "theorem h : True := by fake_hang", "env": 0}, time.monotonic() + 0.5)
    proc.signal_kill()
    wait_until(lambda: not proc.alive, what="the killed REPL to end")
    assert not proc.alive and proc.exit_signal() is None  # our own kill: not an accident to retry
    assert "killed by SIGKILL" in proc.transport.exit_description()
    proc.kill()
    proc.start()  # a restart reuses the batch's live Sandbox
    assert proc.request({"cmd": "import Mathlib"}, time.monotonic() + PATIENCE_S)["env"] == 0
    assert len(standin.created) == 1
    box.terminate()
    assert not proc.alive and proc.exit_signal() is None  # we ended the Sandbox ourselves
    assert "Sandbox ended" in proc.transport.exit_description()
    proc.kill()
    proc.start()  # ...and a restart after that gets a fresh Sandbox
    assert len(standin.created) == 2 and box.deaths == 0  # we ended it: not counted as a death
    standin.created[1]._end(137)  # now it dies under the REPL (timeout, OOM): the pool may retry
    assert not proc.alive and proc.exit_signal() == signal.SIGKILL
    proc.kill()
    box.terminate()
    assert box.deaths == 1


def test_transport_memory_limit_is_an_address_space_limit_inside_the_sandbox(standin):
    box = sandbox.SandboxBox(make_config())
    transport = sandbox.SandboxTransport(box, list(images.REPL_COMMAND), images.LEAN_PROJECT_DIR, 0.5)
    transport.start()
    [process] = standin.created[0]._processes
    with open(f"/proc/{process._popen.pid}/limits") as f:
        limits = f.read()
    assert f"{1 << 29}" in next(line for line in limits.splitlines() if line.startswith("Max address space"))
    transport.kill()
    box.terminate()


def test_a_repl_with_a_sandbox_of_its_own_ends_it_and_restarts_in_a_fresh_one(standin):
    from prover_cli.verify.lean.repl import ReplProcess

    proc = ReplProcess(sandbox.repl_sandboxes(make_config())())
    proc.start()
    assert proc.request({"cmd": "import Mathlib"}, time.monotonic() + PATIENCE_S)["env"] == 0
    proc.kill()   # a recycle: the process and its Sandbox end
    assert standin.created[0].poll() == 137 and not proc.alive and proc.exit_signal() is None
    proc.start()
    assert len(standin.created) == 2 and proc.request({"cmd": "import Mathlib"}, time.monotonic() + PATIENCE_S)["env"] == 0
    standin.created[1]._end(137)   # Modal ends it under the REPL: a kill from outside, which the pool retries
    assert not proc.alive and proc.exit_signal() == signal.SIGKILL
    proc.kill()
    assert not any("os.killpg" in " ".join(argv) for argv in standin.ran)   # ending the Sandbox ends the group


# --------------------------------------------------------------------------------------------
# Ending a REPL inside a live Sandbox: the image's Python, never a `kill` it does not have
# --------------------------------------------------------------------------------------------

def test_hung_repls_are_ended_inside_a_live_sandbox_without_a_kill_binary(standin):
    """Three REPLs hang; each is ended by `signal_kill` while their Sandbox keeps running. The
    stand-in refuses `kill` (the Lean image has no procps); before this fix the refused exec was
    swallowed and all three REPLs stayed alive until the Sandbox ended."""
    from prover_cli.verify.lean.repl import ReplProcess, ReplTimeout

    box = sandbox.SandboxBox(make_config())
    repls = [ReplProcess(box.transport()) for _ in range(3)]
    for repl in repls:
        repl.start()
        with pytest.raises(ReplTimeout):
            repl.request({"cmd": "theorem h : True := by fake_hang"}, time.monotonic() + 0.3)
    [the_sandbox] = standin.created
    hung = list(the_sandbox._processes)
    for repl in repls:
        repl.signal_kill()
    wait_until(lambda: all(p._popen.poll() is not None for p in hung), what="the three REPLs to end")
    assert [p._popen.poll() is not None for p in hung] == [True] * 3
    assert the_sandbox.poll() is None  # the Sandbox still runs: only the REPLs were ended
    kills = [argv for argv in standin.ran if "os.killpg" in " ".join(argv)]
    assert len(kills) == 3 and all(argv[0] == "python" for argv in kills)
    assert not any(argv[0] == "kill" for argv in standin.ran)
    for repl in repls:
        assert not repl.alive and repl.exit_signal() is None  # ours: a verdict, not an accident
        repl.kill()
    box.terminate()


def test_the_stand_in_refuses_a_program_the_image_does_not_have(standin):
    from modal_standin import ProgramNotInImage

    the_sandbox = SandboxStandIn.create(**sandbox.sandbox_arguments(make_config()))
    with pytest.raises(ProgramNotInImage):
        the_sandbox.exec("kill", "-KILL", "--", "-1")
    assert standin.refused == [("kill", "-KILL", "--", "-1")]
    standin.refused.clear()  # seen: the fixture fails any test that leaves a refusal behind
    the_sandbox.terminate()


def test_a_sandbox_polls_124_after_its_timeout_and_137_after_terminate(standin):
    arguments = sandbox.sandbox_arguments(make_config())
    # only the first times out (after 1 s); the second's timeout is the hang guard, so a slow
    # machine cannot let it time out before it is terminated
    timed_out = SandboxStandIn.create(**dict(arguments, timeout=1))
    terminated = SandboxStandIn.create(**dict(arguments, timeout=int(PATIENCE_S)))
    assert terminated.poll() is None
    assert terminated.terminate(wait=True) == 137
    with pytest.raises(modal.exception.SandboxTimeoutError):
        timed_out.wait()
    assert timed_out.poll() == 124 and timed_out.returncode == 124
    terminated.wait(raise_on_termination=False)
    with pytest.raises(modal.exception.SandboxTerminatedError):
        terminated.wait()
    with pytest.raises(modal.exception.SandboxTerminatedError):
        terminated.exec("python", "-c", "pass")


# --------------------------------------------------------------------------------------------
# The kernel stage through Sandboxes: every step a fresh Sandbox receiving only data
# --------------------------------------------------------------------------------------------

FORGING_REPL = Path(__file__).resolve().parent / "forging_repl.py"


def test_kernel_sandboxes_are_isolated_and_sized_as_one_repl():
    config = make_config(verify={"workers": 4}, verify_cpus=8.0, verify_memory_gb=32)
    arguments = sandbox.kernel_sandbox_arguments(config)
    assert arguments["image"] is images.kernel_image and arguments["block_network"] is True   # the checker's own image
    assert arguments["volumes"] == {} and arguments["secrets"] == []
    assert arguments["cpu"] == (2.0, 2.0) and arguments["memory"] == (8 * 1024, 8 * 1024)
    assert arguments["timeout"] == int(config.verify.kernel_check_timeout_s + 300)
    SandboxStandIn.create(**arguments).terminate()   # arguments the real Sandbox.create takes


def test_forged_fast_path_answers_are_rejected_through_the_sandbox_transport(standin, monkeypatch):
    """The image's REPL forges its answers (tests/forging_repl.py); the kernel stage, each step in
    its own Sandbox, still rejects every forgery and keeps the honest proof."""
    import sys

    standin.command_map[tuple(images.REPL_COMMAND)] = [sys.executable, str(FORGING_REPL)]
    seen: list[tuple[tuple, frozenset]] = []
    real_run = sandbox.SandboxRunner.run

    def spy(self, argv, inputs, outputs, timeout_s, what="command"):
        seen.append((tuple(argv), frozenset(inputs)))
        return real_run(self, argv, inputs, outputs, timeout_s, what)

    monkeypatch.setattr(sandbox.SandboxRunner, "run", spy)
    config = make_config(verify_batch_size=4)
    records = [record("honest"), record("hidden", "  nlinarith [fake_error]"),
               record("sorryax", "  exact fake_axiom_sorryAx"), record("skipped", "  exact fake_forge_skip_kernel")]
    verdicts = {v["id"]: v for v in verify_records_on_modal(config, records)}
    assert verdicts["honest"]["verdict"] == "verified", verdicts["honest"]["reason"]
    for key in ("hidden", "sorryax", "skipped"):
        assert verdicts[key]["verdict"] == "rejected" and verdicts[key]["reason"].startswith("kernel check"), \
            verdicts[key]["reason"]
    # the checker's steps got the pairs' .olean files (T{k}, P{k}), nothing else; each step had
    # its own Sandbox
    checker_steps = [inputs for argv, inputs in seen if images.KERNEL_PIN.program in argv]
    assert checker_steps and all(inputs and all(re.fullmatch(r"[TP]\d+\.olean", name) for name in inputs)
                                 for inputs in checker_steps)
    assert len(kernel_boxes(standin, config)) == len(seen)
    assert_one_sandbox_per_repl(standin, config)


def test_a_kernel_sandbox_that_dies_is_an_error_never_a_pass(standin):
    standin.die_on, standin.deaths_left = b'"timeout_s"', 1   # the first step's Sandbox ends as it starts
    config = make_config()
    [verdict] = verify_records_on_modal(config, [record("a")])
    assert verdict["verdict"] == "error" and "SIGKILL" in verdict["reason"], verdict["reason"]


def test_the_kimina_backend_on_modal_runs_the_kernel_stage_in_sandboxes(standin, monkeypatch):
    """Kimina elaborates (its stand-in server, its REPLs forging their answers); the placement
    gives the library's kernel stage Sandboxes from the Lean image."""
    import sys

    import test_verify_kimina

    monkeypatch.setattr(test_verify_kimina, "fake_repl_command", lambda *args: [sys.executable, str(FORGING_REPL), *args])
    with test_verify_kimina.FakeKimina() as server:
        config = make_config(verify={"backend": "kimina", "kimina_url": server.url})
        records = [record("honest"), record("hidden", "  nlinarith [fake_error]")]
        verdicts = {v["id"]: v for v in verify_records_on_modal(config, records)}
    assert verdicts["honest"]["verdict"] == "verified", verdicts["honest"]["reason"]
    assert verdicts["hidden"]["verdict"] == "rejected" and "fresh Lean process" in verdicts["hidden"]["reason"]
    assert repl_boxes(standin, config) == [] and len(kernel_boxes(standin, config)) == 5  # 2 targets, 2 + 1 steps
