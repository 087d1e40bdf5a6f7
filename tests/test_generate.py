"""generate with the tiny model: valid verify input, deterministic resume, split filter, countdown fields."""

import json

import pytest
from typer.testing import CliRunner

from prover_cli.cli import app
from prover_cli.config import config_from_dict
from prover_cli.tasks.datasets import prepare_data
from prover_cli.errors import InputError
from prover_cli.generate import generate_file
from prover_cli.fsio.jsonl import load_jsonl_strict
from prover_cli.policy.prompts import extract_lean_block

pytestmark = pytest.mark.slow
runner = CliRunner()


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("model-cache")


def make_config(tmp_path, cache_dir, **sections):
    raw = {
        "model": {"name": "tiny", "cache_dir": str(cache_dir), "device": "cpu", "dtype": "float32"},
        "generate": {"n": 2, "max_tokens": 6, "temperature": 1.0, "top_p": 1.0, "seed": 3},
        "run": {"dir": str(tmp_path / "run")},
    }
    for section, values in sections.items():
        raw.setdefault(section, {}).update(values)
    return config_from_dict(raw)


def test_generate_writes_valid_verify_input_and_resumes_identically(tmp_path, cache_dir):
    config = make_config(tmp_path, cache_dir)
    prepare_data(config, source="examples")
    problems = load_jsonl_strict(config.problems_path)
    out = tmp_path / "samples.jsonl"

    result = generate_file(config, out_path=out)
    assert result["samples_written"] == 2 * len(problems) and result["family"] == "plain"
    samples = load_jsonl_strict(out)
    by_problem = {p["id"]: p for p in problems}
    assert [s["id"] for s in samples] == [f"{p['id']}/{j}" for p in problems for j in range(2)]
    for sample in samples:
        problem = by_problem[sample["problem_id"]]
        assert sample["formal_statement"] == problem["formal_statement"]
        assert sample["header"] == problem["header"] and sample["split"] == problem["split"]
        assert sample["finish_reason"] in {"stop", "length"}
        assert 0 <= sample["completion_tokens"] <= 6 and sample["prompt_tokens"] > 0
        # what `prover verify` reads: the last lean4 block holds the statement and the model's proof
        code = extract_lean_block(sample["completion"])
        assert code is not None and code.startswith(problem["formal_statement"])
        assert code == (problem["formal_statement"] + sample["raw_completion"].split("```")[0]).rstrip()
    original = out.read_bytes()

    rerun = generate_file(config, out_path=out)
    assert rerun["samples_written"] == 0 and rerun["samples_skipped"] == len(samples)
    assert out.read_bytes() == original

    # a killed run: two whole lines lost and the next one torn mid-way
    lines = original.decode("utf-8").splitlines(keepends=True)
    out.write_text("".join(lines[:-3]) + lines[-3][:25], encoding="utf-8")
    resumed = generate_file(config, out_path=out)
    assert resumed["samples_written"] == 3
    assert sorted(load_jsonl_strict(out), key=lambda s: s["id"]) == sorted(samples, key=lambda s: s["id"])


def test_split_filter_and_seed_mismatch(tmp_path, cache_dir):
    config = make_config(tmp_path, cache_dir, generate={"split": "test"})
    prepare_data(config, source="examples")
    out = tmp_path / "samples.jsonl"
    result = generate_file(config, out_path=out)
    test_ids = {p["id"] for p in load_jsonl_strict(config.problems_path) if p["split"] == "test"}
    assert result["problems"] == len(test_ids) == 2
    assert {s["problem_id"] for s in load_jsonl_strict(out)} == test_ids

    reseeded = make_config(tmp_path, cache_dir, generate={"split": "test", "seed": 4, "n": 3})
    with pytest.raises(InputError, match="resuming would mix them"):
        generate_file(reseeded, out_path=out)
    missing_split = make_config(tmp_path, cache_dir, generate={"split": "nope"})
    with pytest.raises(InputError, match=r"no problems with split 'nope' \(generate.split\); splits present: test, train, valid"):
        generate_file(missing_split, out_path=out)


def test_countdown_samples_carry_the_problem_fields(tmp_path, cache_dir):
    config = make_config(tmp_path, cache_dir, data={"task": "countdown"}, task={"countdown": {"problems": 3}})
    prepare_data(config)
    result = generate_file(config)
    samples = load_jsonl_strict(config.run_dir / "samples.jsonl")
    assert result["samples_written"] == len(samples) == 6
    problems = {p["id"]: p for p in load_jsonl_strict(config.problems_path)}
    for sample in samples:
        problem = problems[sample["problem_id"]]
        assert (sample["numbers"], sample["target"]) == (problem["numbers"], problem["target"])
        assert "raw_completion" not in sample  # countdown completions are stored as sampled


def test_lean_problems_for_a_countdown_task_are_an_error(tmp_path, cache_dir):
    config = make_config(tmp_path, cache_dir, data={"task": "countdown"})
    prepare_data(config, source="examples")
    with pytest.raises(InputError, match="no usable problem: .* lacks `numbers`"):
        generate_file(config)


def test_cli_generate_json(tmp_path, cache_dir):
    problems = tmp_path / "problems.jsonl"
    assert runner.invoke(app, ["prepare-data", "examples", "--out", str(problems)]).exit_code == 0
    out = tmp_path / "samples.jsonl"
    args = ["generate", "--problems", str(problems), "--out", str(out), "--json",
            "--set", "model.name=tiny", "--set", f"model.cache_dir={cache_dir}", "--set", "generate.n=1",
            "--set", "generate.max_tokens=4", "--set", "generate.split=valid"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["samples_written"] == 2 and payload["out"] == str(out)
    assert len(load_jsonl_strict(out)) == 2

    missing = runner.invoke(app, ["generate", "--problems", str(tmp_path / "none.jsonl"), "--set", "model.name=tiny"])
    assert missing.exit_code == 1 and "none.jsonl: problems file not found" in missing.stderr
