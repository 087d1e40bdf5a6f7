"""README.md's Layout section matches the tree (issue #34).

The rule:

- the layout is the first fenced block after the `## Layout` heading;
- an *entry line* is indented fewer than ENTRY_INDENT columns (description lines that continue the
  one above are indented to the description column, further in); its entries are the
  comma-separated names before the first run of two spaces: `name.py`, `name/`, or a path such as
  `scripts/demo.sh`;
- an entry sits inside the nearest entry line above it that is indented less and names a
  directory (`prover_cli/`, then `tasks/` inside it, ...);
- every entry exists (a `/` entry as a directory, any other as a file);
- listed are: every `.py` file under prover_cli/ except dunder files (`__init__.py`,
  `__main__.py`), every directory under prover_cli/ except `__pycache__`, and every top-level
  directory of the repository that is neither hidden nor ignored by a `dir/` or glob line of
  `.gitignore` (an entry inside a top-level directory, such as `scripts/demo.sh`, lists it).
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

from conftest import REPO

ENTRY_INDENT = 12


def layout_block(readme: str) -> list[str]:
    section = readme.split("\n## Layout\n", 1)[1]
    return section.split("```", 2)[1].split("\n")[1:]  # the lines after the opening fence


def listed(lines: list[str]) -> list[str]:
    """Every entry of the layout, as a path relative to the repository root (directories end in /)."""
    stack: list[tuple[int, str]] = []  # (indent, directory path) of the enclosing entries
    paths = []
    for line in lines:
        indent = len(line) - len(line.lstrip(" "))
        if not line.strip() or indent >= ENTRY_INDENT:
            continue
        names = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else ""
        entries = [parent + name.strip() for name in names.split(",") if name.strip()]
        paths += entries
        if len(entries) == 1 and entries[0].endswith("/"):
            stack.append((indent, entries[0]))
    return paths


def ignored_patterns(root: Path) -> list[str]:
    gitignore = root / ".gitignore"
    lines = gitignore.read_text(encoding="utf-8").splitlines() if gitignore.exists() else []
    return [line.strip().strip("/") for line in lines if line.strip() and not line.startswith("#")]


def required(root: Path) -> set[str]:
    package = root / "prover_cli"
    need = {p.relative_to(root).as_posix() for p in package.rglob("*.py")
            if "__pycache__" not in p.parts and not (p.name.startswith("__") and p.name.endswith("__.py"))}
    need |= {p.relative_to(root).as_posix() + "/" for p in package.rglob("*")
             if p.is_dir() and "__pycache__" not in p.parts}
    patterns = ignored_patterns(root)
    need |= {p.name + "/" for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")
             and not any(fnmatch.fnmatch(p.name, pattern) for pattern in patterns)}
    return need


def problems(root: Path) -> list[str]:
    paths = listed(layout_block((root / "README.md").read_text(encoding="utf-8")))
    found = []
    for path in paths:
        target = root / path.rstrip("/")
        if not (target.is_dir() if path.endswith("/") else target.is_file()):
            found.append(f"README.md Layout lists {path}, which does not exist")
    covered = set(paths) | {path.split("/", 1)[0] + "/" for path in paths}
    found += [f"README.md Layout does not list {path}" for path in sorted(required(root) - covered)]
    return found


def test_the_readme_layout_lists_exactly_the_tree():
    assert problems(REPO) == []


def test_the_layout_is_read_as_a_tree():
    lines = ["prover_cli/", "  cli.py              the command", "                      more about it",
             "  tasks/              tasks", "    lean.py             lean", "  configs/, studies/  data",
             "scripts/demo.sh       the demo"]
    assert listed(lines) == ["prover_cli/", "prover_cli/cli.py", "prover_cli/tasks/", "prover_cli/tasks/lean.py",
                             "prover_cli/configs/", "prover_cli/studies/", "scripts/demo.sh"]


def test_a_missing_module_a_stale_entry_and_an_unlisted_directory_are_caught(tmp_path):
    (tmp_path / "prover_cli" / "__pycache__").mkdir(parents=True)
    for name in ("__init__.py", "a.py", "b.py"):
        (tmp_path / "prover_cli" / name).write_text("")
    (tmp_path / "docs").mkdir()
    (tmp_path / "runs").mkdir()  # ignored below: no need to list it
    (tmp_path / ".gitignore").write_text("runs/\n")
    (tmp_path / "README.md").write_text("# x\n\n## Layout\n\n```\nprover_cli/\n  a.py    one\n  gone.py  stale\n```\n")
    assert problems(tmp_path) == ["README.md Layout lists prover_cli/gone.py, which does not exist",
                                  "README.md Layout does not list docs/",
                                  "README.md Layout does not list prover_cli/b.py"]
