"""Every path of this repository that README.md or docs/*.md names exists (issue #38: docs/cli.md
named runs/demo/ledger.json, which the demo does not write; tests/test_demo_explains.py checks the
runs/demo/ ones). Paths that belong to another repository or are placeholders are listed below,
each with where it comes from."""

from __future__ import annotations

import re

from conftest import REPO

PATH = re.compile(r"(?<![\w./-])((?:configs|docs|scripts|tests|benchmarks|prover_cli)/[\w./-]*\w"
                  r"\.(?:py|toml|md|sh|json|jsonl|csv|lean))\b")
NOT_OURS = {
    "configs/NAME.toml": "README: the placeholder of `--config configs/NAME.toml`",
    "configs/sampling.py": "docs/eval.md: DeepSeek-Prover-V1.5's repository",
    "scripts/pipeline.sh": "docs/eval.md: Goedel-Prover-V2's repository",
    "configs/old.toml": "docs/modal.md: a user's config in an example error message",
    "scripts/check_imports.lean": "docs/verify.md: Batteries' repository",
    "tests/lean/run/6090.lean": "docs/verify.md: leanprover/lean4",
    "tests/lean/run/collectAxioms.lean": "docs/verify.md: leanprover/lean4",
}


def test_every_path_the_docs_name_exists():
    missing = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for path in PATH.findall(doc.read_text(encoding="utf-8")):
            if path not in NOT_OURS and not (REPO / path).exists():
                missing.append(f"{doc.relative_to(REPO)}: {path}")
    assert missing == []


def test_the_exceptions_are_still_named_somewhere():
    text = "".join(doc.read_text(encoding="utf-8") for doc in [REPO / "README.md", *(REPO / "docs").glob("*.md")])
    assert [path for path in NOT_OURS if path not in text] == []
