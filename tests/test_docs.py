"""docs/config.md and docs/cli.md are generated; fail when the checked-in copies drift."""

import pytest

from prover_cli.docgen import generated


@pytest.mark.parametrize("path,text", list(generated().items()), ids=lambda v: getattr(v, "name", ""))
def test_generated_doc_is_current(path, text):
    assert path.exists(), f"{path} missing: run `make docs`"
    assert path.read_text(encoding="utf-8") == text, f"{path.name} drifted: run `make docs` and commit"
