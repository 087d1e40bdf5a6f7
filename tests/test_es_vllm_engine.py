"""The vLLM side of ES (es/vllm_worker.py, samplers/vllm_sampler.py) against fakes of vLLM's
interfaces as vLLM 0.31 defines them: a model's `load_weights(weights) -> set[str]` of the
parameters it loaded, which skips a tied alias (`lm_head.weight` when `lm_head` *is*
`model.embed_tokens`, model_executor/models/qwen2.py) and refuses any one call that skipped an
alias without loading its canonical name (`AutoWeightsLoader._check_skipped_aliases`,
model_executor/models/utils.py, since 0.29; the message is the one recorded from vLLM 0.30.0 in a
verl run: "'lm_head.weight' was skipped because it is tied to 'model.embed_tokens.weight' in
Qwen3ForCausalLM, but 'model.embed_tokens.weight' was not found in the checkpoint, so the tied
weight is uninitialized.", quoted in verl-project/verl PR #8014), and
`LLM.reset_prefix_cache() -> bool`, False when the reset is refused (blocks in use).
No vLLM here: these fakes are not vLLM results.
"""

import pytest
import torch
from safetensors.torch import save_file

from prover_cli.errors import BackendError
from prover_cli.es.noise import fp32
from prover_cli.es.weights import NamedWeights
from prover_cli.samplers.vllm_sampler import VLLMWeights
from test_es_weights import FakeLLM, FakeWorker


class TiedReference(torch.nn.Module):
    """transformers-style with tied embeddings: lm_head *is* embed, so named_parameters lists it once."""

    def __init__(self):
        super().__init__()
        generator = torch.Generator().manual_seed(3)
        self.embed = torch.nn.Embedding(5, 4)
        self.mlp = torch.nn.Linear(4, 4, bias=False)
        with torch.no_grad():
            self.embed.weight.copy_(torch.randn(5, 4, generator=generator))
            self.mlp.weight.copy_(torch.randn(4, 4, generator=generator))
        self.lm_head = torch.nn.Linear(4, 5, bias=False)
        self.lm_head.weight = self.embed.weight


class TiedEngineModel(torch.nn.Module):
    """vLLM-style: `lm_head` is the embedding module; load_weights skips the alias, returns what
    it loaded, and refuses a call that skipped an alias whose canonical name it did not load."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(5, 4)
        self.mlp = torch.nn.Linear(4, 4, bias=False)
        self.lm_head = self.embed   # vLLM: `self.lm_head = self.model.embed_tokens` when tied

    def load_weights(self, weights):
        params, loaded, skipped = dict(self.named_parameters()), set(), []
        with torch.no_grad():
            for name, tensor in weights:
                if name.startswith("lm_head."):  # the tied alias: its bytes are never read
                    skipped.append(name)
                    continue
                params[name].copy_(tensor)
                loaded.add(name)
        for alias in skipped:   # _check_skipped_aliases, per call
            canonical = "embed." + alias.removeprefix("lm_head.")
            if canonical not in loaded:
                raise ValueError(f"'{alias}' was skipped because it is tied to '{canonical}' in TiedEngineModel, "
                                 f"but '{canonical}' was not found in the checkpoint, so the tied weight is uninitialized.")
        return loaded


def test_the_engine_stand_in_refuses_a_tied_alias_loaded_on_its_own_as_vllm_does():
    engine = TiedEngineModel()
    with pytest.raises(ValueError, match="tied weight is uninitialized"):
        engine.load_weights([("lm_head.weight", torch.zeros(5, 4))])
    assert engine.load_weights([("embed.weight", torch.zeros(5, 4)), ("lm_head.weight", torch.zeros(5, 4))]) == {"embed.weight"}
    from prover_cli.es.vllm_worker import tied_aliases
    assert tied_aliases(engine) == {"lm_head.weight": "embed.weight"}   # vLLM's rule: first name canonical


def test_a_checkpoint_with_a_tied_head_but_no_embedding_is_refused_by_name(tmp_path):
    save_file({"mlp.weight": torch.ones(4, 4), "lm_head.weight": torch.ones(5, 4)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match=r"lm_head.weight \(tied to embed.weight\)"):
        FakeWorker(TiedEngineModel(), torch.float32).es_init(str(tmp_path))


def test_a_tied_lm_head_the_engine_skips_is_not_part_of_the_es_base(tmp_path):
    reference = TiedReference()
    checkpoint = {"embed.weight": reference.embed.weight, "mlp.weight": reference.mlp.weight,
                  "lm_head.weight": reference.embed.weight}  # a checkpoint that also stores the tied head
    save_file({k: v.detach().clone().contiguous() for k, v in checkpoint.items()}, str(tmp_path / "model.safetensors"))
    worker = FakeWorker(TiedEngineModel(), torch.float32)
    engine = VLLMWeights(FakeLLM([worker]), str(tmp_path))
    assert sorted(worker._prover_es.base) == ["embed.weight", "mlp.weight"]
    assert worker.es_skipped() == ["lm_head.weight"]
    local = NamedWeights.from_module(reference)  # the transformers path and replay-seeds
    assert sorted(local.base) == ["embed.weight", "mlp.weight"]
    assert engine.fingerprint() == local.fingerprint()
    terms = [(4, fp32(0.01)), (5, fp32(-0.02))]
    assert engine.update(terms) == local.update(terms)
    assert engine.fingerprint() == local.fingerprint()  # the same update, norm and bits on both paths


class RefusingLLM(FakeLLM):
    def reset_prefix_cache(self):
        self.prefix_cache_resets += 1
        return False  # vLLM: blocks still in use, nothing was reset


def test_a_refused_prefix_cache_reset_stops_es_instead_of_sampling_from_stale_blocks(tmp_path):
    save_file({"embed.weight": torch.ones(5, 4), "mlp.weight": torch.ones(4, 4)}, str(tmp_path / "model.safetensors"))
    engine = VLLMWeights(RefusingLLM([FakeWorker(TiedEngineModel(), torch.float32)]), str(tmp_path))
    for change in (lambda: engine.perturb(1, fp32(0.1)), engine.restore, lambda: engine.update([(1, fp32(0.1))]),
                   lambda: engine.load(tmp_path / "model.safetensors")):
        with pytest.raises(BackendError, match="refused to reset its prefix cache"):
            change()
    assert engine.llm.prefix_cache_resets == 4
