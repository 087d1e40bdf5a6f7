"""At 80 columns nothing prover prints splits a number, an interval, a key or a word (issue #38).

Every command's tables (through `Out.table`: the title a line of its own, the columns sized to
keep each one's longest word whole, each row as `column  value` lines where the words cannot fit
side by side) and every command's `--help` (paragraphs wrapped by the terminal, not hard-wrapped
in the docstring and then rewrapped into half lines). The check is strict: each word of each cell
is found whole on one line of the output, not merely somewhere once whitespace is removed.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
import typer.main
from rich.cells import cell_len
from rich.console import Console
from rich.text import Text
from typer.testing import CliRunner

from conftest import REPO, fake_repl_command, kernel_stand_in_sets
from prover_cli import out as out_module
from prover_cli.cli import app
from prover_cli.out import Out

runner = CliRunner()
WIDTH = 80


@pytest.fixture
def printed(monkeypatch):
    """COLUMNS=80, and every table prover prints, as (title, columns, rows) in the order printed."""
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    seen: list[tuple[str, list[str], list[list[str]]]] = []
    table = Out.table

    def recording(self, title, columns, rows):
        rows = [list(row) for row in rows]
        if not self.quiet:
            seen.append((title, [str(c) for c in columns], [[out_module._fmt(cell) for cell in row] for row in rows]))
        table(self, title, columns, rows)

    monkeypatch.setattr(Out, "table", recording)
    return seen


def words_of(markup: str) -> list[str]:
    return Text.from_markup(markup).plain.split()


def assert_whole(stderr: str, seen, width: int = WIDTH) -> None:
    """No line wider than the terminal, no `…`, and every word of every table (title, headers,
    cells) whole on one line: a number, an interval `(-0.001..+0.036)`, a key, a path. A word wider
    than a line itself cannot be whole; none of prover's tables has one at 80 columns."""
    assert seen, "no table was printed"
    assert "…" not in stderr, stderr
    lines = stderr.splitlines()
    # (a plain progress line, `stage: n/N ..., 9s elapsed ...`, is a log line: on a terminal a live bar)
    assert max(cell_len(line) for line in lines if " elapsed" not in line) <= width, stderr
    for title, columns, rows in seen:
        shown = [] if columns[:1] == [""] else columns   # a key/value table's "value" heading may go unsaid
        for cell in [title, *shown, *(cell for row in rows for cell in row)]:
            for word in words_of(cell):
                assert cell_len(word) <= width - 4, f"{word!r} is wider than a line"
                assert any(word in line for line in lines), f"{word!r} is split across lines:\n{stderr}"


def run(args: list[str], code: int = 0) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == code, result.output
    return result.stderr


# -- the helper itself ------------------------------------------------------------------------------

def console_out(width: int) -> Out:
    out = Out()
    out.err = Console(file=io.StringIO(), force_terminal=False, width=width)
    return out


def test_a_table_whose_words_cannot_fit_side_by_side_prints_each_row_as_lines():
    out = console_out(40)
    long = "verify.kernel_check=false"   # 24 cells: whole beside the longest key word (40 - 10 - 2)
    rows = [("es@n16 - grpo@n16 (greedy)", "+0.086 (+0.050..+0.121)", long), ("x", 11458.3, "ok")]
    out.table("a title longer than the forty columns of this terminal", ["comparison", "mean (95% t interval)",
                                                                          "what to do"], rows)
    text = out.err.file.getvalue()
    assert_whole(text, [("a title longer than the forty columns of this terminal", ["comparison",
                         "mean (95% t interval)", "what to do"], [[out_module._fmt(c) for c in r] for r in rows])], 40)
    assert "┃" not in text and re.search(r"^comparison +es@n16", text, re.M)   # rows as `column  value` lines


def test_a_table_whose_words_fit_only_without_borders_drops_them():
    out = console_out(50)
    rows = [("runs/study-demo/runs/grpo/n128/seed2", "missing", "(+0.050..+0.121)")]   # 36 + 7 + 16 = 59
    out.table("", ["run dir", "state", "interval"], rows)
    assert "│" not in out.err.file.getvalue()   # nor so at 50: rows as lines
    out = console_out(61)   # 59 + 2 spaces: only without borders (with them 59 + 4)
    out.table("", ["run dir", "state", "interval"], rows)
    text = out.err.file.getvalue()
    assert "│" not in text and "┃" not in text
    assert "runs/study-demo/runs/grpo/n128/seed2 missing (+0.050..+0.121)" in text


