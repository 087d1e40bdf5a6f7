"""The `prover` command layer: help, lazy imports, error mapping, exit codes, backend seam."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prover_cli import backends
from prover_cli.cli import app

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()

SUBCOMMANDS = ["prepare-data", "verify", "generate", "train", "replay-seeds", "eval", "doctor", "report"]


def test_help_lists_subcommands():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for name in SUBCOMMANDS:
        assert name in result.stdout
    train = runner.invoke(app, ["train", "--help"])
    assert train.exit_code == 0 and " es " in train.stdout and " grpo " in train.stdout


def test_help_and_cli_import_do_not_import_heavy_packages():
    probe = (
        "import sys; from typer.testing import CliRunner; import prover_cli.cli as c;"
        "r = CliRunner().invoke(c.app, ['--help']); assert r.exit_code == 0;"
        "r = CliRunner().invoke(c.app, ['train', 'es', '--help']); assert r.exit_code == 0;"
        "heavy = [m for m in ('torch', 'vllm', 'modal', 'transformers', 'trl', 'datasets') if m in sys.modules];"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    importtime = subprocess.run([sys.executable, "-X", "importtime", "-c", "import prover_cli.cli"],
                                capture_output=True, text=True, check=True)
    imported = {line.split("|")[-1].strip().split(".")[0] for line in importtime.stderr.splitlines()}
    assert not imported & {"torch", "vllm", "modal", "transformers", "trl"}


def test_config_error_is_one_line_naming_file_and_key(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[es]\npopulation = -4\n", encoding="utf-8")
    result = runner.invoke(app, ["train", "es", "--config", str(bad)])
    assert result.exit_code == 2  # config errors are usage errors
    assert "Error:" in result.stderr and "bad.toml" in result.stderr and "es.population" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_bad_set_override_is_a_usage_error_naming_the_set(tmp_path):
    result = runner.invoke(app, ["doctor", "--set", "es.populaton=8"])
    assert result.exit_code == 2 and "did you mean" in result.stderr
    assert result.stderr.startswith("Error: --set es.populaton=8: unknown key")
    result = runner.invoke(app, ["train", "es", "--config", str(REPO / "configs" / "demo.toml"),
                                 "--set", "es.learning_rate=inf"])
    assert result.exit_code == 2 and result.stderr.startswith("Error: --set es.learning_rate=inf: must be a finite number")


def test_usage_error_exits_2():
    assert runner.invoke(app, ["verify"]).exit_code == 2          # missing argument
    assert runner.invoke(app, ["no-such-command"]).exit_code == 2


def test_doctor_reports_no_gpu_no_lean_no_modal(no_modal_token, monkeypatch):
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + "/usr/bin:/bin")
    result = runner.invoke(app, ["doctor", "--json"])
    assert result.exit_code == 0
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["python"]["ok"] and checks["torch"]["ok"]
    assert checks["cuda"]["ok"] is False
    assert checks["es fused (cpu)"]["ok"] and checks["es fused (cpu)"]["detail"].startswith("ok")
    assert "es fused (cuda)" not in checks  # no GPU: nothing to say
    assert checks["lean repl"]["ok"] is False and "lake" in checks["lean repl"]["detail"]
    assert checks["kernel checker"]["ok"] is False and "`prover_check` not found" in checks["kernel checker"]["detail"]
    assert checks["kernel canary"]["ok"] is False and "not run" in checks["kernel canary"]["detail"]
    assert checks["modal token"]["ok"] is False and "modal token new" in checks["modal token"]["fix"]
    human = runner.invoke(app, ["doctor"])
    assert human.exit_code == 0 and "missing" in human.stderr and "prover-cli[gpu]" in human.stderr


def test_doctor_finds_a_repl_that_answers(tmp_path):
    fake = tmp_path / "repl"
    fake.write_text("#!/bin/sh\ncat > /dev/null\nprintf '{\"env\": 0}\\n\\n'\n", encoding="utf-8")
    fake.chmod(0o755)
    # (that script is no REPL: the verify canary after the probe gives up at the header deadline)
    result = runner.invoke(app, ["doctor", "--json", "--set", f'verify.repl_command=["{fake}"]',
                                 "--set", "verify.header_timeout_s=1"])
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["lean repl"]["ok"] is True


def test_modal_backend_without_credentials_is_one_sentence(no_modal_token, tmp_path):
    proofs = tmp_path / "p.jsonl"
    proofs.write_text("", encoding="utf-8")
    result = runner.invoke(app, ["verify", str(proofs), "--backend", "modal"])
    assert result.exit_code == 1
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(error_lines) == 1 and "Modal credentials" in error_lines[0]
    assert "Traceback" not in result.stderr


def test_modal_backend_routes_through_the_seam(monkeypatch, tmp_path):
    calls = []

    def fake_runner(name, config, kwargs):
        calls.append((name, config.run.dir, sorted(kwargs)))
        return {"ok": True, "ran": name}

    monkeypatch.setattr(backends, "MODAL_RUNNER", fake_runner)
    result = runner.invoke(app, ["replay-seeds", "ledger.json", "--out", str(tmp_path / "m"),
                                 "--backend", "modal", "--set", "run.dir=runs/x", "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {"ok": True, "ran": "replay_seeds"}
    assert calls == [("replay_seeds", "runs/x", ["device", "ledger_path", "out_dir", "upto"])]


def test_unknown_backend_is_an_error():
    result = runner.invoke(app, ["eval", "--verdicts", "v.jsonl", "--backend", "cloud"])
    assert result.exit_code == 2 and "cloud" in result.stderr  # a bad option value: usage error


def test_result_ok_false_gives_exit_1(monkeypatch):
    monkeypatch.setattr(backends, "MODAL_RUNNER", lambda name, config, kwargs: {"ok": False, "failed": 2})
    result = runner.invoke(app, ["eval", "--verdicts", "v.jsonl", "--backend", "modal"])
    assert result.exit_code == 1 and "failed" in result.stderr


def test_unexpected_error_is_one_line_unless_debugging(monkeypatch):
    def boom(name, config, kwargs):
        raise RuntimeError("kaput")

    monkeypatch.setattr(backends, "MODAL_RUNNER", boom)
    result = runner.invoke(app, ["eval", "--verdicts", "v.jsonl", "--backend", "modal"])
    assert result.exit_code == 1 and "unexpected RuntimeError: kaput" in result.stderr
    monkeypatch.setenv("PROVER_DEBUG", "1")
    result = runner.invoke(app, ["eval", "--verdicts", "v.jsonl", "--backend", "modal"])
    assert isinstance(result.exception, RuntimeError)


def test_bad_k_is_a_usage_error():
    result = runner.invoke(app, ["eval", "--verdicts", "v.jsonl", "--k", "1,x"])
    assert result.exit_code == 2


def test_version_names_our_version_and_the_stacks_without_importing_them():
    from prover_cli import __version__

    probe = ("import sys; from typer.testing import CliRunner; import prover_cli.cli as c;"
             "r = CliRunner().invoke(c.app, ['--version']); assert r.exit_code == 0, r.output;"
             "print(r.stdout);"
             "print([m for m in ('torch', 'vllm', 'modal', 'transformers', 'trl') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    lines = out.strip().splitlines()
    assert lines[-1] == "[]"
    rows = dict(line.split(" ", 1) for line in lines[:-1] if line)
    assert rows["prover"] == __version__
    from importlib.metadata import version

    assert rows["torch"] == version("torch")
    assert set(rows) == {"prover", "torch", "transformers", "trl", "vllm", "modal"}
    assert all(value == "not installed" or value[0].isdigit() for value in rows.values())


@pytest.mark.parametrize("argv, expected", [
    (["train", "es", "--config", "c.toml"], "prover train es --config c.toml --resume"),
    (["train", "grpo", "--resume", "--set", "grpo.steps=4"], "prover train grpo --resume --set grpo.steps=4"),
    (["verify", "my samples.jsonl", "--out", "v.jsonl"], "prover verify 'my samples.jsonl' --out v.jsonl"),
])
def test_interrupt_prints_the_command_that_resumes(monkeypatch, tmp_path, argv, expected):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    (tmp_path / "my samples.jsonl").write_text("", encoding="utf-8")
    (tmp_path / "c.toml").write_text("", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(backends, "run", interrupted)
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/prover", *argv])
    result = runner.invoke(app, argv)
    assert result.exit_code == 130
    assert "Interrupted." in result.stderr and f"Resume with: {expected}" in result.stderr
    assert "Traceback" not in result.stderr


def test_disk_full_is_one_line_with_path_and_operation_then_the_rerun_resumes(monkeypatch, tmp_path):
    """An injected ENOSPC on the third verdict: exit 1, one Error line naming the file and
    `write`, no "please report"; once space is back, the same command completes the file."""
    import errno

    from conftest import fake_repl_command, kernel_stand_in_sets
    from prover_cli.fsio.jsonl import ResumableWriter
    from test_verify_statement import STATEMENT

    proofs = tmp_path / "samples.jsonl"
    proofs.write_text("".join(json.dumps({"id": f"p{i}", "formal_statement": STATEMENT, "proof": "  linarith"}) + "\n"
                              for i in range(5)), encoding="utf-8")
    out = tmp_path / "verdicts.jsonl"
    args = ["verify", str(proofs), "--out", str(out), "--set", f"verify.repl_command={json.dumps(fake_repl_command())}",
            "--set", "verify.workers=1", "--set", "verify.memory_limit_gb=0", *kernel_stand_in_sets()]

    class FullDisk:
        """A file handle whose disk fills up after `budget` writes."""

        def __init__(self, inner, budget):
            self.inner, self.budget = inner, budget

        def write(self, text):
            if self.budget == 0:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.budget -= 1
            return self.inner.write(text)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    real_enter = ResumableWriter.__enter__

    def enter_then_fill(self):
        real_enter(self)
        self._handle = FullDisk(self._handle, budget=2)
        return self

    monkeypatch.setattr(ResumableWriter, "__enter__", enter_then_fill)
    failed = runner.invoke(app, args)
    assert failed.exit_code == 1
    errors = [line for line in failed.stderr.splitlines() if line.startswith("Error:")]
    assert errors == [f"Error: {out}: cannot write: No space left on device [ENOSPC]"]
    assert "please report" not in failed.stderr and "free some disk space" in failed.stderr
    assert len(out.read_text().splitlines()) == 2

    monkeypatch.setattr(ResumableWriter, "__enter__", real_enter)
    again = runner.invoke(app, args + ["--json"])
    assert again.exit_code == 0, again.stderr
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert sorted(ids) == [f"p{i}" for i in range(5)]


def test_unwrapped_machine_fault_still_names_path_and_operation(monkeypatch):
    """/dev/full fails every write with ENOSPC: a real fault nobody wrapped, read off the traceback."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")

    def write_to_full_disk(*args, **kwargs):
        with open("/dev/full", "w", encoding="utf-8") as handle:
            handle.write("x" * 10)
            handle.flush()

    monkeypatch.setattr(backends, "MODAL_RUNNER", write_to_full_disk)
    result = runner.invoke(app, ["eval", "--verdicts", "v.jsonl", "--backend", "modal"])
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == "Error: /dev/full: cannot write: No space left on device [ENOSPC]"
    assert "please report" not in result.stderr


