"""ES speed and size, measured side by side in one run and printed as ratios.

    python benchmarks/bench_es.py                 # CPU
    python benchmarks/bench_es.py --device cuda   # the same on a GPU

1. noise: our integer-hash noise vs torch.randn, same number of elements, same device
2. perturb + restore of every weight vs one clone() of them (a model of --params elements)
3. ledger bytes per iteration at population 30 (a real tiny-model run, and Lean-like rewards)
4. replay time per iteration vs training time per iteration (the same tiny-model run)
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path


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


def bench_noise(device: str, elements: int) -> None:
    import torch

    from prover_cli.es.noise import CPU_CHUNK, GPU_CHUNK, noise, stream_key

    chunk = CPU_CHUNK if device == "cpu" else GPU_CHUNK
    key = stream_key(0, "bench")
    ours = best_of(lambda: [noise(key, s, min(s + chunk, elements), device) for s in range(0, elements, chunk)])
    randn = best_of(lambda: torch.randn(elements, device=device))
    print(f"noise      {elements:,} fp32 on {device}: ours {ours * 1e3:.1f} ms, torch.randn {randn * 1e3:.1f} ms "
          f"-> ratio {ours / randn:.2f}x")


def bench_perturb(device: str, params: int) -> None:
    import torch

    from prover_cli.es.noise import fp32
    from prover_cli.es.weights import NamedWeights

    width = 1024
    layers = max(1, params // (width * width))
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)]).to(device)
    weights = NamedWeights.from_module(model)
    total = sum(p.numel() for p in model.parameters())

    def perturb_restore():
        weights.perturb(1, fp32(1e-3))
        weights.restore()

    both = best_of(perturb_restore, repeats=3)
    restore = best_of(weights.restore)
    clone = best_of(lambda: [p.detach().clone() for p in model.parameters()])
    print(f"perturb    {total:,} weights on {device}: perturb+restore {both * 1e3:.1f} ms, one clone() "
          f"{clone * 1e3:.1f} ms -> ratio {both / clone:.1f}x (restore alone from the base copy: "
          f"{restore / clone:.1f}x a clone)")


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
            "generate": {"temperature": 0.0, "top_p": 1.0, "max_tokens": 8},
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
    print(f"ledger     population 30: {bytes_per_iteration(header, records):.0f} bytes/iteration (toy run), "
          f"{bytes_per_iteration(header, lean_like):.0f} (rewards k/8, as Lean with 8 samples); goal <= 200")
    print(f"replay     tiny model, population 30: {replay_s * 1e3:.0f} ms/iteration vs training "
          f"{train_s * 1e3:.0f} ms/iteration -> replay is {train_s / replay_s:.0f}x faster")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--elements", type=int, default=1 << 24, help="noise elements (default 16M)")
    parser.add_argument("--params", type=int, default=1 << 24, help="model size for perturb (default 16M)")
    parser.add_argument("--cache-dir", default=".prover-cache", help="where the tiny model is built")
    args = parser.parse_args()
    bench_noise(args.device, args.elements)
    bench_perturb(args.device, args.params)
    bench_ledger_and_replay(Path(args.cache_dir))


if __name__ == "__main__":
    main()
