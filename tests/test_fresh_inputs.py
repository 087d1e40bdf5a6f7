"""Issue #30: inputs prover did not expect, and what a script sees when a command fails.

1. a number JSON cannot carry (`1e999999`, `NaN`) in an input line is a bad line, and nothing
   prover writes is ever `Infinity` or `NaN`;
2. a verdict outside the vocabulary is a malformed line of `eval --verdicts`, not a failure;
3. a lock held by a process that is not prover (or left no record) is reported as such, with its
   pid and what to do, never as "started None";
4. `prepare-data` with a bad input line writes the rest and exits 1, as verify and eval do;
5. with `--json`, every failure path still prints one JSON object on stdout.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import REPO
from prover_cli import backends
from prover_cli.cli import app
from prover_cli.fsio.jsonl import BadLine, ResumableWriter, read_jsonl, write_jsonl_atomic
from prover_cli.fsio.lock import LockedError, lock_path, output_lock
from test_verify_file import proof, write_config, write_proofs

runner = CliRunner()


def one_line(text: str) -> str:
    """Rich wraps long lines at the terminal width: compare the words."""
    return " ".join(text.split())


def _refuse_constant(literal: str):
    raise AssertionError(f"{literal} is not JSON")


def strict_json(text: str):
    """json.loads as a strict JSON reader would: NaN, Infinity and -Infinity refused."""
    return json.loads(text, parse_constant=_refuse_constant)


def strict_lines(path: Path) -> list[dict]:
    return [strict_json(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# -- 1. non-finite numbers ---------------------------------------------------------------------------

def test_a_number_no_finite_float_holds_makes_its_line_a_bad_line(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join([
        '{"id": "ok", "x": 1.5, "big": 123456789012345678901234567890}',
        '{"id": "overflow", "x": 1e999999}',
        '{"id": "negative", "x": [1, {"y": -1e400}]}',
        '{"id": "nan", "x": NaN}',
        '{"id": "inf", "x": -Infinity}',
        '{"id": "long", "x": ' + "9" * 5000 + "}",
        '{"id": "also-ok", "x": 2E+3}',
    ]) + "\n", encoding="utf-8")
    rows = list(read_jsonl(path))
    good = {n: obj for n, obj in rows if not isinstance(obj, BadLine)}
    bad = {n: obj.reason for n, obj in rows if isinstance(obj, BadLine)}
    assert good == {1: {"id": "ok", "x": 1.5, "big": 123456789012345678901234567890},
                    7: {"id": "also-ok", "x": 2000.0}}
    assert sorted(bad) == [2, 3, 4, 5, 6]
    assert "`1e999999`" in bad[2] and bad[2].startswith("not a finite number")
    assert "`-1e400`" in bad[3] and "`NaN`" in bad[4] and "`-Infinity`" in bad[5]
    assert bad[6].startswith("number too long to read")


def test_writers_refuse_nan_and_infinity_and_write_nothing_of_that_record(tmp_path):
    out = tmp_path / "out.jsonl"
    with ResumableWriter(out) as writer:
        writer.write({"id": "a", "x": 1.0})
        with pytest.raises(ValueError):
            writer.write({"id": "b", "x": float("inf")})
        writer.write({"id": "c", "x": 2.0})
    assert [r["id"] for r in strict_lines(out)] == ["a", "c"]
    whole = tmp_path / "whole.jsonl"
    with pytest.raises(ValueError):
        write_jsonl_atomic(whole, [{"id": "a", "x": float("nan")}])
    assert not whole.exists()


def test_verify_skips_a_line_with_a_non_finite_number_and_writes_strict_json(tmp_path):
    proofs = tmp_path / "samples.jsonl"
    write_proofs(proofs, [proof("a")])
    with proofs.open("a", encoding="utf-8") as handle:   # a field json.dumps cannot write as it came
        handle.write(json.dumps(proof("b"))[:-1] + ', "score": 1e999999}\n')
        handle.write(json.dumps(proof("c")) + "\n")
    out = tmp_path / "verdicts.jsonl"
    result = runner.invoke(app, ["verify", str(proofs), "--out", str(out), "--config",
                                 str(write_config(tmp_path / "c.toml")), "--json"])
    assert result.exit_code == 1, result.stderr
    assert f"{proofs}:2: not a finite number: `1e999999`" in one_line(result.stderr)
    summary = strict_json(result.stdout)
    assert [m["line"] for m in summary["malformed"]] == [2]
    rows = strict_lines(out)   # before the fix: `"score": Infinity`, which no strict reader takes
    assert sorted(r["id"] for r in rows) == ["a", "c"] and all(r["verdict"] == "verified" for r in rows)


def test_prepare_data_refuses_a_parquet_row_holding_nan_and_writes_the_rest(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    source = tmp_path / "rows.parquet"
    pq.write_table(pa.table({
        "id": ["a", "b"],
        "formal_statement": ["theorem a (x : ℕ) : x + 0 = x := by\n", "theorem b (x : ℕ) : 0 + x = x := by\n"],
        "difficulty": [float("nan"), 0.5],
    }), source)
    out = tmp_path / "problems.jsonl"
    result = runner.invoke(app, ["prepare-data", str(source), "--out", str(out), "--json"])
    assert result.exit_code == 1, result.stderr
    assert f"{source}:1: not a finite number: difficulty = nan" in one_line(result.stderr)
    summary = strict_json(result.stdout)
    assert summary["dropped_by_reason"] == {"not a finite number": 1}
    assert [(p["id"], p["difficulty"]) for p in strict_lines(out)] == [("b", 0.5)]


def test_json_on_stdout_is_strict_a_non_finite_value_is_null():
    import io

    from prover_cli.out import Out

    out = Out(json_mode=True)
    out.stdout = io.StringIO()
    out.result({"ok": True, "rate": float("nan"), "rows": [[1, float("inf")]], "nested": {"x": -float("inf")}})
    assert strict_json(out.stdout.getvalue()) == {"ok": True, "rate": None, "rows": [[1, None]], "nested": {"x": None}}


# -- 2. a verdict outside the vocabulary --------------------------------------------------------------

def test_eval_reports_an_unknown_verdict_by_line_and_scores_the_rest(tmp_path):
    verdicts = tmp_path / "verdicts.jsonl"
    verdicts.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "a/0", "verdict": "verified"},
        {"id": "a/1", "verdict": "maybe"},
        {"id": "b/0", "verdict": "rejected"},
        {"id": "b/1", "verdict": "Verified"},
        {"id": "b/2", "verdict": "timeout"},
    ]), encoding="utf-8")
    result = runner.invoke(app, ["eval", "--verdicts", str(verdicts), "--k", "1", "--json",
                                 "--set", "eval.plot=false"])
    assert result.exit_code == 1, result.stderr
    text = one_line(result.stderr)
    assert f"{verdicts}:2: `verdict` is 'maybe'" in text and f"{verdicts}:4: `verdict` is 'Verified'" in text
    summary = json.loads(result.stdout)
    assert [m["line"] for m in summary["malformed"]] == [2, 4]
    assert (summary["problems"], summary["samples"], summary["verified"]) == (2, 3, 1)
    assert summary["ok"] is False


# -- 3. a lock held by a process that is not prover -----------------------------------------------------

# A non-prover child: takes an flock on argv[1] (a lock file), after writing argv[2] into it, says so,
# and holds it until stdin closes.
FOREIGN_HOLDER = textwrap.dedent("""
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.ftruncate(fd, 0)
    os.pwrite(fd, sys.argv[2].encode(), 0)
    print("locked", flush=True)
    sys.stdin.read()
