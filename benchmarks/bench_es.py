"""ES speed and size, measured side by side in one run and printed as ratios.

    python benchmarks/bench_es.py                 # CPU
    python benchmarks/bench_es.py --device cuda   # the same on a GPU, with GB/s next to the device's bandwidth

1. noise: our integer-hash noise (the fused C pass on CPU) vs torch.randn, same elements, same device
2. perturb + restore of every weight vs one clone() of them (an fp32 model of --params elements,
   and a bf16 model with its fp32 master), with the bytes moved per second
3. update: one fused pass per tensor for all population/2 terms vs one clone
4. ledger bytes per iteration at population 30 (a real tiny-model run, and Lean-like rewards)
5. replay time per iteration vs training time per iteration (the same tiny-model run)

Targets (issue 16): noise <= 1.0x torch.randn, perturb + restore <= 3x one clone on CPU,
ledger <= 128 bytes/iteration at population 30.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

# Peak memory bandwidth (GB/s) of GPUs whose properties do not give clock and bus width.
KNOWN_BANDWIDTH_GBS = {"H200": 4800, "H100 SXM": 3350, "H100 PCIe": 2000, "H100": 3350, "A100-SXM4-80GB": 2039,
                       "A100": 1555, "L40S": 864, "A10G": 600, "L4": 300, "T4": 320}


def best_of(fn, repeats: int = 5) -> float:
    """Fastest wall time of `repeats` calls, seconds (synchronising CUDA around each)."""
    import torch

    times = []
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        started = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return min(times)


def side_by_side(fns: dict, repeats: int = 7) -> dict:
    """Fastest wall time of each callable, the calls interleaved so load changes hit all alike."""
    best = {name: float("inf") for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            best[name] = min(best[name], best_of(fn, repeats=1))
    return best


def device_bandwidth_gbs(device: str) -> str:
    """The device's peak memory bandwidth as text ("unknown" when it cannot be told)."""
    import torch

    if device != "cuda":
        return "unknown (CPU)"
    props = torch.cuda.get_device_properties(0)
    clock_khz, bus_bits = getattr(props, "memory_clock_rate", 0), getattr(props, "memory_bus_width", 0)
    if clock_khz and bus_bits:  # double data rate: two transfers per clock
        return f"{2 * clock_khz * 1e3 * bus_bits / 8 / 1e9:.0f} GB/s peak ({props.name})"
    for name, gbs in KNOWN_BANDWIDTH_GBS.items():
        if name in props.name:
            return f"{gbs} GB/s peak ({props.name}, from its data sheet)"
    return f"unknown ({props.name})"


def bench_noise(device: str, elements: int) -> None:
    import torch

    from prover_cli.es import fused_cpu
    from prover_cli.es.noise.full import noise, noise_eager, stream_key
    from prover_cli.es.noise.definition import GPU_CHUNK

    from prover_cli.es import fused_gpu

    key = stream_key(0, "bench")
    fused = fused_cpu.available() if device == "cpu" else fused_gpu.available(device)
    times = side_by_side({"ours": lambda: noise(key, 0, elements, device),
                          "randn": lambda: torch.randn(elements, device=device)})
    ours, randn = times["ours"], times["randn"]
    step = GPU_CHUNK if device != "cpu" else 1 << 18
    slow = side_by_side({"eager": lambda: [noise_eager(key, s, min(s + step, elements), device)
                                           for s in range(0, elements, step)],
                         "randn": lambda: torch.randn(elements, device=device)}, repeats=2)
    print(f"noise      {elements:,} fp32 on {device} ({('fused C pass' if device == 'cpu' else 'fused Triton pass') if fused else 'eager torch ops'}): "
          f"ours {ours * 1e3:.1f} ms, torch.randn {randn * 1e3:.1f} ms -> ratio {ours / randn:.2f}x "
          f"(eager ops: {slow['eager'] / slow['randn']:.2f}x; {elements * 4 / ours / 1e9:.1f} GB/s written)")


