"""`--dry-run`: the plan of `train es` / `train grpo`, on this machine or on Modal, with its tables."""

from __future__ import annotations

from typing import Any

from prover_cli.backends import modal_credentials_present
from prover_cli.config import Config
from prover_cli.errors import ConfigError
from prover_cli.on_modal.calibration import Figures, resolve
from prover_cli.progress import NULL_REPORTER
from prover_cli.on_modal.plan.containers import es_gap_bound_s, resources
from prover_cli.on_modal.plan.costs import (
    _Costs,
    _costs,
    kernel_check_core_s_per_proof,
    memory_problem,
    SLOWDOWNS,
    _unit_cost,
    with_resident_slowdown,
)
from prover_cli.on_modal.plan.iteration import (
    es_one_call,
    es_pipelined,
    heldout_evaluations,
    _memory,
    _Work,
    _work_per_iteration,
)
from prover_cli.on_modal.plan.explain import function_rows, notes_rows, roles_rows
from prover_cli.on_modal.plan.pins import ImageSpec, image_specs
from prover_cli.on_modal.plan.sizing import (
    cold_member_replay,
    decode_tokens_per_s,
    HOURS,
    UNIT_NAMES,
)


# --------------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------------

def plan(config: Config, *, command: str, backend: str, reporter: Any = NULL_REPORTER) -> dict[str, Any]:
    """The `--dry-run` of `train es` / `train grpo`: what runs where, and (on Modal) the cost."""
    if command not in ("train_es", "train_grpo"):
        raise ValueError(f"no plan for {command!r}")  # the CLI only asks for these two
    work = _work_per_iteration(config, command)
    if backend == "local":
        return _local_plan(config, command, work)
    return _modal_plan(config, command, work)


def _local_plan(config: Config, command: str, work: _Work) -> dict[str, Any]:
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


def _figure_value(config: Config, name: str, figures: Figures) -> Any:
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


