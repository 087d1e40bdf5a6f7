"""The package's layers: no module imports a trainer except the command layer (issue #24).

A trainer (`grpo.py`, `es/train.py`) is the algorithm and its glue; what others need from it lives
a layer down (problems.py, rollout.py, es/population.py, metrics.py, ...). Imports are read with
`ast`, lazy ones inside functions included.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "prover_cli"
TRAINERS = {"prover_cli.grpo", "prover_cli.es.train"}
COMMAND_LAYER = ("prover_cli.cli", "prover_cli.backends", "prover_cli.on_modal.")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)  # `from prover_cli import grpo`
    return names


def test_no_module_below_the_command_layer_imports_a_trainer():
    offenders = set()
    for path in PACKAGE.rglob("*.py"):
        name = module_name(path)
        if name in TRAINERS or name.startswith(COMMAND_LAYER) or name in COMMAND_LAYER:
            continue
        offenders.update((name, trainer) for trainer in imported(path) & TRAINERS)
    assert offenders == set()


def test_the_scan_sees_lazy_and_package_relative_imports(tmp_path):
    sample = tmp_path / "m.py"
    sample.write_text("def f():\n    from prover_cli import grpo\n    import prover_cli.es.train\n")
    assert TRAINERS <= imported(sample)
