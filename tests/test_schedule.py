"""The ES iteration simulator (prover_cli/on_modal/schedule.py) on schedules whose answer is
worked out by hand."""

import pytest

from prover_cli.on_modal.schedule import IterationWork, Prices, Schedule, cheapest_pipeline, simulate

# 4 members of 10 s each, 2 proofs per member, 5 s per proof, 2 Lean workers.
WORK = IterationWork(members=4, generation_s=10.0, proofs_per_member=2, proof_s=5.0, header_s=3.0)
PRICES = Prices(gpu_per_hour=3600.0, lean_worker_per_hour=360.0)   # 1 USD per GPU-s, 0.1 per worker-s


def test_pipelined_on_one_gpu_verifies_under_the_next_generation():
    # GPU: members end at 10, 20, 30, 40; each member's two proofs run side by side on the two
    # warm workers for 5 s: the last verdicts at 45.
    r = simulate(WORK, Schedule("p", gpus=1, lean_workers=2, barrier=False, proofs_per_header=0, warm_lean=True), PRICES)
    assert r.generation_end_s == 40.0 and r.iteration_s == 45.0
    assert r.gpu_busy_fraction == pytest.approx(40 / 45)
    assert r.lean_busy_s == 40.0 and r.lean_billed_s == 90.0
    assert r.usd == pytest.approx(45 * 1.0 + 90 * 0.1)


def test_barrier_waits_for_the_last_member_and_pays_a_header_per_batch():
    # Two GPUs: two waves, generation ends at 20. Then 8 proofs on 2 workers, each worker a fresh
    # Sandbox of 2 proofs (header 3 s before every 2 proofs): per worker 4 proofs = 2 headers +
    # 4 x 5 s = 26 s, so the last verdict at 46; with the loop's GPU, 3 GPUs billed for 46 s.
    r = simulate(WORK, Schedule("b", gpus=2, lean_workers=2, barrier=True, proofs_per_header=2, loop_gpu=True), PRICES)
    assert r.generation_end_s == 20.0 and r.iteration_s == 46.0
    assert r.gpu_billed_s == 3 * 46.0 and r.gpu_busy_s == 40.0
    assert r.lean_busy_s == 52.0 and r.lean_billed_s == 52.0   # fresh Sandboxes: billed while up
    assert r.usd == pytest.approx(138 * 1.0 + 52 * 0.1)


def test_the_update_ends_the_iteration_and_perturbation_occupies_the_gpu():
    work = IterationWork(members=2, generation_s=10.0, proofs_per_member=1, proof_s=1.0, header_s=0.0,
                         perturb_s=0.5, update_s=2.0)
    r = simulate(work, Schedule("p", gpus=1, lean_workers=1, barrier=False, proofs_per_header=0), PRICES)
    assert r.generation_end_s == 21.0 and r.iteration_s == 22.0 + 2.0 and r.gpu_busy_s == 21.0


def test_the_cheapest_pipeline_respects_the_latency_bound():
    # Unbounded: one GPU with 2 workers, 45 s: 45 + 90 x 0.1 = 54 USD (1 worker: 50 s, 55 USD).
    # Bounded at 30 s, one GPU is out; two GPUs (members end at 10, 10, 20, 20) with 4 workers end
    # at 25 s: 50 + 100 x 0.1 = 60 USD (2 workers: 30 s, 66; 3: 30 s, 69; 5: 25 s, 62.5).
    free = cheapest_pipeline(WORK, PRICES, max_iteration_s=1e9)
    assert (free.schedule.gpus, free.schedule.lean_workers, free.usd) == (1, 2, pytest.approx(54.0))
    bounded = cheapest_pipeline(WORK, PRICES, max_iteration_s=30.0)
    assert (bounded.schedule.gpus, bounded.schedule.lean_workers, bounded.iteration_s) == (2, 4, 25.0)
    assert bounded.usd == pytest.approx(60.0)
    assert cheapest_pipeline(WORK, PRICES, max_iteration_s=5.0) is None   # less than one generation


