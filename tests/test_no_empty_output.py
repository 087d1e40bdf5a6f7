"""A command that fails before its first record leaves no output file behind (issue #38): an empty
samples.jsonl or verdicts.jsonl would read as a finished run with nothing in it."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from prover_cli.cli import app
from prover_cli.fsio.jsonl import ResumableWriter

runner = CliRunner()


def test_a_writer_that_fails_before_its_first_record_removes_the_file_it_made(tmp_path):
    out = tmp_path / "samples.jsonl"
    with pytest.raises(RuntimeError):
        with ResumableWriter(out):
            assert out.exists()   # made at once (its inode is locked), removed when nothing came
            raise RuntimeError("the model did not load")
    assert not out.exists()


def test_a_writer_keeps_what_it_wrote_and_a_file_it_did_not_make(tmp_path):
    out = tmp_path / "samples.jsonl"
    with pytest.raises(KeyboardInterrupt):
        with ResumableWriter(out) as writer:
            writer.write({"id": "a"})
            raise KeyboardInterrupt
    assert out.read_text(encoding="utf-8") == '{"id": "a"}\n'   # the rerun resumes from it
    out.write_text("", encoding="utf-8")
    with pytest.raises(RuntimeError):
        with ResumableWriter(out):
            raise RuntimeError("failed")
    assert out.exists()   # someone else's (or an earlier run's) file is never removed


def test_a_finished_writer_with_no_records_leaves_its_empty_output(tmp_path):
    out = tmp_path / "verdicts.jsonl"
    with ResumableWriter(out):
        pass
    assert out.read_text(encoding="utf-8") == ""   # nothing to do is a result: the next stage reads it


def test_generate_that_cannot_load_its_model_writes_no_samples_file(tmp_path):
    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"id": "c1", "numbers": [1, 2, 3], "target": 6, "split": "valid"}) + "\n",
                        encoding="utf-8")
    out = tmp_path / "samples.jsonl"
    broken = tmp_path / "broken-model"   # a model directory that is refused at load, inside the writer
    broken.mkdir()
    (broken / "config.json").write_text("{}", encoding="utf-8")
    result = runner.invoke(app, ["generate", "--config", "demo", "--problems", str(problems), "--out", str(out),
                                 "--model", str(broken)])
    assert result.exit_code == 1, result.output
    assert "Error:" in result.stderr and "unexpected" not in result.stderr, result.stderr
    assert not out.exists()


def test_verify_whose_repl_dies_at_start_writes_no_verdicts_file(tmp_path):
    import sys

    from conftest import kernel_stand_in_sets
    from test_verify_statement import STATEMENT

    proofs = tmp_path / "samples.jsonl"
    proofs.write_text(json.dumps({"id": "p0", "formal_statement": STATEMENT, "proof": "  linarith"}) + "\n",
                      encoding="utf-8")
    out = tmp_path / "verdicts.jsonl"
    result = runner.invoke(app, ["verify", str(proofs), "--out", str(out), "--set",
                                 f"verify.repl_command={json.dumps([sys.executable, '-c', 'raise SystemExit(3)'])}",
                                 "--set", "verify.workers=1", "--set", "verify.memory_limit_gb=0",
                                 *kernel_stand_in_sets()])
    assert result.exit_code == 1, result.output
    assert "Error:" in result.stderr and "unexpected" not in result.stderr, result.stderr
    assert not out.exists()
