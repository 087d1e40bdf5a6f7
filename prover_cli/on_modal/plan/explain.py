"""The dry run's explanations: the per-function rows, what each function does, and how the estimate is made."""

from __future__ import annotations

from typing import Any

from prover_cli.config import Config
from prover_cli.on_modal.calibration import Figures
from prover_cli.on_modal.plan.containers import batch_kernel_s, es_gap_bound_s, es_gap_s
from prover_cli.on_modal.plan.costs import _Costs, _imports_said, kernel_batches, kernel_check_core_s_per_proof
from prover_cli.on_modal.plan.iteration import (
    _kv_capacity,
    _Timings,
    _Work,
    es_lean_workers,
    es_member_containers,
    es_one_call,
    es_pipelined,
)
from prover_cli.on_modal.plan.sizing import (
    MAX_SCALEDOWN_WINDOW_S,
    Resources,
    cold_member_replay,
    decode_tokens_per_s,
    gpu_price_per_hour,
    kernel_memory_problem,
    kernel_s_per_pass,
    kernel_workers,
)


def function_rows(config: Config, c: _Costs, res: dict[str, Resources]) -> list[list[Any]]:
    """The plan table: one row per billed line, then download_model and the once-per-run tail."""
    lines, once_usd = c.lines, c.once_usd
    rows: list[list[Any]] = []
    for line in lines:
        gpu = line.r.gpu.replace(":", " x ") if line.r.gpu else "-"
        rows.append([line.name, line.r.image, gpu, line.r.cpu, round(line.r.memory_mb / 1024), line.containers,
                     line.calls, round(line.container_s, 1), round(sum(line.usd(config).values()), 4)])
    rows.append(["download_model", res["download_model"].image, "-", res["download_model"].cpu,
                 round(res["download_model"].memory_mb / 1024), 1, "once", 0.0, 0.0])
    if c.tail is not None:
        tail = c.tail
        rows.append([tail.name, tail.r.image, tail.r.gpu.replace(":", " x ") if tail.r.gpu else "-", tail.r.cpu,
                     round(tail.r.memory_mb / 1024), tail.containers, "once", round(tail.container_s, 1),
                     round(once_usd, 4)])
    return rows


def roles_rows(config: Config, command: str, rows: list[list[Any]]) -> list[list[Any]]:
    """What each function of the plan table does."""
    m = config.modal
    roles = {
        "train_es": ("the ES loop: holds theta, applies updates, writes the ledger (one writer); evaluates share 0 "
                     f"of the members on its own GPU ({m.es_members_per_gpu} at once) and the held-out evaluation"
                     if command == "train_es" and es_pipelined(config) else
                     "the ES loop: holds theta, applies updates, writes the ledger (one writer)"),
        "ESMember": ("GPU worker: applies the new ledger iteration, then evaluates its share of the members "
                     f"one after another ({m.es_members_per_gpu} at once), handing each member's proofs to its "
                     "REPL workers (pipeline.py)"
                     if es_pipelined(config) else
                     "warm GPU worker: replays only new ledger iterations, perturbs, samples; one member per call"),
        "Lean REPL Sandbox (warm)": "Lean: one REPL per Sandbox (no network, no Volumes), verify.workers per "
                                    "generating GPU (the loop's and each member container's), its header imported "
                                    "once per iteration, checking each member's proofs as they arrive",
        "train_grpo": "TRL GRPOTrainer: generates, scores, takes the optimizer step",
        "verify Sandbox": "Lean: one Sandbox per REPL, verify.workers per batch of proofs (no network, no Volumes), "
                          "the REPL over stdin/stdout, ended after its last proof",
        "kernel Sandbox": "the kernel stage: per fast-path pass `lean -o`, per checker batch one checker process, "
                          "each in a fresh Sandbox given only files (no network, no Volumes)",
        "download_model": "base weights into the models Volume, once per run (not per step)",
        "ESMember idle after the run": "at most: each warm member idles out its scaledown_window once the run ends "
                                       "(the loop then lowers it to 2 s; not seen on Modal yet)",
    }
    return [[r[0], roles[r[0]]] for r in rows]


def _wall_note(config: Config, command: str, t: _Timings) -> str:
    m = config.modal
    if command != "train_es":
        return f"generation + {t.verify_waves} verification wave(s) = {t.iteration_s:.0f} s"
    r = t.simulated
    if es_one_call(config):
        return (f"one call (es.noise = \"lora\", schedule.simulate): every member a LoRA adapter on the loop's engine, "
                f"all {config.es.population} members' sequences in {t.generation_s:.0f} s of generation (its KV rounds), "
                f"then {t.verify_waves} verification wave(s) + the update ({m.est_update_s:g} s, modal.est_update_s) "
                f"= {t.iteration_s:.0f} s")
    if es_pipelined(config):
        return (f"pipelined (schedule.simulate): the loop's GPU and {es_member_containers(config)} member "
                f"container(s) each evaluate a share, {m.es_members_per_gpu} member(s) at once "
                f"(each further one {m.est_resident_slowdown:g} of a generation slower, "
                f"modal.est_resident_slowdown, ASSUMED); engines first apply the last update "
                f"({m.est_replay_s_per_iteration:g} s; on the loop's GPU only its engines after the first"
                f"{', none here' if m.es_members_per_gpu == 1 else ''}); {es_lean_workers(config)} warm REPL workers; "
                "generation ends "
                f"at {r.generation_end_s:.0f} s, the last verdict and the update ({m.est_update_s:g} s, "
                f"modal.est_update_s) end the iteration at {t.iteration_s:.0f} s")
    return (f"barrier (schedule.simulate): {t.gen_waves} generation wave(s) + {t.verify_waves} verification wave(s) "
            f"+ the update ({m.est_update_s:g} s, modal.est_update_s) = {t.iteration_s:.0f} s")



