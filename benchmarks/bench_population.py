"""ES member evaluation, batched (`es.batched_members`) against one member at a time, side by side in one run.

    .venv/bin/python benchmarks/bench_population.py                        # the demo's shapes, then the paper's
    .venv/bin/python benchmarks/bench_population.py --shape demo --threads 2
    .venv/bin/python benchmarks/bench_population.py --shape paper --paper-problems 50   # scaled down, printed

What is timed: one iteration's member generation, `LocalPopulation.members(iteration, batch)`,
the code the training loop runs (es/population.py), on the demo's base (`tiny-countdown`, CPU,
float32, greedy members) and the demo's sampling settings (configs/demo.toml). Scoring is left
out: the countdown check is the same Python for both and costs microseconds a sample. Both modes
share one loaded sampler and one theta, and are timed interleaved (best of `--repeats` each), so a
change of machine load hits both alike. Each mode's CPU-seconds (this process's, best of the repeats)
are printed beside its wall time: on a shared machine the CPU-seconds ratio is the steadier figure. Shapes:

- demo: configs/demo.toml as shipped (es.population x es.problems_per_iteration x es.samples_per_problem,
  read from the config: 16 x 256 x 1 = 4,096 samples an iteration since #42's operating point);
- paper: the ES-at-scale paper's operating point, population 30 x 200 problems x 1 sample
  (6,000 samples an iteration), `--paper-problems` to scale the problem count down (printed).

`--noise lowrank --rank r` times low-rank members (es/noise/lowrank.py) both ways: one at a time perturbs
the whole model per member, batched computes x Wᵀ + c (x B) Aᵀ (es/batched.py).

Batched runs `--chunk` members per `generate` call (default: the whole population). Before timing,
each shape checks that the two modes' completions are the same (greedy: they may differ only where
a float tie flips a token, es/batched.py) and prints the agreement.

The forward floor (`--floor`, on by default; a second table): what no batching of members can take
away. With full-rank noise every member's weights differ, so each member's rows need their own
forward passes; batching can only remove what lies outside them (generate's per-step bookkeeping,
the perturb and restore) and make each pass wider. The floor times the bare model forward those
rows need, nothing else: the prompts' prefill, then greedy decode steps through the KV cache until
every row of the call has ended (at most `generate.max_tokens`), on the live weights. It is timed
once at one member at a time's rows per call (the sampler's `generate.batch_size`) and once at the
batched call's rows (chunk x problems, every row on one weight: cheaper than the batched path's
stacked per-member weights). One at a time's CPU-seconds over the wide floor's bound from above
the speedup any batching of full-rank members could reach on this machine at this shape.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def populations(shape: str, problems_per_member: int, chunk: int, workdir: Path, cache_dir: str, noise: list[str]):
    """(one-at-a-time population, batched population, problems file's train split) over one loaded sampler."""
    from prover_cli.config import load_config
    from prover_cli.tasks.datasets import prepare_data
    from prover_cli.es.population import LocalPopulation
    from prover_cli.tasks.problems import train_problems

    overrides = [f"model.cache_dir={cache_dir}", f"data.problems={workdir / 'problems.jsonl'}",
                 f"run.dir={workdir / 'run'}", *noise]
    if shape == "paper":  # the demo's 1,024 countdown problems leave ~920 to train on: 200 a member fit
        overrides += ["es.population=30", f"es.problems_per_iteration={problems_per_member}"]
    config = load_config(REPO / "configs" / "demo.toml", overrides)
    if not config.problems_path.exists():
        prepare_data(config)
    problems = train_problems(config)
    config.check_problems_per_iteration(len(problems))
    batched_config = dataclasses.replace(config, es=dataclasses.replace(config.es, batched_members=chunk or config.es.population))
    one = LocalPopulation(config)
    one.load_sampler()
    together = LocalPopulation(batched_config)
    together.sampler, together.weights = one.sampler, one.weights  # one model, one theta
    return one, together, problems


def measure(shape: str, args: argparse.Namespace, cache_dir: str) -> dict:
    from prover_cli.es.population import pick_problems

    with tempfile.TemporaryDirectory(prefix=f"bench-population-{shape}-") as tmp:
        problems_per_member = args.paper_problems  # used at the paper's shape only: the demo's is its config's
        noise = [f"es.noise={args.noise}", f"es.rank={args.rank}"] if args.noise == "lowrank" else []
        one, together, problems = populations(shape, problems_per_member, args.chunk, Path(tmp), cache_dir, noise)
        es = one.config.es
        batch = pick_problems(problems, one.config.run.seed, 1, es.problems_per_iteration)
        samples = es.population * len(batch) * es.samples_per_problem
        # the agreement check doubles as the warm-up of both paths
        first, second = one.members(1, batch), together.members(1, batch)
        pairs = [(a, b) for x, y in zip(first, second) for a, b in zip(x, y)]
        agree = sum(a == b for a, b in pairs)
        best = {"one": float("inf"), "batched": float("inf")}
        cpu = {"one": float("inf"), "batched": float("inf")}
        for _ in range(args.repeats):
            for name, population in (("one", one), ("batched", together)):
                started, cpu_started = time.perf_counter(), time.process_time()
                population.members(1, batch)
                best[name] = min(best[name], time.perf_counter() - started)
                cpu[name] = min(cpu[name], time.process_time() - cpu_started)
        result = {"shape": shape, "population": es.population, "problems": len(batch), "samples": samples,
                  "chunk": together.config.es.batched_members, "agree": agree, "compared": len(pairs),
                  "one_s": best["one"], "batched_s": best["batched"],
                  "one_cpu_s": cpu["one"], "batched_cpu_s": cpu["batched"]}
        if args.floor:
            from prover_cli.policy import rollout

            prompts = rollout.prompts(one.task, batch, one.sampler.tokenizer, one.config.model.family)
            steps = one.config.generate.max_tokens
            narrow, wide = one.sampler.batch_size, result["chunk"] * len(prompts)
            result["narrow_rows"], result["wide_rows"], result["steps"] = narrow, wide, steps
            result["floor_narrow_cpu_s"] = es.population * forward_floor(one.sampler, prompts, narrow, steps, args.repeats)
            chunks_per_population = -(-es.population // result["chunk"])
            result["floor_wide_cpu_s"] = chunks_per_population * forward_floor(
                one.sampler, prompts * result["chunk"], wide, steps, args.repeats)
        return result


def forward_floor(sampler, prompts: list[str], rows_per_call: int, steps: int, repeats: int) -> float:
    """CPU-seconds (best of `repeats`) of the bare forward passes `prompts` need in calls of
    `rows_per_call` rows: `greedy_forward` on each call's left-padded rows, on the sampler's live
    model (theta: a member's rows end about where theta's do)."""
    import torch

    eos = torch.tensor(sampler._eos_ids())
    calls = [sampler.tokenizer(prompts[start:start + rows_per_call], return_tensors="pt", padding=True,
                               add_special_tokens=False) for start in range(0, len(prompts), rows_per_call)]
    best = float("inf")
    for _ in range(repeats + 1):  # the first pass warms up
        started = time.process_time()
        for encoded in calls:
            greedy_forward(sampler.model, encoded["input_ids"], encoded["attention_mask"], eos, steps)
        best = min(best, time.process_time() - started)
    return best


def greedy_forward(model, ids, mask, eos, steps: int):
    """The forward passes of greedy decoding and nothing else: the prefill of the left-padded `ids`,
    then one decode step at a time through the KV cache until every row has ended (a token in
    `eos`) or `steps` tokens are out, as `generate` stops. Returns the tokens, [rows, decoded]."""
    import torch

    with torch.no_grad():
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
        cache, token = out.cache, out.logits[:, -1].argmax(-1, keepdim=True)
        tokens, ended = [token], torch.isin(token[:, 0], eos)
        while len(tokens) < steps and not bool(ended.all()):
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
            positions = positions[:, -1:] + 1
            out = model(input_ids=token, attention_mask=mask, position_ids=positions, cache=cache,
                        use_cache=True)
            cache, token = out.cache, out.logits[:, -1].argmax(-1, keepdim=True)
            tokens.append(token)
            ended |= torch.isin(token[:, 0], eos)
    return torch.cat(tokens, dim=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=("demo", "paper", "both"), default="both")
    parser.add_argument("--paper-problems", type=int, default=200, help="problems per member at the paper's shape")
    parser.add_argument("--chunk", type=int, default=0, help="members per batched generate call (0: all)")
    parser.add_argument("--repeats", type=int, default=3, help="timed iterations of each mode (best is kept)")
    parser.add_argument("--noise", choices=("full", "lowrank"), default="full", help="es.noise (default full)")
    parser.add_argument("--rank", type=int, default=1, help="es.rank with --noise lowrank (default 1)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--floor", action=argparse.BooleanOptionalAction, default=True,
                        help="also time the bare forward floor (module docstring)")
    parser.add_argument("--cache-dir", default=str(REPO / ".prover-cache"), help="where the demo's base is built")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    torch.set_num_threads(args.threads)
    shapes = ("demo", "paper") if args.shape == "both" else (args.shape,)
    noise = f"es.noise {args.noise}" + (f", rank {args.rank}" if args.noise == "lowrank" else "")
    print(f"torch {torch.__version__}, {args.threads} thread(s), best of {args.repeats}, {noise}; "
          f"member generation only (es/population.py LocalPopulation.members)")
    print("| shape | population x problems = samples | batched chunk | one at a time (samples/s) | "
          "batched (samples/s) | ratio | one at a time (samples/CPU-s) | batched (samples/CPU-s) | ratio (CPU) | "
          "completions equal |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    results = []
    for shape in shapes:
        r = measure(shape, args, args.cache_dir)
        results.append(r)
        note = "" if shape == "demo" or r["problems"] == 200 else " (scaled from 200)"
        print(f"| {shape} | {r['population']} x {r['problems']}{note} = {r['samples']} | {r['chunk']} | "
              f"{r['samples'] / r['one_s']:.0f} | {r['samples'] / r['batched_s']:.0f} | "
              f"{r['one_s'] / r['batched_s']:.2f}x | {r['samples'] / r['one_cpu_s']:.0f} | "
              f"{r['samples'] / r['batched_cpu_s']:.0f} | {r['one_cpu_s'] / r['batched_cpu_s']:.2f}x | "
              f"{r['agree']}/{r['compared']} |", flush=True)

    if args.floor:
        print("\nThe forward floor (CPU-seconds of the bare forward passes alone; module docstring):")
        print("| shape | one at a time (CPU-s) | floor at its rows per call (CPU-s) | share of one at a time | "
              "batched (CPU-s) | floor at the batched call's rows (CPU-s) | ceiling of any batching (CPU) |")
        print("|---|---|---|---|---|---|---|")
        for r in results:
            print(f"| {r['shape']} | {r['one_cpu_s']:.2f} | {r['floor_narrow_cpu_s']:.2f} ({r['narrow_rows']} rows, up to "
                  f"{r['steps']} steps) | {r['floor_narrow_cpu_s'] / r['one_cpu_s']:.0%} | {r['batched_cpu_s']:.2f} | "
                  f"{r['floor_wide_cpu_s']:.2f} ({r['wide_rows']} rows) | "
                  f"{r['one_cpu_s'] / r['floor_wide_cpu_s']:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
