"""Per-toolchain capabilities (prover_cli/verify/lean/toolchain.py): the Lean version is read once per
REPL start from the project's `lean-toolchain` (else `verify.lean_toolchain`), and everything the
verifier sends must exist on it; nothing it sends needs more than Lean v4.3."""

from __future__ import annotations

import re

import pytest

from prover_cli.errors import BackendError
from prover_cli.verify import verify_records
from prover_cli.verify.lean import toolchain
from prover_cli.verify.text.rules import alias_command, trusted_command
from test_verify_statement import STATEMENT


@pytest.mark.parametrize("text, version", [
    ("leanprover/lean4:v4.9.0", (4, 9, 0)),
    ("leanprover/lean4:v4.33.0-rc2\n", (4, 33, 0)),
    ("v4.15.0", (4, 15, 0)),
    ("leanprover/lean4:nightly-2024-05-01", None),
    ("", None),
])
def test_parse_toolchain(text, version):
    assert toolchain.parse_toolchain(text) == version


def test_the_project_lean_toolchain_wins_over_the_config(verify_config, tmp_path):
    config = verify_config(project_dir=str(tmp_path), lean_toolchain="leanprover/lean4:v4.15.0")
    assert toolchain.detect_version(config)[0] == (4, 15, 0)        # no file: the configured pin
    (tmp_path / "lean-toolchain").write_text("leanprover/lean4:v4.9.0\n")
    version, where = toolchain.detect_version(config)
    assert version == (4, 9, 0) and "lean-toolchain" in where


def test_every_option_the_verifier_sends_exists_on_lean_4_3_and_4_9():
    commands = trusted_command(" (x : ℝ) : x = x ") + "\n" + alias_command("Ns.", "t")
    options = set(re.findall(r"set_option (\S+)", commands))
    assert options == {"pp.fullNames"}                               # no pp.maxSteps (4.10+), no pp.all
    assert all(any(form.startswith(f"set_option {o}") for form in toolchain.SENT) for o in options)
    assert "#check" not in commands and "pp.maxSteps" not in commands
    for version in [(4, 3, 0), (4, 9, 0), (4, 10, 0), (4, 33, 0)]:
        assert toolchain.missing_capabilities(version) == []


def test_a_toolchain_that_lacks_a_sent_form_stops_verification_naming_it(verify_config, tmp_path, monkeypatch):
    (tmp_path / "lean-toolchain").write_text("leanprover/lean4:v4.9.0\n")
    config = verify_config(workers=1, project_dir=str(tmp_path))
    monkeypatch.setitem(toolchain.SENT, "set_option pp.maxSteps N in", ((4, 10, 0), "lean4#4556"))
    with pytest.raises(BackendError) as info:
        verify_records([{"id": "a", "formal_statement": STATEMENT, "proof": "  linarith"}], config)
    message = str(info.value)
    assert "Lean 4.9.0" in message and "`set_option pp.maxSteps N in` needs Lean 4.10.0" in message


@pytest.mark.parametrize("version", ["4.9", "4.15", "4.33"])
def test_verification_runs_on_each_toolchain_the_corpus_covers(verify_config, tmp_path, version):
    (tmp_path / "lean-toolchain").write_text(f"leanprover/lean4:v{version}.0\n")
    config = verify_config(workers=1, project_dir=str(tmp_path), repl_args=["--lean-version", version])
    records = [{"id": "ok", "formal_statement": STATEMENT, "proof": "  linarith"},
               {"id": "sorry", "formal_statement": STATEMENT, "proof": "  fake_sorry"}]
    verdicts = verify_records(records, config)
    assert [v["verdict"] for v in verdicts] == ["verified", "rejected"], [v["reason"] for v in verdicts]