def _first_notes(config: Config, command: str, work: _Work, t: _Timings, res: dict[str, Resources]) -> list[list[Any]]:
    """The generation call and the verification batch."""
    m, v = config.modal, config.verify
    return [
        ["generation call", f"{work.decode_tokens} tokens at {decode_tokens_per_s(config):g} tokens/s "
                            f"({'modal.est_decode_tokens_per_s' if m.est_decode_tokens_per_s else f'the {m.gpu} estimate'}) "
                            f"= {t.generation_s:.0f} s (upper estimate: every sample runs to its token limit)"],
        ["verification batch", (f"pipelined: each proof on the first free of {es_lean_workers(config)} warm REPL "
                                f"workers (verify.workers = {v.workers} per generating GPU, one REPL per Sandbox of "
                                f"{res['lean_worker'].cpu:g} cores, {res['lean_worker'].memory_mb // 1024} GiB), "
                                f"{m.est_verify_s_per_proof:g} s each; the {m.est_header_s:g} s header once per worker "
                                "per iteration (its share's pool kept warm through the share)")
                               if command == "train_es" and es_pipelined(config) and work.proofs else
                               (f"{work.proofs} proofs in one call: {t.batches} batch(es) of up to "
                                f"{m.verify_batch_size}, {t.verification.repls} REPL Sandboxes side by side, each "
                                f"{m.est_header_s:g} s header, then {m.est_verify_s_per_proof:g} s per proof, ending "
                                f"after its last (the last fast-path verdict {t.verification.fast_path_end_s:.0f} s "
                                f"in; the call's last verdict {t.batch_s:.0f} s in); a REPL Sandbox killed after "
                                f"{res['verify_sandbox'].timeout_s} s, its in-flight proof retried once")
                               if t.batches and t.verification is not None
                               else f"none: `{config.data.task}` rewards are checked in Python"],
    ]


def _es_member_notes(config: Config, t: _Timings, res: dict[str, Resources]) -> list[list[Any]]:
    """ES: how long a warm member waits between its calls, and what a cold one replays."""
    m = config.modal
    notes: list[list[Any]] = []
    bound = es_gap_bound_s(config)
    replay_iterations, replay_s = cold_member_replay(config)
    snapshots = (f"es.snapshot_every = {config.es.snapshot_every}" if config.es.snapshot_every
                 else "es.snapshot_every = 0: the whole ledger")
    notes.append(["warm members", f"scaledown_window = {res['es_member'].scaledown_window_s} s: the longest "
                                 f"legitimate gap between a member's calls is {bound:.0f} s (verification "
                                 f"waves at their Sandboxes' {res['verify_sandbox'].timeout_s} s timeout, "
                                 f"+ {batch_kernel_s(config):.0f} s of a batch's kernel stage, + the update); estimated gap "
                                 f"{es_gap_s(config):.0f} s"])
    notes.append(["cold member", f"replays at most {replay_iterations} iterations ({snapshots}) at "
                                f"{m.est_replay_s_per_iteration:g} s each = {replay_s:.0f} s on its GPU "
                                "before it generates (worst case)"])
    return notes


def _step_notes(config: Config, command: str, work: _Work) -> list[list[Any]]:
    """A generation call that runs in several KV rounds; a GRPO step's optimizer pass."""
    notes: list[list[Any]] = []
    if work.rounds > 1:
        notes.append(["KV rounds", f"one generation call's {work.samples if command == 'train_grpo' else 'member batch of'} "
                                   f"sequences run in {work.rounds} rounds: the engine's KV cache holds "
                                   f"{_kv_capacity(config, command)} sequences of prompt + {work.decode_tokens} tokens "
                                   "at a time (`memory per GPU`)"])
    if command == "train_grpo":
        notes.append(["optimizer step", f"forward and backward over the step's {work.samples} completions: "
                                        f"{work.train_s:.0f} s ({work.train_note}), added to the step"])
    return notes