def test_a_schedule_without_machines_is_refused():
    with pytest.raises(ValueError):
        simulate(WORK, Schedule("x", gpus=0, lean_workers=1, barrier=True, proofs_per_header=0), PRICES)


def test_members_resident_together_finish_together_and_pay_the_stated_slowdown():
    work = IterationWork(members=5, generation_s=10.0, proofs_per_member=1, proof_s=1.0, header_s=0.0,
                         resident_slowdown=0.5)
    # groups of 2, 2, 1 on one GPU: 15 s, 15 s, 10 s; the last member's proof at 40..41
    r = simulate(work, Schedule("p", gpus=1, lean_workers=1, barrier=False, proofs_per_header=0, resident=2), PRICES)
    assert r.generation_end_s == 40.0 and r.iteration_s == 41.0 and r.gpu_busy_s == 40.0
    best = cheapest_pipeline(work, PRICES, max_iteration_s=1e9, gpu_options=[1], resident_options=(1, 2, 5))
    assert best.schedule.resident == 5   # 10 x (1 + 0.5 x 4) = 30 s beats 40 s and 50 s


def test_batches_wait_for_a_free_sandbox_and_are_billed_for_their_lifetime():
    # 4 GPUs: every member ends at 10; 8 proofs in batches of 3 (3, 3, 2), each Sandbox 20 s, 2 at
    # a time: two batches 10..30, the third 30..50; 3 batches x 20 s billed at the Sandbox price
    work = IterationWork(members=4, generation_s=10.0, proofs_per_member=2, proof_s=5.0, header_s=3.0,
                         proofs_per_batch=3, batch_s=20.0)
    prices = Prices(gpu_per_hour=3600.0, lean_worker_per_hour=0.0, sandbox_per_hour=36.0)
    r = simulate(work, Schedule("b", gpus=4, lean_workers=1, barrier=True, proofs_per_header=0, sandboxes=2), prices)
    assert (r.generation_end_s, r.iteration_s, r.batches, r.lean_billed_s) == (10.0, 50.0, 3, 60.0)
    assert r.usd == pytest.approx(4 * 50 * 1.0 + 60 * 0.01)


def test_member_containers_catch_up_first_and_verdicts_wait_for_the_kernel_stage():
    # GPU 0 is the loop's (no catch-up), GPU 1 applies the last update for 5 s first: members end at
    # 10, 15, 20, 25; one proof each, 1 s on one warm worker, its kernel verdict 2 s later: 28 s
    work = IterationWork(members=4, generation_s=10.0, proofs_per_member=1, proof_s=1.0, header_s=0.0,
                         catch_up_s=5.0, kernel_latency_s=2.0)
    r = simulate(work, Schedule("p", gpus=2, lean_workers=1, barrier=False, proofs_per_header=0, warm_lean=True,
                                loop_generates=True), PRICES)
    assert (r.generation_end_s, r.iteration_s, r.gpu_busy_s, r.gpu_billed_s) == (25.0, 28.0, 45.0, 56.0)
    assert r.lean_billed_s == 28.0 and r.usd == pytest.approx(56 * 1.0 + 28 * 0.1)


def test_the_loops_gpu_pays_its_own_catch_up_when_its_other_engines_replay_the_update():
    # GPU 0 is the loop's: engine 0 made the update, its other engines replay it for 3 s; GPU 1 (a
    # member container) for 5 s. Members end at 13, 15, 23, 25; 1 s each on one warm worker: 26 s,
    # 2 GPUs billed (none waits: the loop's is one of the two)
    work = IterationWork(members=4, generation_s=10.0, proofs_per_member=1, proof_s=1.0, header_s=0.0,
                         catch_up_s=5.0, loop_catch_up_s=3.0)
    r = simulate(work, Schedule("p", gpus=2, lean_workers=1, barrier=False, proofs_per_header=0, warm_lean=True,
                                loop_generates=True), PRICES)
    assert (r.generation_end_s, r.iteration_s, r.gpu_busy_s, r.gpu_billed_s) == (25.0, 26.0, 48.0, 52.0)
    assert r.usd == pytest.approx(52 * 1.0 + 26 * 0.1)