""")


def start_foreign_holder(lock_file: Path, content: str = "") -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", FOREIGN_HOLDER, str(lock_file), content, "--foreign"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "locked"
    return child


def locked_message(target: Path) -> LockedError:
    with pytest.raises(LockedError) as err:
        with output_lock(target):
            pytest.fail("took a lock another live process holds")
    return err.value


@pytest.mark.parametrize("content", ["", "not json", '{"pid": "x"}', "{}"],
                         ids=["empty", "not-json", "bad-pid", "empty-object"])
def test_a_lock_file_held_without_a_prover_record_names_the_process_and_what_to_do(tmp_path, content):
    target = tmp_path / "verdicts.jsonl"
    child = start_foreign_holder(lock_path(target), content)
    try:
        error = locked_message(target)
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    message = str(error)
    assert "None" not in message and "just started" not in message, message
    assert "not prover or left no record" in message and str(lock_path(target)) in message
    assert f"pid {child.pid}" in message and "--foreign" in message   # from /proc/locks
    assert f"pid {child.pid}" in error.hint and "stop it or wait" in error.hint


def test_a_stale_prover_record_under_a_foreign_lock_is_not_believed(tmp_path):
    target = tmp_path / "run"
    stale = json.dumps({"pid": 4194303, "command": "prover train es --old", "host": socket.gethostname(),
                        "started": "2001-01-01 00:00:00 UTC"})
    child = start_foreign_holder(lock_path(target), stale)
    try:
        message = str(locked_message(target))
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    assert message.startswith(f"{target}: in use by a process that is not prover or left no record"), message
    assert f"pid {child.pid}" in message and "pid 4194303, `prover train es --old`, a run that has ended" in message


@pytest.mark.skipif(shutil.which("flock") is None, reason="no flock(1) on this system")
def test_a_plain_flock_on_the_lock_file_reads_clearly_through_the_cli(tmp_path):
    proofs = write_proofs(tmp_path / "samples.jsonl", [proof("a")])
    out = tmp_path / "verdicts.jsonl"
    lock = lock_path(out)
    child = subprocess.Popen(["flock", str(lock), sys.executable, "-c",
                              "import sys; print('locked', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "locked"
        result = runner.invoke(app, ["verify", str(proofs), "--out", str(out), "--json",
                                     "--config", str(write_config(tmp_path / "c.toml"))])
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    assert result.exit_code == 1, result.stderr
    failure = json.loads(result.stdout)
    assert (failure["ok"], failure["exit_code"], failure["kind"]) == (False, 1, "locked")
    assert "not prover or left no record" in failure["error"] and f"pid {child.pid}" in failure["error"]
    assert "`flock " in failure["error"] and "started" not in failure["error"]
    assert "stop it or wait" in failure["hint"]
    assert not out.exists()


# -- 4. prepare-data: one bad line costs one line, and the command exits 1 --------------------------------

def test_prepare_data_names_a_bad_line_writes_the_rest_and_exits_1(tmp_path):
    source = tmp_path / "rows.jsonl"
    source.write_text("\n".join([
        json.dumps({"id": "a", "formal_statement": "theorem a (x : ℕ) : x + 0 = x := by\n"}),
        "{torn",
        json.dumps({"id": "b", "formal_statement": "theorem b (x : ℕ) : 0 + x = x := by\n"}),
        json.dumps({"id": "c", "formal_statement": ""}),   # filtered on purpose: not a malformed line
    ]) + "\n", encoding="utf-8")
    out = tmp_path / "problems.jsonl"
    result = runner.invoke(app, ["prepare-data", str(source), "--out", str(out)])
    assert result.exit_code == 1, result.stderr
    assert f"{source}:2: not valid JSON" in one_line(result.stderr)
    assert [p["id"] for p in strict_lines(out)] == ["a", "b"]
    as_json = runner.invoke(app, ["prepare-data", str(source), "--out", str(out), "--json"])
    summary = json.loads(as_json.stdout)
    assert as_json.exit_code == 1 and summary["ok"] is False
    assert summary["malformed"] == [{"line": 2, "reason": summary["malformed"][0]["reason"]}]
    assert summary["dropped_by_reason"] == {"not valid JSON": 1, "missing formal_statement": 1}


def test_prepare_data_with_only_filtered_rows_still_exits_0(tmp_path):
    source = tmp_path / "rows.jsonl"
    source.write_text("\n".join([
        json.dumps({"id": "a", "formal_statement": "theorem a (x : ℕ) : x + 0 = x := by\n"}),
        json.dumps({"id": "a", "formal_statement": "theorem a (x : ℕ) : x + 0 = x := by\n"}),   # duplicate id
    ]) + "\n", encoding="utf-8")
    result = runner.invoke(app, ["prepare-data", str(source), "--out", str(tmp_path / "p.jsonl"), "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["ok"] is True and "malformed" not in json.loads(result.stdout)


def test_prepare_data_names_the_file_of_a_bad_row_in_a_directory(tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "one.jsonl").write_text(json.dumps({"id": "a", "formal_statement": "theorem a : 1 = 1 := by\n"})
                                      + "\n[1]\n", encoding="utf-8")
    result = runner.invoke(app, ["prepare-data", str(folder), "--out", str(tmp_path / "p.jsonl"), "--json"])
    assert result.exit_code == 1, result.stderr
    assert f"{folder}/one.jsonl:2: expected a JSON object" in one_line(result.stderr)
    assert json.loads(result.stdout)["malformed"] == [{"line": 2, "reason": "expected a JSON object, got list",
                                                      "file": "one.jsonl"}]


# -- 5. --json on every failure path ------------------------------------------------------------------

def failure_of(result, exit_code: int, kind: str) -> dict:
    assert result.exit_code == exit_code, result.stderr
    failure = json.loads(result.stdout)   # one JSON document, nothing else on stdout
    assert (failure["ok"], failure["exit_code"], failure["kind"]) == (False, exit_code, kind), failure
    assert set(failure) == {"ok", "exit_code", "kind", "error", "hint"}
    return failure


def test_json_failure_on_a_prover_error_exit_1(tmp_path):
    missing = tmp_path / "absent.jsonl"
    result = runner.invoke(app, ["eval", "--verdicts", str(missing), "--json"])
    failure = failure_of(result, 1, "input")
    assert failure["error"] == f"{missing}: file not found"
    assert result.stderr.startswith(f"Error: {missing}: file not found")   # stderr as without --json


def test_json_failure_on_a_config_error_and_on_a_usage_error_exit_2(tmp_path):
    bad_set = runner.invoke(app, ["doctor", "--set", "es.populaton=8", "--json"])
    failure = failure_of(bad_set, 2, "config")
    assert failure["error"].startswith("--set es.populaton=8: unknown key") and "docs/config.md" in failure["hint"]
    assert bad_set.stderr.startswith("Error: --set es.populaton=8: unknown key")
    bad_k = runner.invoke(app, ["eval", "--verdicts", "v.jsonl", "--k", "1,x", "--json"])
    assert "--k '1,x'" in failure_of(bad_k, 2, "usage")["error"]


def test_json_failure_on_an_interrupt_exit_130(monkeypatch):
    def interrupted(name, config, kwargs):
        raise KeyboardInterrupt("SIGTERM")

    monkeypatch.setattr(backends, "MODAL_RUNNER", interrupted)
    result = runner.invoke(app, ["eval", "--verdicts", "v.jsonl", "--backend", "modal", "--json"])
    failure = failure_of(result, 130, "interrupted")
    assert failure["error"] == "interrupted (SIGTERM)" and failure["hint"].startswith("resume with: ")
    assert "Interrupted (SIGTERM)." in result.stderr


def test_json_failure_on_the_unexpected_path(monkeypatch):
    def boom(name, config, kwargs):
        raise RuntimeError("kaput")

    monkeypatch.setattr(backends, "MODAL_RUNNER", boom)
    result = runner.invoke(app, ["eval", "--verdicts", "v.jsonl", "--backend", "modal", "--json"])
    failure = failure_of(result, 1, "unexpected")
    assert failure["error"] == "unexpected RuntimeError: kaput" and "unexpected RuntimeError: kaput" in result.stderr


def test_no_json_without_json_and_success_shape_unchanged(monkeypatch, tmp_path):
    missing = runner.invoke(app, ["eval", "--verdicts", str(tmp_path / "absent.jsonl")])
    assert missing.exit_code == 1 and missing.stdout == ""
    monkeypatch.setattr(backends, "MODAL_RUNNER", lambda name, config, kwargs: {"ok": True, "ran": name})
    ok = runner.invoke(app, ["replay-seeds", "l.json", "--out", str(tmp_path / "m"), "--backend", "modal", "--json"])
    assert ok.exit_code == 0 and json.loads(ok.stdout) == {"ok": True, "ran": "replay_seeds"}


def test_json_failure_on_a_usage_error_click_finds_while_parsing():
    """`prover ... --json` as a script runs it (through main()): a bad option value is refused by
    click before any command runs; stdout still gets its JSON object, stderr reads as without it."""
    args = ["eval", "--verdicts", "v.jsonl", "--backend", "cloud"]
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200")
    plain = subprocess.run([sys.executable, "-m", "prover_cli", *args], cwd=REPO, capture_output=True, text=True,
                           env=env, timeout=120)
    as_json = subprocess.run([sys.executable, "-m", "prover_cli", *args, "--json"], cwd=REPO, capture_output=True,
                             text=True, env=env, timeout=120)
    assert plain.returncode == as_json.returncode == 2 and plain.stdout == ""
    failure = json.loads(as_json.stdout)
    assert (failure["ok"], failure["exit_code"], failure["kind"]) == (False, 2, "usage")
    assert "cloud" in failure["error"]
    assert as_json.stderr == plain.stderr


def test_a_non_finite_metric_is_written_as_null_and_the_line_stays_json(tmp_path):
    from prover_cli.fsio.jsonl import loads
    from prover_cli.training.metrics import append_metrics, read_metrics  # noqa: F401  (the reader of report)

    record = {"iteration": 0, "method": "grpo", "task": "toy", "samples": 0, "samples/total": 0,
              "time/wall_s": 0.0, "time/elapsed_s": 0.0, "eval/verified_rate": 0.25,
              "grpo/loss": float("nan"), "nested": {"x": float("inf"), "y": [1.0, float("-inf")]}}
    from prover_cli.training.metrics import BASE_REQUIRED_KEYS
    record.update({key: 0 for key in BASE_REQUIRED_KEYS if key not in record})
    append_metrics(tmp_path, record)
    line = loads((tmp_path / "metrics.jsonl").read_text(encoding="utf-8"))
    assert line["grpo/loss"] is None and line["nested"] == {"x": None, "y": [1.0, None]}
    assert line["eval/verified_rate"] == 0.25
