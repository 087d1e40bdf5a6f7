"""Backends change where verification runs, never what it computes: `verify_file` run here and
through the Modal function body give the same summary, the same verdict lines and the same resume.

Local: the library's `verify_file` with the REPL stand-in (tests/fake_repl.py) and the kernel
stage's stand-ins (tests/fake_checker.py), as tests/test_verify_file.py runs it. Modal: the
`verify` Modal function body (`functions.verify.local`, the Volume stand-in as the runs Volume),
whose REPLs and kernel-stage steps run in Sandbox stand-ins (tests/modal_standin.py) that run
the same stand-ins for the image's commands. Neither side is Lean or Modal: these are stand-ins.
"""

import json
import shutil
import sys
from pathlib import Path

import pytest

from conftest import KERNEL_STAND_INS, PATIENCE_S, fake_repl_command
from modal_standin import VolumeStandIn, sandboxes_running
from prover_cli.config import config_from_dict
from prover_cli.on_modal import functions, images, remote
from prover_cli.verify import verify_file
from prover_cli.verify.placement import LOCAL, current

FAKE_REPL = Path(__file__).resolve().parent / "fake_repl.py"
# `.local()` warns that a function with Volumes runs without them: the stand-in is the Volume here.
pytestmark = pytest.mark.filterwarnings("ignore:.*executing locally.*:UserWarning")

# Keys that differ between two runs of the *same* backend, so they cannot be compared across two:
# wall-clock seconds and the rate derived from them (summary), a proof's own seconds (verdict line).
TIMING_SUMMARY_KEYS = ("elapsed_s", "proofs_per_s")
TIMING_LINE_KEYS = ("time_s",)
# The only keys that name the place, inside `verifier` (summary and every line Lean had a part in):
# the argv that started the REPL there (locally the configured command, on Modal the Lean image's
# `lake env repl`) and where its toolchain was read (the project's `lean-toolchain` on the machine
# that read it). Each is checked to name its own place below, never skipped.
PLACE_VERIFIER_KEYS = ("repl_command", "lean_toolchain_from")


def statement(name):
    return f"theorem {name} : 1 + 1 = 2 := by"


INPUT_LINES = [
    json.dumps({"id": "ok1", "problem_id": "p1", "formal_statement": statement("ok1"), "proof": "  norm_num"}),
    json.dumps({"id": "ok2", "problem_id": "p2", "formal_statement": statement("ok2"), "proof": "  norm_num"}),
    json.dumps({"id": "lean_no", "problem_id": "p3", "formal_statement": statement("lean_no"),
                "proof": "  fake_error"}),                             # Lean's error: rejected by the REPL
    json.dumps({"id": "text_no", "problem_id": "p4", "formal_statement": statement("text_no"),
                "proof": "  sorry"}),                                  # the denylist: rejected before any REPL
    '{"id": "torn", "proof": ',                                        # not JSON: malformed, no verdict
    json.dumps({"id": "no_statement", "proof": "  norm_num"}),         # no statement: `error`, and malformed
    json.dumps({"id": "ok1", "formal_statement": statement("ok1"), "proof": "  norm_num"}),  # duplicate id
]

VERIFY_KEYS = {"repl_command": fake_repl_command(), "workers": 2, "timeout_s": PATIENCE_S,
               "header_timeout_s": PATIENCE_S, "memory_limit_gb": 0.0, "canary": False, **KERNEL_STAND_INS}


def config_dict():
    return {"verify": dict(VERIFY_KEYS), "data": {"task": "lean"}}


def write_input(root):
    path = root / "proofs" / "in.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(INPUT_LINES) + "\n", encoding="utf-8")


