"""What a new user sees (issue #30): tables at 80 columns, help metavars, docs/cli.md examples,
one pin warning per `prover verify`, verdicts that name only what ran, progress lines between
steps in a log file, and no prompt-family warning for tasks that are not Lean."""

from __future__ import annotations

import io
import json
import queue
import re

import pytest
from rich.console import Console
from rich.text import Text
from typer.testing import CliRunner

from conftest import REPO, fake_repl_command, kernel_stand_in_sets
from prover_cli import out as out_module
from prover_cli.cli import app
from prover_cli.out import Out
from test_verify_statement import STATEMENT

runner = CliRunner()


# --------------------------------------------------------------------------------------------
# 1. Tables at 80 columns: folded, never cut
# --------------------------------------------------------------------------------------------

@pytest.fixture
def tables_at_80(monkeypatch):
    """COLUMNS=80, and every table prover prints, as (columns, rows) in the order printed."""
    monkeypatch.setenv("COLUMNS", "80")
    printed: list[tuple[list[str], list[list[str]]]] = []
    table = Out.table

    def recording(self, title, columns, rows):
        rows = [list(row) for row in rows]
        if not self.quiet:
            printed.append(([str(c) for c in columns], [[out_module._fmt(cell) for cell in row] for row in rows]))
        table(self, title, columns, rows)

    monkeypatch.setattr(Out, "table", recording)
    return printed


def rendered_columns(stderr: str) -> list[list[str]]:
    """Per table drawn in `stderr` (top border to bottom border), each column's text with all
    whitespace removed: a word folded or wrapped onto several lines reads whole again."""
    tables, current = [], None
    for line in stderr.splitlines():
        if line.startswith("┏"):
            current = None
        elif line.startswith("└"):
            tables.append(current or [])
            current = None
        elif line[:1] in ("┃", "│"):
            pieces = re.split("[┃│]", line)[1:-1]
            if current is None:
                current = [""] * len(pieces)
            assert len(pieces) == len(current), line
            current = [text + re.sub(r"\s", "", piece) for text, piece in zip(current, pieces)]
    return tables


def assert_every_word_whole(stderr: str, printed) -> None:
    assert printed, "no table was printed"
    assert "…" not in stderr, stderr
    assert max(len(line) for line in stderr.splitlines()) <= 80
    drawn = rendered_columns(stderr)
    assert len(drawn) == len(printed), stderr
    for (columns, rows), texts in zip(printed, drawn):
        assert len(texts) == len(columns)
        for k, text in enumerate(texts):
            for cell in [columns[k], *(row[k] for row in rows)]:
                for word in Text.from_markup(cell).plain.split():
                    assert word in text, f"{word!r} is cut in column {columns[k]!r}:\n{stderr}"


def test_doctor_table_at_80_columns_keeps_every_word(tables_at_80):
    result = runner.invoke(app, ["doctor"])
    assert result.exit_code == 0, result.stderr
    assert_every_word_whole(result.stderr, tables_at_80)
    for word in ("check", "status", "detail", "what to do"):
        assert word in result.stderr
    checker = next((row for row in tables_at_80[0][1] if row[0] == "kernel checker"), ["", "", ""])
    if "GasStationManager/SafeVerify" in checker[2]:   # the checker is not installed here
        assert "GasStationManager/SafeVerify" in rendered_columns(result.stderr)[0][2]


def test_modal_plan_tables_at_80_columns_keep_every_word(tables_at_80):
    result = runner.invoke(app, ["train", "es", "--config", str(REPO / "configs" / "kimina-es.toml"),
                                 "--backend", "modal", "--dry-run"])
    assert result.exit_code == 0, result.stderr
    assert_every_word_whole(result.stderr, tables_at_80)
    plan = rendered_columns(result.stderr)[1]   # [0]: the summary (total, USD per iteration, memory, credentials)
    # 7632: kimina-es's 4 pipelined member containers idling out their 1908 s window, whole
    assert "container-s" in "".join(plan) and "7632" in "".join(plan)


