"""prover_cli/policy/rollout.py: the one sampling-and-scoring path: its order, its seeds, one task call per batch."""

import pytest

from prover_cli.policy import rollout
from prover_cli.policy.samplers import Sample, SamplingParams


class EchoSampler:
    """Sample j of a prompt is `<prompt>#j@<seed>`: the order and the seeds show in the text."""

    tokenizer = None

    def __init__(self):
        self.calls = []

    def generate(self, prompts, params, seeds=None):
        self.calls.append((list(prompts), seeds))
        seeds = seeds or [params.seed] * len(prompts)
        return [[Sample(f"{p}#{j}@{s}", "stop", 1, 1) for j in range(params.n)] for p, s in zip(prompts, seeds)]


class CountingTask:
    name = "counting"

    def __init__(self):
        self.batches = []

    def build_prompt(self, problem, tokenizer, family):
        return f"{family}:{problem['id']}"

    def rewards(self, problems, completions, config, reporter=None):
        self.batches.append([(p["id"], c) for p, c in zip(problems, completions, strict=True)])
        return [1 if c.startswith(f"plain:{p['id']}#0") else 0 for p, c in zip(problems, completions)]  # ints: made floats


PROBLEMS = [{"id": "a"}, {"id": "b"}]
PARAMS = SamplingParams(n=2, temperature=1.0, top_p=1.0, max_tokens=4, seed=7)


class Config:
    class model:
        family = "plain"


def test_completions_are_problem_major_and_scored_in_one_call_with_their_own_problem():
    sampler, task = EchoSampler(), CountingTask()
    completions = rollout.texts(rollout.sample(sampler, task, PROBLEMS, PARAMS, Config.model.family))
    rewards = rollout.score(task, PROBLEMS, completions, Config)
    assert completions == ["plain:a#0@7", "plain:a#1@7", "plain:b#0@7", "plain:b#1@7"]
    assert sampler.calls == [(["plain:a", "plain:b"], None)]  # one call, seeded by params.seed
    assert task.batches == [[("a", completions[0]), ("a", completions[1]), ("b", completions[2]), ("b", completions[3])]]
    assert rewards == [1.0, 0.0, 1.0, 0.0] and all(type(r) is float for r in rewards)


def test_per_problem_seeds_reach_the_sampler():
    sampler = EchoSampler()
    outputs = rollout.sample(sampler, CountingTask(), PROBLEMS, PARAMS, "plain", seeds=[3, 9])
    assert rollout.texts(outputs) == ["plain:a#0@3", "plain:a#1@3", "plain:b#0@9", "plain:b#1@9"]


def test_members_scored_together_are_member_major_in_one_task_call():
    task = CountingTask()
    member_texts = [["x0", "x1", "y0", "y1"], ["x2", "x3", "y2", "y3"]]  # two members, 2 problems x 2 samples
    rollout.score(task, PROBLEMS * 2, [t for m in member_texts for t in m], Config)
    assert [pid for pid, _ in task.batches[0]] == ["a", "a", "b", "b", "a", "a", "b", "b"] and len(task.batches) == 1


def test_completions_that_do_not_divide_among_the_problems_are_refused():
    with pytest.raises(ValueError, match="3 completions"):
        rollout.score(CountingTask(), PROBLEMS, ["a", "b", "c"], Config)
