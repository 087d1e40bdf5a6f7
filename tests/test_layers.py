"""The package's layers: no module imports a trainer except the command layer (issue #24), and
code outside prover_cli/es/ reaches ES only through its entry points (issue #34).

A trainer (`grpo/train.py`, `es/train.py`) is the algorithm and its glue; what others need from it lives
a layer down (tasks/problems.py, policy/rollout.py, es/population.py, metrics.py, ...). Generic helpers (a
model directory, its fingerprint, its config.json's dtype) live in policy/model_dir.py, not in es/, so
held-out evaluation, GRPO and the samplers never climb into ES for them. Imports are read with
`ast`, lazy ones inside functions included.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "prover_cli"
TRAINERS = {"prover_cli.grpo", "prover_cli.grpo.train", "prover_cli.es.train"}
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


# What a module outside prover_cli/es/ may import from it: module -> names ("*": the module itself).
ES_ENTRY_POINTS = {
    "prover_cli.es.train": {"train_es"},                     # `prover train es` (command layer only, above)
    "prover_cli.es.probe": {"probe_es"},                     # `prover train es --probe`
    "prover_cli.es.replay": {"replay_seeds"},                # `prover replay-seeds`, `prover eval --ledger`
    "prover_cli.es.member": {"MemberEvaluator", "heldout_at"},  # ES members and held-out away from the loop (Modal)
    "prover_cli.es.population": {"member_completions", "load_es_sampler",  # a pipelined share's engines (Modal)
                                 "LocalPopulation",  # train_es's population seam, which Modal's extends
                                 "lora_members"},  # es.noise = "lora": the whole population on the loop's engine (Modal)
    "prover_cli.es.ledger": {"LEDGER_FILE"},                 # the ledger's file name in run.dir (Modal retries, downloads)
    "prover_cli.es.vllm_lora": {"engine_rank"},              # the plan's LoRA slots: the max_lora_rank an engine gets
    "prover_cli.es.signal": {"NOISE_BELOW", "WINDOW"},       # `prover report`'s signal-share diagnostics
    "prover_cli.es.weights": {"NamedWeights", "save_model_dir"},  # a sampler's weights perturbed in place, saved
    "prover_cli.es.fused_cpu": {"*"},                        # `prover doctor`: is the fused path there
    "prover_cli.es.fused_gpu": {"*"},
}


def es_imports(path: Path) -> set[tuple[str, str]]:
    """(module of prover_cli.es, name) for each thing `path` imports from ES; "*" for a whole module."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update((alias.name, "*") for alias in node.names if alias.name.startswith("prover_cli.es."))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "prover_cli.es":
                found.update((f"prover_cli.es.{alias.name}", "*") for alias in node.names)
            elif node.module.startswith("prover_cli.es."):
                found.update((node.module, alias.name) for alias in node.names)
            elif node.module == "prover_cli" and any(alias.name == "es" for alias in node.names):
                found.add(("prover_cli.es", "*"))
    return found


def test_code_outside_es_imports_only_its_entry_points():
    offenders = set()
    for path in PACKAGE.rglob("*.py"):
        if module_name(path).startswith("prover_cli.es"):
            continue
        offenders.update((module_name(path), module, name) for module, name in es_imports(path)
                         if name not in ES_ENTRY_POINTS.get(module, set()))
    assert offenders == set()


def test_the_es_scan_sees_a_generic_helper_taken_from_es(tmp_path):
    sample = tmp_path / "m.py"
    sample.write_text("def f():\n    from prover_cli.es.weights import fingerprint\n    from prover_cli.es import noise\n"
                      "    import prover_cli.es.ledger\n")
    assert es_imports(sample) == {("prover_cli.es.weights", "fingerprint"), ("prover_cli.es.noise", "*"),
                                  ("prover_cli.es.ledger", "*")}


def test_the_scan_sees_lazy_and_package_relative_imports(tmp_path):
    sample = tmp_path / "m.py"
    sample.write_text("def f():\n    from prover_cli.grpo import train\n    import prover_cli.es.train\n")
    assert TRAINERS <= imported(sample)


# verify/'s layers, lowest first (issue #43): a module imports only from its own layer or one before
# it, lazy imports included; the entry points (engine.py, placement.py, the package) sit above all.
VERIFY_LAYERS = ("prover_cli.verify.text", "prover_cli.verify.lean", "prover_cli.verify.kernel")


def verify_layer(name: str) -> int:
    """The layer of a module of prover_cli.verify: its index in VERIFY_LAYERS, or len() for the top."""
    return next((k for k, layer in enumerate(VERIFY_LAYERS) if name == layer or name.startswith(layer + ".")),
                len(VERIFY_LAYERS))


def verify_climbs(path: Path, name: str | None = None) -> set[tuple[str, str]]:
    """(module, what it imports) for each import of `path` (module `name`, else its own) from a
    verify layer above its own."""
    name = name or module_name(path)
    return {(name, target) for target in imported(path)
            if target.startswith("prover_cli.verify") and verify_layer(target) > verify_layer(name)}


def test_verify_layers_import_only_downward():
    paths = [p for p in (PACKAGE / "verify").rglob("*.py") if "__pycache__" not in p.parts]
    assert {verify_layer(module_name(p)) for p in paths} == set(range(len(VERIFY_LAYERS) + 1))
    assert set().union(*(verify_climbs(p) for p in paths)) == set()


def test_the_verify_scan_sees_a_lazy_climb_and_allows_a_descent(tmp_path):
    sample = tmp_path / "m.py"
    sample.write_text("from prover_cli.verify.text.rules import Verdict\n\n\n"
                      "def f():\n    from prover_cli.verify.kernel.stage import KernelStage\n")
    assert verify_climbs(sample, "prover_cli.verify.lean.m") == {
        ("prover_cli.verify.lean.m", "prover_cli.verify.kernel.stage"),
        ("prover_cli.verify.lean.m", "prover_cli.verify.kernel.stage.KernelStage")}
    assert verify_climbs(sample, "prover_cli.verify.engine") == set()