def test_eval_tables_at_80_columns_keep_every_word(tables_at_80, tmp_path, monkeypatch):
    from pathlib import Path

    monkeypatch.chdir(tmp_path)   # a path shorter than a line: one wider can only fold (tests/test_columns80.py)
    verdicts = Path("a-rather-long-directory-name-for-the-verdicts") / "verdicts.jsonl"
    verdicts.parent.mkdir()
    verdicts.write_text("".join(json.dumps({"id": f"p{i % 3}/{i}", "problem_id": f"p{i % 3}", "split": "test",
                                            "verdict": "verified" if i % 2 else "rejected"}) + "\n"
                                for i in range(12)), encoding="utf-8")
    result = runner.invoke(app, ["eval", "--verdicts", str(verdicts), "--k", "1,2,8"])
    assert result.exit_code == 0, result.stderr
    assert_every_word_whole(result.stderr, tables_at_80)
    assert "pass@1" in result.stderr


def test_report_tables_at_80_columns_keep_every_word(tables_at_80, tmp_path, monkeypatch):
    from test_report import ES_ITERATIONS, GRPO_ITERATIONS, make_run

    monkeypatch.chdir(tmp_path)
    es = make_run(tmp_path / "es", "es", ES_ITERATIONS)
    grpo = make_run(tmp_path / "grpo", "grpo", GRPO_ITERATIONS)
    result = runner.invoke(app, ["report", str(es), str(grpo)])
    assert result.exit_code == 0, result.stderr
    assert_every_word_whole(result.stderr, tables_at_80)
    header = "".join(rendered_columns(result.stderr)[0])
    for word in ("method", "decoding", "verified", "reward"):   # were `meth…`, `veri…`
        assert word in header


def test_a_table_wider_than_the_terminal_folds_instead_of_cutting():
    out = Out()
    out.err = Console(file=io.StringIO(), force_terminal=False, width=40)
    long = "verify.kernel_checker_command=GasStationManager/SafeVerify@577e95319a2b"
    out.table("t", ["name", "what to do"], [("kernel checker", long), ("x", 11458.3)])
    text = out.err.file.getvalue()
    assert "…" not in text and all(len(line) <= 40 for line in text.splitlines())
    # words this wide cannot sit side by side in 40 columns: each row is printed as `column  value`
    # lines (prover_cli/out.py), the word wider than the value column folded, never cut
    lines = text.splitlines()
    start = next(line.index("kernel checker") for line in lines if "kernel checker" in line)   # the value column
    assert long in "".join(line[start:].strip() for line in lines) and "1.146e+04" in text


# --------------------------------------------------------------------------------------------
# 2. Help: no metavar on flags, a meaningful one on --set; docs/cli.md examples one per line
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [["--help"], ["verify", "--help"], ["train", "es", "--help"], ["doctor", "--help"]])
def test_help_shows_no_metavar_on_flags_and_names_the_set_format(args, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    result = runner.invoke(app, args)
    assert result.exit_code == 0
    assert "<bool>" not in result.stdout and "<list[str]>" not in result.stdout, result.stdout
    if args != ["--help"]:
        assert "--set" in result.stdout and "SECTION.KEY=VALUE" in result.stdout
        assert re.search(r"--json\s+Print the result", result.stdout), result.stdout


def test_docs_cli_md_shows_each_example_on_its_own_line():
    import inspect

    import typer.main

    from prover_cli.docgen import cli_reference

    text = cli_reference()
    assert "<bool>" not in text and "<list[str]>" not in text
    assert "--set SECTION.KEY=VALUE" in text
    lines = {line.strip() for line in text.splitlines()}
    root = typer.main.get_command(app)
    examples = []

    def walk(command):
        doc = inspect.cleandoc(getattr(command, "help", None) or "")
        if "Examples:" in doc:
            block = doc.split("Examples:", 1)[1].split("\n\n", 1)[0]
            examples.extend(line.strip() for line in block.splitlines() if line.strip())
        for name in getattr(command, "commands", {}):
            walk(command.commands[name])

    walk(root)
    assert len(examples) > 10
    for example in examples:
        assert example in lines, f"{example!r} is not a line of docs/cli.md"
    assert not re.search(r"Examples:[ \t]+prover", text)   # was: all of them run together on one line


# --------------------------------------------------------------------------------------------
# 3. The default pin's warning: once per `prover verify`
# --------------------------------------------------------------------------------------------

def verify_args(tmp_path, proofs):
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in proofs), encoding="utf-8")
    return ["verify", str(path), "--out", str(tmp_path / "verdicts.jsonl"),
            "--set", f"verify.repl_command={json.dumps(fake_repl_command())}", "--set", "verify.workers=1",
            "--set", "verify.memory_limit_gb=0", *kernel_stand_in_sets()]