def test_progress_is_plain_lines_every_few_seconds_when_stderr_is_not_a_terminal():
    import io

    from rich.console import Console

    from prover_cli import out as out_module
    from prover_cli.out import Out

    now = [0.0]
    out = Out(clock=lambda: now[0])
    out.err = Console(file=io.StringIO(), force_terminal=False, width=200)
    with out.task("train es", total=20, unit="it") as bar:
        for _ in range(20):
            with out.task("generate", total=8, unit="samples") as inner:  # a nested stage per step
                for _ in range(8):
                    now[0] += 0.125
                    inner.advance(1)
            bar.advance(1, reward="0.500")
    lines = out.err.file.getvalue().splitlines()
    assert lines[0] == "train es: started (20 it)"
    assert lines[-1].startswith("train es: 20/20 it, 1.00 it/s, 20s elapsed") and lines[-1].endswith("(done)")
    # 20 s of work at one line per PROGRESS_EVERY_S: a handful of lines, not one per step or sample
    assert 2 <= len(lines) - 2 <= 20 / out_module.PROGRESS_EVERY_S + 1, lines
    assert all("\x1b" not in line for line in lines)  # no terminal escapes in a log file


def test_a_bad_byte_read_anywhere_names_the_file_and_line(monkeypatch, tmp_path):
    """The safety net for text read whole outside the line-by-line readers (e.g. read_text)."""
    bad = tmp_path / "metrics.jsonl"
    bad.write_bytes(b'{"a": 1}\n{"\xff": 2}\n')
    monkeypatch.setattr(backends, "MODAL_RUNNER", lambda name, config, kwargs: bad.read_text(encoding="utf-8"))
    result = runner.invoke(app, ["eval", "--verdicts", "v.jsonl", "--backend", "modal"])
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == f"Error: {bad}:2: not valid UTF-8 (byte 0xff at column 3)"
    assert "please report" not in result.stderr
