"""The tiny model builds offline, deterministically, and loads like any hub model."""

import hashlib

from prover_cli.policy.built_models import resolve_model_path
from prover_cli.policy.tiny_model import build_tiny_model, tiny_model_dir


def test_tiny_model_is_deterministic_and_loadable(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    a = build_tiny_model(tmp_path / "a", seed=0)
    b = build_tiny_model(tmp_path / "b", seed=0)
    c = build_tiny_model(tmp_path / "c", seed=1)
    digest = lambda p: hashlib.sha256((p / "model.safetensors").read_bytes()).hexdigest()
    assert digest(a) == digest(b) != digest(c)
    assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()

    model = AutoModelForCausalLM.from_pretrained(a)
    tokenizer = AutoTokenizer.from_pretrained(a)
    assert model.config.model_type == "qwen2"
    text = tokenizer.apply_chat_template([{"role": "user", "content": "prove 1 + 1 = 2 in ℕ"}],
                                         tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text  # byte-level BPE round-trips unicode


def test_resolve_model_path_builds_tiny_and_passes_others_through(tmp_path):
    path = resolve_model_path("tiny", tmp_path, seed=0)
    assert path == str(tiny_model_dir(tmp_path, 0))
    assert resolve_model_path("AI-MO/Kimina-Prover-Preview-Distill-1.5B", tmp_path) == "AI-MO/Kimina-Prover-Preview-Distill-1.5B"
