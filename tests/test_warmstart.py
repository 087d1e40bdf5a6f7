"""The warm-started base (`tiny-countdown`): deterministic, keyed by its inputs, partly skilled."""

from pathlib import Path

import pytest

from prover_cli.tasks.countdown import check_answer, content_split, generate_problems, solve
from prover_cli.policy.warmstart import WARMSTART, build_warmstart, training_pairs, warmstart_dir, warmstart_key


DEMO_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "demo.toml"


@pytest.fixture(scope="session")
def warm_cache(tmp_path_factory):
    """A model cache holding the real `tiny-countdown` base, built once per test session."""
    cache = tmp_path_factory.getbasetemp() / "warmstart-cache"  # tests/test_demo.py reuses it
    build_warmstart(warmstart_dir(cache, 0), cache, 0)
    return cache


def weights_fingerprint(model_dir):
    from safetensors.torch import load_file

    from prover_cli.policy.model_dir import weights_fingerprint

    return weights_fingerprint(load_file(str(model_dir / "model.safetensors")))


def test_solver_finds_a_checked_solution_for_every_generated_problem():
    for problem in generate_problems(200, 3, 9, seed=3):
        expression = solve(problem["numbers"], problem["target"])
        assert expression is not None and check_answer(expression, problem["numbers"], problem["target"])
    assert solve([2, 3], 7) is None  # nothing over {2, 3} makes 7
    assert solve([2, 3, 4], 20) == "(2 + 3) * 4"  # the canonical (first) solution


def test_split_is_a_function_of_the_problem_content():
    a, b = generate_problems(300, 3, 9, seed=0), generate_problems(300, 3, 9, seed=1)
    for problem in a + b:
        assert problem["split"] == content_split(problem["numbers"], problem["target"])
    assert content_split([3, 1, 2], 6) == content_split([1, 2, 3], 6)  # a multiset: order does not matter
    valid = sum(p["split"] == "valid" for p in a + b) / len(a + b)
    assert 0.03 < valid < 0.2


def test_training_data_never_holds_a_held_out_problem():
    from prover_cli.policy.tiny_model import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    settings = {**WARMSTART, "problems": 300}
    pairs = training_pairs(tokenizer, 0, settings)
    problems = [p for p in generate_problems(300, 3, 9, seed=settings["data_seed"], prompt="short") if p["split"] == "train"]
    assert len(pairs) == len(problems) > 200
    for (prompt, completion), problem in zip(pairs, problems):
        assert f"{problem['numbers']}" in prompt and f"equals {problem['target']}." in prompt
        assert completion == f"<answer> {solve(problem['numbers'], problem['target'])} </answer>{tokenizer.eos_token}"


def test_cache_key_covers_every_input():
    base = warmstart_key(0)
    assert warmstart_key(0) == base
    assert warmstart_key(1) != base
    assert warmstart_key(0, {**WARMSTART, "steps": WARMSTART["steps"] + 1}) != base
    assert warmstart_key(0, {**WARMSTART, "learning_rate": 1e-3}) != base
    assert warmstart_dir("cache", 0).name.endswith(base)


@pytest.mark.slow
def test_warm_start_is_deterministic(tmp_path):
    short = {**WARMSTART, "steps": 4, "problems": 128}  # the same code path, a few steps
    a = build_warmstart(tmp_path / "a", tmp_path / "cache", 0, short)
    b = build_warmstart(tmp_path / "b", tmp_path / "cache", 0, short)
    c = build_warmstart(tmp_path / "c", tmp_path / "cache", 1, short)
    assert weights_fingerprint(a) == weights_fingerprint(b) != weights_fingerprint(c)
    from prover_cli.policy.tiny_model import tiny_model_dir

    assert weights_fingerprint(a) != weights_fingerprint(tiny_model_dir(tmp_path / "cache", 0))  # it trained
    again = build_warmstart(tmp_path / "a", tmp_path / "cache", 0, short)  # cached: reused, not rebuilt
    assert again == a and weights_fingerprint(again) == weights_fingerprint(b)


@pytest.mark.slow
def test_the_built_base_is_partly_skilled_on_held_out_problems(warm_cache, tmp_path):
    """The demo's base: its held-out verified rate (as both trainers evaluate it) is in (0, 1)."""
    from prover_cli.config import load_config
    from prover_cli.demo import base_heldout

    config = load_config(DEMO_CONFIG, [f"model.cache_dir={warm_cache}", f"run.dir={tmp_path}",
                                       "data.problems="])   # <run.dir>/problems.jsonl: generated from run.seed
    result = base_heldout(config)
    assert result["eval/problems"] >= 20 and result["eval/samples"] == result["eval/problems"] * config.run.eval_n
    assert 0.0 < result["eval/verified_rate"] < 1.0
