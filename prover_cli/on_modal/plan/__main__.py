"""`python -m prover_cli.on_modal.plan docs/modal.md`: rewrite the generated blocks of each file named."""

import sys
from pathlib import Path

from prover_cli.on_modal.plan.docs import render_docs

if __name__ == "__main__":
    for name in sys.argv[1:]:
        path = Path(name)
        path.write_text(render_docs(path.read_text(encoding="utf-8")), encoding="utf-8")
