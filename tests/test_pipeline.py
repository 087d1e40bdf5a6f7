"""The whole Lean chain through the real CLI: prepare-data -> generate -> verify -> eval.

Generation uses the tiny random model; verification uses the REPL stand-in (tests/fake_repl.py),
which is NOT Lean: these tests check that the stages fit together (every arrow of
shared/ARCHITECTURE.md is a file the next stage reads), not what Lean would say.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prover_cli.cli import app
from conftest import fake_repl_command, kernel_stand_in_sets

runner = CliRunner()


@pytest.fixture(scope="module")
def tiny_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny-cache")


def invoke(*args: str) -> dict:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_lean_chain_generate_verify_eval(tmp_path, tiny_cache):
    run = tmp_path / "run"
    common = [
        "--set", "model.name=tiny", "--set", f"model.cache_dir={tiny_cache}",
        "--set", "model.family=kimina", "--set", "data.task=lean",
        "--set", f"run.dir={run}", "--set", f"verify.repl_command={json.dumps(fake_repl_command())}",
        "--set", "verify.workers=1", "--set", "verify.timeout_s=5.0", "--set", "verify.memory_limit_gb=0.0",
        "--set", "generate.n=2", "--set", "generate.max_tokens=8", *kernel_stand_in_sets(),
    ]
    invoke("prepare-data", "examples", *common)
    problems = lines(run / "problems.jsonl")
    assert problems and all(p["formal_statement"].rstrip().endswith(":= by") for p in problems)

    invoke("generate", *common)
    samples = lines(run / "samples.jsonl")
    assert len(samples) == 2 * len(problems)

    verdict_summary = invoke("verify", str(run / "samples.jsonl"), "--out", str(run / "verdicts.jsonl"), *common)
    verdicts = lines(run / "verdicts.jsonl")
    assert sorted(v["id"] for v in verdicts) == sorted(s["id"] for s in samples)
    # A random tiny model writes no Lean block: nothing may count as verified (fail closed).
    assert {v["verdict"] for v in verdicts} == {"rejected"}
    assert all(v["problem_id"] in {p["id"] for p in problems} for v in verdicts)
    assert verdict_summary["ok"] is True

    scored = invoke("eval", "--verdicts", str(run / "verdicts.jsonl"), "--k", "1,2", *common)
    assert (scored["problems"], scored["samples"], scored["verified"]) == (len(problems), len(samples), 0)
    assert scored["pass@1"] == 0.0 and scored["pass@2"] == 0.0
    assert Path(scored["plot"]).exists()


def test_human_proofs_as_completions_verify_and_score(tmp_path, shared):
    """Real miniF2F human proofs, wrapped as model completions, pass every text check and the
    stand-in's protocol; eval then counts them as solved (skipped without ../shared/data)."""
    rows = lines(shared("data", "minif2f", "minif2f_valid_few_shot_proofs.jsonl"))[:6]
    header = json.loads(shared("data", "minif2f", "minif2f.jsonl").read_text(encoding="utf-8").splitlines()[0])["header"]
    proofs = tmp_path / "samples.jsonl"
    with proofs.open("w", encoding="utf-8") as handle:
        for row in rows:
            for j, body in enumerate([row["formal_proof"], "  sorry"]):
                completion = f"<think>easy</think>\n```lean4\n{row['formal_statement']}{body}\n```\n"
                handle.write(json.dumps({
                    "id": f"{row['name']}/{j}", "problem_id": row["name"], "split": "valid",
                    "formal_statement": row["formal_statement"], "header": header, "completion": completion,
                }) + "\n")
    cfg = ["--set", f"verify.repl_command={json.dumps(fake_repl_command())}", "--set", "verify.workers=2",
           "--set", "verify.memory_limit_gb=0.0", "--set", f"run.dir={tmp_path}", *kernel_stand_in_sets()]
    invoke("verify", str(proofs), "--out", str(tmp_path / "verdicts.jsonl"), *cfg)
    verdicts = {v["id"]: v for v in lines(tmp_path / "verdicts.jsonl")}
    for row in rows:
        assert verdicts[f"{row['name']}/0"]["verdict"] == "verified"
        assert verdicts[f"{row['name']}/1"]["verdict"] == "rejected"   # sorry, denied before Lean
    scored = invoke("eval", "--verdicts", str(tmp_path / "verdicts.jsonl"), "--k", "1,2", *cfg)
    assert scored["problems"] == len(rows) and scored["verified"] == len(rows)
    assert scored["pass@1"] == 0.5 and scored["pass@2"] == 1.0  # one of two samples per problem


def test_es_on_the_lean_task_scores_through_one_warm_verifier(tmp_path, tiny_cache):
    """`train es` with the Lean reward: every member's samples go through the verify engine (the
    stand-in here), one REPL pool is kept warm across iterations, nothing random verifies."""
    from prover_cli.verify import engine

    run = tmp_path / "run"
    common = [
        # kimina family: the answer must be a ```lean4 block, which a random model never writes, so
        # every sample is rejected before it reaches the stand-in (which is not Lean and would
        # accept a continuation-style candidate that has no `fake_*` marker).
        "--set", "model.name=tiny", "--set", f"model.cache_dir={tiny_cache}", "--set", "model.family=kimina",
        "--set", "data.task=lean", "--set", "data.train_split=train", "--set", f"run.dir={run}",
        "--set", f"verify.repl_command={json.dumps(fake_repl_command())}", "--set", "verify.workers=1",
        "--set", "verify.memory_limit_gb=0.0", "--set", "generate.max_tokens=8", *kernel_stand_in_sets(),
        "--set", "es.population=2", "--set", "es.iterations=2", "--set", "es.problems_per_iteration=2",
    ]
    invoke("prepare-data", "examples", *common)
    engine.close_warm_verifiers()
    try:
        summary = invoke("train", "es", *common)
        assert len(engine._WARM) == 1  # the same pool served both iterations
    finally:
        engine.close_warm_verifiers()
    assert summary["iterations"] == 2
    metrics = lines(run / "metrics.jsonl")
    assert [m["samples"] for m in metrics] == [4, 4]            # 2 members x 2 problems x 1 sample
    assert all(m["verify/verified"] == 0 and m["es/skipped"] for m in metrics)
    from prover_cli.es.ledger import read_ledger

    header, records = read_ledger(run / "ledger.json")
    assert header["task"] == "lean" and [r.get("skip") for r in records] == [1, 1]
