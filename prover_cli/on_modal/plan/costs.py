"""What an iteration or step costs: the billed lines, the held-out evaluation, the run."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from prover_cli.config import WORKERS_MAX, Config
from prover_cli.on_modal.calibration import resolve
from prover_cli.on_modal.gpu_memory import GpuMemory, rounds
from prover_cli.verify.kernel.pins import pin_for
from prover_cli.on_modal.plan.containers import resources
from prover_cli.on_modal.plan.iteration import (
    es_gpus_billed,
    es_lean_workers,
    es_pipelined,
    heldout_evaluations,
    _kv_capacity,
    _memory,
    _Timings,
    _timings,
    with_es_schedule,
    _Work,
    _work_per_iteration,
)
from prover_cli.on_modal.plan.sizing import (
    cold_member_replay,
    decode_tokens_per_s,
    kernel_imports_per_batch,
    kernel_s_per_pass,
    kernel_step_size,
    kernel_workers,
    _Line,
)


def _billed_lines(config: Config, command: str, work: _Work, t: _Timings) -> list[_Line]:
    res = resources(config)
    lines: list[_Line] = []
    if command == "train_es" and es_pipelined(config):
        # N member containers, each evaluating its share of the members one
        # after another, and the loop's GPU waiting; REPL workers check each member's proofs as they arrive.
        members = t.gen_containers
        lines.append(_Line("train_es", res["train_es"], 1, 1, t.iteration_s))
        if members:
            lines.append(_Line("ESMember", res["es_member"], members, "-", members * t.iteration_s))
        if work.proofs:
            workers = es_lean_workers(config)
            lines.append(_Line("Lean REPL Sandbox (warm)", res["lean_worker"], workers, "-", workers * t.iteration_s,
                               sandbox=True))
    elif command == "train_es":
        # The loop holds its GPU for the whole iteration; so does every warm member container:
        # it generates for its wave(s), then idles through verification and the update.
        lines.append(_Line("train_es", res["train_es"], 1, 1, t.iteration_s))
        if t.gen_containers:   # none with the LoRA path: the loop's engine generates every member
            lines.append(_Line("ESMember", res["es_member"], t.gen_containers, work.generation_calls,
                               t.gen_containers * t.iteration_s))
    else:
        lines.append(_Line("train_grpo", res["train_grpo"], 1, 1, t.iteration_s))
    run = t.verification if not (command == "train_es" and es_pipelined(config)) else None
    if t.batches and run is not None:
        # every REPL Sandbox of the call (one REPL's share of a batch: sandbox.sandbox_arguments),
        # from the call's start to its last proof (verification.py)
        cores, mib = kernel_step_size(config)
        repl = replace(res["verify_sandbox"], cpu=cores, memory_mb=mib)
        lines.append(_Line("verify Sandbox", repl, run.repls, run.repl_sandboxes, run.repl_sandbox_s, sandbox=True))
    if t.kernel_passes and run is not None:
        # every kernel step of the call, as verification.py counts them: each pass's and target's
        # `lean -o`, each checker process
        kernel = res["kernel_sandbox"]
        at_once = min(WORKERS_MAX, kernel_workers(config.verify) * run.batches)   # as sandbox_concurrency places it
        lines.append(_Line("kernel Sandbox", kernel, min(at_once, kernel.max_containers), run.kernel_steps,
                           run.kernel_sandbox_s, sandbox=True))
    elif t.kernel_passes:
        kernel = res["kernel_sandbox"]
        batch_passes, groups = kernel_batches(config, command, work, t)
        per_pass = kernel_s_per_pass(config, batch_passes)
        processes = groups * kernel_imports_per_batch(config, batch_passes)[0]
        lines.append(_Line("kernel Sandbox", kernel, min(groups * kernel_workers(config.verify), kernel.max_containers),
                           t.kernel_passes + processes, t.kernel_passes * per_pass, sandbox=True))
    return lines


def kernel_batches(config: Config, command: str, work: _Work, t: _Timings) -> tuple[int, int]:
    """(passes per kernel-stage batch, batches per iteration): a verification batch's passes, or in the
    pipelined ES schedule one member's (its proofs reach Lean together)."""
    rate = config.modal.est_pass_rate
    if command == "train_es" and es_pipelined(config) and work.proofs:
        per_member = work.proofs // config.es.population
        return math.ceil(per_member * rate), config.es.population
    return math.ceil(t.proofs_per_batch * rate), t.batches


