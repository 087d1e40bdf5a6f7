"""docs/grpo.md's claim about activations under the fp32 master, checked on the tiny Qwen2 model.

With `grpo.fp32_master` the policy's parameters are fp32 and the forward pass runs under bf16
autocast: the matmuls run in bf16, but the hidden states between decoder layers (what activation
checkpointing keeps) stay fp32, since the embedding, the norms and the residual adds run on fp32
weights. So checkpointed activations take twice the bytes of a bf16 model's, as the doc says.
"""

from pathlib import Path

import torch

from prover_cli.config import config_from_dict
from prover_cli.grpo.trl_glue import load_policy

DOC = Path(__file__).resolve().parents[1] / "docs" / "grpo.md"


def layer_input_dtypes(model) -> set[torch.dtype]:
    seen: set[torch.dtype] = set()
    hooks = [layer.register_forward_pre_hook(
        lambda module, args, kwargs: seen.add((args[0] if args else kwargs["hidden_states"]).dtype), with_kwargs=True)
        for layer in model.model.layers]
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        model(torch.tensor([[1, 2, 3, 4]]))
    for hook in hooks:
        hook.remove()
    return seen


def test_checkpointed_hidden_states_are_fp32_under_autocast_with_the_fp32_master(tmp_path):
    def policy(fp32_master: bool):
        config = config_from_dict({"model": {"name": "tiny", "cache_dir": str(tmp_path / "cache"), "device": "cpu",
                                             "dtype": "bfloat16"},
                                   "grpo": {"fp32_master": fp32_master, "beta": 0.0, "use_vllm": False},
                                   "run": {"dir": str(tmp_path / "run")}})
        model, _, _, compute_dtype = load_policy(config)
        assert compute_dtype == torch.bfloat16  # the autocast the Trainer runs under
        return model

    master = policy(True)
    assert {p.dtype for p in master.parameters()} == {torch.float32}
    assert layer_input_dtypes(master) == {torch.float32}
    assert layer_input_dtypes(policy(False)) == {torch.bfloat16}  # twice the bytes with the master
    text = " ".join(DOC.read_text(encoding="utf-8").split())
    assert "are fp32 with the fp32 master" in text and "they are bf16 under autocast either way" not in text
