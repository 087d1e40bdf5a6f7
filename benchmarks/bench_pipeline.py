"""One ES iteration on Modal, the barrier schedule and the pipelined one side by side, simulated.

    python benchmarks/bench_pipeline.py [--config kimina-es] [--set key=value ...] [--max-iteration-s S]

Every figure is the plan's own (`prover train es --backend modal --dry-run`): each schedule is the
config with `modal.es_member_gpus` / `modal.es_members_per_gpu` set, priced by
`plan.es_iteration_cost`, which lays the iteration out with `schedule.simulate` and bills it as
the plan's table does. So this benchmark and `--dry-run` agree by construction. The timings are
the `modal.est_*` estimates, or the doctor's measured ones when a calibration file matches the
config (`modal.calibration`; the first line says which).

Rows: the barrier (what `modal.es_member_gpus = 0` runs: one GPU per member, the loop's GPU
waiting, then Lean in fresh Sandboxes), the configured schedule (the loop's GPU evaluating a share
beside `modal.es_member_gpus` member containers), and the cheapest pipelined schedule (member
containers 1..population - 1, members resident per GPU 1, 2, 4, 8, only those whose GPUs hold
their engines: the plan's `memory per GPU`, prover_cli/on_modal/gpu_memory.py) whose iteration ends
within a bound: the barrier's iteration time, twice and four times it (or `--max-iteration-s`);
then the same search with one engine per GPU (what kimina-es ships until a measurement of
several engines on one GPU says otherwise, issue #40). Several engines per GPU are priced at the
configured `modal.est_resident_slowdown` (ASSUMED; `--set modal.est_resident_slowdown=0.75` for
the pessimistic figure). Printed per row: GPUs billed, members per GPU, Lean workers, iteration
seconds, GPU-busy share of billed GPU-seconds, USD per iteration (kernel stage included) and per
1,000 samples, the ratio to the barrier, and whether its GPUs hold it. These are estimates from
estimates: no GPU, Modal or Lean ran here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from prover_cli.config import load_config  # noqa: E402
from prover_cli.on_modal import plan  # noqa: E402
from prover_cli.on_modal.calibration import resolve  # noqa: E402
from prover_cli.shipped import resolve_config  # noqa: E402

RESIDENT_OPTIONS = (1, 2, 4, 8)


def row(name: str, cost: dict, barrier: dict) -> list[str]:
    return [name, str(cost["gpus_billed"]), str(cost["resident"]), str(cost["lean_workers"]),
            f"{cost['iteration_s']:.0f}", f"{100 * cost['gpu_busy_fraction']:.1f}%", f"{cost['usd']:.2f}",
            f"{cost['usd_per_1k_samples']:.3f}", f"{cost['usd'] / barrier['usd']:.3f}x",
            ("fits" if cost["fits"] else "NO") if cost["memory_checked"] else "-"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="kimina-es")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--max-iteration-s", type=float, default=None)
    args = parser.parse_args()
    figures = resolve(load_config(resolve_config(args.config), args.set))
    config = figures.config
    barrier = plan.es_iteration_cost(plan.with_es_schedule(config, 0, 1))
    configured = plan.es_iteration_cost(config)
    print(f"{args.config}: {config.es.population} members per iteration; {figures.note}")
    header = ["schedule", "GPUs", "per GPU", "Lean workers", "iteration s", "GPU busy", "USD/iter",
              "USD/1k samples", "vs barrier", "memory"]
    rows = [row("barrier (es_member_gpus = 0)", barrier, barrier)]
    if plan.es_pipelined(config):
        rows.append(row(f"configured (loop + {config.modal.es_member_gpus} x {config.modal.es_members_per_gpu})",
                        configured, barrier))
    bounds = [args.max_iteration_s] if args.max_iteration_s else [barrier["iteration_s"] * k for k in (1, 2, 4)]
    for options, label in ((RESIDENT_OPTIONS, "cheapest pipelined"), ((1,), "one engine per GPU")):
        for bound in bounds:
            best = plan.cheapest_es_pipeline(config, max_iteration_s=bound, resident_options=options)
            if best is None:
                print(f"no pipelined schedule ({label}) ends within {bound:.0f} s and fits")
                continue
            rows.append(row(f"{label} <= {bound:.0f} s", best, barrier))
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(cell.rjust(w) for cell, w in zip(r, widths)))


if __name__ == "__main__":
    main()
