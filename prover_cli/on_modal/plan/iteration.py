"""One iteration (ES) or step (GRPO): its work, its timings, and the ES schedule that lays it out."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from prover_cli.config import MODAL_GPUS, Config
from prover_cli.errors import ConfigError
from prover_cli.on_modal.gpu_memory import GpuMemory, ModelFacts, es_gpus, gpu_memory, grpo_train_s, model_facts, rounds
from prover_cli.on_modal.schedule import IterationWork, Prices, Result, Schedule, simulate
from prover_cli.on_modal.plan.sizing import (
    decode_tokens_per_s,
    gpu_container_size,
    kernel_step_size,
    unit_prices,
)
from prover_cli.on_modal.plan.verification import VerificationRun, verification_as_run


@dataclass(frozen=True)
class _Work:
    unit: str                 # "iteration" or "step"
    iterations: int
    samples: int              # samples generated and scored per iteration
    generation_calls: int     # GPU calls that generate, per iteration (ES: one per member)
    decode_tokens: int        # tokens one generation call decodes per sequence, at most
    proofs: int               # proofs sent to Lean per iteration (0 for Python-checked tasks)
    rounds: int = 1           # rounds of one generation call: its sequences over what the engine's KV cache holds
    train_s: float = 0.0      # GRPO: the optimizer step's forward and backward passes
    train_note: str = ""
    problems: int = 1         # distinct problems among the proofs (the kernel stage compiles each target once)


def _memory(config: Config, command: str,
            measured: dict[str, float] | None = None) -> tuple[ModelFacts | None, list[GpuMemory]]:
    """(the model's shape, each GPU's memory: gpu_memory.py) as this config lays its engines out."""
    return gpu_memory(config, command, pipelined=command == "train_es" and es_pipelined(config), measured=measured)


def _kv_capacity(config: Config, command: str, *, heldout: bool = False) -> int:
    """Sequences one engine holds at once where the call runs (0: not known here). ES: a member GPU's
    engine; its held-out evaluation on the loop's engine 0 (pipelined) or es_eval's one engine (barrier)."""
    if command == "train_es" and heldout and not es_pipelined(config):
        facts = model_facts(config)
        gpus = es_gpus(config, facts, pipelined=False) if facts and config.modal.gpu in MODAL_GPUS else []
    else:
        _, gpus = _memory(config, command)
    if not gpus:
        return 0
    return gpus[0 if heldout else -1].kv_sequences


def es_schedule_problem(config: Config) -> str | None:
    """Why this config's ES schedule cannot run (None: it can). `es.noise = "lora"` generates the
    whole population in one call on the loop's engine, so it cannot be split over member containers
    (`modal.es_member_gpus` > 0, the pipelined schedule): the dry run and a real run
    (remote.run_remote, before anything is launched) both refuse it, naming the keys and where each was set."""
    if config.es.noise != "lora" or not config.modal.es_member_gpus:
        return None
    origins = config.origins
    return (f"{config.source}: es.noise = \"lora\" generates the whole population in one call on the loop's engine, "
            f"and modal.es_member_gpus = {config.modal.es_member_gpus} would split it over member containers "
            f"(es.noise set by {origins.get('es.noise') or 'the default'}, modal.es_member_gpus by "
            f"{origins.get('modal.es_member_gpus') or 'the default'})")


def es_one_call(config: Config) -> bool:
    """`es.noise = "lora"`: every member a LoRA adapter, the population one call on the loop's engine
    (es/vllm_lora.py); refused beside the pipelined schedule, which splits members over engines."""
    problem = es_schedule_problem(config)
    if problem:
        raise ConfigError(problem, hint="set modal.es_member_gpus = 0, or es.noise = \"full\" for member containers")
    return config.es.noise == "lora"


def _work_per_iteration(config: Config, command: str) -> _Work:
    lean = config.data.task == "lean"
    if command == "train_es":
        es = config.es
        samples = es.population * es.problems_per_iteration * es.samples_per_problem
        if es_one_call(config):   # every member's sequences in one call, in the loop engine's rounds
            return _Work("iteration", es.iterations, samples, 1, config.generate.max_tokens,
                         samples if lean else 0, rounds=rounds(samples, _kv_capacity(config, command)),
                         problems=es.problems_per_iteration)
        batch = es.problems_per_iteration * es.samples_per_problem     # one member's call
        return _Work("iteration", es.iterations, samples, es.population, config.generate.max_tokens,
                     samples if lean else 0, rounds=rounds(batch, _kv_capacity(config, command)),
                     problems=es.problems_per_iteration)
    g = config.grpo
    samples = g.per_device_train_batch_size * g.gradient_accumulation_steps
    calls = rounds(samples, _kv_capacity(config, command))   # TRL generates a step's completions in one call
    train_s, how = grpo_train_s(config, model_facts(config), samples,
                                calls * g.max_completion_length / decode_tokens_per_s(config))
    return _Work("step", g.steps, samples, 1, g.max_completion_length, samples if lean else 0, rounds=calls,
                 train_s=train_s, train_note=how, problems=max(1, samples // g.num_generations))


def heldout_evaluations(config: Config, iterations: int) -> tuple[int, int]:
    """(evaluations, samples per evaluation) of the held-out evaluation (prover_cli/training/heldout.py): the base,
    every `run.eval_every` iterations and the last; sampled (`run.eval_n`, once at temperature 0) plus greedy."""
    r = config.run
    if not r.eval_every:
        return 0, 0
    count = 1 + iterations // r.eval_every + (1 if iterations % r.eval_every else 0)
    problems = r.eval_problems or 0  # 0 = the whole valid split: unknown before prepare-data
    per_problem = 1 if r.eval_temperature == 0 else r.eval_n + 1
    return count, problems * per_problem


@dataclass(frozen=True)
class _Timings:
    generation_s: float       # one generation call
    gen_waves: int
    gen_containers: int
    batches: int              # Lean Sandboxes per iteration
    proofs_per_batch: int
    batch_s: float            # the call's verification, wall: its batches side by side (verification.py)
    verify_waves: int
    iteration_s: float        # wall time of one iteration / step
    kernel_passes: int = 0    # fast-path passes per iteration, each through the kernel stage
    kernel_s: float = 0.0     # the kernel stage after the last fast-path verdict, wall
    es: Result | None = None  # ES: the simulated iteration (schedule.Result), which sets iteration_s
    verification: VerificationRun | None = None   # the call's verification in batch Sandboxes, event by event

    @property
    def simulated(self) -> Result:
        """ES: the simulated iteration (`_timings` sets it); a GRPO step has none."""
        if self.es is None:
            raise ValueError("no simulated ES iteration: these are a GRPO step's timings")
        return self.es


def _timings(config: Config, command: str, work: _Work) -> _Timings:
    m, v = config.modal, config.verify
    generation_s = work.rounds * work.decode_tokens / decode_tokens_per_s(config)
    if command == "train_es":
        gen_waves = math.ceil(work.generation_calls / m.max_containers)
        gen_containers = min(work.generation_calls, m.max_containers)
    else:
        gen_waves, gen_containers = 1, 1
    # the call's proofs in batch Sandboxes as the code runs them (verification.py, event by event):
    # its batches' REPLs side by side, each ending after its last proof, the batches' kernel stages
    # beside each other; one wave (more batches than modal.verify_max_containers: their REPLs take more proofs)
    run = verification_as_run(config, work.proofs, work.problems) if work.proofs else None
    batches = run.batches if run else 0
    proofs_per_batch = min(m.verify_batch_size, work.proofs) if work.proofs else 0
    batch_s = run.wall_s if run else 0.0
    kernel_passes = math.ceil(work.proofs * m.est_pass_rate) if v.kernel_check else 0
    kernel_s = run.kernel_tail_s if run else 0.0
    verify_waves = 1 if run else 0
    iteration_s = gen_waves * generation_s + work.train_s + verify_waves * batch_s
    t = _Timings(generation_s, gen_waves, gen_containers, batches, proofs_per_batch, batch_s, verify_waves,
                 iteration_s, kernel_passes, kernel_s, verification=run)
    if command != "train_es":
        return t
    result = simulate(*es_simulation_inputs(config, work, t))
    # the simulator's one "batch" is the call's verification (its lifetime batch_s); pipelined: none
    return replace(t, iteration_s=result.iteration_s, es=result, batches=t.batches if result.batches else 0,
                   gen_containers=es_member_containers(config))


# --------------------------------------------------------------------------------------------
# The ES iteration as the schedule runs it (schedule.simulate: barrier or pipelined)
# --------------------------------------------------------------------------------------------
# One code path: the plan prices the iteration the simulator lays out, and
# benchmarks/bench_pipeline.py prints the plan's figures for both schedules.

def es_pipelined(config: Config) -> bool:
    """modal.es_member_gpus > 0: a few GPUs evaluate the members one after another (docs/modal.md)."""
    return config.modal.es_member_gpus > 0


def es_generating_gpus(config: Config) -> int:
    """GPUs that generate members. Barrier: the ESMember containers, one per member (at most
    modal.max_containers), the loop's GPU waiting on top. Pipelined: the loop's GPU (share 0) and
    modal.es_member_gpus member containers, at most one per member (pipeline.shares: member i on
    GPU i % (N + 1))."""
    if es_one_call(config):
        return 1   # the loop's own engine
    if es_pipelined(config):
        return min(config.modal.es_member_gpus + 1, config.es.population)
    return min(config.es.population, config.modal.max_containers)


def es_member_containers(config: Config) -> int:
    """ESMember containers up in an iteration (the loop's container apart)."""
    if es_one_call(config):
        return 0
    return es_generating_gpus(config) - 1 if es_pipelined(config) else es_generating_gpus(config)


def es_gpus_billed(config: Config) -> int:
    """GPU containers billed through an ES iteration: the loop's and the members'."""
    return es_member_containers(config) + 1


def es_lean_workers(config: Config) -> int:
    """Pipelined: Lean REPL workers, `verify.workers` per generating GPU, the loop's included (its
    share's verification pool, kept warm through the share: `verify_records(keep_warm=True)`, pipeline.py)."""
    return es_generating_gpus(config) * config.verify.workers


def es_kernel_latency_s(config: Config) -> float:
    """Pipelined: from a pass's fast-path verdict to its kernel verdict: its `lean -o`, then one checker
    process (its import and check) in fresh Sandboxes; 0 with the stage off."""
    m = config.modal
    return m.est_kernel_check_s_per_proof + m.est_kernel_import_s if config.verify.kernel_check else 0.0


def es_prices(config: Config) -> Prices:
    """What the simulator bills: a GPU container, one warm REPL worker's Sandbox, one batch Sandbox (per hour)."""
    functions, sandbox = unit_prices(config), unit_prices(config, sandbox=True)
    cores, mib = gpu_container_size(config)
    gpu = (functions["gpu"] * config.modal.gpus_per_container + cores * functions["cpu"]
           + mib / 1024 * functions["memory"])
    worker_cores, worker_mib = kernel_step_size(config)
    worker = worker_cores * sandbox["cpu"] + worker_mib / 1024 * sandbox["memory"]
    batch = config.modal.verify_cpus * sandbox["cpu"] + config.modal.verify_memory_gb * sandbox["memory"]
    return Prices(gpu_per_hour=gpu, lean_worker_per_hour=worker, sandbox_per_hour=batch)


def with_es_schedule(config: Config, member_gpus: int, per_gpu: int) -> Config:
    """`config` with another ES schedule (modal.es_member_gpus, modal.es_members_per_gpu)."""
    return replace(config, modal=replace(config.modal, es_member_gpus=member_gpus, es_members_per_gpu=per_gpu))


def es_simulation_inputs(config: Config, work: _Work, t: _Timings) -> tuple[IterationWork, Schedule, Prices]:
    """(IterationWork, Schedule, Prices) of one ES iteration as `modal.es_member_gpus` lays it out."""
    m, v = config.modal, config.verify
    calls = work.generation_calls   # es.population, or 1 with the LoRA path (every member in one call)
    proofs_per_member = work.proofs // calls if work.proofs else 0
    common: dict[str, Any] = dict(members=calls, generation_s=t.generation_s, proofs_per_member=proofs_per_member,
                  proof_s=m.est_verify_s_per_proof, header_s=m.est_header_s, update_s=m.est_update_s)
    if es_one_call(config):
        # the loop's engine generates every member at once (its rounds are in generation_s), then the
        # proofs go to batch Sandboxes in one call as in the barrier schedule; no other GPU. The
        # simulator sees that call as one "batch" lasting its verification (t.batch_s, verification.py:
        # its batches side by side); the billed lines price its Sandboxes from the same count
        item = IterationWork(**common, proofs_per_batch=max(1, work.proofs), batch_s=t.batch_s)
        schedule = Schedule("one call (LoRA)", gpus=1, lean_workers=max(1, m.verify_max_containers * v.workers),
                            barrier=True, proofs_per_header=0, loop_gpu=False, sandboxes=1 if work.proofs else 0)
    elif not es_pipelined(config):
        # today's: every member at once (in waves of max_containers), then every proof in one call
        # to batch Sandboxes (verification.py), seen by the simulator as one "batch" of t.batch_s
        item = IterationWork(**common, proofs_per_batch=max(1, work.proofs), batch_s=t.batch_s)
        schedule = Schedule("barrier", gpus=es_generating_gpus(config), lean_workers=max(1, m.verify_max_containers
                            * v.workers), barrier=True, proofs_per_header=0, loop_gpu=True,
                            sandboxes=1 if work.proofs else 0)
    else:
        # every generating GPU, the loop's (GPU 0) and each member container's, evaluates its share
        # one member after another (es_members_per_gpu at once), after applying the last update: a
        # member container's engines replay it; on the loop's GPU engine 0 made it, its other
        # engines replay it. A member's proofs go to its GPU's REPL workers as they arrive, each
        # worker importing the header once per iteration (its share's pool, kept warm through the
        # share) and billed for the whole iteration (an upper bound). No GPU waits.
        loop_catch_up_s = m.est_replay_s_per_iteration if m.es_members_per_gpu > 1 else 0.0
        item = IterationWork(**common, resident_slowdown=m.est_resident_slowdown, catch_up_s=m.est_replay_s_per_iteration,
                             loop_catch_up_s=loop_catch_up_s, kernel_latency_s=es_kernel_latency_s(config))
        schedule = Schedule("pipelined", gpus=es_generating_gpus(config), lean_workers=max(1, es_lean_workers(config)),
                            barrier=False, proofs_per_header=max(1, work.proofs), warm_lean=bool(work.proofs),
                            resident=m.es_members_per_gpu, loop_generates=True)
    return item, schedule, es_prices(config)