def _cost_notes(config: Config, command: str, work: _Work, t: _Timings, res: dict[str, Resources]) -> list[list[Any]]:
    """The kernel stage, the wall time, the prices, what is billed and what is not counted."""
    m, v = config.modal, config.verify
    return [
        ["kernel stage", (f"{t.kernel_passes} of {work.proofs} proofs per {work.unit} pass the fast path "
                          f"(modal.est_pass_rate = {m.est_pass_rate:g}); each: `lean -o` and its check, "
                          f"{m.est_kernel_check_s_per_proof:g} s (modal.est_kernel_check_s_per_proof, assumed), plus "
                          f"its share of the checker's header imports ({m.est_kernel_import_s:g} s each, "
                          f"modal.est_kernel_import_s, assumed; {_imports_said(config)}): "
                          f"{kernel_s_per_pass(config, kernel_batches(config, command, work, t)[0]):.1f} s per "
                          f"pass in Sandboxes of {res['kernel_sandbox'].cpu:g} cores "
                          f"= {kernel_check_core_s_per_proof(config):.1f} "
                          f"core-s expected per proof; {kernel_workers(v)} at a time per batch "
                          f"(verify.kernel_check_workers), each batch's checker batches beside the others': "
                          f"{t.kernel_s:.0f} s after the last fast-path verdict"
                          + (f"; as counted event by event: {t.verification.kernel_steps} kernel Sandboxes, "
                             f"{t.verification.checker_processes} checker processes"
                             if t.verification is not None and not (command == "train_es" and es_pipelined(config))
                             else ""))
                         if t.kernel_passes else
                         ("off: verify.kernel_check = false, `verified` rests on the fast path alone"
                          if t.batches else "none: no proof goes to Lean")],
        [f"{work.unit} wall time", _wall_note(config, command, t)],
        ["prices", f"{gpu_price_per_hour(config):g} USD per GPU-hour ({m.gpu}, "
                   f"{'modal.gpu_price_per_hour' if m.gpu_price_per_hour else 'its Modal list price'}), "
                   f"{m.cpu_price_per_core_hour:g} per core-hour, "
                   f"{m.memory_price_per_gib_hour:g} per GiB-hour; Sandboxes {m.sandbox_cpu_price_per_core_hour:g} per "
                   f"core-hour, {m.sandbox_memory_price_per_gib_hour:g} per GiB-hour ([modal] keys)"],
        ["billed", "each container's GPUs, cores and GiB for as long as it is up, idle time of warm containers included"],
        ["not counted", "container start and model load (once per container), network"
                        + (", the trainer's activations in its memory" if command == "train_grpo"
                           else ", a cold member's replay (above)")],
    ]


def _warnings(config: Config, command: str, gpus: list[Any]) -> list[list[Any]]:
    """The resident engines' note, then every warning the plan has for this config."""
    m, v = config.modal, config.verify
    notes: list[list[Any]] = []
    if command == "train_es" and es_pipelined(config):
        k, share = m.es_members_per_gpu, config.generate.gpu_memory_utilization
        notes.append(["resident engines", f"{k} engine(s) per generating GPU, the loop's included, each with 1/{k} "
                                          f"of generate.gpu_memory_utilization = {share:g}; each also keeps an fp32 "
                                          "master of the weights outside that budget (es/vllm_worker.py): "
                                          + ("`memory per GPU` adds it up" if gpus else
                                             "not checked here: the model's shape is not known (gpu_memory.py)")])
    if not gpus:
        notes.append(["warning", f"memory per GPU not checked: the shape of {config.model.name} is not known here "
                                 "(gpu_memory.KNOWN_MODELS, or a local checkpoint with its config.json)"])
    kernel_problem = kernel_memory_problem(config)
    if kernel_problem:
        notes.append(["warning", kernel_problem + " (a run refuses to start)"])
    if command == "train_es":
        bound = es_gap_bound_s(config)
        replay_s = cold_member_replay(config)[1]
        if bound > MAX_SCALEDOWN_WINDOW_S:
            notes.append(["warning", f"a gap of up to {bound:.0f} s exceeds Modal's {MAX_SCALEDOWN_WINDOW_S} s "
                                     f"scaledown_window ceiling: members may go cold, each then replaying up to "
                                     f"{replay_s:.0f} s; lower verify.timeout_s or modal.verify_batch_size"])
    if v.workers > m.verify_cpus:
        notes.append(["warning", f"verify.workers = {v.workers} REPLs share modal.verify_cpus = {m.verify_cpus:g} cores"])
    if v.memory_limit_gb and v.workers * v.memory_limit_gb > m.verify_memory_gb:
        notes.append(["warning", f"verify.workers x verify.memory_limit_gb = {v.workers * v.memory_limit_gb:g} GiB "
                                 f"exceeds modal.verify_memory_gb = {m.verify_memory_gb}"])
    return notes


def notes_rows(config: Config, command: str, work: _Work, c: _Costs, res: dict[str, Resources], figures: Figures,
               gpus: list[Any]) -> list[list[Any]]:
    """The table "how the estimate is made", in the order a reader needs it."""
    heldout = c.heldout
    notes = [["figures", figures.note], *_first_notes(config, command, work, c.t, res)]
    if command == "train_es":
        notes += _es_member_notes(config, c.t, res)
    notes += _step_notes(config, command, work)
    notes += _cost_notes(config, command, work, c.t, res)
    if heldout["evaluations"]:
        notes.append(["held-out evaluation", heldout["note"]])
    return notes + _warnings(config, command, gpus)
