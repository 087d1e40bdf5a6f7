"""docs/modal.md: its cost figures are the plan's output, and its pins are the images' pins."""

import re
from pathlib import Path

from prover_cli.on_modal.plan import BLOCK_START, docs_block, image_specs, render_docs

DOC = Path(__file__).resolve().parents[1] / "docs" / "modal.md"


def test_generated_blocks_match_the_plan_of_today():
    text = DOC.read_text(encoding="utf-8")
    assert text.count(BLOCK_START.split("{config}")[0]) == 2  # kimina-es and kimina-grpo
    assert render_docs(text) == text, "run: python -m prover_cli.on_modal.plan docs/modal.md"
    assert docs_block("configs/kimina-es.toml") in text


def test_every_pinned_requirement_the_doc_names_is_an_image_pin():
    text = DOC.read_text(encoding="utf-8")
    images = text[text.index("**Images.**"):text.index("## Verification")]
    pins = {p for spec in image_specs("leanprover/lean4:v4.15.0", "v4.15.0").values() for p in spec.python_packages}
    named = set(re.findall(r"`([a-z_]+==[0-9.*]+)`", images))
    assert named and named <= pins, named - pins
