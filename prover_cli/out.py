"""All terminal output goes through `Out`.

Humans get rich tables, progress and messages on stderr; with `--json`, stdout carries only the
result (one JSON document), so `prover eval ... --json | jq` always works.

Progress: on a terminal, live rich bars. When stderr is not a terminal (a log file, CI, `nohup`),
a live bar would print nothing until the end, or one frozen row per refresh; instead a long
stage prints one plain line when it starts, one every `PROGRESS_EVERY_S` seconds while it runs
(throttled across nested stages, so a per-step inner stage cannot flood the log), and one when
it ends.
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, Sequence

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


# Seconds between two plain progress lines when stderr is not a terminal.
PROGRESS_EVERY_S = 5.0


class _PlainHandle:
    """Progress as plain lines, for a stderr that is a file or a pipe."""

    def __init__(self, out: "Out", description: str, total: float | None, unit: str):
        self._out = out
        self._description = description
        self._total = total
        self._unit = unit
        self._start = out.clock()
        self._done = 0.0
        self._fields: dict[str, Any] = {}

    def advance(self, n: float = 1, **fields: Any) -> None:
        self._done += n
        self._fields.update(fields)
        now = self._out.clock()
        finished = bool(self._total) and self._done >= self._total  # the closing line says it
        if not finished and now - self._out.last_progress_line >= PROGRESS_EVERY_S:
            self.line()

    def line(self, final: bool = False) -> None:
        now = self._out.clock()
        self._out.last_progress_line = now
        elapsed = now - self._start
        rate = self._done / elapsed if elapsed > 0 else 0.0
        count = f"{self._done:g}" + (f"/{self._total:g}" if self._total else "")
        parts = [f"{self._description}: {count} {self._unit}"]
        if self._total and not final:
            parts[0] += f" ({100 * self._done / self._total:.0f}%)"
        parts.append(f"{rate:,.2f} {self._unit}/s")
        parts.append(f"{_duration(elapsed)} elapsed")
        if self._total and rate > 0 and not final:
            parts.append(f"~{_duration((self._total - self._done) / rate)} left")
        line = ", ".join(parts)
        if self._fields:
            line += "  " + " ".join(f"{k}={v}" for k, v in self._fields.items())
        self._out.plain(line + (" (done)" if final else ""))


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class Out:
    """One object for all printing. `json_mode` moves the result to stdout as JSON."""

    def __init__(self, json_mode: bool = False, quiet: bool = False, clock: Callable[[], float] = time.monotonic):
        self.json_mode = json_mode
        self.quiet = quiet
        self.err = Console(stderr=True, highlight=False)
        self.stdout = sys.stdout
        self.clock = clock  # tests pass a fake one: progress lines are time-driven
        self.last_progress_line = float("-inf")
        self._depth = 0  # nesting of progress tasks (ES: generate inside each iteration)

    # -- messages (stderr) --------------------------------------------------------------------
    def info(self, message: str) -> None:
        if not self.quiet:
            self.err.print(escape(message), soft_wrap=True)  # a path or a line number never split

    def warn(self, message: str) -> None:
        self.err.print(f"[yellow]Warning:[/yellow] {escape(message)}", soft_wrap=True)

    def error(self, message: str, hint: str | None = None) -> None:
        self.err.print(f"[bold red]Error:[/bold red] {escape(message)}", soft_wrap=True)
        if hint:
            self.err.print(f"[dim]Hint: {escape(hint)}[/dim]", soft_wrap=True)

    def interrupted(self, resume_command: str | None, *, why: str | None = None, starts_over: bool = False) -> None:
        """Ctrl-C, SIGTERM or SIGHUP (`why`): say so, and print the exact command that continues
        the run (or, for a command that does not resume, the one that starts it over)."""
        self.err.print(f"[yellow]Interrupted{f' ({why})' if why else ''}.[/yellow]", soft_wrap=True)
        if resume_command:
            if starts_over:
                self.err.print(f"Rerun with (it starts over): {escape(resume_command)}", soft_wrap=True)
            else:
                self.err.print(f"Resume with: {escape(resume_command)}", soft_wrap=True)

    def plain(self, line: str) -> None:
        """One unstyled line on stderr (progress in logs)."""
        if not self.quiet:
            self.err.print(line, markup=False, highlight=False, soft_wrap=True)

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
    def task(self, description: str, total: float | None = None, unit: str = "it") -> Iterator[Any]:
        if not self.err.is_terminal:
            yield from self._plain_task(description, total, unit)
            return
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

    def _plain_task(self, description: str, total: float | None, unit: str) -> Iterator[_PlainHandle]:
        handle = _PlainHandle(self, description, total, unit)
        top = self._depth == 0
        if top:
            self.plain(f"{description}: started" + (f" ({total:g} {unit})" if total else ""))
            self.last_progress_line = self.clock()
        self._depth += 1
        try:
            yield handle
        finally:
            self._depth -= 1
        if top:
            handle.line(final=True)

    def log(self, message: str) -> None:
        self.info(message)


def _fmt(cell: Any) -> str:
    if isinstance(cell, float):
        return f"{cell:.4g}"
    return escape(str(cell))
