"""`--dry-run`: the plan of `train es` / `train grpo`, on this machine or on Modal, with its tables."""

from __future__ import annotations

import math
from typing import Any

from prover_cli.progress import NULL_REPORTER
from prover_cli.on_modal.plan.containers import es_gap_bound_s, es_gap_s, resources
from prover_cli.on_modal.plan.costs import (
    _Costs,
    _costs,
    _imports_said,
    kernel_batches,
    kernel_check_core_s_per_proof,
    memory_problem,
    SLOWDOWNS,
    _unit_cost,
    with_resident_slowdown,
)
from prover_cli.on_modal.plan.iteration import (
    es_lean_workers,
    es_member_containers,
    es_one_call,
    es_pipelined,
    heldout_evaluations,
    _kv_capacity,
    _memory,
    _Timings,
    _Work,
    _work_per_iteration,
)
from prover_cli.on_modal.plan.pins import image_specs
from prover_cli.on_modal.plan.sizing import (
    cold_member_replay,
    decode_tokens_per_s,
    gpu_price_per_hour,
    HOURS,
    kernel_memory_problem,
    kernel_s_per_pass,
    kernel_workers,
    MAX_SCALEDOWN_WINDOW_S,
    UNIT_NAMES,
)


# --------------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------------

def plan(config: Any, *, command: str, backend: str, reporter: Any = NULL_REPORTER) -> dict[str, Any]:
    """The `--dry-run` of `train es` / `train grpo`: what runs where, and (on Modal) the cost."""
    if command not in ("train_es", "train_grpo"):
        raise ValueError(f"no plan for {command!r}")  # the CLI only asks for these two
    work = _work_per_iteration(config, command)
    if backend == "local":
        return _local_plan(config, command, work)
    return _modal_plan(config, command, work)


def _local_plan(config: Any, command: str, work: _Work) -> dict[str, Any]:
    device = config.model.device
    sampler = config.generate.backend
    reward = (f"Lean REPL pool in this process: {config.verify.workers} `{' '.join(config.verify.repl_command)}` processes"
              if config.data.task == "lean" else f"`{config.data.task}` checker in this process (pure Python)")
    if config.data.task == "lean":
        reward += ("; then the kernel stage on each pass: `lean -o` in a fresh process, then the pinned checker "
                   "(prover_check: one process per batch, one header import)"
                   if config.verify.kernel_check else "; kernel stage off (verify.kernel_check = false)")
    if command == "train_es":
        generation = (f"{config.es.population} members one after another, each perturbing the weights in place "
                      f"and sampling {config.es.problems_per_iteration} x {config.es.samples_per_problem}")
        update = f"fp32 update of every weight + ledger.json in {config.run.dir}"
    else:
        generation = f"TRL GRPOTrainer: {work.samples} completions per step ({config.grpo.num_generations} per prompt)"
        update = f"AdamW step, metrics.jsonl in {config.run.dir}"
    rows = [
        ["generate", f"this machine, model.device = {device}, {sampler} sampler", generation],
        ["reward", "this machine", reward],
        ["update", f"this machine, model.device = {device}", update],
    ]
    evaluations, eval_samples = heldout_evaluations(config, work.iterations)
    if evaluations:
        rows.append(["held-out", f"this machine, {sampler if command == 'train_es' else 'transformers'} sampler",
                     f"{evaluations} evaluations of {eval_samples or 'all valid-split'} samples (base, every "
                     f"{config.run.eval_every} {work.unit}s, the last)"])
    return {
        "ok": True,
        "command": command.replace("_", " "),
        "backend": "local",
        f"samples_per_{work.unit}": work.samples,
        f"{work.unit}s": work.iterations,
        "samples_total": work.samples * work.iterations,
        "heldout_evaluations": evaluations,
        # run.eval_problems = 0 evaluates every valid-split problem: a count only prepare-data knows, so "all"
        "heldout_samples_total": evaluations * eval_samples if eval_samples or not evaluations else "all",
        "tables": [{"title": f"plan: {command.replace('_', ' ')} on this machine (no cost estimate for local runs)",
                    "columns": ["stage", "where", "what"], "rows": rows}],
    }