def _imports_said(config: Config) -> str:
    pin = pin_for(config.verify.lean_toolchain)
    if pin is not None and pin.dialect == "batch":
        return f"prover_check imports once per {config.verify.kernel_batch_size} proofs (verify.kernel_batch_size)"
    return "SafeVerify imports four times per proof"


def kernel_check_core_s_per_proof(config: Config) -> float:
    """Expected core-seconds of the kernel stage per proof sent to Lean: the pass rate times one
    pass's amortised seconds (`kernel_s_per_pass`, over one verification batch's passes) times the
    cores of its Sandboxes (0 with verify.kernel_check = false)."""
    if not config.verify.kernel_check:
        return 0.0
    cores, _ = kernel_step_size(config)
    passes = math.ceil(min(config.modal.verify_batch_size, config.verify.kernel_batch_size) * config.modal.est_pass_rate)
    return config.modal.est_pass_rate * kernel_s_per_pass(config, passes) * cores


def _heldout_cost(config: Config, command: str, work: _Work, t: _Timings, res: dict[str, Any]) -> dict[str, Any]:
    """One held-out evaluation on Modal: two generation calls (sampled, greedy), then its proofs through Lean.
    GRPO: in the trainer's container (its GPU held meanwhile), its proofs in batch Sandboxes as a step's.
    ES, pipelined: on the loop's own GPU, with its live weights (es/train.py: no replay, no container
    of its own); the warm member containers wait meanwhile, so they are billed for its wall time.
    ES, barrier: on ONE GPU container of its own (`es_eval`, functions.py's es_heldout), theta rebuilt
    from the newest snapshot (the plan counts the worst case, `cold_member_replay`); the loop and the
    warm members wait. Both ES placements check its proofs as the Sandbox placement sizes the pool
    (sandbox.sandbox_concurrency): `verify.workers` REPL Sandboxes per `modal.verify_batch_size`
    proofs, each up to its last proof, the batches' kernel stages beside each other: one verification
    call, counted as on_modal/plan/verification.py does)."""
    evaluations, samples = heldout_evaluations(config, work.iterations)
    r = config.run
    calls = 1 if r.eval_temperature == 0 else 2
    capacity = _kv_capacity(config, command, heldout=True)
    problems = r.eval_problems or 0
    sequences = [problems] if calls == 1 else [problems * r.eval_n, problems]   # sampled, then greedy
    call_rounds = [rounds(n, capacity) if problems else 1 for n in sequences]
    evaluation = _Work(work.unit, evaluations, samples, 1, config.generate.max_tokens,
                       samples if config.data.task == "lean" else 0, rounds=sum(call_rounds), problems=max(1, problems))
    te = _timings(config, "train_grpo", evaluation)  # one container generates, then Lean checks
    es = command == "train_es"
    lines = [line for line in _billed_lines(config, "train_grpo", evaluation, te)
             if line.name != "train_grpo" and not (es and line.name == "verify Sandbox")]
    if es:
        run = te.verification
        workers = run.repls if run is not None else 0
        lean_s = te.verify_waves * te.batch_s
        in_loop = es_pipelined(config)
        replay_s = 0.0 if in_loop else cold_member_replay(config)[1]
        wall_s = replay_s + te.generation_s + lean_s
        lines.append(_Line("train_es", res["train_es"], 1, 1, wall_s))
        if not in_loop:
            lines.append(_Line("es_eval", res["es_eval"], 1, 1, wall_s))
        if t.gen_containers:
            lines.append(_Line("ESMember", res["es_member"], t.gen_containers, 0, t.gen_containers * wall_s))
        if evaluation.proofs:
            lines.append(_Line("eval REPL Sandbox", res["lean_worker"], workers, "-",
                               run.repl_sandbox_s if run is not None else 0.0, sandbox=True))
        lean = (f"{evaluation.proofs} proofs on {workers} REPL Sandboxes ({te.batches} batch(es) of "
                f"{te.proofs_per_batch}, each REPL up to its last proof; the last verdict {te.batch_s:.0f} s in)"
                if evaluation.proofs else "no Lean")
        members = f"{t.gen_containers} warm member container(s)" if t.gen_containers else ""
        held = (f"; on the loop's GPU with its live weights (no replay){f', {members} waiting' if members else ''}"
                if in_loop else
                f"; one GPU container (es_eval) replays up to {replay_s:.0f} s from the newest snapshot first; the loop"
                f"{f' and {members}' if members else ''} wait meanwhile")
    else:
        lean = f"{te.batches} Sandbox(es) of {te.batch_s:.0f} s" if te.batches else "no Lean"
        wall_s = te.iteration_s
        lines.append(_Line("train_grpo", res["train_grpo"], 1, 1, wall_s))
        held = "; in the trainer's container, with its colocated vLLM"
    usd = sum(sum(line.usd(config).values()) for line in lines)
    round_s = config.generate.max_tokens / decode_tokens_per_s(config)
    kv = (f"{capacity} sequences at a time (the engine's KV budget: `memory per GPU`)" if capacity else
          "the engine's KV budget not known here (one round per call assumed)")
    calls_said = " + ".join(f"{n or 'all'} {'sampled' if calls == 2 and i == 0 else 'greedy'} in {c} round(s)"
                            for i, (n, c) in enumerate(zip(sequences, call_rounds)))
    note = (f"{evaluations} evaluations (base, every {config.run.eval_every} {work.unit}s, the last) x "
            f"{samples or 'all valid-split'} samples ({config.run.eval_problems or 'all'} problems x "
            f"{'1 greedy' if calls == 1 else f'{config.run.eval_n} sampled + 1 greedy'}): {calls_said}, "
            f"{kv}, each round {round_s:.0f} s, = {te.generation_s:.0f} s of generation + {lean} = {wall_s:.0f} s, "
            f"{usd:.4f} USD each" + held)
    return {"evaluations": evaluations, "samples": samples, "usd": usd, "wall_s": wall_s, "note": note,
            "rounds": sum(call_rounds), "kv_sequences": capacity}


