"""heldout.py: which problems, how they are sampled, how the verified rate is computed, no side effects."""

import json

import pytest
import torch

from prover_cli.config import load_config
from prover_cli.errors import InputError
from prover_cli.training.heldout import EVAL_KEYS, eval_due, evaluate_heldout, heldout_params
from prover_cli.tasks.problems import heldout_problems
from prover_cli.policy.samplers import Sample


def write_problems(path, splits):
    path.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"q{i}", "split": s}) + "\n"
                            for i, s in enumerate(splits)))
    return path


def config_for(tmp_path, *overrides):
    problems = write_problems(tmp_path / "problems.jsonl", ["train", "valid"] * 10 + ["test"])
    return load_config(None, ["data.task=toy", f"data.problems={problems}", f"run.dir={tmp_path / 'run'}",
                              *overrides])


def test_heldout_problems_are_the_valid_split_or_a_fixed_seeded_subset(tmp_path):
    every = heldout_problems(config_for(tmp_path))
    assert [p["id"] for p in every] == [f"p{i}" for i in range(1, 20, 2)]
    subset = heldout_problems(config_for(tmp_path, "run.eval_problems=4"))
    assert len(subset) == 4 and subset == heldout_problems(config_for(tmp_path, "run.eval_problems=4"))
    assert [every.index(p) for p in subset] == sorted(every.index(p) for p in subset)  # file order kept
    # One test set for every run seed (issue #31); its own seed, run.eval_problems_seed, draws another.
    assert heldout_problems(config_for(tmp_path, "run.eval_problems=4", "run.seed=7")) == subset
    assert heldout_problems(config_for(tmp_path, "run.eval_problems=4", "run.eval_problems_seed=7")) != subset
    assert heldout_problems(config_for(tmp_path, "run.eval_problems=50")) == every  # more than there are: all
    assert [p["id"] for p in heldout_problems(config_for(tmp_path, "data.valid_split=test"))] == ["p20"]


def test_no_heldout_problems_is_an_error_naming_the_file_and_the_key(tmp_path):
    with pytest.raises(InputError, match=r"problems.jsonl: no problems with split 'dev' .*data.valid_split") as error:
        heldout_problems(config_for(tmp_path, "data.valid_split=dev", "run.eval_every=5"))
    assert "run.eval_every = 0" in error.value.hint


def test_generated_tasks_hold_out_the_problems_training_generates(tmp_path):
    from prover_cli.tasks import toy

    config = load_config(None, ["data.task=toy", f"run.dir={tmp_path}", "run.seed=3"])
    generated = toy.generate_problems(toy.DEFAULT_COUNT, seed=3)
    trained = {p["prompt"] for p in generated if p["split"] == "train"}
    # toy splits rows by a coin, not by content: a prompt also drawn for training is not held out
    expected = [p for p in generated if p["split"] == "valid" and p["prompt"] not in trained]
    held_out = heldout_problems(config)
    assert held_out == expected and expected and held_out.train_overlap_dropped == 3


def test_eval_due_every_k_and_at_the_end_never_at_zero(tmp_path):
    config = config_for(tmp_path, "run.eval_every=3")
    assert [i for i in range(1, 8) if eval_due(config, i, 7)] == [3, 6, 7]
    assert not any(eval_due(config_for(tmp_path), i, 7) for i in range(1, 8))


class FakeSampler:
    """Answers 'ok' for the first sample of every other prompt; records what it was asked; spends RNG."""

    tokenizer = None

    def __init__(self):
        self.calls = []

    def generate(self, prompts, params):
        self.calls.append((list(prompts), params))
        torch.manual_seed(12345)  # as the transformers sampler does: must not leak into training
        torch.rand(3)
        return [[Sample("ok" if i % 2 == 0 and j == 0 else "no", "stop", 1, 1) for j in range(params.n)]
                for i in range(len(prompts))]


class FakeTask:
    name = "fake"

    def build_prompt(self, problem, tokenizer, family):
        return "prompt:" + problem["prompt"]

    def rewards(self, problems, completions, config, reporter=None):
        return [1.0 if c == "ok" else 0.25 for c in completions]


