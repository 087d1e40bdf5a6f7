"""The REPL client: framing and response parsing over every real transcript, the stand-in's fidelity
to those transcripts, and one process's deadlines and kills."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from conftest import PATIENCE_S, fake_repl_command, shared_files
from prover_cli.verify.text import rules
from prover_cli.verify.lean.repl import (
    ReplDied,
    ReplGarbage,
    ReplProcess,
    ReplTimeout,
    ResponseReader,
    encode_request,
    parse_responses,
    split_requests,
)

# The real REPL transcripts in ../shared/lean-repl-transcripts, read through conftest's `shared`
# fixture: without ../shared each test below runs once, as `no-transcripts`, and the fixture skips it.
IN_FILES = shared_files("lean-repl-transcripts/*.in", "lean-repl-transcripts/mathlib/*.in")
IN_CASES = IN_FILES or [None]


def load(in_path: Path) -> tuple[list[dict], list]:
    requests = [json.loads(r) for r in split_requests(in_path.read_text(encoding="utf-8"))]
    out_path = in_path.with_name(in_path.name[:-3] + ".expected.out")
    return requests, parse_responses(out_path.read_bytes())


def ids(paths):
    return [p.as_posix().split("lean-repl-transcripts/", 1)[1] if p else "no-transcripts" for p in paths]


# --------------------------------------------------------------------------------------------
# Every transcript
# --------------------------------------------------------------------------------------------

def test_all_transcripts_are_covered(shared):
    shared("lean-repl-transcripts")  # skips without ../shared, naming it
    assert len(IN_FILES) >= 40 and any("mathlib" in str(p) for p in IN_FILES)


@pytest.mark.parametrize("in_path", IN_CASES, ids=ids(IN_CASES))
def test_transcript_responses_follow_the_repl_state_machine(in_path, shared):
    """One response per request; env and proof-state numbers follow the REPL's counters; protocol
    errors occur exactly for unknown envs/proof states or thrown tactics."""
    shared("lean-repl-transcripts")  # skips without ../shared, naming it
    requests, responses = load(in_path)
    assert len(responses) == len(requests)
    next_env = next_state = 0
    envs, states = set(), set()
    for request, response in zip(requests, responses):
        assert isinstance(response, dict)
        if "cmd" in request:
            if "env" in request and request["env"] not in envs:
                assert response == {"message": "Unknown environment."}
                assert rules.protocol_problem(response) == "REPL protocol error: Unknown environment."
                continue
            assert rules.protocol_problem(response) is None
            assert response["env"] == next_env
            envs.add(next_env)
            next_env += 1
            for sorry in response.get("sorries", []):
                assert sorry["proofState"] == next_state and "goal" in sorry
                states.add(next_state)
                next_state += 1
            for tactic in response.get("tactics", []):
                if "proofState" in tactic:
                    states.add(tactic["proofState"])
                    next_state = max(next_state, tactic["proofState"] + 1)
        elif "unpickleEnvFrom" in request:
            assert response["env"] == next_env
            envs.add(next_env)
            next_env += 1
        elif "pickleTo" in request and "env" in request:
            assert response == {"env": request["env"]}
        else:  # tactic mode: tactic, pickleTo a proof state, unpickleProofStateFrom
            if "tactic" in request and request["proofState"] not in states:
                assert response == {"message": "Unknown proof state."}
                continue
            if "message" in response:
                assert response["message"].startswith("Lean error:")
                assert rules.protocol_problem(response).startswith("REPL protocol error: Lean error:")
                continue
            for sorry in response.get("sorries", []):
                states.add(sorry["proofState"])
                next_state = max(next_state, sorry["proofState"] + 1)
            assert response["proofState"] == next_state
            states.add(next_state)
            next_state += 1


@pytest.mark.parametrize("in_path", IN_CASES, ids=ids(IN_CASES))
def test_transcript_sorries_are_detected_in_both_quote_styles(in_path, shared):
    """A response with sorries or the sorry warning fails the rules; each signal alone suffices,
    in the backtick style the transcripts use and in the straight-quote style of Lean <= 4.27."""
    shared("lean-repl-transcripts")  # skips without ../shared, naming it
    _, responses = load(in_path)
    for response in responses:
        if "env" not in response:
            continue
        messages = response.get("messages", [])
        warning = [m for m in messages if m["severity"] == "warning" and "declaration uses" in m["data"]]
        has_sorry = bool(response.get("sorries")) or bool(warning)
        verdict = rules.judge_proof(response)
        if has_sorry:
            assert verdict is not None and verdict.status == "rejected"
        errors = [m for m in messages if m["severity"] == "error"]
        if not has_sorry and not errors:
            assert verdict is None
        for m in warning:
            assert m["data"] == "declaration uses `sorry`"
            straight = dict(m, data="declaration uses 'sorry'")
            assert rules.has_sorry_warning(m) and rules.has_sorry_warning(straight)
            only_warning = {"env": response["env"], "messages": [straight]}
            assert rules.judge_proof(only_warning).status == "rejected"
        if response.get("sorries"):
            only_sorries = {"env": response["env"], "sorries": response["sorries"]}
            assert rules.judge_proof(only_sorries).status == "rejected"


@pytest.mark.parametrize("in_path", IN_CASES, ids=ids(IN_CASES))
def test_reader_is_independent_of_chunking(in_path, shared):
    """The client reads pipes in arbitrary pieces; the responses must not depend on where they split."""
    shared("lean-repl-transcripts")  # skips without ../shared, naming it
    out_bytes = in_path.with_name(in_path.name[:-3] + ".expected.out").read_bytes()
    expected = parse_responses(out_bytes)
    rng = random.Random(in_path.name)
    reader, got, k = ResponseReader(), [], 0
    while k < len(out_bytes):
        step = rng.randint(1, 7)
        reader.feed(out_bytes[k:k + step])
        k += step
        while (response := reader.take()) is not None:
            got.append(response)
    assert got == expected and not reader.pending().strip()


@pytest.mark.parametrize("in_path", IN_CASES, ids=ids(IN_CASES))
def test_encoded_requests_survive_the_repl_line_joining(in_path, shared):
    shared("lean-repl-transcripts")  # skips without ../shared, naming it
    requests, _ = load(in_path)
    wire = b"".join(encode_request(r) for r in requests).decode("utf-8")
    assert [json.loads(r) for r in split_requests(wire)] == requests


def test_raw_newline_in_a_request_is_what_the_transcript_shows(shared):
    transcripts = shared("lean-repl-transcripts")  # skips without ../shared, naming it
    # invalid_line_break: a raw newline inside the JSON string vanishes (`by` + `sorry` -> `bysorry`).
    text = (transcripts / "invalid_line_break.in").read_text(encoding="utf-8")
    assert json.loads(split_requests(text)[0])["cmd"] == "theorem foo : 1 = 1 := bysorry"
    assert b"\\n" in encode_request({"cmd": "a\nb"}) and encode_request({"cmd": "a\nb"}).count(b"\n") == 2


# --------------------------------------------------------------------------------------------
# The stand-in replays the transcripts
# --------------------------------------------------------------------------------------------

def _load_fake_module():
    import importlib.util

    import sys

    if "fake_repl" in sys.modules:
        return sys.modules["fake_repl"]
    spec = importlib.util.spec_from_file_location("fake_repl", fake_repl_command()[1])
    module = importlib.util.module_from_spec(spec)
    sys.modules["fake_repl"] = module   # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_canned_responses_are_copied_from_the_transcripts(shared):
    transcripts = shared("lean-repl-transcripts")  # skips without ../shared, naming it
    for name, (source, index, response) in _load_fake_module().CANNED.items():
        transcript = parse_responses((transcripts / source).read_bytes())
        assert transcript[index] == response, name


def test_stand_in_speaks_the_framing_and_unknown_env(tmp_path):
    proc = ReplProcess(fake_repl_command())
    proc.start()
    try:
        deadline = time.monotonic() + PATIENCE_S   # answers that should come: the hang guard
        assert proc.request({"cmd": "import Mathlib"}, deadline) == {"env": 0}
        proof = proc.request({"cmd": "theorem t : 1 = 1 := by\n  norm_num", "env": 0}, deadline)
        assert proof == {"env": 1}
        answer = proc.request({"cmd": "#print axioms t", "env": 1}, deadline)
        assert rules.parse_axioms_message(answer["messages"][0]["data"]) == (
            "t", ["propext", "Classical.choice", "Quot.sound"])
        assert proc.request({"cmd": "x", "env": 99}, deadline) == {"message": "Unknown environment."}
        assert proc.request({"tactic": "rfl", "proofState": 0}, deadline) == {"message": "Unknown proof state."}
    finally:
        proc.kill()


# --------------------------------------------------------------------------------------------
# One process: deadlines, EOF, garbage
# --------------------------------------------------------------------------------------------

def test_hang_times_out_at_the_deadline_and_kill_ends_the_process():
    proc = ReplProcess(fake_repl_command())
    proc.start()
    pid = proc.pid
    start = time.monotonic()
    with pytest.raises(ReplTimeout):
        proc.request({"cmd": "theorem t : True := by fake_hang"}, time.monotonic() + 0.5)
    assert 0.4 < time.monotonic() - start  # not before the deadline; one never kept hangs (pytest-timeout)
    proc.kill()
    assert not proc.alive and proc.pid is None
    with pytest.raises(ProcessLookupError):
        import os

        os.kill(pid, 0)


def test_crash_mid_answer_is_reported_with_exit_code_and_partial_output():
    proc = ReplProcess(fake_repl_command())
    proc.start()
    with pytest.raises(ReplDied) as info:
        proc.request({"cmd": "theorem t : True := by fake_crash"}, time.monotonic() + PATIENCE_S)
    assert "exited with code 3" in str(info.value) and '{"messages"' in str(info.value)
    proc.kill()


def test_garbage_output_is_a_garbage_fault():
    proc = ReplProcess(fake_repl_command())
    proc.start()
    with pytest.raises(ReplGarbage) as info:
        proc.request({"cmd": "theorem t : True := by fake_garbage"}, time.monotonic() + PATIENCE_S)
    assert "not JSON" in str(info.value)
    proc.kill()


def test_memory_limit_applies_to_the_repl_process():
    proc = ReplProcess(fake_repl_command(), memory_limit_gb=1.0)
    proc.start()
    with pytest.raises(ReplDied) as info:
        proc.request({"cmd": "theorem t : True := by fake_mem"}, time.monotonic() + PATIENCE_S)
    assert "MemoryError" in str(info.value)
    proc.kill()


def test_missing_program_is_a_backend_error():
    from prover_cli.errors import BackendError

    with pytest.raises(BackendError) as info:
        ReplProcess(["/nonexistent/lake", "env", "repl"]).start()
    assert "verify.repl_command" in str(info.value)


def test_the_local_shorthand_boxes_the_repl_unless_told_none():
    for box, boxed in (("bubblewrap", True), ("none", False)):
        proc = ReplProcess(fake_repl_command(), box=box)
        proc.start()
        try:
            assert proc.request({"cmd": "import Mathlib"}, time.monotonic() + PATIENCE_S) == {"env": 0}
            command = proc.transport.command
        finally:
            proc.kill()
        if boxed:   # conftest's stand-in bwrap, which checked the argv as bwrap would
            assert Path(command[0]).name == "bwrap" and command[command.index("--") + 1:] == fake_repl_command()
        else:
            assert command == fake_repl_command()