def test_verify_prints_the_pin_warning_once(tmp_path, monkeypatch):
    from prover_cli.config import VerifyConfig
    from prover_cli.verify.kernel.pins import pin_warning

    monkeypatch.setenv("COLUMNS", "400")   # the warning on one line: counted, not folded
    warning = pin_warning(VerifyConfig())
    assert warning
    args = verify_args(tmp_path, [{"id": "a", "formal_statement": STATEMENT, "proof": "  linarith"}])
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    assert result.stderr.count("has not been compiled or run where it was written") == 1, result.stderr
    as_json = runner.invoke(app, [*args, "--json"])
    assert as_json.exit_code == 0, as_json.stderr
    assert json.loads(as_json.stdout)["warnings"] == [warning]   # with --json: in the result, once
    assert "has not been compiled or run where it was written" not in as_json.stderr


# --------------------------------------------------------------------------------------------
# 4. A verdict's `verifier` names only what ran
# --------------------------------------------------------------------------------------------

def test_a_proof_refused_by_the_text_checks_names_no_toolchain(tmp_path):
    from prover_cli.verify.engine import RULES_VERSION

    args = verify_args(tmp_path, [{"id": "denied", "formal_statement": STATEMENT, "proof": "  sorry"},
                                  {"id": "malformed", "formal_statement": 7, "proof": "  linarith"},
                                  {"id": "checked", "formal_statement": STATEMENT, "proof": "  linarith"}])
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.stderr   # the malformed record makes it 1; the others are checked
    lines = {v["id"]: v for v in map(json.loads, (tmp_path / "verdicts.jsonl").read_text().splitlines())}
    for key in ("denied", "malformed"):   # no REPL ever saw these
        assert lines[key]["verifier"] == {"ran": "text checks", "rules": RULES_VERSION}, lines[key]
        assert "lean_toolchain" not in json.dumps(lines[key]["verifier"])
    checked = lines["checked"]["verifier"]
    assert lines["checked"]["verdict"] == "verified" and checked["backend"] == "repl"
    assert checked["repl_command"][-1].endswith("fake_repl.py")
    # no lean-toolchain file where the stand-in ran: the version is only the configured one, and said so
    assert checked["lean_toolchain_from"].startswith("verify.lean_toolchain (configured")


def test_the_repl_toolchain_is_read_from_the_project_it_runs_in(tmp_path, verify_config):
    from prover_cli.verify import verify_records

    (tmp_path / "lean-toolchain").write_text("leanprover/lean4:v4.9.0\n", encoding="utf-8")
    config = verify_config(workers=1, project_dir=str(tmp_path))
    [line] = verify_records([{"id": "a", "formal_statement": STATEMENT, "proof": "  linarith"}], config)
    assert line["verifier"]["lean_toolchain"] == "leanprover/lean4:v4.9.0"   # not the config's v4.15.0
    assert line["verifier"]["lean_toolchain_from"] == str(tmp_path / "lean-toolchain")


# --------------------------------------------------------------------------------------------
# 5. In a log file: a plain line every few seconds while work runs, between steps too
# --------------------------------------------------------------------------------------------

