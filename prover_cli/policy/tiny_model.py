"""A tiny random causal LM and tokenizer, built offline, loadable like any hub model.

Tests and the demo use it so that nothing downloads: `model.name = "tiny"` builds (once, into
`model.cache_dir`) a Qwen2-architecture model with a byte-level BPE tokenizer trained on a small
built-in corpus of Lean and arithmetic text, plus a Qwen-style chat template. The build is a
pure function of `seed`: the same seed gives the same tokenizer and bit-identical weights.
`model.name = "tiny-countdown"` is the same model after a short supervised warm-start on
countdown (prover_cli/policy/warmstart.py): a base policy with some skill, for the demo.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prover_cli.fsio.jsonl import write_dir_atomic

TINY_NAME = "tiny"
TINY_VERSION = 1  # bump when the architecture or corpus changes: it is part of the cache key

_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

_CORPUS = [
    "theorem mathd_algebra_10 (x : ℝ) (h₀ : x = 2) : x + 1 = 3 := by\n  subst h₀\n  norm_num",
    "import Mathlib\nimport Aesop\n\nset_option maxHeartbeats 400000\n\nopen BigOperators Real Nat Topology Rat\n",
    "```lean4\ntheorem foo (a b : ℕ) : a + b = b + a := by\n  omega\n```",
    "<think> Let me try nlinarith [sq_nonneg (a - b), sq_nonneg (a + b)] </think>",
    "Using the numbers [3, 5, 7], create an equation that equals 22. <answer> (3 + 5) * 7 / 2 </answer>",
    "intro h\nsimp at h\nlinarith\nexact h\nrfl\ndecide\nring_nf\nfield_simp\npositivity",
    "∀ ∃ → ↔ ≤ ≥ ≠ ∧ ∨ ¬ ⊢ ∑ ∏ ∈ ℕ ℤ ℚ ℝ ℂ λ ⟨ ⟩ ₀ ₁ ₂ · × ÷ √",
    "# Problem:\n# Formal statement:\n/-- Show that 1 + 1 = 2. -/\n",
    "0 1 2 3 4 5 6 7 8 9 10 100 1000 + - * / ( ) = < > : := by",
]


def tiny_model_dir(cache_dir: str | Path, seed: int = 0) -> Path:
    return Path(cache_dir) / f"tiny-qwen2-v{TINY_VERSION}-seed{seed}"


def build_tiny_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=_SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = _CHAT_TEMPLATE
    fast.padding_side = "left"  # decoder-only generation pads on the left
    return fast


# vLLM's CPU attention needs head_dim >= 32 ("Unsupported CPU attention configuration:
# head_dim=16"), and vLLM's Qwen2 takes head_dim as hidden_size / num_attention_heads (it ignores
# config.head_dim): the real-vLLM tests (tests/real_vllm) build this model with these heads. The
# weights' shapes, and so the seeded weights, are the same as the default's (q: 64 -> 2 x 32, k/v:
# 64 -> 1 x 32); only how attention splits them differs. The demo keeps the default (4, 2).
VLLM_CPU_HEADS = (2, 1)   # (num_attention_heads, num_key_value_heads): head_dim 32


def build_tiny_model(out_dir: str | Path, seed: int = 0, heads: tuple[int, int] = (4, 2),
                     tie_word_embeddings: bool = False) -> Path:
    """Build (or reuse) the tiny model directory and return its path. `heads`: (attention heads,
    key/value heads) over hidden size 64; `tie_word_embeddings`: the head is the embedding."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    marker = out / "prover_tiny.json"
    recipe: dict[str, Any] = {"version": TINY_VERSION, "seed": seed}
    if heads != (4, 2) or tie_word_embeddings:   # the default's marker stays as it was (cached bases)
        recipe.update(heads=list(heads), tie_word_embeddings=tie_word_embeddings)
    if marker.exists():
        found = json.loads(marker.read_text())
        if found != recipe:
            raise ValueError(f"{out}: a tiny model built as {found}, asked for {recipe}: use another directory")
        return out
    tokenizer = build_tiny_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=heads[0],
        num_key_value_heads=heads[1],
        max_position_embeddings=1024,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",  # type: ignore[call-arg]  # accepted by Qwen2Config, not in its typed signature; config.json as built before
    )
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    finally:
        torch.random.set_rng_state(generator_state)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )

    def fill(tmp: Path) -> None:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "prover_tiny.json").write_text(json.dumps(recipe) + "\n")

    return write_dir_atomic(out, fill, shared=True)  # a cache: a concurrent build that finished first is kept
