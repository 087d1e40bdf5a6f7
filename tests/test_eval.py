"""prover eval: scoring verdicts through the CLI, and countdown end to end with the tiny model."""

import json

import pytest
from typer.testing import CliRunner

from prover_cli.cli import app
from prover_cli.config import config_from_dict
from prover_cli.data import prepare_data
from prover_cli.errors import ConfigError
from prover_cli.evaluate import PLOT_FILE, run_eval
from prover_cli.jsonl import load_jsonl_strict

runner = CliRunner()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_verdicts(path):
    rows = []
    # p1 (test): 1 of 4 verified; p2 (test): none; p3 (valid): 3 of 4, no problem_id (grouped by id)
    for pid, split, statuses, with_pid in [
        ("p1", "test", ["rejected", "verified", "timeout", "rejected"], True),
        ("p2", "test", ["rejected", "error", "rejected", "rejected"], True),
        ("p3", "valid", ["verified", "verified", "rejected", "verified"], False),
    ]:
        for j, status in enumerate(statuses):
            row = {"id": f"{pid}/{j}", "split": split, "verdict": status}
            if with_pid:
                row["problem_id"] = pid
            rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_cli_eval_verdicts_json_and_plot(tmp_path):
    verdicts = write_verdicts(tmp_path / "verdicts.jsonl")
    run_dir = tmp_path / "run"
    result = runner.invoke(app, ["eval", "--verdicts", str(verdicts), "--k", "1,2,4", "--json",
                                 "--set", f"run.dir={run_dir}"])
    assert result.exit_code == 0, result.stderr
    payload = json.loads(result.stdout)
    # by hand: pass@1 = c/n per problem; pass@2 = 1 - C(n-c,2)/C(4,2) = 1 - C(n-c,2)/6
    assert payload["pass@1"] == pytest.approx((1 / 4 + 0 + 3 / 4) / 3)
    assert payload["pass@2"] == pytest.approx(((1 - 3 / 6) + 0 + 1.0) / 3)
    assert payload["pass@4"] == pytest.approx(2 / 3)
    assert payload["solved_any"] == pytest.approx(2 / 3)
    assert payload["problems"] == 3 and payload["samples"] == 12 and payload["verified"] == 4
    assert payload["per_split"]["test"]["pass@1"] == pytest.approx(1 / 8)
    assert payload["per_split"]["valid"]["pass@2"] == pytest.approx(1.0)
    assert "tables" not in payload
    plot = run_dir / PLOT_FILE
    assert payload["plot"] == str(plot) and plot.read_bytes()[:8] == PNG_MAGIC

    human = runner.invoke(app, ["eval", "--verdicts", str(verdicts), "--k", "1,2", "--set", f"run.dir={run_dir}"])
    assert human.exit_code == 0 and human.stdout == ""
    assert "test: 2 problems" in human.stderr and "valid: 1 problems" in human.stderr and "pass@2" in human.stderr


def test_cli_eval_k_above_n_names_the_problem(tmp_path):
    verdicts = write_verdicts(tmp_path / "verdicts.jsonl")
    result = runner.invoke(app, ["eval", "--verdicts", str(verdicts), "--k", "1,8", "--json",
                                 "--set", f"run.dir={tmp_path}"])
    assert result.exit_code == 1 and result.stdout == ""
    assert "Error:" in result.stderr and "k = 8" in result.stderr and "'p1'" in result.stderr


def test_eval_argument_conflicts(tmp_path):
    config = config_from_dict({"run": {"dir": str(tmp_path)}})
    with pytest.raises(ConfigError, match="--model and --ledger"):
        run_eval(config, model="x", ledger=tmp_path / "ledger.json")
    with pytest.raises(ConfigError, match="no --model or --ledger"):
        run_eval(config, model="x", verdicts=tmp_path / "v.jsonl")
    with pytest.raises(ConfigError, match="k = 64 exceeds eval.n = 32"):
        run_eval(config, k=[1, 64])


@pytest.mark.slow
def test_eval_countdown_end_to_end_with_the_tiny_model(tmp_path, tmp_path_factory):
    config = config_from_dict({
        "model": {"name": "tiny", "cache_dir": str(tmp_path_factory.mktemp("model-cache")), "device": "cpu"},
        "data": {"task": "countdown", "countdown_problems": 40},
        "generate": {"max_tokens": 6, "temperature": 1.0, "top_p": 1.0},
        "eval": {"split": "valid", "n": 2, "k": [1, 2]},
        "run": {"dir": str(tmp_path / "run")},
    })
    prepare_data(config)
    valid = [p for p in load_jsonl_strict(config.problems_path) if p["split"] == "valid"]
    assert valid  # 40 problems, ~10% valid

    result = run_eval(config)
    assert result["problems"] == len(valid) and result["samples"] == 2 * len(valid)
    assert 0.0 <= result["pass@1"] <= result["pass@2"] <= 1.0
    assert result["solved_any"] == pytest.approx(result["pass@2"])  # every problem has n = 2 samples
    verdicts = load_jsonl_strict(result["verdicts"])
    assert len(verdicts) == 2 * len(valid)
    assert {v["verdict"] for v in verdicts} <= {"verified", "rejected"}
    # the verdicts agree with the countdown checker on the stored completions
    from prover_cli.tasks.countdown import score

    samples = {s["id"]: s for s in load_jsonl_strict(result["samples_path"])}
    for v in verdicts:
        sample = samples[v["id"]]
        assert (v["verdict"] == "verified") == (score(sample["completion"], sample) == 1.0)
    assert (tmp_path / "run" / "eval").is_dir()
    with open(result["plot"], "rb") as handle:
        assert handle.read(8) == PNG_MAGIC

    again = run_eval(config)  # resumes: nothing new generated, same scores
    assert again["samples_written"] == 0 and again["pass@1"] == result["pass@1"]
    other = run_eval(config_from_dict({**config.to_dict(), "generate": {**config.to_dict()["generate"], "seed": 9}}))
    assert other["eval_dir"] != result["eval_dir"]  # another setting never mixes into the same files
