"""`prover verify`: one verdict per input line, written as known; resume; malformed lines by number;
the command through the CLI; and a `kill -9` mid-run that loses and duplicates nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter

from typer.testing import CliRunner

from conftest import KERNEL_STAND_INS, PATIENCE_S, REPO, fake_repl_command, wait_until
from prover_cli.cli import app
from prover_cli.config import load_config
from prover_cli.verify import verify_file
from prover_cli.verify.engine import RULES_VERSION
from test_verify_statement import STATEMENT

runner = CliRunner()


def write_config(path, repl_args=(), **verify):
    """A `[verify]` config driving the stand-ins. Its deadlines are for answers that should come:
    the hang guard (PATIENCE_S); a test of a timeout sets its own small one."""
    keys = {"repl_command": fake_repl_command(*repl_args), "workers": 2, "timeout_s": PATIENCE_S,
            "header_timeout_s": PATIENCE_S, "memory_limit_gb": 0.0, "canary": False, **KERNEL_STAND_INS, **verify}
    lines = ["[verify]"] + [f"{k} = {json.dumps(v)}" for k, v in keys.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_proofs(path, records):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def proof(record_id, text="  linarith", **extra):
    return {"id": record_id, "formal_statement": STATEMENT, "proof": text, **extra}


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_verdict_lines_carry_input_fields_and_the_verifier(tmp_path):
    config = load_config(write_config(tmp_path / "c.toml", timeout_s=2.0))  # "c" hangs: a timeout at 2 s
    proofs = write_proofs(tmp_path / "samples.jsonl", [
        proof("a", problem_id="amc_p1", sample=0),
        proof("b", "  sorry", problem_id="amc_p1", sample=1),
        proof("c", "  fake_hang", problem_id="amc_p1", sample=2),
    ])
    out = tmp_path / "verdicts.jsonl"
    summary = verify_file(config, proofs_path=proofs, out_path=out)
    rows = {r["id"]: r for r in read_jsonl(out)}
    assert {k: rows[k]["verdict"] for k in rows} == {"a": "verified", "b": "rejected", "c": "timeout"}
    for row in rows.values():
        assert row["problem_id"] == "amc_p1" and "sample" in row and "proof" in row
        assert {"reason", "messages", "axioms", "time_s"} <= set(row)
        if row["id"] == "b":   # `sorry` is refused by the text checks: no Lean ran, none is named
            assert row["verifier"] == {"ran": "text checks", "rules": RULES_VERSION}
            continue
        assert row["verifier"]["backend"] == "repl"
        assert row["verifier"]["repl_command"][-1].endswith("fake_repl.py")  # never mistaken for Lean
        assert row["verifier"]["lean_toolchain"] and row["verifier"]["mathlib_rev"]
    assert rows["a"]["axioms"] == ["propext", "Classical.choice", "Quot.sound"]
    assert summary["ok"] is True and summary["proofs"] == 3
    assert (summary["verified"], summary["rejected"], summary["timeout"], summary["error"]) == (1, 1, 1, 0)
    assert summary["checked"] == 3 and summary["resumed"] == 0 and summary["proofs_per_s"] > 0
    table, warnings = summary["tables"]   # the default pin's warning (no import check) is the second
    assert table["rows"][0][:2] == ["verified", 1]
    assert warnings["title"] == "warnings" and warnings["rows"] == [[w] for w in summary["warnings"]]
    json.dumps({k: v for k, v in summary.items() if k != "tables"})  # JSON-serialisable


def test_rerun_skips_ids_that_have_a_verdict_and_drops_a_torn_tail(tmp_path):
    config = load_config(write_config(tmp_path / "c.toml"))
    proofs = write_proofs(tmp_path / "p.jsonl", [proof(f"p{k}") for k in range(4)])
    out = tmp_path / "v.jsonl"
    first = verify_file(config, proofs_path=proofs, out_path=out)
    assert first["checked"] == 4
    rows = read_jsonl(out)
    # Simulate a kill in the middle of writing the last line.
    text = "".join(json.dumps(r) + "\n" for r in rows[:2]) + json.dumps(rows[2])[:25]
    out.write_text(text, encoding="utf-8")
    second = verify_file(config, proofs_path=proofs, out_path=out)
    assert (second["resumed"], second["checked"], second["verified"]) == (2, 2, 4)
    assert Counter(r["id"] for r in read_jsonl(out)) == Counter({f"p{k}": 1 for k in range(4)})
    third = verify_file(config, proofs_path=proofs, out_path=out)
    assert (third["resumed"], third["checked"]) == (4, 0)


def test_malformed_lines_are_reported_by_number_and_the_rest_is_processed(tmp_path):
    config = load_config(write_config(tmp_path / "c.toml"))
    proofs = tmp_path / "p.jsonl"
    proofs.write_text("\n".join([
        json.dumps(proof("ok1")),
        "{not json",
        "[1, 2]",
        json.dumps({"formal_statement": STATEMENT, "proof": "x"}),
        json.dumps(proof("ok1")),
        json.dumps({"id": "nofields", "proof": "  linarith"}),
        json.dumps(proof("ok2")),
    ]) + "\n", encoding="utf-8")
    out = tmp_path / "v.jsonl"
    summary = verify_file(config, proofs_path=proofs, out_path=out)
    assert summary["ok"] is False
    assert [m["line"] for m in summary["malformed"]] == [2, 3, 4, 5, 6]
    assert "duplicate id 'ok1' (first on line 1)" in summary["malformed"][3]["reason"]
    rows = {r["id"]: r for r in read_jsonl(out)}
    assert set(rows) == {"ok1", "ok2", "nofields"}
    assert rows["ok1"]["verdict"] == rows["ok2"]["verdict"] == "verified"
    assert rows["nofields"]["verdict"] == "error" and rows["nofields"]["reason"].startswith("line 6:")
    assert summary["tables"][1]["title"] == "malformed input lines"


def test_cli_verify_json_and_exit_codes(tmp_path):
    cfg = write_config(tmp_path / "c.toml")
    good = write_proofs(tmp_path / "good.jsonl", [proof("a"), proof("b", "  admit")])
    result = runner.invoke(app, ["verify", str(good), "--config", str(cfg), "--json"])
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["verified"], summary["rejected"]) == (1, 1) and "tables" not in summary
    default_out = tmp_path / "good.verdicts.jsonl"
    assert summary["out"] == str(default_out) and len(read_jsonl(default_out)) == 2

    human = runner.invoke(app, ["verify", str(good), "--config", str(cfg), "--out", str(tmp_path / "h.jsonl")])
    assert human.exit_code == 0 and human.stdout == ""
    assert "verified" in human.stderr and "proofs_per_s" in human.stderr

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(proof("a")) + "\nnot json\n", encoding="utf-8")
    failed = runner.invoke(app, ["verify", str(bad), "--config", str(cfg), "--json"])
    assert failed.exit_code == 1
    assert json.loads(failed.stdout)["malformed"] == [
        {"line": 2, "reason": "not valid JSON (Expecting value at column 1)"}]
    assert "bad.jsonl:2" in failed.stderr

    missing = runner.invoke(app, ["verify", str(tmp_path / "nope.jsonl"), "--config", str(cfg)])
    assert missing.exit_code == 1 and "Error:" in missing.stderr and "nope.jsonl" in missing.stderr

    broken = write_config(tmp_path / "broken.toml", repl_command=["/nonexistent/lake", "env", "repl"])
    down = runner.invoke(app, ["verify", str(good), "--config", str(broken), "--out", str(tmp_path / "d.jsonl")])
    assert down.exit_code == 1 and "cannot start" in down.stderr and "Traceback" not in down.stderr
    # The denylist verdict is the proof's own and stays; nothing records the broken REPL as a verdict.
    assert [(r["id"], r["verdict"]) for r in read_jsonl(tmp_path / "d.jsonl")] == [("b", "rejected")]


def test_kill_9_mid_run_loses_and_duplicates_no_verdict(tmp_path):
    n, free = 24, 8
    # The REPLs answer the first `free` proofs; the later ones (`[h₀]`: the same verdicts) are held
    # until `gate` exists, so the kill lands mid-run whatever the machine's speed. Nothing hangs:
    # the per-proof deadline is the hang guard.
    gate = tmp_path / "gate"
    cfg = write_config(tmp_path / "c.toml", repl_args=["--hold", "[h₀]", str(gate)])

    def body(k):
        held = " [h₀]" if k >= free else ""
        return f"  linarith{held}" if k % 3 else f"  nlinarith{held}\n  fake_error"

    proofs = write_proofs(tmp_path / "p.jsonl", [proof(f"p{k}", body(k)) for k in range(n)])
    out = tmp_path / "v.jsonl"
    argv = [sys.executable, "-m", "prover_cli", "verify", str(proofs), "--out", str(out),
            "--config", str(cfg), "--json"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    victim = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_until(lambda: out.exists() and out.read_text(encoding="utf-8").count("\n") >= 5, victim, "5 verdicts")
    victim.send_signal(signal.SIGKILL)
    victim.communicate()
    written_before = len(read_jsonl(out))  # a torn last line, if any, is not counted here
    assert 5 <= written_before <= free < n, "the run must be killed mid-way for this test to mean anything"

    gate.touch()
    rerun = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=PATIENCE_S)
    assert rerun.returncode == 0, rerun.stderr
    summary = json.loads(rerun.stdout)
    assert summary["resumed"] >= written_before - 1 and summary["resumed"] + summary["checked"] == n
    rows = read_jsonl(out)
    assert Counter(r["id"] for r in rows) == Counter({f"p{k}": 1 for k in range(n)})
    for row in rows:
        expected = "rejected" if int(row["id"][1:]) % 3 == 0 else "verified"
        assert row["verdict"] == expected, row


def _manifest(project, mathlib_rev):
    project.mkdir(exist_ok=True)
    (project / "lake-manifest.json").write_text(json.dumps({"version": "1.1.0", "packagesDir": ".lake/packages",
        "packages": [{"type": "git", "name": "mathlib", "rev": mathlib_rev, "url": "https://x", "inherited": False}]}))


def test_a_resume_after_the_manifest_moves_mathlib_verifies_again(tmp_path):
    """#39: the policy digest holds the Mathlib of `<project_dir>/lake-manifest.json` (what the REPL
    loads), so a verdict made under another Mathlib is stale."""
    project = tmp_path / "project"
    _manifest(project, "9837ca9d65d9de6fad1ef4381750ca688774e608")
    config = load_config(write_config(tmp_path / "c.toml", project_dir=str(project)))
    proofs = write_proofs(tmp_path / "p.jsonl", [proof(f"p{k}") for k in range(2)])
    out = tmp_path / "v.jsonl"
    assert verify_file(config, proofs_path=proofs, out_path=out)["checked"] == 2
    assert (verify_file(config, proofs_path=proofs, out_path=out)["resumed"]) == 2     # nothing moved
    _manifest(project, "c211948581bde9846a99e32d97a03f0d5307c31e")
    again = verify_file(config, proofs_path=proofs, out_path=out)
    assert (again["resumed"], again["checked"], again["rechecked"]) == (0, 2, 2)


def test_every_verdict_line_and_the_summary_say_whether_the_box_was_in_force(tmp_path):
    proofs = write_proofs(tmp_path / "p.jsonl", [proof("a")])
    for setting in ("bubblewrap", "none"):
        config = load_config(write_config(tmp_path / f"{setting}.toml", box=setting))
        out = tmp_path / f"{setting}.jsonl"
        summary = verify_file(config, proofs_path=proofs, out_path=out)
        [line] = read_jsonl(out)
        assert line["verifier"]["box"] == setting and summary["verifier"]["box"] == setting
        off = [w for w in summary["warnings"] if w.startswith('verify.box = "none"')]
        assert bool(off) == (setting == "none"), summary["warnings"]
