"""README.md, as a newcomer reads it (issue #38): what a real run needs comes near the top, the
CUDA-torch caveat where installing is first mentioned, and the block that tries `verify` without
Lean (the tests' stand-ins: not Lean verdicts) runs as written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from conftest import REPO

README = REPO / "README.md"


def test_what_a_real_run_needs_comes_before_the_demo():
    text = README.read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings[:2] == ["What a real run needs", "Two commands"]
    box = text.split("## What a real run needs", 1)[1].split("\n## ", 1)[0]
    assert text[:text.index("## What a real run needs")].count("\n") < 20
    for need in ("CUDA GPU", "Modal", "Mathlib", "REPL", "kernel checker", "bubblewrap", "[gpu]", "prover doctor"):
        assert need in box, need


def test_the_torch_caveat_comes_where_installing_is_first_mentioned():
    text = README.read_text(encoding="utf-8")
    first = text.index("pip install")
    assert "download.pytorch.org/whl/cpu" in text[first - 600:first + 600]
    assert "CUDA" in text[first - 600:first + 600]
    assert "after a plain `pip install`" not in text


def verify_block() -> str:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("**Trying `verify` without Lean.**"):]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)


def test_trying_verify_without_lean_runs_as_written(tmp_path):
    block = verify_block()
    assert "tests/fake_repl.py" in block and "not Lean" in README.read_text(encoding="utf-8")
    # as written from the checkout; here from a scratch directory, the stand-ins named by their full path
    script = block.replace('"python3"', json.dumps(sys.executable)).replace('"tests/', f'"{REPO}/tests/')
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    verdicts = {json.loads(line)["id"]: json.loads(line) for line in (tmp_path / "verdicts.jsonl").read_text().splitlines()}
    assert verdicts["one_plus_one"]["verdict"] == "verified"
    assert verdicts["cheat"]["verdict"] == "rejected" and "sorry" in verdicts["cheat"]["reason"]