def test_evaluate_heldout_gives_both_metrics_with_fixed_sampling(tmp_path):
    from prover_cli.comparison.stats import rate_interval

    config = config_for(tmp_path, "run.eval_n=3", "run.eval_temperature=0.5", "run.eval_problems=4",
                        "generate.max_tokens=17")
    sampler = FakeSampler()
    torch.manual_seed(0)
    expected_next = torch.rand(1)
    torch.manual_seed(0)
    record = evaluate_heldout(sampler, config, task=FakeTask())
    assert torch.rand(1).equal(expected_next)  # the global RNG is where it was

    assert set(record) == set(EVAL_KEYS)
    # Sampled: 4 problems x 3 samples; problems 0 and 2 have one verified sample each.
    assert record["eval/samples"] == 12 and record["eval/problems"] == 4 and record["eval/verified"] == 2
    assert record["eval/verified_rate"] == pytest.approx(2 / 12)
    assert record["eval/solved_rate"] == pytest.approx(2 / 4)
    assert record["eval/reward_mean"] == pytest.approx((2 * 1.0 + 10 * 0.25) / 12)
    _, low, high = rate_interval([1, 0, 1, 0], 3)
    assert (record["eval/verified_rate_lo"], record["eval/verified_rate_hi"]) == (low, high)
    assert low < 2 / 12 < high
    # Greedy: one sample per problem, problems 0 and 2 verified.
    assert record["eval/greedy_verified"] == 2 and record["eval/greedy_verified_rate"] == 0.5
    assert (record["eval/greedy_verified_rate_lo"], record["eval/greedy_verified_rate_hi"]) == \
        rate_interval([1, 0, 1, 0], 1)[1:]
    ids = [p["id"] for p in heldout_problems(config)]
    assert record["eval/by_problem"] == {ids[0]: [1, 1], ids[1]: [0, 0], ids[2]: [1, 1], ids[3]: [0, 0]}

    (prompts, params), (greedy_prompts, greedy) = sampler.calls
    assert prompts == greedy_prompts == ["prompt:" + p["prompt"] for p in heldout_problems(config)]
    assert (params.n, params.temperature, params.max_tokens, params.top_p) == (3, 0.5, 17, config.generate.top_p)
    assert (greedy.n, greedy.temperature, greedy.max_tokens) == (1, 0.0, 17)
    evaluate_heldout(sampler, config, task=FakeTask())
    assert sampler.calls[2][1] == params == heldout_params(config)  # the same seed at every evaluation
    assert heldout_params(config_for(tmp_path, "run.seed=1")).seed != params.seed


def test_at_temperature_zero_the_two_metrics_are_one_evaluation(tmp_path):
    config = config_for(tmp_path, "run.eval_n=1", "run.eval_temperature=0", "run.eval_problems=4")
    sampler = FakeSampler()
    record = evaluate_heldout(sampler, config, task=FakeTask())
    assert len(sampler.calls) == 1 and sampler.calls[0][1].n == 1  # greedy samples would all be alike
    assert record["eval/verified_rate"] == record["eval/greedy_verified_rate"] == 0.5 and record["eval/samples"] == 4


def test_base_is_evaluated_once_per_weights_problems_and_settings(tmp_path):
    from prover_cli.training.heldout import base_record, evaluate_base

    config = config_for(tmp_path, "run.eval_n=2", "run.eval_temperature=0.7", f"model.cache_dir={tmp_path / 'cache'}")
    problems = heldout_problems(config)
    sampler = FakeSampler()
    first = evaluate_base(sampler, config, problems, "ab" * 32, task=FakeTask())
    assert len(sampler.calls) == 2  # sampled and greedy
    again = evaluate_base(sampler, config, problems, "ab" * 32, task=FakeTask())  # e.g. the GRPO run of that seed
    assert again == first and len(sampler.calls) == 2
    assert len(list((tmp_path / "cache" / "heldout-base").glob("*.json"))) == 1

    evaluate_base(sampler, config, problems, "cd" * 32, task=FakeTask())  # other base weights
    evaluate_base(sampler, config, problems[:3], "ab" * 32, task=FakeTask())  # other problems
    evaluate_base(sampler, config_for(tmp_path, "run.eval_n=3", "run.eval_temperature=0.7",
                                      f"model.cache_dir={tmp_path / 'cache'}"), problems, "ab" * 32, task=FakeTask())
    assert len(sampler.calls) == 8 and len(list((tmp_path / "cache" / "heldout-base").glob("*.json"))) == 4

    line = base_record("grpo", "toy", first)
    assert line["iteration"] == 0 and line["samples/total"] == 0 and line["method"] == "grpo"
    assert "reward/mean" not in line and line["eval/verified_rate"] == first["eval/verified_rate"]
    from prover_cli.training.metrics import append_metrics

    append_metrics(tmp_path / "run", line)  # a valid metrics line: iteration 0 needs no training keys
    with pytest.raises(ValueError, match="reward/mean"):
        append_metrics(tmp_path / "run", {**line, "iteration": 1})


def test_weights_fingerprint_of_a_module_is_the_es_master_fingerprint():
    from prover_cli.es.weights import NamedWeights
    from prover_cli.training.heldout import weights_sha256

    module = torch.nn.Linear(3, 2).to(torch.bfloat16)
    bf16 = weights_sha256(module)
    assert bf16 == NamedWeights.from_module(module).fingerprint()  # ES's fp32 master of the bf16 weights
    module.float()  # GRPO's fp32 master (load_policy): the same values, the same fingerprint
    assert weights_sha256(module) == bf16
