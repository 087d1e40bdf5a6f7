"""Every subpackage of prover_cli lists its modules in its `__init__.py` docstring (issue #34).

The rule, for each directory under prover_cli/ holding an `__init__.py` (prover_cli itself is
indexed by README.md's Layout section instead: tests/test_readme_layout.py):

- the index is the module docstring of that `__init__.py`, read with `ast` (never imported);
- an *entry* is a bare file name `name.py`, or a bare directory name `name/`, not preceded by a
  word character, `/` or `.` (so `es/vllm_worker.py` is a path, not an entry);
- complete: every `*.py` file of the directory except `__init__.py`, and every subdirectory that is
  itself a package, is an entry;
- nothing absent: every entry exists in the directory (a `.py` entry as a file, a `/` entry as a
  directory), and every path with a slash ending in `.py` or `/` exists relative to the repository
  root or to prover_cli/.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from conftest import REPO

PACKAGE = REPO / "prover_cli"
ENTRY = re.compile(r"(?<![\w/.])([A-Za-z_]\w*(?:\.py|/))(?![\w/])")
PATH = re.compile(r"(?<![\w/.])([\w-]+(?:/[\w-][\w.-]*)+/?)")  # at least one slash between two names


def index_of(package_dir: Path) -> str:
    return ast.get_docstring(ast.parse((package_dir / "__init__.py").read_text(encoding="utf-8"))) or ""


def problems(package_dir: Path, root: Path = REPO) -> list[str]:
    """What the index of `package_dir` lacks or lists wrongly, one sentence each (empty: it holds)."""
    text = index_of(package_dir)
    entries = set(ENTRY.findall(text))
    where = package_dir.relative_to(root) / "__init__.py"
    found = []
    members = {p.name for p in package_dir.glob("*.py") if p.name != "__init__.py"}
    members |= {f"{p.name}/" for p in package_dir.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    found += [f"{where}: {name} is not in the index" for name in sorted(members - entries)]
    for name in sorted(entries):
        target = package_dir / name.rstrip("/")
        if not (target.is_dir() if name.endswith("/") else target.is_file()):
            found.append(f"{where}: lists {name}, which {package_dir.relative_to(root)}/ does not hold")
    for path in sorted({p.rstrip(".") for p in PATH.findall(text)}):
        if not path.endswith((".py", "/")):
            continue  # a doc, a dotted name after a module path, prose: only module and directory paths count
        if not any((base / path.rstrip("/")).exists() for base in (root, root / "prover_cli")):
            found.append(f"{where}: names {path}, which does not exist")
    return found


SUBPACKAGES = sorted(p.parent for p in PACKAGE.rglob("__init__.py")
                     if p.parent != PACKAGE and "__pycache__" not in p.parts)


def test_the_package_has_the_subpackages_this_test_expects_to_read():
    names = {p.relative_to(PACKAGE).as_posix() for p in SUBPACKAGES}
    assert {"es", "verify", "on_modal", "tasks", "policy", "policy/samplers", "fsio"} <= names


@pytest.mark.parametrize("package_dir", SUBPACKAGES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_each_package_index_lists_exactly_its_modules(package_dir):
    assert problems(package_dir) == []


def test_a_missing_module_and_a_listed_but_absent_one_are_both_caught(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "sub" / "__init__.py").write_text("")
    (package / "data").mkdir()  # not a package: listing it is optional
    (package / "__init__.py").write_text('"""Index.\n\n- a.py  listed\n- gone.py  listed, absent\n'
                                         '- sub/  a subpackage\n- see pkg/missing.py\n"""\n')
    (package / "a.py").write_text("")
    (package / "b.py").write_text("")
    assert problems(package, root=tmp_path) == [
        "pkg/__init__.py: b.py is not in the index",
        "pkg/__init__.py: lists gone.py, which pkg/ does not hold",
        "pkg/__init__.py: names pkg/missing.py, which does not exist",
    ]
