"""All terminal output goes through `Out`.

Humans get rich tables, progress and messages on stderr; with `--json`, stdout carries only the
result (one JSON document), so `prover eval ... --json | jq` always works.
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Sequence

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table


class _RichHandle:
    def __init__(self, progress: Progress, task_id: int, unit: str):
        self._progress = progress
        self._task_id = task_id
        self._unit = unit
        self._start = time.monotonic()
        self._done = 0.0

    def advance(self, n: float = 1, **fields: Any) -> None:
        self._done += n
        rate = self._done / max(time.monotonic() - self._start, 1e-9)
        extra = " ".join(f"{k}={v}" for k, v in fields.items())
        self._progress.update(
            self._task_id, advance=n, rate=f"{rate:,.1f} {self._unit}/s", extra=extra
        )


class Out:
    """One object for all printing. `json_mode` moves the result to stdout as JSON."""

    def __init__(self, json_mode: bool = False, quiet: bool = False):
        self.json_mode = json_mode
        self.quiet = quiet
        self.err = Console(stderr=True, highlight=False)
        self.stdout = sys.stdout

    # -- messages (stderr) --------------------------------------------------------------------
    def info(self, message: str) -> None:
        if not self.quiet:
            self.err.print(escape(message))

    def warn(self, message: str) -> None:
        self.err.print(f"[yellow]Warning:[/yellow] {escape(message)}")

    def error(self, message: str, hint: str | None = None) -> None:
        self.err.print(f"[bold red]Error:[/bold red] {escape(message)}", soft_wrap=True)
        if hint:
            self.err.print(f"[dim]Hint: {escape(hint)}[/dim]", soft_wrap=True)

    # -- results ------------------------------------------------------------------------------
    def table(self, title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        """A summary table for humans (stderr, so stdout stays clean for --json)."""
        if self.quiet:
            return
        table = Table(title=title)
        for column in columns:
            table.add_column(str(column))
        for row in rows:
            table.add_row(*(_fmt(cell) for cell in row))
        self.err.print(table)

    def result(self, payload: Any) -> None:
        """The machine-readable result: printed to stdout with --json, ignored otherwise."""
        if self.json_mode:
            self.stdout.write(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")
            self.stdout.flush()

    # -- progress (implements progress.Reporter) ----------------------------------------------
    @contextmanager
    def task(self, description: str, total: float | None = None, unit: str = "it") -> Iterator[_RichHandle]:
        progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[extra]}"),
            console=self.err,
            disable=self.quiet,
            transient=False,
        )
        with progress:
            task_id = progress.add_task(description, total=total, rate="", extra="")
            yield _RichHandle(progress, task_id, unit)

    def log(self, message: str) -> None:
        self.info(message)


def _fmt(cell: Any) -> str:
    if isinstance(cell, float):
        return f"{cell:.4g}"
    return escape(str(cell))
