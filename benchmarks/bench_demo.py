"""The demo's miniature over several seeds: held-out verified rate of ES and GRPO from one base.

    .venv/bin/python benchmarks/bench_demo.py                   # seeds 0 1 2, configs/demo.toml
    .venv/bin/python benchmarks/bench_demo.py --seeds 3 4 --set es.population=16

For each seed (`run.seed`: the training problems, the held-out subset, ES noise, GRPO sampling),
both methods train from the same `tiny-countdown` base with the demo's budgets and evaluate their
current weights on the same held-out problems every `run.eval_every` iterations. Printed, for
each method, the held-out verified rate (mean, and min..max over the seeds)
1. per iteration (ES iteration or GRPO optimizer step), the base at iteration 0;
2. per 1,000 training samples: the latest evaluation of weights trained on at most that many.
This is the miniature of "does ES match or beat GRPO per iteration, especially with little
data?": a tiny model, one task, a few seeds; it shows how the two compare here, nothing more.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_seed(config_path: Path, overrides: list[str], seed: int, out: Path) -> dict:
    """Base rate and both methods' (iteration, samples/total, eval rate) points for one seed."""
    from prover_cli.config import load_config
    from prover_cli.data import prepare_data
    from prover_cli.es.train import train_es
    from prover_cli.grpo import train_grpo
    from prover_cli.warmstart import base_heldout, sample_budgets

    common = [*overrides, f"run.seed={seed}", f"data.problems={out / 'problems.jsonl'}"]
    config = load_config(config_path, [*common, f"run.dir={out}"])
    prepare_data(config)
    base = base_heldout(config)
    result = {"base": base["eval/verified_rate"], "problems": base["eval/problems"], "budgets": sample_budgets(config)}
    for method, train in (("es", train_es), ("grpo", train_grpo)):
        started = time.perf_counter()
        train(load_config(config_path, [*common, f"run.dir={out / method}"]))
        lines = [json.loads(x) for x in (out / method / "metrics.jsonl").read_text().splitlines() if x.strip()]
        result[method] = [(r["iteration"], r["samples/total"], r["eval/verified_rate"])
                          for r in lines if "eval/verified_rate" in r]
        result[f"{method}_wall_s"] = time.perf_counter() - started
    return result


def spread(values: list[float]) -> str:
    return f"{statistics.mean(values):.3f} ({min(values):.3f}..{max(values):.3f})"


def latest_at(points: list[tuple[int, int, float]], base: float, samples: int) -> float:
    """The rate of the last evaluation whose weights were trained on <= `samples` samples."""
    rate = base
    for _, seen, value in points:
        if seen <= samples:
            rate = value
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "demo.toml")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="config override, KEY=VALUE")
    parser.add_argument("--out", type=Path, default=None, help="where the runs go (default: a temp directory)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-demo-") as tmp:
        out = args.out or Path(tmp)
        results = {seed: run_seed(args.config, args.overrides, seed, out / f"seed{seed}") for seed in args.seeds}

    first = results[args.seeds[0]]
    print(f"demo miniature ({args.config.name}{' ' + ' '.join(args.overrides) if args.overrides else ''}), "
          f"seeds {' '.join(map(str, args.seeds))}: held-out verified rate on "
          f"{'/'.join(str(r['problems']) for r in results.values())} problems, "
          f"mean (min..max) over seeds; budgets es {first['budgets']['es']} / grpo {first['budgets']['grpo']} samples")
    bases = [r["base"] for r in results.values()]
    for method in ("es", "grpo"):
        print(f"\n{method}: per iteration")
        print(f"  iteration {0:>4}: {spread(bases)}  (the base)")
        iterations = [i for i, _, _ in first[method]]
        for index, iteration in enumerate(iterations):
            values = [r[method][index][2] for r in results.values()]
            print(f"  iteration {iteration:>4}: {spread(values)}   ({first[method][index][1]} samples)")
        print(f"{method}: per 1,000 training samples")
        most = max(r[method][-1][1] for r in results.values())
        for thousand in range(1, most // 1000 + 1):
            values = [latest_at(r[method], r["base"], thousand * 1000) for r in results.values()]
            print(f"  {thousand * 1000:>6} samples: {spread(values)}")
        walls = [r[f"{method}_wall_s"] for r in results.values()]
        print(f"{method}: wall {statistics.mean(walls):.0f} s per run (incl. evaluations)")
    print("\nfinal: " + "; ".join(
        f"seed {seed}: es {r['base']:.3f} -> {r['es'][-1][2]:.3f}, grpo {r['base']:.3f} -> {r['grpo'][-1][2]:.3f}"
        for seed, r in results.items()))


if __name__ == "__main__":
    main()
