"""ES versus GRPO on the demo, answered with statistics: many seeds, both held-out metrics, a null control.

    .venv/bin/python benchmarks/bench_demo.py                       # 10 seeds x 4 arms, configs/demo.toml
    .venv/bin/python benchmarks/bench_demo.py --seeds 3 --jobs 1    # quicker, less conclusive
    .venv/bin/python benchmarks/bench_demo.py --set es.iterations=40 --set grpo.steps=160 --out runs/bench

For each seed (`run.seed`: the training problems, the held-out problems, ES noise and sampling,
GRPO sampling) every arm trains from the same `tiny-countdown` base with the config's budgets:
- `es`, `grpo`: the config as it is;
- `es-null`, `grpo-null`: the same with `es.shuffle_rewards` / `grpo.shuffle_rewards`, the null
  control (rewards permuted within the iteration / group: the update follows no signal);
- `es-sampled` (on request, `--arms`): ES with its members scored by sampling at
  `generate.temperature` instead of greedily (`es.member_temperature`), the evidence for that key.
Every run is evaluated on the held-out problems at iteration 0 (the base, evaluated once per seed
and shared by the arms) and at the same sample budgets (GRPO's `run.eval_every` is scaled so
its evaluations fall on ES's budgets), with both metrics: sampled (`run.eval_n` samples at
`run.eval_temperature`) and greedy.

Printed, with 95% intervals (prover_cli/stats.py; the aggregation is `prover report`'s):
1. per arm, for both metrics: base -> final (mean over seeds, interval of the final) and the
   gain final - base (interval over seeds);
2. the paired differences at the final evaluation, on the same held-out problems per seed:
   es - grpo, and each method - its null control. "Gain beyond the null" is the second kind:
   same base, so (final - base) - (null final - base) = final - null final;
3. the wall time of the whole benchmark and of one run per arm.
The runs stay in `--out` (default: a temporary directory), with `report/` (`prover report` of
all of them: report.json, report.png with the bands) in `report-<time>/` when `--out` is given; a bench run again
on the same `--out` reuses every run it finished with the same resolved config.

CPU heavy: runs execute in `--jobs` processes (default 2) under `nice`, one torch thread each.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARMS = {"es": ("es", []), "grpo": ("grpo", []),
        "es-null": ("es", ["es.shuffle_rewards=true"]), "grpo-null": ("grpo", ["grpo.shuffle_rewards=true"]),
        # not run by default: ES with members scored by sampling (at generate.temperature), not greedily
        "es-sampled": ("es", ["es.member_temperature={generate_temperature}"])}


def finished(run_dir: Path, wanted) -> bool:
    """A run in `--out` that an earlier bench completed with this config: its `final/`, its last
    iteration, and every key of its `config.toml` equal to `wanted`'s, the other method's section
    aside (a key the run's config predates counts as its default, as `train grpo --resume` does)."""
    from prover_cli.config import SECTIONS, tomllib

    metrics = run_dir / "metrics.jsonl"
    if not (run_dir / "final").is_dir() or not (run_dir / "config.toml").exists() or not metrics.exists():
        return False
    last = json.loads(metrics.read_text(encoding="utf-8").splitlines()[-1])
    method = last["method"]
    stored = tomllib.loads((run_dir / "config.toml").read_text(encoding="utf-8"))
    current = tomllib.loads(wanted.to_toml())
    defaults = tomllib.loads(type(wanted)().to_toml())
    for section in SECTIONS:
        if section == {"es": "grpo", "grpo": "es"}[method]:
            continue  # the ES keys never reach GRPO's training, nor GRPO's ES's
        for key, value in current.get(section, {}).items():
            had = stored.get(section, {}).get(key, defaults[section].get(key))
            if (section, key) == ("run", "eval_every") and had and value and value % had == 0:
                continue  # it evaluated at every budget asked for, and more; evaluation never steers training
            if had != value:
                return False
    return last["iteration"] == (wanted.es.iterations if method == "es" else wanted.grpo.steps)


def run_seconds(run_dir: Path) -> float:
    """A run's own time from its metrics: training (`time/elapsed_s`) plus its held-out evaluations."""
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    return lines[-1]["time/elapsed_s"] + sum(x.get("eval/wall_s", 0.0) for x in lines)


def run_arm(config_path: Path, overrides: list[str], seed: int, arm: str, out: Path, threads: int) -> tuple[float, bool]:
    """Train one arm of one seed in a fresh, niced process: (its seconds, reused).

    A run left complete in `--out` by an earlier bench with the same config is reused, not
    trained again (an interrupted bench picks up where it stopped)."""
    from prover_cli.config import load_config
    from prover_cli.demo import grpo_eval_every

    method, extra = ARMS[arm]
    temperature = load_config(config_path, overrides).generate.temperature
    extra = [item.format(generate_temperature=temperature) for item in extra]
    common = [*overrides, f"run.seed={seed}", f"data.problems={out / 'problems.jsonl'}", *extra]
    if method == "grpo":
        common.append(f"run.eval_every={grpo_eval_every(load_config(config_path, common))}")
    run_dir = out / arm
    if finished(run_dir, load_config(config_path, [*common, f"run.dir={run_dir}"])):
        return run_seconds(run_dir), True
    shutil.rmtree(run_dir, ignore_errors=True)  # an unfinished or different run: start it over
    sets = [arg for item in common for arg in ("--set", item)]
    command = ["nice", "-n", "10", sys.executable, "-m", "prover_cli", "train", method, "--config", str(config_path),
               *sets, "--set", f"run.dir={run_dir}"]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"seed {seed} {arm}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return run_seconds(run_dir), False


def prepare(config_path: Path, overrides: list[str], seed: int, out: Path) -> None:
    from prover_cli.config import load_config
    from prover_cli.data import prepare_data

    prepare_data(load_config(config_path, [*overrides, f"run.seed={seed}", f"data.problems={out / 'problems.jsonl'}",
                                           f"run.dir={out}"]))


def fmt(point, signed: bool = False) -> str:
    if point is None:
        return "-"
    spec = "+.3f" if signed else ".3f"
    band = f" ({point['lo']:{spec}}..{point['hi']:{spec}})" if point.get("lo") is not None else ""
    return f"{point['mean']:{spec}}{band}"


def clear_of_zero(point) -> bool:
    return point is not None and point.get("lo") is not None and (point["lo"] > 0 or point["hi"] < 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "demo.toml")
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1 (default 10)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--arms", default="es,grpo,es-null,grpo-null", help=f"comma-separated, of {', '.join(ARMS)}")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="config override, KEY=VALUE")
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel (default 2)")
    parser.add_argument("--out", type=Path, default=None, help="keep the runs (and a report) here")
    args = parser.parse_args()
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        parser.error(f"unknown arm {unknown[0]!r}; known: {', '.join(ARMS)}")
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))

    from prover_cli.config import load_config
    from prover_cli.report import differences, group_arms, load_run, report_runs, summarize_arm
    from prover_cli.demo import budget_line

    config = load_config(args.config, args.overrides)
    threads = max(1, (os.cpu_count() or 1) // args.jobs)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-demo-") as tmp:
        root = args.out or Path(tmp)
        for seed in seeds:
            prepare(args.config, args.overrides, seed, root / f"seed{seed}")
        walls: dict[str, list[float]] = {arm: [] for arm in arms}
        reused = 0
        jobs = [(seed, arm) for seed in seeds for arm in arms]
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:  # each job is its own process
            futures = {pool.submit(run_arm, args.config, args.overrides, seed, arm, root / f"seed{seed}", threads):
                       (seed, arm) for seed, arm in jobs}
            for future, (seed, arm) in futures.items():
                seconds, was_reused = future.result()
                walls[arm].append(seconds)
                reused += was_reused
        wall = time.perf_counter() - started
        runs = [load_run(root / f"seed{seed}" / arm) for arm in arms for seed in seeds]
        grouped = group_arms(runs)
        summaries = [summarize_arm(arm) for arm in grouped]
        diffs = differences(grouped)
        if args.out:
            report = report_runs(run_dirs=[run["dir"] for run in runs],
                                 out_dir=args.out / f"report-{time.strftime('%Y%m%d-%H%M%S')}")
            report_path = report["plot"]

    problems = runs[0]["records"][0].get("eval/problems")
    print(f"ES vs GRPO on the demo ({args.config.name}{' ' + ' '.join(args.overrides) if args.overrides else ''}): "
          f"{len(seeds)} seeds ({seeds[0]}..{seeds[-1]}), {problems} held-out problems per seed; "
          f"{budget_line(config)}")
    print(f"held-out verified rate, mean over seeds, base -> final (95% interval of the final; t over seeds); "
          f"sampled = {config.run.eval_n} samples/problem at t {config.run.eval_temperature}, greedy = 1 at t 0\n")
    print("| arm | seeds | held-out, sampled: base -> final | gain | held-out, greedy: base -> final | gain |")
    print("|---|---|---|---|---|---|")
    for summary in summaries:
        cells = []
        for metric in ("sampled", "greedy"):
            entry = summary["heldout"].get(metric)
            cells += ([f"{entry['base']['mean']:.3f} -> {fmt(entry['final'])}", fmt(entry["gain"], signed=True)]
                      if entry and entry.get("base") else ["-", "-"])
        print(f"| {summary['arm']} | {len(summary['seeds'])} | " + " | ".join(cells) + " |")
    print("\npaired difference at the final evaluation, same held-out problems per seed (95% interval, t over seeds)\n")
    print("| difference | seeds | sampled | greedy |")
    print("|---|---|---|---|")
    for d in diffs:
        marks = {m: " *" if clear_of_zero(d.get(m)) else "" for m in ("sampled", "greedy")}
        print(f"| {d['name']} | {len(d['seeds'])} | {fmt(d.get('sampled'), True)}{marks['sampled']} | "
              f"{fmt(d.get('greedy'), True)}{marks['greedy']} |")
    print("(* interval clear of zero)")
    per_arm = ", ".join(f"{arm} {sum(w) / len(w):.0f} s" for arm, w in walls.items())
    print(f"\nwall: {wall / 60:.1f} min for {len(jobs) - reused} runs in {args.jobs} processes "
          f"({threads} torch thread{'s' if threads > 1 else ''} each){f', {reused} reused from --out' if reused else ''}; "
          f"one run (training + its evaluations, from its metrics): {per_arm}")
    if args.out:
        print(f"runs in {args.out}; report: {report_path}")


if __name__ == "__main__":
    main()
