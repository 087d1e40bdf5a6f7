"""The resources of every remote function (`resources(config)`), with the ES members' warm window."""

from __future__ import annotations

import math

from prover_cli.config import Config
from prover_cli.on_modal.plan.iteration import es_lean_workers, _timings, _work_per_iteration
from prover_cli.on_modal.plan.pins import MODELS_MOUNT, RUNS_MOUNT
from prover_cli.on_modal.plan.sizing import (
    gpu_container_size,
    gpu_spec,
    HOURS,
    kernel_imports_per_batch,
    kernel_step_size,
    kernel_step_timeout_s,
    kernel_workers,
    MAX_SCALEDOWN_WINDOW_S,
    MAX_TIMEOUT_S,
    MINUTES,
    Resources,
    UPDATE_MARGIN_S,
    verify_batch_timeout_s,
)


def es_gap_s(config: Config) -> float:
    """Estimated seconds an ES member waits between its calls: the iteration minus its own generation."""
    work = _work_per_iteration(config, "train_es")
    return _timings(config, "train_es", work).iteration_s - _timings(config, "train_es", work).generation_s


def es_gap_bound_s(config: Config) -> float:
    """The longest a member may legitimately wait between its calls: the other generation waves,
    then every verification wave running to its Sandboxes' timeout (`verify_batch_timeout_s`:
    header + every proof at its own timeout) plus the kernel stage's estimated time, then the update."""
    work = _work_per_iteration(config, "train_es")
    t = _timings(config, "train_es", work)
    return ((t.gen_waves - 1) * t.generation_s + t.verify_waves * (verify_batch_timeout_s(config) + batch_kernel_s(config))
            + UPDATE_MARGIN_S)


def batch_kernel_s(config: Config) -> float:
    """The kernel stage of one batch whose passes all arrive at once, for the bound above (not
    moved by the fast path's estimate; each step is bounded by verify.kernel_check_timeout_s, which
    the bound does not multiply out): its passes' `lean -o`, kernel_workers at a time, then its
    checker processes one after another."""
    m, v = config.modal, config.verify
    if not v.kernel_check or config.data.task != "lean":
        return 0.0
    passes = math.ceil(m.verify_batch_size * m.est_pass_rate)
    return (math.ceil(passes / kernel_workers(v)) * m.est_kernel_check_s_per_proof
            + kernel_imports_per_batch(config, passes)[1] * m.est_kernel_import_s if passes else 0.0)


def es_member_scaledown_window_s(config: Config) -> int:
    """Long enough to outlast the longest legitimate gap between iterations (at least 5 minutes, at
    most Modal's 1 h): a member that went cold replays the ledger from the newest snapshot, so
    idling through any gap the verification bound allows is the cheaper choice."""
    return int(min(MAX_SCALEDOWN_WINDOW_S, max(5 * MINUTES, math.ceil(es_gap_bound_s(config)))))


