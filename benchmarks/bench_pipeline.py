"""One ES iteration on Modal, today's schedule and the pipelined one side by side, simulated.

    python benchmarks/bench_pipeline.py [--config kimina-es] [--resident-slowdown 0.25] [--set key=value ...]

Both schedules are simulated event by event (prover_cli/on_modal/schedule.py) from the same
timings, which are the plan's (`prover train es --backend modal --dry-run`): one member's
generation `generate.max_tokens / decode speed of modal.gpu`, `modal.est_verify_s_per_proof` per
proof plus the kernel stage's expected seconds, `modal.est_header_s` per header import, and the
plan's prices of a GPU container and of one Lean worker's share of a Sandbox.

- **barrier** (what runs and what the plan prices today): `modal.max_containers` member GPUs plus
  the loop's, generation first, then Lean in fresh Sandboxes of `modal.verify_batch_size`.
- **pipelined**: the cheapest number of GPUs, members resident per GPU (1, 2, 4, 8) and warm Lean
  workers whose iteration is no longer than a bound: today's iteration, twice and four times it
  (or `--max-iteration-s`); each GPU runs member after member and Lean checks each member's proofs
  as they arrive. Members resident together each cost `--resident-slowdown` of a generation more
  (an ASSUMPTION, 0.25 by default: only a measurement on the GPU can say).

Printed: GPUs, Lean workers, iteration seconds, GPU-busy share of billed GPU-seconds, USD per
iteration and per 1,000 samples, and the ratio. These are estimates from estimates: no GPU,
Modal or Lean ran; `prover doctor --backend modal` measures the timings on real hardware.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from prover_cli.config import load_config  # noqa: E402
from prover_cli.on_modal import plan  # noqa: E402
from prover_cli.on_modal.schedule import IterationWork, Prices, Schedule, cheapest_pipeline, simulate  # noqa: E402
from prover_cli.shipped import resolve_config  # noqa: E402


def iteration_work(config, resident_slowdown: float = 0.25) -> IterationWork:
    es, m = config.es, config.modal
    proof_s = m.est_verify_s_per_proof
    if config.verify.kernel_check:
        proof_s += m.est_pass_rate * m.est_kernel_check_s_per_proof
    return IterationWork(members=es.population,
                         generation_s=config.generate.max_tokens / plan.decode_tokens_per_s(config),
                         proofs_per_member=es.problems_per_iteration * es.samples_per_problem,
                         proof_s=proof_s, header_s=m.est_header_s, update_s=plan.UPDATE_MARGIN_S,
                         resident_slowdown=resident_slowdown)


def prices(config) -> Prices:
    functions, sandbox = plan.unit_prices(config), plan.unit_prices(config, sandbox=True)
    cores, mib = plan.gpu_container_size(config)
    gpu = functions["gpu"] * config.modal.gpus_per_container + cores * functions["cpu"] + mib / 1024 * functions["memory"]
    m, v = config.modal, config.verify
    worker = m.verify_cpus / v.workers * sandbox["cpu"] + m.verify_memory_gb / v.workers * sandbox["memory"]
    return Prices(gpu_per_hour=gpu, lean_worker_per_hour=worker)


def todays_schedule(config) -> Schedule:
    m, v = config.modal, config.verify
    return Schedule("barrier (today)", gpus=min(config.es.population, m.max_containers),
                    lean_workers=m.verify_max_containers * v.workers, barrier=True,
                    proofs_per_header=math.ceil(m.verify_batch_size / v.workers), loop_gpu=True)


def row(result, samples: int, name: str | None = None) -> list[str]:
    s = result.schedule
    return [name or s.name, str(s.gpus + (1 if s.loop_gpu else 0)), str(s.resident), str(s.lean_workers),
            f"{result.iteration_s:.0f}",
            f"{100 * result.gpu_busy_fraction:.1f}%", f"{result.usd:.2f}", f"{1000 * result.usd / samples:.3f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="kimina-es")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--max-iteration-s", type=float, default=None)
    parser.add_argument("--resident-slowdown", type=float, default=0.25)
    args = parser.parse_args()
    config = load_config(resolve_config(args.config), args.set)
    work, cost = iteration_work(config, args.resident_slowdown), prices(config)
    samples = work.members * work.proofs_per_member
    today = simulate(work, todays_schedule(config), cost)
    bounds = [args.max_iteration_s] if args.max_iteration_s else [today.iteration_s * k for k in (1, 2, 4)]
    print(f"{args.config}: {work.members} members x {work.proofs_per_member} proofs, generation "
          f"{work.generation_s:.0f} s per member, {work.proof_s:.1f} s per proof, header {work.header_s:.0f} s; "
          f"GPU {cost.gpu_per_hour:.2f} USD/h, Lean worker {cost.lean_worker_per_hour:.3f} USD/h")
    header = ["schedule", "GPUs", "per GPU", "Lean workers", "iteration s", "GPU busy", "USD/iter", "USD/1k samples"]
    rows, ratios = [row(today, samples)], []
    for bound in bounds:
        best = cheapest_pipeline(work, cost, max_iteration_s=bound, resident_options=(1, 2, 4, 8))
        if best is None:
            print(f"no pipelined schedule ends within {bound:.0f} s")
            continue
        rows.append(row(best, samples, f"pipelined <= {bound:.0f} s"))
        ratios.append(f"{best.usd / today.usd:.3f}x the USD at {best.iteration_s / today.iteration_s:.2f}x the time")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(cell.rjust(w) for cell, w in zip(r, widths)))
    print("pipelined / today: " + "; ".join(ratios))


if __name__ == "__main__":
    main()