def _unit_cost(command: str, work: _Work, t: _Timings, usd: float) -> dict[str, float]:
    """The same unit for ES and GRPO: the GPU-busy share of billed GPU-seconds, USD per 1,000 samples.
    GPU-busy counts generation (ES: and the members' catch-up; GRPO: and its forward and backward passes)."""
    if command == "train_es":
        busy = t.simulated.gpu_busy_fraction
    else:
        busy = (t.generation_s + work.train_s) / t.iteration_s if t.iteration_s else 0.0
    return {"gpu_busy_fraction": busy, "usd_per_1k_samples": 1000 * usd / work.samples if work.samples else 0.0}


SLOWDOWNS = (0.25, 0.75)   # the resident slowdown the plan prices at besides the configured one (issue #40)


@dataclass
class _Costs:
    t: _Timings
    lines: list[_Line]
    breakdown: dict[str, dict[str, float]]
    cost: float               # USD per iteration / step
    heldout: dict[str, Any]
    once_usd: float
    tail: _Line | None
    total: float              # the run: every iteration, the held-out evaluations, the once-per-run tail


def _costs(config: Config, command: str, work: _Work) -> _Costs:
    """What one iteration (and the run) costs as `config` prices it."""
    res = resources(config)
    t = _timings(config, command, work)
    lines = _billed_lines(config, command, work, t)
    # est_usd_breakdown: per resource, the unit-seconds behind it (GPU-s, core-s, GiB-s) and USD.
    breakdown: dict[str, dict[str, float]] = {}
    for kind, unit in (("gpu", "gpu_s"), ("cpu", "core_s"), ("memory", "gib_s")):
        unit_s = sum(line.seconds()[kind] for line in lines)
        breakdown[kind] = {unit: round(unit_s, 1), "container_s": round(sum(
            line.container_s for line in lines if line.seconds()[kind] > 0), 1),
            "usd": round(sum(line.usd(config)[kind] for line in lines), 4)}
    cost = sum(item["usd"] for item in breakdown.values())
    heldout = _heldout_cost(config, command, work, t, res)
    once_usd, tail = 0.0, None
    if command == "train_es":
        # After the last iteration every warm member idles out its scaledown_window, once per run.
        window = res["es_member"].scaledown_window_s or 0
        tail = _Line("ESMember idle after the run", res["es_member"], t.gen_containers, "once",
                     t.gen_containers * window)
        once_usd = sum(tail.usd(config).values())
    total = round(cost * work.iterations + once_usd + heldout["usd"] * heldout["evaluations"], 2)
    return _Costs(t, lines, breakdown, cost, heldout, once_usd, tail, total)