def bench_perturb(device: str, params: int) -> None:
    import torch

    from prover_cli.es.noise.full import fp32
    from prover_cli.es.weights import NamedWeights

    width = 1024
    layers = max(1, params // (width * width))
    for dtype in (torch.float32, torch.bfloat16):
        model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)])
        model = model.to(device=device, dtype=dtype)
        weights = NamedWeights.from_module(model)  # the fp32 master: 4 bytes per weight
        total = sum(p.numel() for p in model.parameters())

        def perturb_restore():
            weights.perturb(1, fp32(1e-3))
            weights.restore()

        # clone() allocates: its time swings with the allocator (fresh pages fault in, reused ones
        # do not), so a copy into kept buffers, at memcpy speed, is printed beside it.
        buffers = [torch.empty_like(p) for p in model.parameters()]
        times = side_by_side({"both": perturb_restore, "restore": weights.restore,
                              "clone": lambda: [p.detach().clone() for p in model.parameters()],
                              "copy": lambda: [b.copy_(p) for b, p in zip(buffers, model.parameters())]})
        both, restore, clone, copy = times["both"], times["restore"], times["clone"], times["copy"]
        live_bytes = model[0].weight.element_size()
        # perturb reads the master and writes the live weights; restore does it again
        moved = total * 2 * (4 + live_bytes)
        tag = "perturb   " if dtype == torch.float32 else "perturb-bf16"
        print(f"{tag} {total:,} {str(dtype).removeprefix('torch.')} weights on {device} (fp32 master): "
              f"perturb+restore {both * 1e3:.1f} ms, one clone() {clone * 1e3:.1f} ms -> ratio {both / clone:.1f}x "
              f"({both / copy:.1f}x one copy_ into kept buffers, {copy * 1e3:.1f} ms; restore alone: "
              f"{restore / copy:.1f}x a copy_; {moved / both / 1e9:.1f} GB/s moved, "
              f"clone {total * 2 * live_bytes / clone / 1e9:.1f} GB/s; device {device_bandwidth_gbs(device)})")
        if dtype == torch.float32:
            bench_update(weights, model, total, device, clone)
        del weights, model


def bench_update(weights, model, total: int, device: str, clone_s: float) -> None:
    from prover_cli.es.noise.full import fp32

    terms = [(seed, fp32(1e-4 * (seed - 7))) for seed in range(15)]  # population 30, antithetic
    update = best_of(lambda: weights.update(terms), repeats=3)
    print(f"update     15 terms (population 30) over {total:,} weights on {device}: {update * 1e3:.1f} ms, "
          f"one fused pass per tensor -> {update / clone_s:.1f}x a clone ({update / 15 * 1e3:.1f} ms per term)")


def bench_ledger_and_replay(cache_dir: Path) -> None:
    import json

    from prover_cli.config import config_from_dict
    from prover_cli.es.ledger import bytes_per_iteration, make_record, read_ledger, reward_text
    from prover_cli.es.replay import replay_seeds
    from prover_cli.es.train import train_es

    with tempfile.TemporaryDirectory() as tmp:
        iterations = 4
        config = config_from_dict({
            "model": {"name": "tiny", "cache_dir": str(cache_dir), "device": "cpu", "dtype": "float32"},
            "data": {"task": "toy"},
            "generate": {"temperature": 0.0, "top_p": 1.0, "max_tokens": 8, "n": 1},  # greedy: one sample
            "es": {"population": 30, "sigma": 0.01, "learning_rate": 0.01, "iterations": iterations,
                   "problems_per_iteration": 8},
            "run": {"dir": f"{tmp}/run", "seed": 1},
        })
        train_es(config)
        header, records = read_ledger(f"{tmp}/run/ledger.json")
        metrics = [json.loads(line) for line in Path(f"{tmp}/run/metrics.jsonl").read_text().splitlines()]
        train_s = sum(m["time/wall_s"] for m in metrics) / iterations
        started = time.perf_counter()
        replay_seeds(config, ledger_path=f"{tmp}/run/ledger.json", out_dir=f"{tmp}/replayed")
        replay_s = (time.perf_counter() - started) / iterations  # includes loading the base: an upper bound

    rng = random.Random(0)
    lean_like = [make_record(i, [reward_text(rng.randrange(9) / 8) for _ in range(30)], "0" * 64, False)
                 for i in range(1, 1001)]
    graded = [make_record(i, [reward_text(rng.random()) for _ in range(30)], "0" * 64, False) for i in range(1, 1001)]
    print(f"ledger     population 30: {bytes_per_iteration(header, records):.0f} bytes/iteration (toy run), "
          f"{bytes_per_iteration(header, lean_like):.0f} (rewards k/8, as Lean with 8 samples), "
          f"{bytes_per_iteration(header, graded):.0f} (any 3-decimal rewards in [0, 1]); goal <= 128")
    print(f"replay     tiny model, population 30: {replay_s * 1e3:.0f} ms/iteration vs training "
          f"{train_s * 1e3:.0f} ms/iteration -> replay is {train_s / replay_s:.0f}x faster")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--elements", type=int, default=1 << 24, help="noise elements (default 16M)")
    parser.add_argument("--params", type=int, default=1 << 24, help="model size for perturb (default 16M)")
    parser.add_argument("--cache-dir", default=".prover-cache", help="where the tiny model is built")
    parser.add_argument("--skip-ledger", action="store_true", help="only the arithmetic (no tiny-model run)")
    args = parser.parse_args()
    import torch

    from prover_cli.es import fused_cpu

    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")

    print(f"fused      fused CPU path: {fused_cpu.status()}")
    if args.device == "cuda":
        from prover_cli.es import fused_gpu

        print(f"fused      fused GPU path (Triton): {fused_gpu.status('cuda')}")
    bench_noise(args.device, args.elements)
    bench_perturb(args.device, args.params)
    if not args.skip_ledger:
        bench_ledger_and_replay(Path(args.cache_dir))


if __name__ == "__main__":
    main()
