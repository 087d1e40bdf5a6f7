"""A fresh clone has no ../shared beside it (issue #38): the suite must pass there, skipping by name.

Every test that reads ../shared goes through conftest's `shared` fixture, which skips naming the
missing path; this file holds every other test to that (a static look at tests/), checks the
fixture's behaviour both ways, and checks that CI (.ci/run) runs those tests once as on a clone
without ../shared (PROVER_TEST_SHARED=none), so CI sees what a newcomer sees.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from conftest import REPO, SHARED_ENV, shared_files, shared_root

TESTS = REPO / "tests"
# What a test may import from conftest about ../shared: the parametrization helper (its tests still
# ask for the fixture, which is what skips them). Everything else that names the place is conftest's.
FORBIDDEN_NAMES = {"SHARED", "_SHARED_BESIDE", "shared_root", "SHARED_ENV"}
SHARED_PATH = re.compile(r"(^|[/\\])\.\.[/\\]shared([/\\]|$)")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (prose may say ../shared)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                found.add(id(first.value))
    return found


def _reaches_above_the_checkout(node: ast.AST) -> bool:
    """`REPO.parent`, `….parents[2]`, `….parents[1].parent`, `Path(__file__)….parent.parent.parent`."""
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        base = node.value
        if isinstance(base, ast.Name) and base.id == "REPO":
            return True
        if isinstance(base, ast.Subscript) and isinstance(base.value, ast.Attribute) and base.value.attr == "parents":
            return True
        depth, inner = 1, base
        while isinstance(inner, ast.Attribute) and inner.attr == "parent":
            depth, inner = depth + 1, inner.value
        return depth >= 3
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "parents":
        index = node.slice
        return isinstance(index, ast.Constant) and isinstance(index.value, int) and index.value >= 2
    return False


def shared_uses(path: Path) -> list[str]:
    """Where `path` (a test module) reaches ../shared other than through the fixture."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    docstrings = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.ImportFrom) and node.module in ("conftest", "tests.conftest"):
            found += [f"{where}: imports {alias.name} from conftest" for alias in node.names
                      if alias.name in FORBIDDEN_NAMES]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if node.value == "shared" or SHARED_PATH.search(node.value):
                found.append(f"{where}: the path {node.value!r}")
        elif _reaches_above_the_checkout(node):
            found.append(f"{where}: a path above the checkout ({ast.unparse(node)})")
    return found


def test_no_test_reads_shared_but_through_the_fixture():
    here = Path(__file__).resolve()   # this file names the place to check for it, as conftest does to provide it
    modules = sorted(p for p in TESTS.rglob("*.py")
                     if p.name != "conftest.py" and p.resolve() != here and "__pycache__" not in p.parts)
    assert len(modules) > 50
    found = [use for module in modules for use in shared_uses(module)]
    assert found == [], ("read ../shared through conftest's `shared` fixture (it skips, naming the path, on a clone "
                         "without it):\n" + "\n".join(found))


@pytest.mark.parametrize("source, caught", [
    ('from conftest import SHARED\n', True),
    ('from tests.conftest import shared_root\n', True),
    ('X = Path(__file__).resolve().parents[1].parent / "shared"\n', True),
    ('X = REPO.parent / "data"\n', True),
    ('X = Path(__file__).parents[2] / "data"\n', True),
    ('X = Path(__file__).parent.parent.parent\n', True),
    ('X = open("../shared/data/minif2f.jsonl")\n', True),
    ('def test_a(shared):\n    """Reads ../shared/data."""\n    shared("data", "x.jsonl")\n', False),
    ('X = Path(__file__).resolve().parent.parent / "tests"\n', False),
    ('from conftest import shared_files\nFILES = shared_files("lean-repl-transcripts/*.in")\n', False),
])
def test_the_static_check_catches_each_way_to_reach_shared(tmp_path, monkeypatch, source, caught):
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    module = tmp_path / "test_x.py"
    module.write_text(source, encoding="utf-8")
    assert bool(shared_uses(module)) is caught, shared_uses(module)


def test_the_fixture_skips_naming_the_path_when_shared_is_absent(shared, monkeypatch, request):
    monkeypatch.setenv(SHARED_ENV, "none")
    assert shared_root() is None and shared_files("data/*") == []
    with pytest.raises(pytest.skip.Exception, match=r"needs \.\./shared/data/minif2f/minif2f\.jsonl \(PROVER_TEST_SHARED=none"):
        shared("data", "minif2f", "minif2f.jsonl")
    assert request.node.get_closest_marker("shared") is not None   # `pytest -m shared` selects it


def test_the_fixture_reads_the_copy_it_is_pointed_at(shared, monkeypatch, tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.jsonl").write_text("{}\n", encoding="utf-8")
    monkeypatch.setenv(SHARED_ENV, str(tmp_path))
    assert shared("data", "a.jsonl") == tmp_path / "data" / "a.jsonl"
    assert shared_files("data/*.jsonl") == [tmp_path / "data" / "a.jsonl"]
    with pytest.raises(pytest.skip.Exception, match=r"needs \.\./shared/data/b\.jsonl, absent from"):
        shared("data", "b.jsonl")


def test_ci_runs_the_shared_tests_as_on_a_clone_without_shared():
    """After `make test`, .ci/run runs every test marked `shared` with PROVER_TEST_SHARED=none: they
    must skip (or pass), never fail; `-m shared` selecting nothing would exit 5 and fail CI too."""
    lines = [line.split("#", 1)[0].strip() for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    test_at = lines.index("make test")
    runs = [n for n, line in enumerate(lines) if line.startswith(f"{SHARED_ENV}=none ") and " -m shared" in line]
    assert runs and runs[0] > test_at, "no `PROVER_TEST_SHARED=none … pytest … -m shared` after `make test` in .ci/run"