def with_resident_slowdown(config: Config, slowdown: float) -> Config:
    """`config` with another `modal.est_resident_slowdown`."""
    return replace(config, modal=replace(config.modal, est_resident_slowdown=slowdown))


def _key_said(config: Config, dotted: str) -> str:
    """`modal.gpu = "H100" (configs/kimina-es.toml)`: a key, its value and where it was set."""
    section, key = dotted.split(".")
    value = getattr(getattr(config, section), key)
    origin = config.origins.get(dotted)
    return f"{dotted} = {value!r} ({origin or 'the default'})"


def memory_problem(config: Config, command: str, gpus: list[GpuMemory]) -> str | None:
    """Why this config's GPUs cannot hold what it puts on them (gpu_memory.py), naming the config
    file and the keys that size it; None when every GPU fits."""
    for gpu in gpus:
        problem = gpu.problem()
        if problem:
            fewer = ("one engine per GPU (modal.es_members_per_gpu = 1), "
                     if command == "train_es" and gpu.engines > 1 else "")
            fix = (f"{fewer}a lower generate.gpu_memory_utilization, or a GPU with more memory (modal.gpu)"
                   if command == "train_es" else
                   "a lower grpo.vllm_gpu_memory_utilization or a GPU with more memory (modal.gpu)")
            return (f"{config.source}: this config does not fit the GPU's memory: {problem}; set by "
                    f"{', '.join(_key_said(config, key) for key in gpu.keys)}. Use {fix} (docs/modal.md, "
                    "*Memory per GPU*)")
    return None


def gpu_memory_problem(config: Config, command: str) -> str | None:
    """Why a `train es` / `train grpo` run of this config would not fit its GPUs (the plan's refusal,
    calibration included), or None; remote.run_remote refuses such a run before anything is billed."""
    if command not in ("train_es", "train_grpo"):
        return None
    figures = resolve(config)
    _, gpus = _memory(figures.config, command, figures.memory)
    return memory_problem(figures.config, command, gpus)


def es_iteration_cost(config: Config) -> dict[str, Any]:
    """One ES iteration on Modal as the plan bills it (the same lines as `--dry-run`'s table, kernel
    stage included), with the simulated schedule's wall time and GPU-busy share. `config` is priced
    as given: resolve a calibration first (calibration.resolve) to use measured figures."""
    work = _work_per_iteration(config, "train_es")
    t = _timings(config, "train_es", work)
    usd = sum(sum(line.usd(config).values()) for line in _billed_lines(config, "train_es", work, t))
    pipelined = es_pipelined(config)
    _, gpus = _memory(config, "train_es")
    return {"schedule": "pipelined" if pipelined else "barrier", "iteration_s": t.iteration_s, "usd": usd,
            "fits": memory_problem(config, "train_es", gpus) is None, "memory_checked": bool(gpus),
            "gpu_busy_fraction": t.simulated.gpu_busy_fraction, "gpus_billed": es_gpus_billed(config),
            "resident": config.modal.es_members_per_gpu if pipelined else 1,
            "lean_workers": es_lean_workers(config) if pipelined else t.batches * config.verify.workers,
            "usd_per_1k_samples": 1000 * usd / work.samples if work.samples else 0.0, "config": config}


def cheapest_es_pipeline(config: Config, *, max_iteration_s: float,
                         resident_options: tuple[int, ...] = (1, 2, 4, 8)) -> dict[str, Any] | None:
    """The pipelined schedule (member containers 1..population - 1 beside the loop's GPU x members per
    GPU) of least USD per iteration whose iteration ends within `max_iteration_s` and whose GPUs hold
    its engines (`memory per GPU`; ties: fewer GPUs, then fewer members per GPU); None if none does."""
    best = None
    for gpus in range(1, max(2, config.es.population)):
        for resident in resident_options:
            cost = es_iteration_cost(with_es_schedule(config, gpus, resident))
            if not cost["fits"]:
                continue
            if cost["iteration_s"] <= max_iteration_s and (best is None or round(cost["usd"], 9) < round(best["usd"], 9)):
                best = cost
    return best
