"""What fp32 master weights cost GRPO, measured side by side in one run and printed as ratios.

    python benchmarks/bench_master.py                  # CPU: tiny model and a 0.5B Qwen2 shape
    python benchmarks/bench_master.py --device cuda    # the same on a GPU
    python benchmarks/bench_master.py --skip-large     # tiny model only (seconds)

For each model shape (random init, offline: nothing downloads), two ways to train a bfloat16 model:
- `bf16 weights` (grpo.fp32_master = false): parameters, gradients and AdamW moments in bf16;
- `fp32 master` (the default): parameters, gradients and AdamW moments in fp32, forward and
  backward under torch.autocast(bfloat16), as the Trainer does with `bf16=True`.

Printed per shape: persistent training-state bytes per parameter after one optimizer step
(parameters + gradients + optimizer state, counted from the tensors themselves) and the time of one
training step (forward + backward + AdamW step on a fixed random batch, best of --repeats after a
warm-up), with the fp32-master / bf16 ratios. The step is a language-model loss, the same shapes
as GRPO's policy-gradient pass; generation (which runs in the model dtype either way, vLLM or
transformers) is not included. A reference model (grpo.beta > 0) adds 4 bytes/parameter with
fp32 master weights (TRL builds it in the policy's dtype) instead of 2.
"""

from __future__ import annotations

import argparse
import gc
import time

# Qwen2.5-0.5B's shape (494M parameters, tied embeddings); random weights, built offline.
QWEN2_0_5B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                  num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768, tie_word_embeddings=True)


def tiny_config():
    import tempfile
    from pathlib import Path

    from transformers import AutoConfig

    from prover_cli.policy.tiny_model import build_tiny_model

    return AutoConfig.from_pretrained(build_tiny_model(Path(tempfile.mkdtemp(prefix="bench-master-")) / "tiny"))


def state_bytes(model, optimizer) -> int:
    """Bytes of parameters, their gradients and every optimizer-state tensor (tied weights once)."""
    import torch

    total = 0
    for p in model.parameters():  # parameters() yields a tied tensor once
        total += p.numel() * p.element_size()
        if p.grad is not None:
            total += p.grad.numel() * p.grad.element_size()
    for state in optimizer.state.values():
        total += sum(v.numel() * v.element_size() for v in state.values() if torch.is_tensor(v) and v.dim() > 0)
    return total


def measure(config, master: bool, device: str, batch: int, seq: int, repeats: int) -> tuple[float, float, int]:
    """(bytes per parameter, best step seconds, parameters) for one way of training."""
    import contextlib

    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32 if master else torch.bfloat16).to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.0)
    params = sum(p.numel() for p in model.parameters())
    tokens = torch.randint(0, config.vocab_size, (batch, seq), device=device,
                           generator=torch.Generator(device="cpu").manual_seed(1) if device == "cpu" else None)
    autocast = (torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16) if master
                else contextlib.nullcontext())

    def step() -> None:
        with autocast:
            loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)  # keep the gradient buffers: they are part of the state

    step()  # warm-up; also allocates the AdamW moments
    bytes_per_param = state_bytes(model, optimizer) / params
    times = []
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        started = time.perf_counter()
        step()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    del model, optimizer
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return bytes_per_param, min(times), params


def bench(name: str, config, device: str, batch: int, seq: int, repeats: int) -> None:
    low_bytes, low_s, params = measure(config, False, device, batch, seq, repeats)
    master_bytes, master_s, _ = measure(config, True, device, batch, seq, repeats)
    print(f"{name}: {params / 1e6:,.1f}M parameters, batch {batch} x {seq} tokens on {device}")
    print(f"  bf16 weights : {low_bytes:5.2f} bytes/param, step {low_s * 1e3:9.1f} ms")
    print(f"  fp32 master  : {master_bytes:5.2f} bytes/param, step {master_s * 1e3:9.1f} ms")
    print(f"  -> fp32 master costs {master_bytes / low_bytes:.2f}x the memory "
          f"({(master_bytes - low_bytes) * params / 2**30:.2f} GiB more) and {master_s / low_s:.2f}x the step time")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=1, help="timed steps of the 0.5B shape (the tiny one: 20)")
    parser.add_argument("--skip-large", action="store_true", help="only the tiny model")
    args = parser.parse_args()

    import torch
    from transformers import Qwen2Config

    torch.set_num_threads(torch.get_num_threads())
    bench("tiny (prover_cli/policy/tiny_model.py)", tiny_config(), args.device, batch=8, seq=64, repeats=max(args.repeats, 20))
    if not args.skip_large:
        large = Qwen2Config(**QWEN2_0_5B)
        seq = 512 if args.device.startswith("cuda") else 32  # keep the CPU run to a couple of minutes
        bench("Qwen2 0.5B shape (random init)", large, args.device, batch=1 if args.device == "cpu" else 4,
              seq=seq, repeats=args.repeats)


if __name__ == "__main__":
    main()
