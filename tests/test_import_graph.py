"""No import circles between the package's files (issue #24).

The graph: one node per file of prover_cli (a package's __init__.py is the package), one edge per
`import` / `from ... import` of prover_cli in it, read with `ast`, so imports inside functions
(the lazy ones) count as much as those at the top. Relative imports are resolved, and
`from prover_cli.x import y` is an edge to prover_cli.x.y when y is a submodule, else to
prover_cli.x. `importlib.import_module("...")` by name (backends.py reaching on_modal/, the task
registry) is not an import statement and is not counted. A circle is a strongly connected
component of more than one file, or a file that imports itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

def module_files(package_dir: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under `package_dir`."""
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _containing(name: str, modules: dict[str, Path]) -> str | None:
    """`name` if it is a module of the package, else its nearest enclosing module (None: not ours)."""
    while name not in modules and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in modules else None


def imported_modules(name: str, modules: dict[str, Path]) -> set[str]:
    """The package's modules that module `name` imports anywhere in its file (itself included)."""
    path = modules[name]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package holding this file, level - 1 packages up
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                package = package[:len(package) - (node.level - 1)]
                base = ".".join(package + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                       for alias in node.names]
        else:
            continue
        found.update(filter(None, (_containing(target, modules) for target in targets)))
    return found


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    modules = module_files(package_dir)
    return {name: imported_modules(name, modules) for name in modules}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node, and nodes with an edge to themselves,
    each sorted, in sorted order (Tarjan's algorithm, iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            successor = next(successors, None)
            if successor is not None:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                elif successor in on_stack:
                    low[node] = min(low[node], index[successor])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.get(node, ()):
                    found.append(sorted(component))
    return sorted(found)


def test_the_cycle_finder_finds_every_circle_and_only_circles():
    graph = {
        "a": {"b"}, "b": {"c"}, "c": {"a", "d"},    # a -> b -> c -> a
        "d": set(), "f": {"d", "a"},                 # reach a circle without being in it
        "e": {"e"},                                  # imports itself
        "g": {"h"}, "h": {"g", "i"}, "i": {"h"},     # two circles sharing h: one component
        "x": {"y"}, "y": {"z"}, "z": set(),          # a chain
    }
    assert circles(graph) == [["a", "b", "c"], ["e"], ["g", "h", "i"]]
    assert circles({"x": {"y"}, "y": {"z"}, "z": set()}) == []
    long_chain = {str(n): {str(n + 1)} for n in range(5000)} | {"5000": {"0"}}  # deeper than recursion allows
    assert circles(long_chain) == [sorted(long_chain)]


def test_imports_are_read_lazy_relative_and_by_submodule(tmp_path):
    package = tmp_path / "prover_cli"
    files = {
        "__init__.py": "",
        "a.py": "def late():\n    from prover_cli.b import thing  # lazy\n    return thing\n",
        "b.py": "from . import c\nfrom .sub import d\nimport json\nthing = 1\n",
        "c.py": "import importlib\nimport prover_cli.sub.d as dd\nimportlib.import_module('prover_cli.a')\n",
        "sub/__init__.py": "from .d import value\n",
        "sub/d.py": "from .. import a\nfrom prover_cli import b, c as cc\nvalue = 'import prover_cli.e'\n",
        "e.py": "from prover_cli.sub import value\nfrom prover_cli.b import thing, missing\n",
    }
    for name, text in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    assert import_graph(package) == {
        "prover_cli": set(),
        "prover_cli.a": {"prover_cli.b"},
        "prover_cli.b": {"prover_cli.c", "prover_cli.sub.d"},
        "prover_cli.c": {"prover_cli.sub.d"},                       # importlib by name: not counted
        "prover_cli.sub": {"prover_cli.sub.d"},
        "prover_cli.sub.d": {"prover_cli.a", "prover_cli.b", "prover_cli.c"},
        "prover_cli.e": {"prover_cli.sub", "prover_cli.b"},
    }
    assert circles(import_graph(package)) == [["prover_cli.a", "prover_cli.b", "prover_cli.c", "prover_cli.sub.d"]]


def test_no_import_circles_between_the_package_files():
    graph = import_graph(REPO / "prover_cli")
    assert len(graph) > 50 and "prover_cli.es.train" in graph  # the real package was read
    found = circles(graph)
    assert not found, "import circles between files (move the shared piece down a layer):\n" + "\n".join(
        " <-> ".join(component) for component in found)