def _summary_rows(config: Config, command: str, work: _Work, c: _Costs, at_slowdown: dict[str, Any], figures: Any,
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


def _modal_plan(config: Config, command: str, work: _Work) -> dict[str, Any]:
    """The Modal dry run: measured figures in place of estimates, the memory refusal, the costs, the tables."""
    figures = resolve(config)       # measured figures (the doctor's calibration file) in place of estimates
    config = figures.config
    work = _work_per_iteration(config, command)   # the rounds at the measured decode speed
    facts, gpus = _memory(config, command, figures.memory)
    refused = memory_problem(config, command, gpus)
    if refused:
        raise ConfigError(refused)
    c = _costs(config, command, work)
    res = resources(config)
    at_slowdown = _at_resident_slowdowns(config, command)
    schedule = _schedule_said(config, command)
    credentials = modal_credentials_present()
    summary = _summary_rows(config, command, work, c, at_slowdown, figures, gpus, credentials, schedule)
    rows = function_rows(config, c, res)
    tables = _tables(config, command, work, c, figures, summary=summary, rows=rows, gpus=gpus, schedule=schedule,
                     roles=roles_rows(config, command, rows),
                     notes=notes_rows(config, command, work, c, res, figures, gpus))
    return {
        "ok": True,
        "command": command.replace("_", " "),
        "backend": "modal",
        "app": config.modal.app_name,
        "est_usd_total": c.total,
        f"est_usd_per_{work.unit}": round(c.cost, 4),
        "modal_credentials": credentials,
        **(_es_resident_json(config, at_slowdown, figures) if command == "train_es" else {}),
        "gpu_memory": {"fits": bool(gpus) and refused is None, "checked": bool(gpus),
                       "model": ({"name": facts.name, "params": facts.params, "tied": facts.tied, "source": facts.source}
                                 if facts else None),
                       "gpus": [gpu.to_json() for gpu in gpus]},
        **_figures_json(config, command, work, c, figures, schedule),
        "images": {name: spec.to_json() for name, spec in _specs(config).items()},  # every image the app declares
        "tables": tables,
    }


def _at_resident_slowdowns(config: Config, command: str) -> dict[str, Any]:
    """ES: the iteration and the run priced at each of `SLOWDOWNS` (issue #40); GRPO: none."""
    at_slowdown = {}
    if command == "train_es":
        for slowdown in SLOWDOWNS:
            other = with_resident_slowdown(config, slowdown)
            k = _costs(other, command, _work_per_iteration(other, command))
            at_slowdown[f"{slowdown:g}"] = {"usd_per_iteration": round(k.cost, 4), "usd_total": k.total,
                                            "wall_s_per_iteration": round(k.t.iteration_s, 1)}
    return at_slowdown


def _schedule_said(config: Config, command: str) -> str:
    m = config.modal
    return ("one call on the loop's engine (es.noise = \"lora\": members as LoRA adapters)"
            if command == "train_es" and es_one_call(config) else
            f"{'pipelined' if es_pipelined(config) else 'barrier'} (modal.es_member_gpus = {m.es_member_gpus})"
            if command == "train_es" else "one trainer container (colocated vLLM)")


def _specs(config: Config) -> dict[str, ImageSpec]:
    return image_specs(config.verify.lean_toolchain, config.verify.mathlib_rev)


def _run_per_1k(work: _Work, c: _Costs) -> float:
    """USD per 1,000 training samples over the whole run, held-out evaluations included."""
    return 1000 * c.total / (work.samples * work.iterations) if work.samples * work.iterations else 0.0


def _es_resident_json(config: Config, at_slowdown: dict[str, Any], figures: Figures) -> dict[str, Any]:
    m = config.modal
    return {"est_usd_at_resident_slowdown": at_slowdown, "resident_slowdown": {
        "value": m.est_resident_slowdown, "source": figures.sources["resident_slowdown"],
        "enters": es_pipelined(config) and m.es_members_per_gpu > 1}}


def _figures_json(config: Config, command: str, work: _Work, c: _Costs, figures: Figures,
                  schedule: str) -> dict[str, Any]:
    """The dry run's figures, as `--json` gives them (after `gpu_memory`, before `images`)."""
    t, breakdown, heldout = c.t, c.breakdown, c.heldout
    unit = _unit_cost(command, work, t, c.cost)
    figure_rows = _figure_rows(config, figures)
    return {
        f"samples_per_{work.unit}": work.samples,
        f"{work.unit}s": work.iterations,
        "samples_total": work.samples * work.iterations,  # the training budget `prover report` compares (held-out not in it)
        f"est_wall_s_per_{work.unit}": round(t.iteration_s, 1),
        f"est_gpu_hours_per_{work.unit}": round(breakdown["gpu"]["gpu_s"] / HOURS, 4),
        f"est_cpu_core_hours_per_{work.unit}": round(breakdown["cpu"]["core_s"] / HOURS, 4),
        "kernel_check": bool(config.verify.kernel_check),
        "est_kernel_check_core_s_per_proof": round(kernel_check_core_s_per_proof(config), 1),
        "est_usd_breakdown": breakdown,
        "heldout_evaluations": heldout["evaluations"],
        "heldout_samples_per_evaluation": heldout["samples"] or ("all" if heldout["evaluations"] else 0),
        "est_usd_per_heldout_evaluation": round(heldout["usd"], 4),
        "est_usd_once": round(c.once_usd, 4),
        "est_gpu_busy_fraction": round(unit["gpu_busy_fraction"], 4),   # generation over billed GPU-seconds
        "est_usd_per_1k_samples": round(unit["usd_per_1k_samples"], 4),  # per training sample, per unit
        "est_usd_per_1k_samples_run": round(_run_per_1k(work, c), 4),    # the whole run, evaluations included
        "schedule": schedule,
        "calibration": figures.path,
        "figures": {name: {"value": value, "source": source} for name, value, source in figure_rows},
        **({"cold_member_replay_iterations": cold_member_replay(config)[0],
            "cold_member_replay_s": round(cold_member_replay(config)[1], 1),
            "es_gap_bound_s": round(es_gap_bound_s(config), 1)} if command == "train_es" else {}),
    }


def _figure_rows(config: Config, figures: Figures) -> list[list[Any]]:
    return [[name, _figure_value(config, name, figures), figures.sources[name]] for name in figures.sources]


def _tables(config: Config, command: str, work: _Work, c: _Costs, figures: Figures, *, summary: list[list[Any]],
            rows: list[list[Any]], gpus: list[Any], schedule: str, roles: list[list[Any]],
            notes: list[list[Any]]) -> list[dict[str, Any]]:
    """The dry run's tables, in the order it prints them."""
    title, cost, m = command.replace("_", " "), c.cost, config.modal
    unit = _unit_cost(command, work, c.t, cost)
    run_per_1k = _run_per_1k(work, c)
    method = "ES" if command == "train_es" else "GRPO"
    return [
        {"title": f"{title} on Modal: {c.total:.2f} USD in all, {cost:.2f} USD per {work.unit} (estimates)",
         "columns": ["", "value", "how"], "rows": summary},
        {"title": f"plan: {title} on Modal (app `{m.app_name}`), per {work.unit}; seconds and USD estimated",
         "columns": ["function", "image", "GPU", "CPU", "GiB", "parallel", "calls", "container-s", "USD"],
         "rows": rows},
        {"title": "memory per GPU (GiB; gpu_memory.py)", "columns": ["GPU", "held", "GiB", "how"],
         "rows": _memory_rows(gpus)},
        {"title": f"cost per {work.unit} by resource", "columns": ["resource", "amount", "container-s", "USD"],
         "rows": [[kind, f"{round(next(iter(item.values())))} {UNIT_NAMES[kind]}", round(item["container_s"]),
                   item["usd"]] for kind, item in c.breakdown.items()]},
        {"title": "unit cost (the same unit for ES and GRPO)",
         "columns": ["method", "schedule", f"samples per {work.unit}", "GPU-busy of billed GPU-s",
                     "USD per 1,000 samples", "USD per 1,000 samples, whole run"],
         "rows": [[method, schedule, work.samples, f"{100 * unit['gpu_busy_fraction']:.1f}%",
                   round(unit["usd_per_1k_samples"], 3), round(run_per_1k, 3)]]},
        {"title": "figures: measured or assumed", "columns": ["figure", "value", "source"],
         "rows": _figure_rows(config, figures)},
        {"title": "what each function does", "columns": ["function", "role"], "rows": roles},
        {"title": "images", "columns": ["image", "python packages", "system / toolchain"],
         "rows": [[name, ", ".join(spec.python_packages),
                   ", ".join([*spec.apt_packages, *(f"{k} {val}" for k, val in spec.toolchain.items())]) or "-"]
                  for name, spec in _specs(config).items()]},
        {"title": "how the estimate is made", "columns": ["", ""], "rows": notes},
    ]
