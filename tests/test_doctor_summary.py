"""`prover doctor` separates what this config needs from what only a real run needs, and ends with
one summary line (issue #38): the demo's doctor opens with no unexplained `missing`."""

from __future__ import annotations

import json
import os
import sys

from typer.testing import CliRunner

from prover_cli.cli import app
from prover_cli.config import load_config
from prover_cli.doctor import NEEDED, OPTIONAL, REAL_RUN, need_of

runner = CliRunner()


def no_lean_here(monkeypatch):
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + "/usr/bin:/bin")


def test_the_demo_needs_nothing_it_lacks_and_says_what_the_missing_rows_are_for(no_modal_token, monkeypatch):
    no_lean_here(monkeypatch)
    result = runner.invoke(app, ["doctor", "--config", "demo", "--json"])
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    needs = {c["name"]: c["need"] for c in found["checks"]}
    assert found["ready"] is True and found["missing_needed"] == []
    assert {"lean repl", "kernel checker", "cuda", "vllm", "modal token"} <= set(found["missing_real_run"])
    assert all(needs[name] == REAL_RUN for name in found["missing_real_run"])
    assert needs["torch"] == needs["transformers"] == NEEDED and needs["es fused (cpu)"] == OPTIONAL

    human = runner.invoke(app, ["doctor", "--config", "demo"])
    lines = human.stderr.splitlines()
    real_run_table = next(n for n, line in enumerate(lines) if line.startswith("prover doctor: what only a real run"))
    assert all("missing" not in line for line in lines[:real_run_table]), human.stderr   # none in "what this config needs"
    summary = " ".join(human.stderr[human.stderr.index("summary: "):].split())   # wrapped at 80 columns
    assert summary.startswith("summary: ready for this config") and "for a real run only" in summary
    assert summary.endswith("(Lean verification, a GPU, Modal: README, *What a real run needs*)")


def test_a_lean_config_without_lean_is_not_ready_and_says_what_to_do(no_modal_token, monkeypatch):
    no_lean_here(monkeypatch)
    result = runner.invoke(app, ["doctor", "--json"])
    found = json.loads(result.stdout)
    assert result.exit_code == 0 and found["ready"] is False   # a report: the exit status says it ran
    assert "lean repl" in found["missing_needed"] and "kernel checker" in found["missing_needed"]
    human = runner.invoke(app, ["doctor"]).stderr
    assert "what to do:" in human and "summary: NOT ready for this config" in " ".join(human.split())
    assert "- lean repl, lean canary: install elan" in human   # one line per distinct fix


def test_what_a_config_needs():
    demo, lean = load_config("prover_cli/configs/demo.toml"), load_config(None)
    assert [need_of(n, demo) for n in ("lean repl", "box", "cuda", "vllm", "modal token", "trl")] == \
        [REAL_RUN, REAL_RUN, REAL_RUN, REAL_RUN, REAL_RUN, NEEDED]
    assert need_of("lean repl", lean) == need_of("kernel canary", lean) == NEEDED
    gpu = load_config(None, ["generate.backend=vllm"])
    assert need_of("cuda", gpu) == need_of("vllm", gpu) == NEEDED
    assert need_of("cuda", load_config(None, ["model.device=cuda"])) == NEEDED