def _wall_note(config: Any, command: str, t: _Timings) -> str:
    m = config.modal
    if command != "train_es":
        return f"generation + {t.verify_waves} verification wave(s) = {t.iteration_s:.0f} s"
    r = t.es
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


def _figure_value(config: Any, name: str, figures: Any) -> Any:
    m = config.modal
    if name == "kernel_peak_memory_gib":
        return round(figures.kernel_peak_memory_gib, 2) if figures.kernel_peak_memory_gib is not None else "-"
    if name in ("engine_overhead_gib", "es_init_gib"):
        return round(figures.memory[name], 2) if name in figures.memory else "-"
    return {"decode_tokens_per_s": decode_tokens_per_s(config), "header_s": m.est_header_s,
            "verify_s_per_proof": m.est_verify_s_per_proof, "kernel_check_s_per_proof": m.est_kernel_check_s_per_proof,
            "kernel_import_s": m.est_kernel_import_s, "resident_slowdown": m.est_resident_slowdown}[name]


def _memory_rows(gpus: list[Any]) -> list[list[Any]]:
    """Each GPU's breakdown; ES's loop and member GPUs once when they hold the same."""
    if not gpus:
        return [["-", "not checked: the model's shape is not known here", "-", "gpu_memory.KNOWN_MODELS"]]
    if len(gpus) == 2 and [row[1:] for row in gpus[0].rows()] == [row[1:] for row in gpus[1].rows()]:
        return [["each (loop, members)", *row[1:]] for row in gpus[0].rows()]
    return [row for gpu in gpus for row in gpu.rows()]


def _summary_rows(config: Any, command: str, work: _Work, c: _Costs, at_slowdown: dict[str, Any], figures: Any,
                  gpus: list[Any], credentials: bool, schedule: str) -> list[list[Any]]:
    """The dry run's first lines: the total, the USD per iteration (ES: at both resident slowdowns),
    the memory verdict and whether Modal credentials were found."""
    m, unit = config.modal, work.unit
    rows: list[list[Any]] = [
        ["USD in all", f"{c.total:.2f}", f"{work.iterations} {unit}s x {c.cost:.2f}, {c.heldout['evaluations']} held-out "
                                        f"evaluations x {c.heldout['usd']:.2f}, once per run {c.once_usd:.2f}"],
        [f"USD per {unit}", f"{c.cost:.2f}", f"{schedule}, {c.t.iteration_s:.0f} s"],
    ]
    if command == "train_es":
        resident = es_pipelined(config) and m.es_members_per_gpu > 1
        said = (f"{m.es_members_per_gpu} engines per GPU: each further one adds this fraction of a generation "
                f"(modal.est_resident_slowdown = {m.est_resident_slowdown:g}, {figures.sources['resident_slowdown']})"
                if resident else "one engine per GPU: no member shares a GPU, so the slowdown does not enter")
        for slowdown, k in at_slowdown.items():
            rows.append([f"USD per {unit} at resident slowdown {slowdown}", f"{k['usd_per_iteration']:.2f}",
                         f"{k['usd_total']:.2f} USD in all; {said}"])
    if gpus:
        worst = max(gpus, key=lambda gpu: gpu.used_gib / gpu.total_gib)
        rows.append(["memory per GPU", "fits", f"{worst.used_gib:.1f} of {worst.total_gib:.1f} GiB ({worst.gpu}) at "
                                               f"most, margin {worst.margin_gib:.1f} GiB (table below)"])
    else:
        rows.append(["memory per GPU", "not checked", f"the shape of {config.model.name} is not known here"])
    rows.append(["Modal credentials", "found" if credentials else "not found",
                 "a real run can start" if credentials else
                 "no MODAL_TOKEN_ID/MODAL_TOKEN_SECRET and no ~/.modal.toml: a real run stops before contacting "
                 "Modal (`modal token new`); this plan needs none"])
    return rows