def test_a_key_value_table_with_a_long_path_puts_each_value_under_its_key():
    out = console_out(WIDTH)
    path = "reports/es1-vs-es2-vs-grpo1-vs-grpo2-20261207-045816/report.json"   # 66 cells
    rows = [("problem_sets_unchecked", 0), ("report_json", path)]
    out.table("report", ["", "value"], rows)
    lines = out.err.file.getvalue().splitlines()
    assert lines == ["report", "problem_sets_unchecked", "  0", "report_json", f"  {path}"]


def test_a_table_that_fits_stays_a_table_with_its_title_on_a_line_of_its_own():
    out = console_out(60)
    out.table("held-out verified rate at the largest common budget, both metrics", ["arm", "greedy"],
              [("es", "0.229 (0.146..0.340)"), ("grpo", "0.157 (0.090..0.260)")])
    text = out.err.file.getvalue()
    first = text.splitlines()[0]
    assert first.startswith("held-out verified rate") and "┃" not in first   # wrapped at 60, not at the table's width
    assert "┃ arm" in text and "0.229 (0.146..0.340)" in text


# -- every command's tables at 80 columns ----------------------------------------------------------

def test_doctor(printed, no_modal_token):
    stderr = run(["doctor"])
    assert_whole(stderr, printed)
    assert stderr.rstrip().splitlines()[-1].startswith("summary: ") or "summary: " in stderr
    printed.clear()
    assert_whole(run(["doctor", "--config", "demo"]), printed)


def test_the_modal_doctor_plan(printed):
    assert_whole(run(["doctor", "--config", "kimina-es", "--backend", "modal", "--dry-run"]), printed)


@pytest.mark.parametrize("args", [
    ["train", "es", "--config", "kimina-es", "--backend", "modal", "--dry-run"],
    ["train", "grpo", "--config", "kimina-grpo", "--backend", "modal", "--dry-run"],
    ["train", "es", "--config", "demo", "--dry-run"],
    ["eval", "--config", "kimina-es", "--preset", "minif2f-test", "--backend", "modal", "--dry-run"],
], ids=["es-modal", "grpo-modal", "es-local", "eval-modal"])
def test_plans(printed, args):
    assert_whole(run(args), printed)


