"""benchmarks/bench_population.py's forward floor: the bare forward passes it times are the ones
greedy `generate` runs (the same tokens, so the same number of decode steps), so its ceiling of
any batching is computed from work generate really does, never from less."""

import importlib.util

import pytest
import torch

from prover_cli.es.population import LocalPopulation, pick_problems
from prover_cli.policy import rollout
from prover_cli.policy.samplers import SamplingParams
from prover_cli.tasks.problems import train_problems
from tests.test_es_train import make_config

from conftest import REPO

pytestmark = pytest.mark.slow


def bench():
    spec = importlib.util.spec_from_file_location("bench_population", REPO / "benchmarks" / "bench_population.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sampler_and_prompts(tmp_path_factory):
    cache_dir = tmp_path_factory.getbasetemp() / "tiny-model-cache"
    config = make_config(tmp_path_factory.mktemp("floor") / "run", cache_dir, population=2, problems_per_iteration=6)
    population = LocalPopulation(config)
    sampler = population.load_sampler()
    batch = pick_problems(train_problems(config), config.run.seed, 1, 6)
    return sampler, rollout.prompts(population.task, batch, sampler.tokenizer, config.model.family)


@pytest.mark.parametrize("max_tokens", [3, 24])
def test_the_floor_decodes_what_greedy_generate_decodes(sampler_and_prompts, max_tokens):
    sampler, prompts = sampler_and_prompts
    outputs = sampler.generate(prompts, SamplingParams(n=1, temperature=0.0, top_p=1.0, max_tokens=max_tokens, seed=0))
    eos = sampler._eos_ids()
    encoded = sampler.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    tokens = bench().greedy_forward(sampler.model, encoded["input_ids"], encoded["attention_mask"],
                                    torch.tensor(eos), max_tokens)
    lengths = [samples[0].completion_tokens + (samples[0].finish_reason == "stop") for samples in outputs]
    assert tokens.shape == (len(prompts), max(lengths))  # generate's decode steps: until the last row ended
    for row, samples in zip(tokens.tolist(), outputs):
        cut = next((i for i, token in enumerate(row) if token in eos), len(row))
        assert sampler.tokenizer.decode(row[:cut], skip_special_tokens=True) == samples[0].text


def test_the_floor_times_every_call(sampler_and_prompts):
    sampler, prompts = sampler_and_prompts
    module = bench()
    calls = []
    real = module.greedy_forward
    module.greedy_forward = lambda model, ids, mask, eos, steps: calls.append(ids.shape[0]) or real(model, ids, mask, eos, steps)
    assert module.forward_floor(sampler, prompts, 4, 8, repeats=1) > 0
    assert calls == [4, 2, 4, 2]  # rows per call, a warm-up pass and one timed