def _modal_plan(config: Any, command: str, work: _Work) -> dict[str, Any]:
    from prover_cli.backends import modal_credentials_present
    from prover_cli.errors import ConfigError
    from prover_cli.on_modal.calibration import resolve

    figures = resolve(config)       # measured figures (the doctor's calibration file) in place of estimates
    config = figures.config
    work = _work_per_iteration(config, command)   # the rounds at the measured decode speed
    m, v = config.modal, config.verify
    res = resources(config)
    facts, gpus = _memory(config, command, figures.memory)
    refused = memory_problem(config, command, gpus)
    if refused:
        raise ConfigError(refused)
    c = _costs(config, command, work)
    t, lines, breakdown, cost, heldout, once_usd = c.t, c.lines, c.breakdown, c.cost, c.heldout, c.once_usd
    at_slowdown = {}
    if command == "train_es":
        for slowdown in SLOWDOWNS:
            other = with_resident_slowdown(config, slowdown)
            k = _costs(other, command, _work_per_iteration(other, command))
            at_slowdown[f"{slowdown:g}"] = {"usd_per_iteration": round(k.cost, 4), "usd_total": k.total,
                                            "wall_s_per_iteration": round(k.t.iteration_s, 1)}

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
        "verify Sandbox": "Lean: one Sandbox per batch of proofs (no network, no Volumes), REPLs over stdin/stdout",
        "kernel Sandbox": "the kernel stage: per fast-path pass `lean -o`, per checker batch one checker process, "
                          "each in a fresh Sandbox given only files (no network, no Volumes)",
        "download_model": "base weights into the models Volume, once per run (not per step)",
        "ESMember idle after the run": "at most: each warm member idles out its scaledown_window once the run ends "
                                       "(the loop then lowers it to 2 s; not seen on Modal yet)",
    }
    roles_rows = [[r[0], roles[r[0]]] for r in rows]

    notes = [
        ["generation call", f"{work.decode_tokens} tokens at {decode_tokens_per_s(config):g} tokens/s "
                            f"({'modal.est_decode_tokens_per_s' if m.est_decode_tokens_per_s else f'the {m.gpu} estimate'}) "
                            f"= {t.generation_s:.0f} s (upper estimate: every sample runs to its token limit)"],
        ["verification batch", (f"pipelined: each proof on the first free of {es_lean_workers(config)} warm REPL "
                                f"workers (verify.workers = {v.workers} per generating GPU, one REPL per Sandbox of "
                                f"{res['lean_worker'].cpu:g} cores, {res['lean_worker'].memory_mb // 1024} GiB), "
                                f"{m.est_verify_s_per_proof:g} s each; the {m.est_header_s:g} s header once per worker "
                                "per iteration (its share's pool kept warm through the share)")
                               if command == "train_es" and es_pipelined(config) and work.proofs else
                               (f"{t.proofs_per_batch} proofs: {m.est_header_s:g} s header + "
                                f"{math.ceil(t.proofs_per_batch / v.workers) if t.batches else 0} rounds x "
                                f"{m.est_verify_s_per_proof:g} s = {t.batch_s:.0f} s; Sandbox killed after "
                                f"{res['verify_sandbox'].timeout_s} s, its in-flight proofs retried once")
                               if t.batches else f"none: `{config.data.task}` rewards are checked in Python"],
        ["kernel stage", (f"{t.kernel_passes} of {work.proofs} proofs per {work.unit} pass the fast path "
                          f"(modal.est_pass_rate = {m.est_pass_rate:g}); each: `lean -o` and its check, "
                          f"{m.est_kernel_check_s_per_proof:g} s (modal.est_kernel_check_s_per_proof, assumed), plus "
                          f"its share of the checker's header imports ({m.est_kernel_import_s:g} s each, "
                          f"modal.est_kernel_import_s, assumed; {_imports_said(config)}): "
                          f"{kernel_s_per_pass(config, kernel_batches(config, command, work, t)[0]):.1f} s per "
                          f"pass in Sandboxes of {res['kernel_sandbox'].cpu:g} cores "
                          f"= {kernel_check_core_s_per_proof(config):.1f} "
                          f"core-s expected per proof; {kernel_workers(v)} at a time per batch "
                          f"(verify.kernel_check_workers): a batch waits {t.kernel_s:.0f} s for its checks")
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
    if command == "train_grpo":
        notes.insert(2, ["optimizer step", f"forward and backward over the step's {work.samples} completions: "
                                           f"{work.train_s:.0f} s ({work.train_note}), added to the step"])
    if work.rounds > 1:
        notes.insert(2, ["KV rounds", f"one generation call's {work.samples if command == 'train_grpo' else 'member batch of'} "
                                      f"sequences run in {work.rounds} rounds: the engine's KV cache holds "
                                      f"{_kv_capacity(config, command)} sequences of prompt + {work.decode_tokens} tokens "
                                      "at a time (`memory per GPU`)"])
    if heldout["evaluations"]:
        notes.append(["held-out evaluation", heldout["note"]])
    notes.insert(0, ["figures", figures.note])
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
        replay_iterations, replay_s = cold_member_replay(config)
        snapshots = (f"es.snapshot_every = {config.es.snapshot_every}" if config.es.snapshot_every
                     else "es.snapshot_every = 0: the whole ledger")
        notes.insert(3, ["warm members", f"scaledown_window = {res['es_member'].scaledown_window_s} s: the longest "
                                         f"legitimate gap between a member's calls is {bound:.0f} s (verification "
                                         f"waves at their Sandboxes' {res['verify_sandbox'].timeout_s} s timeout, "
                                         f"+ {t.kernel_s:.0f} s of kernel stage, + the update); estimated gap "
                                         f"{es_gap_s(config):.0f} s"])
        notes.insert(4, ["cold member", f"replays at most {replay_iterations} iterations ({snapshots}) at "
                                        f"{m.est_replay_s_per_iteration:g} s each = {replay_s:.0f} s on its GPU "
                                        "before it generates (worst case)"])
        if bound > MAX_SCALEDOWN_WINDOW_S:
            notes.append(["warning", f"a gap of up to {bound:.0f} s exceeds Modal's {MAX_SCALEDOWN_WINDOW_S} s "
                                     f"scaledown_window ceiling: members may go cold, each then replaying up to "
                                     f"{replay_s:.0f} s; lower verify.timeout_s or modal.verify_batch_size"])
    if v.workers > m.verify_cpus:
        notes.append(["warning", f"verify.workers = {v.workers} REPLs share modal.verify_cpus = {m.verify_cpus:g} cores"])
    if v.memory_limit_gb and v.workers * v.memory_limit_gb > m.verify_memory_gb:
        notes.append(["warning", f"verify.workers x verify.memory_limit_gb = {v.workers * v.memory_limit_gb:g} GiB "
                                 f"exceeds modal.verify_memory_gb = {m.verify_memory_gb}"])

    specs = image_specs(v.lean_toolchain, v.mathlib_rev)
    title = command.replace("_", " ")
    total = round(cost * work.iterations + once_usd + heldout["usd"] * heldout["evaluations"], 2)
    unit = _unit_cost(command, work, t, cost)
    run_per_1k = 1000 * total / (work.samples * work.iterations) if work.samples * work.iterations else 0.0
    method = "ES" if command == "train_es" else "GRPO"
    schedule = ("one call on the loop's engine (es.noise = \"lora\": members as LoRA adapters)"
                if command == "train_es" and es_one_call(config) else
                f"{'pipelined' if es_pipelined(config) else 'barrier'} (modal.es_member_gpus = {m.es_member_gpus})"
                if command == "train_es" else "one trainer container (colocated vLLM)")
    figure_rows = [[name, _figure_value(config, name, figures), figures.sources[name]] for name in figures.sources]
    credentials = modal_credentials_present()
    memory_rows = _memory_rows(gpus)
    summary = _summary_rows(config, command, work, c, at_slowdown, figures, gpus, credentials, schedule)
    return {
        "ok": True,
        "command": title,
        "backend": "modal",
        "app": m.app_name,
        "est_usd_total": total,
        f"est_usd_per_{work.unit}": round(cost, 4),
        "modal_credentials": credentials,
        **({"est_usd_at_resident_slowdown": at_slowdown, "resident_slowdown": {
            "value": m.est_resident_slowdown, "source": figures.sources["resident_slowdown"],
            "enters": es_pipelined(config) and m.es_members_per_gpu > 1}} if command == "train_es" else {}),
        "gpu_memory": {"fits": bool(gpus) and refused is None, "checked": bool(gpus),
                       "model": ({"name": facts.name, "params": facts.params, "tied": facts.tied, "source": facts.source}
                                 if facts else None),
                       "gpus": [gpu.to_json() for gpu in gpus]},
        f"samples_per_{work.unit}": work.samples,
        f"{work.unit}s": work.iterations,
        "samples_total": work.samples * work.iterations,  # the training budget `prover report` compares (held-out not in it)
        f"est_wall_s_per_{work.unit}": round(t.iteration_s, 1),
        f"est_gpu_hours_per_{work.unit}": round(breakdown["gpu"]["gpu_s"] / HOURS, 4),
        f"est_cpu_core_hours_per_{work.unit}": round(breakdown["cpu"]["core_s"] / HOURS, 4),
        "kernel_check": bool(v.kernel_check),
        "est_kernel_check_core_s_per_proof": round(kernel_check_core_s_per_proof(config), 1),
        "est_usd_breakdown": breakdown,
        "heldout_evaluations": heldout["evaluations"],
        "heldout_samples_per_evaluation": heldout["samples"] or ("all" if heldout["evaluations"] else 0),
        "est_usd_per_heldout_evaluation": round(heldout["usd"], 4),
        "est_usd_once": round(once_usd, 4),
        "est_gpu_busy_fraction": round(unit["gpu_busy_fraction"], 4),   # generation over billed GPU-seconds
        "est_usd_per_1k_samples": round(unit["usd_per_1k_samples"], 4),  # per training sample, per unit
        "est_usd_per_1k_samples_run": round(run_per_1k, 4),              # the whole run, evaluations included
        "schedule": schedule,
        "calibration": figures.path,
        "figures": {name: {"value": value, "source": source} for name, value, source in figure_rows},
        **({"cold_member_replay_iterations": cold_member_replay(config)[0],
            "cold_member_replay_s": round(cold_member_replay(config)[1], 1),
            "es_gap_bound_s": round(es_gap_bound_s(config), 1)} if command == "train_es" else {}),
        "images": {name: spec.to_json() for name, spec in specs.items()},  # every image the app declares
        "tables": [
            {"title": f"{title} on Modal: {total:.2f} USD in all, {cost:.2f} USD per {work.unit} (estimates)",
             "columns": ["", "value", "how"], "rows": summary},
            {"title": f"plan: {title} on Modal (app `{m.app_name}`), per {work.unit}; seconds and USD estimated",
             "columns": ["function", "image", "GPU", "CPU", "GiB", "parallel", "calls", "container-s", "USD"],
             "rows": rows},
            {"title": "memory per GPU (GiB; gpu_memory.py)", "columns": ["GPU", "held", "GiB", "how"],
             "rows": memory_rows},
            {"title": f"cost per {work.unit} by resource", "columns": ["resource", "amount", "container-s", "USD"],
             "rows": [[kind, f"{round(next(iter(item.values())))} {UNIT_NAMES[kind]}", round(item["container_s"]),
                       item["usd"]] for kind, item in breakdown.items()]},
            {"title": "unit cost (the same unit for ES and GRPO)",
             "columns": ["method", "schedule", f"samples per {work.unit}", "GPU-busy of billed GPU-s",
                         "USD per 1,000 samples", "USD per 1,000 samples, whole run"],
             "rows": [[method, schedule, work.samples, f"{100 * unit['gpu_busy_fraction']:.1f}%",
                       round(unit["usd_per_1k_samples"], 3), round(run_per_1k, 3)]]},
            {"title": "figures: measured or assumed", "columns": ["figure", "value", "source"], "rows": figure_rows},
            {"title": "what each function does", "columns": ["function", "role"], "rows": roles_rows},
            {"title": "images", "columns": ["image", "python packages", "system / toolchain"],
             "rows": [[name, ", ".join(spec.python_packages),
                       ", ".join([*spec.apt_packages, *(f"{k} {val}" for k, val in spec.toolchain.items())]) or "-"]
                      for name, spec in specs.items()]},
            {"title": "how the estimate is made", "columns": ["", ""], "rows": notes},
        ],
    }
