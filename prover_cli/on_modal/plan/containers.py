"""The resources of every remote function (`resources(config)`), with the ES members' warm window."""

from __future__ import annotations

import math
from typing import Any
from prover_cli.on_modal.plan.iteration import es_lean_workers, _timings, _work_per_iteration
from prover_cli.on_modal.plan.pins import MODELS_MOUNT, RUNS_MOUNT
from prover_cli.on_modal.plan.sizing import (
    gpu_container_size,
    gpu_spec,
    HOURS,
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


def es_gap_s(config: Any) -> float:
    """Estimated seconds an ES member waits between its calls: the iteration minus its own generation."""
    work = _work_per_iteration(config, "train_es")
    return _timings(config, "train_es", work).iteration_s - _timings(config, "train_es", work).generation_s


def es_gap_bound_s(config: Any) -> float:
    """The longest a member may legitimately wait between its calls: the other generation waves,
    then every verification wave running to its Sandboxes' timeout (`verify_batch_timeout_s`:
    header + every proof at its own timeout) plus the kernel stage's estimated time, then the update."""
    work = _work_per_iteration(config, "train_es")
    t = _timings(config, "train_es", work)
    # the kernel stage after each batch's fast path: its estimate (each of its steps is bounded by
    # verify.kernel_check_timeout_s, which this bound does not multiply out)
    return ((t.gen_waves - 1) * t.generation_s + t.verify_waves * (verify_batch_timeout_s(config) + t.kernel_s)
            + UPDATE_MARGIN_S)


def es_member_scaledown_window_s(config: Any) -> int:
    """Long enough to outlast the longest legitimate gap between iterations (at least 5 minutes, at
    most Modal's 1 h): a member that went cold replays the ledger from the newest snapshot, so
    idling through any gap the verification bound allows is the cheaper choice."""
    return int(min(MAX_SCALEDOWN_WINDOW_S, max(5 * MINUTES, math.ceil(es_gap_bound_s(config)))))


def resources(config: Any) -> dict[str, Resources]:
    """Resources of every remote function, from `[modal]` (and `[verify]` for the Lean Sandboxes)."""
    m = config.modal
    gpu = gpu_spec(config)
    call_timeout_s = m.timeout_min * MINUTES
    both = (MODELS_MOUNT, RUNS_MOUNT)
    host = gpu_container_size(config)  # cores, MiB of every gpu / trl image container
    return {
        # Fetch base weights once into the models Volume, before any GPU container needs them.
        "download_model": Resources("gpu", None, 2.0, 8 * 1024, 2 * HOURS, m.retries, 1, both),
        "prepare_data": Resources("orchestrator", None, 2.0, 8 * 1024, 2 * HOURS, m.retries, 1, (RUNS_MOUNT,)),
        # Drives the Lean Sandboxes; each Sandbox has its own timeout, so this one only bounds the run.
        "verify": Resources("orchestrator", None, 2.0, 4 * 1024, MAX_TIMEOUT_S, m.retries, 1, (RUNS_MOUNT,)),
        # One batch of proofs: no Volumes, no secrets, no network (see sandbox.py). One core per
        # REPL (verify.workers), several GiB each for Mathlib's environment; killed after the
        # header plus every proof at its timeout; a Sandbox that fails gets one more attempt.
        "verify_sandbox": Resources("lean", None, m.verify_cpus, m.verify_memory_gb * 1024,
                                    verify_batch_timeout_s(config), 1, m.verify_max_containers, ()),
        # One kernel-stage step (`lean -o` of one proof, the trusted target, or SafeVerify) in a
        # fresh Sandbox of its own (verify/kernel/, sandbox.SandboxRunner): one REPL's share of
        # the verification Sandbox, verify.kernel_check_workers at a time per batch.
        "kernel_sandbox": Resources("lean", None, *kernel_step_size(config), kernel_step_timeout_s(config), 0,
                                    m.verify_max_containers * kernel_workers(config.verify), ()),
        # The pipelined ES schedule (modal.es_member_gpus > 0): one REPL per Sandbox, warm for the
        # whole run (the header imported once), verify.workers of them per generating GPU.
        "lean_worker": Resources("lean", None, *kernel_step_size(config), MAX_TIMEOUT_S, 1,
                                 max(1, es_lean_workers(config)), ()),
        # Declared so `modal deploy` builds the Lean image up front (Sandboxes alone would build it
        # on the first verification); it reports the image's Lean and Mathlib versions.
        "lean_image_check": Resources("lean", None, 1.0, 4 * 1024, 10 * MINUTES, 0, 1, ()),
        # `prover doctor --backend modal`: one short prompt on one GPU of the generation kind, and
        # the Volumes' commit/reload round trip between two small containers (doctor_plan below).
        "doctor_gpu": Resources("gpu", gpu, *host, 30 * MINUTES, 0, 1, both),
        "doctor_volumes": Resources("orchestrator", None, 1.0, 1024, 10 * MINUTES, 0, 1, both),
        # The ES held-out evaluation: one GPU container with the current weights (base + ledger), not
        # the whole population held (docs/modal.md); one call per evaluation.
        "es_eval": Resources("gpu", gpu, *host, call_timeout_s, m.retries, 1, both),
        # vLLM loads once per container; modal.gpu_container_cpus cores and gpu_container_memory_gb
        # GiB of host RAM stage the weights and run the tokenizer and the engine's CPU side. One
        # call per `prover generate`.
        "generate": Resources("gpu", gpu, *host, call_timeout_s, m.retries, 1, both),
        # One member per call, the population in one wave (max_containers); warm through the gap
        # between iterations (a cold member would replay the ledger); a member is a pure function
        # of (ledger, t, i), so retries are safe.
        "es_member": Resources("gpu", gpu, *host, call_timeout_s, m.retries, m.max_containers, both,
                               scaledown_window_s=es_member_scaledown_window_s(config)),
        # Exactly one container writes a run's ledger; a retry resumes from it.
        "train_es": Resources("gpu", gpu, *host, MAX_TIMEOUT_S, m.retries, 1, both),
        # Not retried: a GRPO retry would refuse the existing run; resume it with `--resume`
        # (from <run.dir>/checkpoints/ on the runs Volume).
        "train_grpo": Resources("trl", gpu, *host, MAX_TIMEOUT_S, 0, 1, both),
        # CPU by default; functions.py adds the GPU for `--device cuda` (same bits either way).
        "replay_seeds": Resources("gpu", None, *host, call_timeout_s, m.retries, 1, both),
        # CPU by default; functions.py adds the GPU when eval generates (not for `--verdicts`).
        "eval": Resources("gpu", None, *host, MAX_TIMEOUT_S, m.retries, 1, both),
    }
