"""The study's tables and per-seed files: numbers as printed, a comparison table, CSV and Markdown.
"""

from __future__ import annotations

import csv
import io
from typing import Any

def to_csv(rows: list[dict[str, Any]]) -> str:
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def format_number(value: float | None, signed: bool = False, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def _budget_text(budget: dict[str, Any] | None) -> str:
    if not budget:
        return "-"
    a, b = budget["a"], budget["b"]
    if b["samples"] == 0 and b["tokens"] == 0:   # an anchor: the base trained nothing
        return f"{a['samples']:,.0f} samples; {a['tokens']:,.0f} tokens; {a['seconds']:,.1f} s"
    return (f"{a['samples']:,.0f} / {b['samples']:,.0f} samples; {a['tokens']:,.0f} / {b['tokens']:,.0f} tokens; "
            f"{a['seconds']:,.1f} / {b['seconds']:,.1f} s")


def comparison_table(title: str, entries: list[dict[str, Any]], holm_column: bool = False) -> dict[str, Any]:
    rows = []
    for e in entries:
        test = e["test"] + (f" (margin {e['margin']:g})" if e["test"] == "non-inferiority" else "")
        if e.get("not_comparable"):
            row = [e["name"], 0, "NOT COMPARABLE", test, e["not_comparable"], "-"]
        else:
            row = [e["name"], len(e["seeds"]), f"{format_number(e['mean'], True)} ({format_number(e['lo'], True)}..{format_number(e['hi'], True)})",
                   test, "-" if e.get("p") is None else f"{e['p']:.3g}", _budget_text(e.get("budget"))]
        if holm_column:
            row += ["-" if e.get("p_holm") is None else f"{e['p_holm']:.3g}", e["verdict"].split(": ", 1)[1]]
        rows.append(row)
    columns = ["comparison", "seeds", "mean a - b (95% t interval)", "test", "p (paired t)",
               "budget a / b (samples; tokens; accelerator-s)"]
    return {"title": title, "columns": columns + (["p (Holm)", "verdict"] if holm_column else []), "rows": rows}


def to_markdown(table: dict[str, Any]) -> str:
    lines = [f"### {table['title']}", "", "| " + " | ".join(table["columns"]) + " |",
             "|" + "---|" * len(table["columns"])]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in table["rows"]]
    return "\n".join(lines) + "\n"