def log_file_out(now, heartbeat_wait=None):
    out = Out(clock=lambda: now[0], heartbeat_wait=heartbeat_wait or (lambda stop, seconds: stop.wait()))
    out.err = Console(file=io.StringIO(), force_terminal=False, width=200)
    return out


def test_a_log_gets_a_line_every_few_seconds_while_one_step_runs_for_minutes():
    """One ES iteration that takes 30 s (fake clock): the heartbeat prints the running stage's line
    every PROGRESS_EVERY_S, never more often however often it looks."""
    now = [0.0]
    out = log_file_out(now)
    every = out_module.PROGRESS_EVERY_S
    with out.task("train es", total=3, unit="it") as bar:
        for _ in range(int(6 * every / 0.5)):   # looks twice a (fake) second, for 6 periods
            now[0] += 0.5
            out.heartbeat()
        bar.advance(1)
    lines = out.err.file.getvalue().splitlines()
    assert lines[0] == "train es: started (3 it)"
    beats = lines[1:-1]
    assert len(beats) == 6, lines
    assert beats[0].startswith(f"train es: 0/3 it (0%), 0.00 it/s, {every:.0f}s elapsed")
    assert lines[-1].startswith("train es: 1/3 it") and lines[-1].endswith("(done)")


def test_the_heartbeat_names_the_innermost_running_stage():
    now = [0.0]
    out = log_file_out(now)
    with out.task("train es", total=2, unit="it"):
        with out.task("generate", total=64, unit="samples") as inner:
            inner.advance(8)
            now[0] += out_module.PROGRESS_EVERY_S
            out.heartbeat()
    beat = out.err.file.getvalue().splitlines()[1]
    assert beat.startswith("generate: 8/64 samples (12%)"), beat


def test_the_heartbeat_thread_prints_between_steps_and_stops_with_the_stage():
    """The thread, driven by an injected wait (no real sleeps): each released wait is one look."""
    now = [0.0]
    looks: queue.Queue = queue.Queue()
    release: queue.Queue = queue.Queue()

    def wait(stop, seconds):
        looks.put(seconds)
        while not stop.is_set():
            try:
                release.get(timeout=0.01)
                return False
            except queue.Empty:
                pass
        return True

    out = log_file_out(now, heartbeat_wait=wait)
    with out.task("verify", total=4, unit="proofs"):
        assert looks.get(timeout=30) <= out_module.PROGRESS_EVERY_S   # parked in its first wait
        now[0] = 1.0
        release.put(True)
        looks.get(timeout=30)                          # looked: too early for a line
        assert len(out.err.file.getvalue().splitlines()) == 1
        now[0] = out_module.PROGRESS_EVERY_S + 1.0
        release.put(True)
        looks.get(timeout=30)                          # looked again: a line
        lines = out.err.file.getvalue().splitlines()
        assert len(lines) == 2 and lines[1].startswith("verify: 0/4 proofs (0%)"), lines
    assert not [t for t in __import__("threading").enumerate() if t.name == "progress-heartbeat"]
    assert out.err.file.getvalue().splitlines()[-1].endswith("(done)")


# --------------------------------------------------------------------------------------------
# 6. No prompt-family warning for a task that is not Lean
# --------------------------------------------------------------------------------------------

class Notes:
    def __init__(self):
        self.logs = []

    def log(self, message):
        self.logs.append(message)

    def task(self, *args, **kwargs):
        from prover_cli.progress import NULL_REPORTER
        return NULL_REPORTER.task(*args, **kwargs)


@pytest.mark.parametrize("task,warned", [("countdown", False), ("lean", True)])
def test_family_auto_warns_only_for_lean(tmp_path, task, warned):
    from prover_cli.config import load_config
    from prover_cli.generate import generate_samples

    config = load_config(None, [f"data.task={task}", "model.name=someone/countdown-solver-0.5B",
                                f"run.dir={tmp_path / 'run'}"])
    notes = Notes()
    result = generate_samples(config, [], tmp_path / "samples.jsonl", n=1, reporter=notes)
    assert result["family"] == "plain"
    assert any("model.family = auto" in note for note in notes.logs) is warned, notes.logs
