"""The budget is a recorded, compared quantity (issue #31): what each run consumed, in metrics.jsonl;
`prover report` compares finals at the largest common budget and refuses unequal ones; the shipped
flagship configs consume the same training samples."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import REPO
from prover_cli.cli import app
from prover_cli.config import load_config
from prover_cli.errors import UsageError
from prover_cli.comparison.report import report_runs
from test_report import make_eval_run

runner = CliRunner()
TINY = REPO / "tests" / "configs" / "tiny.toml"


@pytest.fixture(autouse=True)
def in_tmp_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # default reports go to ./reports/


# ---------------------------------------------------------------------------------------------
# prover report: the largest common budget, the refusal, the flag and the headline
# ---------------------------------------------------------------------------------------------

def test_finals_are_taken_at_the_largest_common_budget(tmp_path):
    # ES: 4 iterations x 8 samples, evaluated at 16 and 32; GRPO: 8 steps x 2 samples, evaluated at 8 and 16.
    es = make_eval_run(tmp_path / "es", "es", 0, {0: (0.2, 0.2), 2: (0.3, 0.3), 4: (0.9, 0.9)})
    grpo = make_eval_run(tmp_path / "grpo", "grpo", 0, {0: (0.2, 0.2), 4: (0.3, 0.3), 8: (0.4, 0.4)},
                         steps=8, samples_per_step=2)
    result = report_runs(run_dirs=[es, grpo], out_dir=tmp_path / "out")
    (diff,) = result["differences"]
    # The common budget is GRPO's 16 samples: ES at iteration 2 (16 samples), not its final 32.
    assert diff["sampled"]["mean"] == pytest.approx(0.3 - 0.4) and diff["sampled"]["samples"] == [16]
    assert diff["sampled"]["iterations"] == {"es": [2], "grpo": [8]}
    point = next(p for p in diff["at"] if p["metric"] == "sampled")
    assert (point["common_budget"], point["a_iteration"], point["a_samples"], point["b_iteration"],
            point["b_samples"]) == (16, 2, 16, 8, 16)
    assert "headline" not in result and "unequal_budgets" not in diff
    table = next(t for t in result["tables"] if t["title"].startswith("paired difference"))
    row = dict(zip(table["columns"], table["rows"][0]))
    assert row["compared at"] == "es @2 (16 samples), grpo @8 (16 samples)"
    # Each arm's own base -> final is still its last evaluation.
    arms = {a["arm"]: a for a in result["arms"]}
    assert arms["es"]["heldout"]["sampled"]["final"]["mean"] == pytest.approx(0.9)


def test_within_five_percent_is_equal():
    from prover_cli.comparison.compare import unequal

    assert not unequal(5000, 5120) and unequal(4800, 5120) and not unequal(0, 0)


def _unequal_runs(tmp_path):
    """ES evaluated at 32 samples only (and its base); GRPO trained and evaluated at 16: no ES point near 16."""
    es = make_eval_run(tmp_path / "es", "es", 0, {0: (0.2, 0.2), 4: (0.5, 0.5)})
    grpo = make_eval_run(tmp_path / "grpo", "grpo", 0, {0: (0.2, 0.2), 2: (0.3, 0.3)}, steps=2)
    return es, grpo


def test_unequal_budgets_are_refused_naming_both_runs_their_budgets_and_the_flag(tmp_path):
    es, grpo = _unequal_runs(tmp_path)
    with pytest.raises(UsageError) as caught:
        report_runs(run_dirs=[es, grpo], out_dir=tmp_path / "out")
    message = str(caught.value)
    assert str(es) in message and str(grpo) in message
    assert "es) is evaluated at 0 samples" in message and "grpo) at 16 samples" in message
    assert "--allow-unequal-budgets" in caught.value.hint
    assert not (tmp_path / "out").exists()  # refused before anything is written

    cli = runner.invoke(app, ["report", str(es), str(grpo), "--out", str(tmp_path / "out"), "--json"])
    assert cli.exit_code == 2  # a usage refusal: the flag makes the command do it
    failure = json.loads(cli.stdout)
    assert (failure["ok"], failure["exit_code"], failure["kind"]) == (False, 2, "usage")
    assert "unequal budgets" in failure["error"] and "--allow-unequal-budgets" in failure["hint"]


def test_the_flag_compares_anyway_and_the_headline_says_unequal_budgets(tmp_path):
    es, grpo = _unequal_runs(tmp_path)
    headline = "UNEQUAL BUDGETS: es 0 samples vs grpo 16 samples"
    result = report_runs(run_dirs=[es, grpo], out_dir=tmp_path / "out", allow_unequal_budgets=True)
    assert result["headline"] == headline and result["differences"][0]["unequal_budgets"] == headline
    assert result["tables"][0]["title"].startswith(headline)
    assert json.loads((tmp_path / "out" / "report.json").read_text())["headline"] == headline

    cli = runner.invoke(app, ["report", str(es), str(grpo), "--out", str(tmp_path / "out2"),
                              "--allow-unequal-budgets"])
    assert cli.exit_code == 0, cli.output
    assert cli.output.lstrip().startswith(f"Warning: {headline}")  # the first line of the output


# ---------------------------------------------------------------------------------------------
# metrics.jsonl: what a tiny ES and a tiny GRPO run recorded
# ---------------------------------------------------------------------------------------------

def _tiny(run_dir: Path, cache_dir: Path, *overrides: str):
    return load_config(TINY, [f"run.dir={run_dir}", f"model.cache_dir={cache_dir}", "data.task=toy",
                              "run.eval_every=1", "run.eval_problems=3", "run.eval_n=2", "run.eval_temperature=0.7",
                              *overrides])


def _check_budget_keys(records, per_iteration):
    from prover_cli.training.metrics import completion_tokens  # noqa: F401  (the counter both trainers use)

    base, trained = records[0], records[1:]
    assert base["iteration"] == 0 and all(base[k] == 0 for k in ("samples", "tokens", "checks", "checks/total"))
    assert base["eval/samples"] > 0  # held-out samples exist, and are not in the training budget
    totals = {"samples": 0, "tokens": 0, "checks": 0}
    for record in trained:
        assert record["samples"] == per_iteration and record["checks"] == per_iteration
        assert 0 < record["tokens"]
        for key in totals:
            totals[key] += record[key]
            assert record[f"{key}/total"] == totals[key]


def test_es_records_samples_tokens_and_checks_of_every_member(tmp_path):
    from prover_cli.es.train import train_es
    from prover_cli.training.metrics import read_metrics

    config = _tiny(tmp_path / "es", tmp_path / "cache", "es.iterations=2", "es.problems_per_iteration=3")
    train_es(config)
    # 4 members x 3 problems x 1 sample: every member's samples count, not only the center's.
    _check_budget_keys(read_metrics(config.run_dir), per_iteration=4 * 3 * 1)


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_grpo_records_samples_tokens_and_checks_of_every_completion(tmp_path):
    from prover_cli.grpo.train import train_grpo
    from prover_cli.training.metrics import read_metrics

    config = _tiny(tmp_path / "grpo", tmp_path / "cache", "grpo.max_completion_length=8")
    train_grpo(config)
    # 4 completions per step (2 prompts x 2 generations) for 2 steps.
    _check_budget_keys(read_metrics(config.run_dir), per_iteration=4)


def test_completion_tokens_reencode_the_text_without_special_tokens():
    from prover_cli.training.metrics import completion_tokens

    class Tokenizer:
        def __call__(self, texts, add_special_tokens=True):
            assert add_special_tokens is False
            return {"input_ids": [t.split() for t in texts]}

    assert completion_tokens(Tokenizer(), ["a b", "c"]) == 3 and completion_tokens(Tokenizer(), []) == 0


# ---------------------------------------------------------------------------------------------
# The shipped flagship configs: the same training budget, the same held-out evaluation
# ---------------------------------------------------------------------------------------------

def test_flagship_configs_consume_equal_training_samples_with_the_same_heldout_evaluation():
    from prover_cli.demo import sample_budgets

    es, grpo = load_config(REPO / "configs" / "kimina-es.toml"), load_config(REPO / "configs" / "kimina-grpo.toml")
    assert sample_budgets(es)["es"] == sample_budgets(grpo)["grpo"] == 24_000
    assert es.data == grpo.data and es.run.eval_problems == grpo.run.eval_problems
    assert (es.run.eval_n, es.run.eval_temperature, es.run.seed) == (grpo.run.eval_n, grpo.run.eval_temperature,
                                                                     grpo.run.seed)
    # Evaluated at the same budgets: ES every eval_every iterations, GRPO every eval_every steps.
    per_iteration = sample_budgets(es)["es"] // es.es.iterations
    per_step = sample_budgets(grpo)["grpo"] // grpo.grpo.steps
    assert es.run.eval_every * per_iteration == grpo.run.eval_every * per_step

    plans = {}
    for method in ("es", "grpo"):
        result = runner.invoke(app, ["train", method, "--config", str(REPO / "configs" / f"kimina-{method}.toml"),
                                     "--backend", "modal", "--dry-run", "--json"])
        assert result.exit_code == 0, result.output
        plans[method] = json.loads(result.stdout)
    assert plans["es"]["samples_total"] == plans["grpo"]["samples_total"] == 24_000
    assert plans["es"]["heldout_evaluations"] == plans["grpo"]["heldout_evaluations"]
    assert plans["es"]["heldout_samples_per_evaluation"] == plans["grpo"]["heldout_samples_per_evaluation"]