@pytest.mark.parametrize("backend", ["local", "modal"])
def test_study_plan(printed, backend, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    stderr = run(["study", "plan", "demo", "--backend", backend])
    assert_whole(stderr, printed)
    runs = next(rows for _, columns, rows in printed if "run dir" in columns)
    if len(runs) > out_module.RECORD_BLOCKS_UP_TO:   # many rows too wide for 80 columns: a paragraph each
        assert sum(line.startswith("- ") for line in stderr.splitlines()) >= len(runs)
    assert "runs/study-demo/runs/grpo-null/n256/seed2" in stderr   # a run directory, whole


def test_report(printed, tmp_path, monkeypatch):
    from test_report import ES_ITERATIONS, GRPO_ITERATIONS, make_run

    monkeypatch.chdir(tmp_path)   # paths short enough to fit a line whole
    assert run(["prepare-data", "--config", "demo", "--out", "problems.jsonl"]) is not None
    printed.clear()
    shared = ("data.problems=problems.jsonl", "run.eval_problems=2")
    runs = [make_run(Path(f"es{seed}"), "es", ES_ITERATIONS, *shared, f"run.seed={seed}", heldout={3: 0.5})
            for seed in (1, 2)]
    runs += [make_run(Path(f"grpo{seed}"), "grpo", GRPO_ITERATIONS, *shared, f"run.seed={seed}", heldout={2: 0.25})
             for seed in (1, 2)]
    stderr = run(["report", *map(str, runs), "--allow-unequal-budgets"])
    assert_whole(stderr, printed)


def test_eval_of_verdicts(printed, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    verdicts = Path("a-rather-long-directory-name-for-the-verdicts") / "verdicts.jsonl"
    verdicts.parent.mkdir()
    verdicts.write_text("".join(json.dumps({"id": f"p{i % 3}/{i}", "problem_id": f"p{i % 3}", "split": "test",
                                            "verdict": "verified" if i % 2 else "rejected"}) + "\n"
                                for i in range(12)), encoding="utf-8")
    assert_whole(run(["eval", "--verdicts", str(verdicts), "--k", "1,2,8"]), printed)


def test_prepare_data_and_verify(printed, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    problems = Path("problems.jsonl")
    assert_whole(run(["prepare-data", "examples", "--out", str(problems)]), printed)
    printed.clear()
    from test_verify_statement import STATEMENT

    proofs = Path("samples.jsonl")
    proofs.write_text(json.dumps({"id": "p0", "formal_statement": STATEMENT, "proof": "  linarith"}) + "\n",
                      encoding="utf-8")
    stderr = run(["verify", str(proofs), "--out", "verdicts.jsonl", "--set",
                  f"verify.repl_command={json.dumps(fake_repl_command())}", "--set", "verify.memory_limit_gb=0",
                  *kernel_stand_in_sets()])
    assert_whole(stderr, printed)


@pytest.fixture
def as_prover_main(monkeypatch):
    """What `prover`'s main() does first: no third-party progress bars (restored after the test)."""
    from transformers.utils import logging as transformers_logging

    from prover_cli.progress import quiet_third_party_bars

    was = transformers_logging.is_progress_bar_enabled()
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    quiet_third_party_bars()
    yield
    if was:
        transformers_logging.enable_progress_bar()


@pytest.mark.slow
def test_generate_train_and_replay(printed, tmp_path, tmp_path_factory, monkeypatch, as_prover_main):
    """The commands that load a model: the tiny one, one small ES iteration of the toy task, its
    replay (and no transformers bar such as `Writing model shards` between them)."""
    monkeypatch.chdir(tmp_path)
    cache = tmp_path_factory.getbasetemp() / "tiny-model-cache"   # shared by every module of the session
    tiny = ["--set", f"model.cache_dir={cache}"]
    assert_whole(run(["train", "es", "--config", "toy", "--set", "es.iterations=1", "--set", "es.population=2",
                      "--set", "es.problems_per_iteration=2", "--set", "run.dir=es", *tiny]), printed)
    printed.clear()
    assert_whole(run(["replay-seeds", "es/ledger.json", "--out", "replayed", "--config", "toy", *tiny]), printed)
    printed.clear()
    run(["prepare-data", "--config", "toy", "--out", "problems.jsonl", "--limit", "4"])
    printed.clear()
    assert_whole(run(["generate", "--config", "toy", "--problems", "problems.jsonl", "--out", "samples.jsonl",
                      "--set", "generate.n=1", "--set", "generate.max_tokens=4", *tiny]), printed)


# -- every command's --help ---------------------------------------------------------------------

def every_command() -> list[list[str]]:
    found = []

    def walk(command, path):
        found.append(path)
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return found


COMMANDS = every_command()


def test_every_command_is_covered():
    names = {" ".join(path) for path in COMMANDS}
    assert {"", "doctor", "report", "study plan", "train es", "verify", "replay-seeds"} <= names


@pytest.mark.parametrize("path", COMMANDS, ids=lambda path: " ".join(path) or "prover")
def test_help_at_80_columns_wraps_each_paragraph_once(path, monkeypatch):
    """Each paragraph of the description is wrapped by the terminal alone: no line ends while the
    next line's first word would still have fitted on it (what a docstring hard-wrapped at ~110
    columns and rewrapped at 80 looks like: `… per hour; seeds of one` / `method are …`)."""
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    result = runner.invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(cell_len(line) for line in lines) <= WIDTH
    description = []
    for line in lines:
        if line.startswith("╭"):
            break
        description.append(line.rstrip())
    for above, below in zip(description, description[1:]):
        if not above.strip() or not below.strip() or above.strip().startswith("Usage:"):
            continue
        if below.strip().startswith("prover ") or above.endswith(":"):   # an example line, or a heading's block
            continue
        room = WIDTH - 2 - cell_len(above)   # the help has a margin of one cell each side
        assert cell_len(below.split()[0]) + 1 > room, f"ragged help: {above!r} / {below!r}\n{result.stdout}"


def test_docstrings_keep_each_help_paragraph_on_one_line():
    """The source of the above: a command's help has a line break only between paragraphs and
    before each example line (docgen and --help alike then wrap it at their own width)."""
    def walk(command, path):
        doc = (getattr(command, "help", None) or "").strip()
        for paragraph in doc.split("\n\n"):
            lines = paragraph.splitlines()
            if lines and lines[0].strip() == "Examples:":
                continue
            assert len(lines) == 1, f"`prover {' '.join(path)}`: a hard-wrapped paragraph:\n{paragraph}"
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])


def test_the_readme_table_commands_are_the_ones_covered():
    """Every command the README's "Using it" block runs with a table is exercised above."""
    block = (REPO / "README.md").read_text(encoding="utf-8").split("## Using it", 1)[1].split("```", 2)[1]
    commands = {line.split()[1] for line in block.splitlines() if line.startswith("prover ")}
    covered = {"--version", "doctor", "prepare-data", "generate", "verify", "eval", "train", "replay-seeds", "report",
               "study"}   # --version prints no table; the others are above
    assert commands <= covered, commands - covered