def resources(config: Config) -> dict[str, Resources]:
    """Resources of every remote function, from `[modal]` (and `[verify]` for the Lean Sandboxes)."""
    m = config.modal
    gpu = gpu_spec(config)
    call_timeout_s = m.timeout_min * MINUTES
    both = (MODELS_MOUNT, RUNS_MOUNT)
    cores, mib = gpu_container_size(config)          # every gpu / trl image container
    repl_cores, repl_mib = kernel_step_size(config)  # one REPL's share of a verification batch
    return {
        # Fetch base weights once into the models Volume, before any GPU container needs them.
        "download_model": Resources(image="gpu", gpu=None, cpu=2.0, memory_mb=8 * 1024, timeout_s=2 * HOURS,
                                    retries=m.retries, max_containers=1, volumes=both),
        "prepare_data": Resources(image="orchestrator", gpu=None, cpu=2.0, memory_mb=8 * 1024, timeout_s=2 * HOURS,
                                  retries=m.retries, max_containers=1, volumes=(RUNS_MOUNT,)),
        # Drives the Lean Sandboxes; each Sandbox has its own timeout, so this one only bounds the run.
        "verify": Resources(image="orchestrator", gpu=None, cpu=2.0, memory_mb=4 * 1024, timeout_s=MAX_TIMEOUT_S,
                            retries=m.retries, max_containers=1, volumes=(RUNS_MOUNT,)),
        # One batch of proofs: no Volumes, no secrets, no network (see sandbox.py). One core per
        # REPL (verify.workers), several GiB each for Mathlib's environment; killed after the
        # header plus every proof at its timeout; a Sandbox that fails gets one more attempt.
        "verify_sandbox": Resources(image="lean", gpu=None, cpu=m.verify_cpus, memory_mb=m.verify_memory_gb * 1024,
                                    timeout_s=verify_batch_timeout_s(config), retries=1,
                                    max_containers=m.verify_max_containers, volumes=()),
        # One kernel-stage step (`lean -o` of one proof, the trusted target, or SafeVerify) in a
        # fresh Sandbox of its own (verify/kernel/, sandbox.SandboxRunner): one REPL's share of
        # the verification Sandbox, verify.kernel_check_workers at a time per batch.
        "kernel_sandbox": Resources(image="lean", gpu=None, cpu=repl_cores, memory_mb=repl_mib,
                                    timeout_s=kernel_step_timeout_s(config), retries=0,
                                    max_containers=m.verify_max_containers * kernel_workers(config.verify), volumes=()),
        # The pipelined ES schedule (modal.es_member_gpus > 0): one REPL per Sandbox, warm for the
        # whole run (the header imported once), verify.workers of them per generating GPU.
        "lean_worker": Resources(image="lean", gpu=None, cpu=repl_cores, memory_mb=repl_mib, timeout_s=MAX_TIMEOUT_S,
                                 retries=1, max_containers=max(1, es_lean_workers(config)), volumes=()),
        # Declared so `modal deploy` builds the Lean image up front (Sandboxes alone would build it
        # on the first verification); it reports the image's Lean and Mathlib versions.
        "lean_image_check": Resources(image="lean", gpu=None, cpu=1.0, memory_mb=4 * 1024, timeout_s=10 * MINUTES,
                                      retries=0, max_containers=1, volumes=()),
        # `prover doctor --backend modal`: one short prompt on one GPU of the generation kind, and
        # the Volumes' commit/reload round trip between two small containers (doctor_plan below).
        "doctor_gpu": Resources(image="gpu", gpu=gpu, cpu=cores, memory_mb=mib, timeout_s=30 * MINUTES,
                                retries=0, max_containers=1, volumes=both),
        "doctor_volumes": Resources(image="orchestrator", gpu=None, cpu=1.0, memory_mb=1024, timeout_s=10 * MINUTES,
                                    retries=0, max_containers=1, volumes=both),
        # The ES held-out evaluation: one GPU container with the current weights (base + ledger), not
        # the whole population held (docs/modal.md); one call per evaluation.
        "es_eval": Resources(image="gpu", gpu=gpu, cpu=cores, memory_mb=mib, timeout_s=call_timeout_s,
                             retries=m.retries, max_containers=1, volumes=both),
        # vLLM loads once per container; modal.gpu_container_cpus cores and gpu_container_memory_gb
        # GiB of host RAM stage the weights and run the tokenizer and the engine's CPU side. One
        # call per `prover generate`.
        "generate": Resources(image="gpu", gpu=gpu, cpu=cores, memory_mb=mib, timeout_s=call_timeout_s,
                              retries=m.retries, max_containers=1, volumes=both),
        # One member per call, the population in one wave (max_containers); warm through the gap
        # between iterations (a cold member would replay the ledger); a member is a pure function
        # of (ledger, t, i), so retries are safe.
        "es_member": Resources(image="gpu", gpu=gpu, cpu=cores, memory_mb=mib, timeout_s=call_timeout_s,
                               retries=m.retries, max_containers=m.max_containers, volumes=both,
                               scaledown_window_s=es_member_scaledown_window_s(config)),
        # Exactly one container writes a run's ledger; a retry resumes from it.
        "train_es": Resources(image="gpu", gpu=gpu, cpu=cores, memory_mb=mib, timeout_s=MAX_TIMEOUT_S,
                              retries=m.retries, max_containers=1, volumes=both),
        # Not retried: a GRPO retry would refuse the existing run; resume it with `--resume`
        # (from <run.dir>/checkpoints/ on the runs Volume).
        "train_grpo": Resources(image="trl", gpu=gpu, cpu=cores, memory_mb=mib, timeout_s=MAX_TIMEOUT_S,
                                retries=0, max_containers=1, volumes=both),
        # CPU by default; functions.py adds the GPU for `--device cuda` (same bits either way).
        "replay_seeds": Resources(image="gpu", gpu=None, cpu=cores, memory_mb=mib, timeout_s=call_timeout_s,
                                  retries=m.retries, max_containers=1, volumes=both),
        # CPU by default; functions.py adds the GPU when eval generates (not for `--verdicts`).
        "eval": Resources(image="gpu", gpu=None, cpu=cores, memory_mb=mib, timeout_s=MAX_TIMEOUT_S,
                          retries=m.retries, max_containers=1, volumes=both),
    }
