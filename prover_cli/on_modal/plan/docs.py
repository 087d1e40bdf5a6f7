"""docs/modal.md's generated blocks: the plan's own output, regenerated, never typed."""

from __future__ import annotations

from typing import Any

from prover_cli.config import load_config
from prover_cli.on_modal.plan.dry_run import plan


# --------------------------------------------------------------------------------------------
# docs/modal.md: its figures are this plan's output, regenerated, never typed
# --------------------------------------------------------------------------------------------
#     python -m prover_cli.on_modal.plan docs/modal.md      # rewrite the generated blocks
# tests/test_modal_docs.py fails when a block differs from what the plan prints now.

BLOCK_START = "<!-- generated from the plan of {config}: python -m prover_cli.on_modal.plan docs/modal.md -->"
BLOCK_END = "<!-- end of generated block -->"


def _markdown(columns: list[str], rows: list[list[Any]]) -> list[str]:
    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|")

    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
            *("| " + " | ".join(cell(v) for v in row) + " |" for row in rows)]


def docs_block(config_path: str) -> str:
    """The Markdown figures for one config: the per-function table, the breakdown, the totals."""
    config = load_config(config_path, ["modal.calibration=none"])   # the estimates: the same on every machine
    command = "train_grpo" if config_path.endswith("grpo.toml") else "train_es"
    p = plan(config, command=command, backend="modal")
    unit = "step" if command == "train_grpo" else "iteration"
    tables = {table["title"].split(" (")[0].split(":")[0]: table for table in p["tables"]}
    summary, functions_table = p["tables"][0], tables["plan"]
    memory_table, breakdown_table = tables["memory per GPU"], tables[f"cost per {unit} by resource"]
    lines = [f"`{config_path}`, `prover {p['command']} --backend modal --dry-run`, per {unit}:", "",
             *_markdown(summary["columns"], summary["rows"][:-1]), "",   # not the credentials: they are this machine's
             *_markdown(functions_table["columns"], functions_table["rows"]), "",
             *_markdown(memory_table["columns"], memory_table["rows"]), "",
             *_markdown(breakdown_table["columns"], breakdown_table["rows"]), "",
             f"Per {unit}: {p[f'samples_per_{unit}']} samples, ~{p[f'est_wall_s_per_{unit}']:g} s, "
             f"**{p[f'est_usd_per_{unit}']:.2f} USD** (GPU {p['est_usd_breakdown']['gpu']['usd']:.2f}, "
             f"CPU {p['est_usd_breakdown']['cpu']['usd']:.2f}, memory {p['est_usd_breakdown']['memory']['usd']:.2f}); "
             f"**{p['est_usd_total']:.2f} USD** for {p[f'{unit}s']} {unit}s"
             + (f" and {p['heldout_evaluations']} held-out evaluations ({p['est_usd_per_heldout_evaluation']:.2f} USD "
                "each)." if p["heldout_evaluations"] else ".")
             + f" GPU-busy {100 * p['est_gpu_busy_fraction']:.1f} % of billed GPU-seconds; "
               f"{p['est_usd_per_1k_samples']:.2f} USD per 1,000 training samples ({p['schedule']})."]
    return "\n".join(lines)


def render_docs(text: str) -> str:
    """`text` with every generated block replaced by the plan's current output."""
    out, rest = [], text
    marker = BLOCK_START.split("{config}")[0]
    while marker in rest:
        before, _, after = rest.partition(marker)
        config_path, _, after = after.partition(BLOCK_START.split("{config}")[1])
        _, end, after = after.partition(BLOCK_END)
        if not end:
            raise ValueError(f"generated block for {config_path} has no {BLOCK_END!r}")
        out.append(before + BLOCK_START.format(config=config_path) + "\n" + docs_block(config_path) + "\n" + BLOCK_END)
        rest = after
    return "".join(out) + rest
