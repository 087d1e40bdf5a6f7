"""What the plan's 0.99 USD for a low-rank kimina-es iteration is made of (issue #42: <= 1 USD with
the same samples per iteration and the same verification).

Pinned from the plan's own estimates (no calibration), so a change to any term shows here. The
loop's H100 container is billed for the whole iteration: 82 s of generation (240 sequences in one
KV round, 8,192 tokens at 100 tokens/s), then the call's verification, then the 30 s update. The
verification is counted event by event as the code runs it (plan/verification.py, ONE function:
the billed lines and the iteration's wall time both read its count): 4 batches of 64 proofs, so 16
REPL Sandboxes of 2 cores and 16 GiB side by side, each importing the 60 s header, checking 15
proofs of 5 s from one queue and ending after its last (135 s); each batch's kernel stage beside
the others' (4 checker batches at once: SandboxRunner.batches_at_once), every pass's `lean -o` and
every checker process a kernel Sandbox of its own; the last verdict 156 s in. Before #42 the code
ran one checker batch at a time and kept the REPL Sandboxes up to the call's end: a count of that
at the same figures (d51d977) gave about 257 s of verification and 1.47 USD (docs/modal.md, *Low-rank ES*). Lean is 0.63
of the 0.99, and the GPU waits for it (the update needs every reward first)."""

from pathlib import Path

import pytest

from prover_cli.config import load_config
from prover_cli.on_modal import plan

KIMINA_LORA = Path(__file__).resolve().parents[1] / "prover_cli" / "configs" / "kimina-es-lowrank.toml"


@pytest.fixture
def lowrank():
    return load_config(KIMINA_LORA, ["modal.calibration=none"])   # the estimates: the same on every machine


def test_the_low_rank_iteration_costs_at_most_1_usd_by_the_estimates(lowrank):
    cost = plan.es_iteration_cost(lowrank)
    assert round(cost["usd"], 4) == 0.9875 and round(cost["iteration_s"], 2) == 267.92
    assert cost["usd"] <= 1.0   # issue #42's target
    assert cost["lean_workers"] == 16


def test_the_verification_as_the_code_runs_it(lowrank):
    work = plan._work_per_iteration(lowrank, "train_es")
    t = plan._timings(lowrank, "train_es", work)
    assert (work.samples, work.proofs, work.rounds, work.problems) == (240, 240, 1, 8)
    run = plan.verification_as_run(lowrank, work.proofs, work.problems)
    assert t.verification == run   # the plan's timings ARE this count
    assert (run.batches, run.repls, run.repl_sandboxes, run.checker_batches_at_once) == (4, 16, 16, 4)
    # 16 REPLs x (60 s header + 15 proofs x 5 s), each released at its last proof
    assert (run.fast_path_end_s, run.repl_sandbox_s) == (135.0, 16 * 135.0)
    # 240 passes' `lean -o` (4 s) and 8 targets' (one per problem), 22 checker processes (5 s import,
    # 0.5 s per pass): a first pass per free slot goes alone, then batches grow while the slots are busy
    assert (run.kernel_steps, run.checker_processes) == (240 + 8 + 22, 22)
    assert run.kernel_sandbox_s == 240 * 4.0 + 8 * 4.0 + 22 * 5.0 + 240 * 0.5
    assert (run.wall_s, run.kernel_tail_s) == (156.0, 21.0)
    assert t.batch_s == run.wall_s and t.kernel_s == run.kernel_tail_s
    assert round(t.iteration_s, 2) == round(t.generation_s + run.wall_s + lowrank.modal.est_update_s, 2)


def test_its_lines_are_the_loops_gpu_the_repl_sandboxes_and_the_kernel_stage(lowrank):
    work = plan._work_per_iteration(lowrank, "train_es")
    t = plan._timings(lowrank, "train_es", work)
    run = t.verification
    lines = {line.name: line for line in plan._billed_lines(lowrank, "train_es", work, t)}
    usd = {name: round(sum(line.usd(lowrank).values()), 4) for name, line in lines.items()}
    assert usd == {"train_es": 0.36, "verify Sandbox": 0.4008, "kernel Sandbox": 0.2267}
    # each line is the count's seconds at one REPL's share (2 cores, 16 GiB) or the GPU container's price
    m = lowrank.modal
    sandbox_per_s = (2 * m.sandbox_cpu_price_per_core_hour + 16 * m.sandbox_memory_price_per_gib_hour) / plan.HOURS
    gpu_per_s = (plan.gpu_price_per_hour(lowrank) + m.gpu_container_cpus * m.cpu_price_per_core_hour
                 + m.gpu_container_memory_gb * m.memory_price_per_gib_hour) / plan.HOURS
    assert lines["verify Sandbox"].container_s == run.repl_sandbox_s
    assert lines["kernel Sandbox"].container_s == run.kernel_sandbox_s
    assert round(usd["verify Sandbox"], 4) == round(run.repl_sandbox_s * sandbox_per_s, 4)
    assert round(usd["kernel Sandbox"], 4) == round(run.kernel_sandbox_s * sandbox_per_s, 4)
    assert round(usd["train_es"], 4) == round(t.iteration_s * gpu_per_s, 4)
    # the loop's GPU waiting through verification (156 s) is 0.21 of it: ES cannot overlap Lean
    # with the next generation (the update needs every reward)
    assert round(run.wall_s * gpu_per_s, 3) == 0.21


def test_the_count_follows_the_stages_rules_on_a_small_call(lowrank):
    """4 proofs of one problem, one batch of 2 REPLs: hand-counted. The REPLs check 2 proofs each
    (65 s, 70 s); the first pass starts the one checker slot at once (its target and its `lean -o`,
    8 s, then a checker of 5.5 s: 78.5 s); the other three queue and go together when it ends
    (3 `lean -o` side by side, 4 s, then one checker of 5 + 1.5 s: 89 s)."""
    from dataclasses import replace

    small = replace(lowrank, verify=replace(lowrank.verify, workers=2),
                    modal=replace(lowrank.modal, verify_batch_size=4))
    run = plan.verification_as_run(small, 4, 1)
    assert (run.batches, run.repls, run.checker_batches_at_once) == (1, 2, 1)
    assert (run.fast_path_end_s, run.repl_sandbox_s) == (70.0, 140.0)
    assert (run.kernel_steps, run.checker_processes, run.wall_s) == (7, 2, 89.0)
    assert run.kernel_sandbox_s == 8.0 + 5.5 + 3 * 4.0 + 6.5