def read_lines(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture
def runs_volume(tmp_path, monkeypatch):
    """The Volume stand-ins in place of Modal's (as tests/test_modal.py installs them)."""
    root = tmp_path / "runs-volume"
    runs = VolumeStandIn(root, "prover-ledgers")
    monkeypatch.setattr(functions, "RUNS_MOUNT", str(root))
    for module in (functions, remote):
        monkeypatch.setattr(module, "runs_volume", runs)
    monkeypatch.setattr(functions, "models_volume", VolumeStandIn(tmp_path / "models-volume", "prover-models"))
    return root


@pytest.fixture
def sandboxes(monkeypatch):
    yield from sandboxes_running(monkeypatch, FAKE_REPL)


def run_local(root, monkeypatch):
    """`prover verify proofs/in.jsonl --out proofs/out.jsonl`, run from `root`."""
    monkeypatch.chdir(root)
    return verify_file(config_from_dict(config_dict()), proofs_path=Path("proofs/in.jsonl"),
                       out_path=Path("proofs/out.jsonl"))


def run_on_modal(elsewhere, monkeypatch):
    """The same command as `--backend modal` runs it: the Modal function body on the runs Volume
    (paths relative to it, as remote.to_wire sends them), from a directory outside the Volume."""
    monkeypatch.chdir(elsewhere)
    result = functions.verify.local(config_dict(), {"proofs_path": "proofs/in.jsonl", "out_path": "proofs/out.jsonl"})
    assert current() is LOCAL   # the placement ends with the call
    return result


def comparable_summary(summary):
    out = {k: v for k, v in summary.items() if k not in TIMING_SUMMARY_KEYS}
    out["verifier"] = {k: v for k, v in summary["verifier"].items() if k not in PLACE_VERIFIER_KEYS}
    return out


def comparable_line(line):
    out = {k: v for k, v in line.items() if k not in TIMING_LINE_KEYS}
    if "repl_command" in line["verifier"]:   # a line Lean had a part in (not the text checks alone)
        out["verifier"] = {k: v for k, v in line["verifier"].items() if k not in PLACE_VERIFIER_KEYS}
    return out


def by_id(lines):
    # verdicts are written as each is known, so the file's order is the order proofs finished: it
    # differs between two local runs with verify.workers = 2, hence compared per id (one line each)
    ids = [line["id"] for line in lines]
    assert len(ids) == len(set(ids))
    return {line["id"]: comparable_line(line) for line in lines}


def test_verify_file_is_the_same_here_and_on_modal(tmp_path, runs_volume, sandboxes, monkeypatch):
    local_root = tmp_path / "local"
    write_input(local_root)
    write_input(runs_volume)
    local = run_local(local_root, monkeypatch)
    modal = run_on_modal(tmp_path, monkeypatch)

    # what was verified: the two honest proofs, verified by Lean and the kernel stage, each in
    # Sandboxes on Modal (so the Modal side really ran elsewhere)
    assert (local["verified"], local["rejected"], local["error"], local["proofs"], local["malformed_lines"]) == (2, 2, 1, 5, 3)
    repl_starts = [argv for argv in sandboxes.ran if tuple(argv[-3:]) == tuple(images.REPL_COMMAND)]
    # (REPLs in the Lean image, the kernel stage's steps in the kernel image, which holds the checker)
    assert repl_starts and all(box._kwargs["image"] in (images.lean_image, images.kernel_image)
                               for box in sandboxes.created)
    assert {id(box._kwargs["image"]) for box in sandboxes.created} == {id(images.lean_image), id(images.kernel_image)}

    # every key of the summary (the timing keys apart), its tables, warnings and malformed lines
    assert set(modal) == set(local)
    assert comparable_summary(modal) == comparable_summary(local)
    # the keys that name the place do name it
    assert local["verifier"]["repl_command"] == fake_repl_command()
    assert modal["verifier"]["repl_command"] == images.REPL_COMMAND
    assert modal["verifier"]["lean_toolchain_from"].startswith("verify.lean_toolchain") or \
        modal["verifier"]["lean_toolchain_from"].startswith(images.LEAN_PROJECT_DIR)

    # every verdict line, field by field
    local_lines = read_lines(local_root / "proofs/out.jsonl")
    modal_lines = read_lines(runs_volume / "proofs/out.jsonl")
    assert by_id(modal_lines) == by_id(local_lines)
    assert {line["id"]: line["verdict"] for line in modal_lines} == {
        "ok1": "verified", "ok2": "verified", "lean_no": "rejected", "text_no": "rejected", "no_statement": "error"}
    for line in modal_lines:
        if "repl_command" in line["verifier"]:
            assert line["verifier"]["repl_command"] == images.REPL_COMMAND

    # the resume: a rerun on each backend checks nothing and counts the same
    created = len(sandboxes.created)
    local_again = run_local(local_root, monkeypatch)
    modal_again = run_on_modal(tmp_path, monkeypatch)
    assert (local_again["resumed"], local_again["checked"]) == (5, 0)
    assert comparable_summary(modal_again) == comparable_summary(local_again)
    assert len(sandboxes.created) == created   # nothing left to check: no Sandbox started

    # ...and a verdict file made on one backend is current on the other (the policy never names the place)
    shutil.copy(local_root / "proofs/out.jsonl", runs_volume / "proofs/out.jsonl")
    crossed = run_on_modal(tmp_path, monkeypatch)
    assert (crossed["resumed"], crossed["checked"], crossed["rechecked"]) == (5, 0, 0)
    assert len(sandboxes.created) == created


def test_no_module_attribute_of_the_verify_package_is_assigned_outside_tests():
    """The done-when of issue #34: Modal no longer swaps `prover_cli.verify`'s functions."""
    import re

    package = Path(__file__).resolve().parents[1] / "prover_cli"
    assignment = re.compile(r"^\s*(?:prover_cli\.verify|verify_module|verify)(?:\.\w+)*\.\w+\s*=[^=]", re.M)
    swap = re.compile(r"setattr\(\s*(?:prover_cli\.verify|verify_module|verify|engine)\b")
    found = [str(path.relative_to(package)) for path in package.rglob("*.py")
             if assignment.search(path.read_text(encoding="utf-8")) or swap.search(path.read_text(encoding="utf-8"))]
    assert found == []
    assert sys.modules["prover_cli.verify"].verify_file.__module__ == "prover_cli.verify.engine"
