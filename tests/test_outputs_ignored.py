"""What the README's own commands write into the checkout is ignored by git, so running them there
(`make demo`, `prover report runs/es runs/grpo`, the "Using it" block) leaves `make test` green:
tests/test_readme_layout.py lists every top-level directory that is not ignored (issue #38)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import REPO
from test_readme_layout import required


def default_outputs(tmp_path: Path) -> list[str]:
    """The directories the commands create in the working directory when given no --out."""
    from prover_cli.config import config_from_dict
    from prover_cli.evaluate import eval_output_dir
    from prover_cli.comparison.report import prepare_out_dir

    report = prepare_out_dir(None, [{"name": "es", "dir": tmp_path / "es"}, {"name": "grpo", "dir": tmp_path / "grpo"}])
    evaluation = eval_output_dir(config_from_dict({"data": {"problems": "problems.jsonl"}}), None)
    demo = config_from_dict({}).run_dir
    return [report.parts[0], evaluation.parts[0], "weights", Path(demo).parts[0]]   # weights/: README's replay-seeds --out


def test_the_default_output_directories_are_ignored(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    outputs = default_outputs(tmp_path)
    assert outputs[:2] == ["reports", "eval"]
    (tmp_path / ".gitignore").write_text((REPO / ".gitignore").read_text(encoding="utf-8"), encoding="utf-8")
    for name in outputs:
        (tmp_path / name).mkdir(exist_ok=True)
    assert required(tmp_path) & {name + "/" for name in outputs} == set()   # the layout test's own rule


def test_git_ignores_them_and_the_using_it_files():
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    paths = ["reports/es-vs-grpo-20260101-000000/report.json", "eval/plot.png", "weights/model.safetensors",
             "runs/demo/ledger.json", "problems.jsonl", "samples.jsonl", "verdicts.jsonl", "samples.verdicts.jsonl"]
    done = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=REPO, capture_output=True, text=True)
    assert sorted(done.stdout.split()) == sorted(paths), done.stderr
