"""What the plan's 1.08 USD for a low-rank kimina-es iteration is made of (issue #42 asked for <= 1 USD
with the same samples per iteration and the same verification; the estimates do not give it).

Pinned from the plan's own estimates (no calibration), so a change to any term shows here: the
loop's H100 container is billed for the whole iteration, 82 s of generation (240 sequences in one
KV round, 8,192 tokens at 100 tokens/s) + 168 s of verification + the 30 s update; verification is
4 batches of 64 proofs, each worth verify.workers = 4 REPL Sandboxes of 2 cores and 16 GiB that
import the 60 s header, check 16 proofs of 5 s and wait 28 s for their kernel stage; the kernel
stage bills every pass's `lean -o` and its share of a checker process in 2-core, 16 GiB Sandboxes.
Lean is 0.71 of the 1.08, and the GPU waits for it (the update needs every reward first). Why no
honest change gets under 1 USD today is in docs/modal.md, *Low-rank ES*."""

from pathlib import Path

import pytest

from prover_cli.config import load_config
from prover_cli.on_modal import plan

KIMINA_LORA = Path(__file__).resolve().parents[1] / "configs" / "kimina-es-lowrank.toml"


@pytest.fixture
def lowrank():
    return load_config(KIMINA_LORA, ["modal.calibration=none"])   # the estimates: the same on every machine


def test_the_low_rank_iteration_costs_1_08_usd_by_the_estimates(lowrank):
    cost = plan.es_iteration_cost(lowrank)
    assert round(cost["usd"], 4) == 1.0823 and round(cost["iteration_s"], 2) == 279.92
    assert cost["usd"] > 1.0   # issue #42's target is not met: see the module docstring and docs/modal.md


def test_its_lines_are_the_loops_gpu_the_repl_sandboxes_and_the_kernel_stage(lowrank):
    work = plan._work_per_iteration(lowrank, "train_es")
    t = plan._timings(lowrank, "train_es", work)
    assert (work.samples, work.proofs, work.rounds) == (240, 240, 1)
    assert (round(t.generation_s, 2), t.batches, t.proofs_per_batch, t.batch_s, t.kernel_s) == (81.92, 4, 64, 168.0, 28.0)
    assert round(t.iteration_s, 2) == round(t.generation_s + t.batch_s + lowrank.modal.est_update_s, 2)
    usd = {line.name: round(sum(line.usd(lowrank).values()), 4)
           for line in plan._billed_lines(lowrank, "train_es", work, t)}
    assert usd == {"train_es": 0.3761, "verify Sandbox": 0.4988, "kernel Sandbox": 0.2074}
    # Lean alone (0.71) plus the GPU only while it generates and updates would be 0.86: the
    # loop's GPU waiting through verification (168 s, 0.23 USD) is what crosses 1 USD
    gpu_per_s = sum(plan.unit_prices(lowrank)[kind] * amount for kind, amount in
                    (("gpu", 1), ("cpu", lowrank.modal.gpu_container_cpus),
                     ("memory", lowrank.modal.gpu_container_memory_gb))) / plan.HOURS
    assert round(t.batch_s * gpu_per_s, 3) == 0.226
    assert round(usd["verify Sandbox"] + usd["kernel Sandbox"] + (t.generation_s + 30) * gpu_per_s, 3) == 0.857


def verification_as_the_code_runs_it(repls: int, proofs: int, header_s: float, proof_s: float, lean_o_s: float,
                                     import_s: float, check_s: float, batch: int) -> tuple[float, float]:
    """(fast path end, kernel stage end), seconds, of one call's verification as prover_cli/verify runs
    it on Modal: `repls` REPL Sandboxes (sandbox_concurrency's one pool) take proofs from one queue,
    each after its header; each pass goes to the ONE kernel stage at once when no checker batch runs,
    else waits and goes with the others that queued, up to `batch` (second_stage: one checker batch
    at a time); a checker batch is every pass's `lean -o` side by side, then one checker process
    (its header import, then each pass). Hand-written from the code, not the code itself."""
    free = [header_s] * repls
    arrivals = []
    for _ in range(proofs):
        done = min(free) + proof_s
        free[free.index(min(free))] = done
        arrivals.append(done)
    arrivals.sort()
    busy_until, t = 0.0, 0.0
    queue: list[float] = []
    pending = list(arrivals)
    while pending or queue:
        t = max(busy_until, pending[0]) if not queue else max(busy_until, t)
        queue += [a for a in pending if a <= t]
        pending = [a for a in pending if a > t]
        if not queue:
            continue
        n = min(batch, len(queue))
        queue = queue[n:]
        busy_until = t = t + lean_o_s + import_s + check_s * n
    return arrivals[-1], busy_until


def test_as_the_code_runs_it_the_same_figures_cost_more_than_the_plan_says(lowrank):
    """The plan's 168 s of verification assumes a kernel stage per batch after its fast path; the
    code's one kernel stage, one checker batch at a time, at the plan's own figures (est_kernel_check
    4.5 s = `lean -o` 4 s + 0.5 s of checking), ends about 257 s in, while the 16 REPL Sandboxes and
    the loop's GPU wait: about 1.47 USD, not 1.08 (docs/modal.md, *Low-rank ES*)."""
    m, v = lowrank.modal, lowrank.verify
    work = plan._work_per_iteration(lowrank, "train_es")
    t = plan._timings(lowrank, "train_es", work)
    repls = t.batches * v.workers
    fast_end, end = verification_as_the_code_runs_it(repls, work.proofs, m.est_header_s, m.est_verify_s_per_proof,
                                                      4.0, m.est_kernel_import_s, 0.5, v.kernel_batch_size)
    assert (round(fast_end), round(end)) == (135, 257) and end > t.batch_s
    gpu_per_s = (plan.gpu_price_per_hour(lowrank) + m.gpu_container_cpus * m.cpu_price_per_core_hour
                 + m.gpu_container_memory_gb * m.memory_price_per_gib_hour) / plan.HOURS
    repl_per_s = (2 * m.sandbox_cpu_price_per_core_hour + 16 * m.sandbox_memory_price_per_gib_hour) / plan.HOURS
    kernel = 0.2074   # the kernel Sandboxes do the same work either way
    as_run = (t.generation_s + end + m.est_update_s) * gpu_per_s + repls * end * repl_per_s + kernel
    assert round(as_run, 2) == 1.47 > plan.es_iteration_cost(lowrank)["usd"]
