"""The README cannot drift: every command of its "Using it" block runs here, as written where this
machine can, with a named stand-in (`--set`) or `--dry-run` where it needs a GPU, Lean or a hub
download, and argument-parsed only where it needs a finished GPU run. A command added to the
block without a line in PLAN fails the test."""

from __future__ import annotations

import json
import re
import shlex

import pytest
from typer.testing import CliRunner

from conftest import REPO, fake_repl_command, kernel_stand_in_sets

README = REPO / "README.md"

# How each README command runs here: (mode, extra arguments, why).
#   run      as written
#   stand-in as written plus the extra `--set` overrides that swap in what this machine lacks
#   dry-run  as written plus --dry-run (the plan; the real run needs a GPU and the 1.5B model)
#   parse    arguments parsed by the real command, not run (needs the output of a GPU run)
TINY = ["--set", "model.name=tiny", "--set", "generate.backend=transformers", "--set", "model.dtype=float32",
        "--set", "model.device=cpu", "--set", "generate.max_tokens=4"]
REPL = ["--set", f"verify.repl_command={json.dumps(fake_repl_command())}", "--set", "verify.memory_limit_gb=0",
        *kernel_stand_in_sets()]
PLAN: dict[str, tuple[str, list[str], str]] = {
    "prover --version": ("run", [], ""),
    "prover doctor": ("run", [], ""),
    "prover prepare-data examples --out problems.jsonl": ("run", [], ""),
    "prover generate --config configs/kimina-es.toml --problems problems.jsonl --out samples.jsonl":
        ("stand-in", TINY, "the Kimina model needs a hub download and vLLM a GPU: the tiny model samples instead"),
    "prover verify samples.jsonl --out verdicts.jsonl":
        ("stand-in", REPL, "no Lean here: the REPL stand-in (tests/fake_repl.py) answers; not Lean verdicts"),
    "prover eval --verdicts verdicts.jsonl --k 1,8": ("run", [], ""),
    "prover train es --config configs/kimina-es.toml": ("dry-run", ["--dry-run"], "a GPU and the 1.5B model"),
    "prover replay-seeds runs/kimina-es/ledger.json --out weights/":
        ("parse", [], "needs the ledger of a finished kimina-es run"),
    "prover train grpo --config configs/kimina-grpo.toml": ("dry-run", ["--dry-run"], "a GPU and the 1.5B model"),
    "prover report runs/kimina-es runs/kimina-grpo": ("parse", [], "needs the two finished GPU runs"),
    "prover train es --config configs/kimina-es.toml --backend modal --dry-run": ("run", [], ""),
    "prover study plan demo": ("run", [], ""),
}


def using_it_commands() -> list[str]:
    """The `prover ...` lines of the README's "Using it" block, comments removed."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Using it"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [shlex.join(shlex.split(line, comments=True)) for line in block.splitlines() if line.strip()]


def test_every_readme_command_has_a_plan():
    commands = using_it_commands()
    assert all(c.startswith("prover ") for c in commands), commands
    assert set(commands) == set(PLAN), "README 'Using it' and tests/test_readme.py PLAN differ"
    assert len(commands) == len(set(commands))


def test_readme_k_values_fit_the_samples_generate_makes():
    """`eval --k` after `generate` must ask for at most generate.n samples per problem."""
    from prover_cli.config import load_config

    commands = using_it_commands()
    generate = next(c for c in commands if c.startswith("prover generate"))
    args = shlex.split(generate)
    n = load_config(REPO / args[args.index("--config") + 1]).generate.n
    evaluate = shlex.split(next(c for c in commands if c.startswith("prover eval")))
    ks = [int(k) for k in evaluate[evaluate.index("--k") + 1].split(",")]
    assert max(ks) <= n


def test_readme_names_the_two_setup_commands_and_the_exit_codes():
    text = README.read_text(encoding="utf-8")
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    for target in ("demo", "test"):
        assert f"make {target}" in text and re.search(rf"^{target}:", makefile, re.M)
    assert "download.pytorch.org/whl/cpu" in makefile and "TORCH_INDEX" in text
    # one exit-code rule, in the README and in the code
    from prover_cli import cli

    assert (cli.EXIT_FAILURE, cli.EXIT_USAGE, cli.EXIT_INTERRUPTED) == (1, 2, 130)
    rule = text[text.index("**Exit codes**"):]
    assert re.search(r"0 success; 1 the work failed.*2 a usage or config error.*130 interrupted", rule, re.S)


@pytest.mark.slow
def test_readme_using_it_block_runs(tmp_path, monkeypatch, no_modal_token):
    """The block top to bottom in a fresh directory; each step's output feeds the next."""
    from prover_cli.cli import app

    (tmp_path / "configs").symlink_to(REPO / "configs")
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    results = {}
    for command in using_it_commands():
        mode, extra, why = PLAN[command]
        args = shlex.split(command)[1:] + extra
        if mode == "parse":
            _parse_only(app, args)
            continue
        result = runner.invoke(app, args)
        assert result.exit_code == 0, f"{command} ({mode}{': ' + why if why else ''}):\n{result.stderr}"
        results[command] = result
    assert len((tmp_path / "problems.jsonl").read_text().splitlines()) >= 5
    samples = (tmp_path / "samples.jsonl").read_text().splitlines()
    verdicts = (tmp_path / "verdicts.jsonl").read_text().splitlines()
    assert len(samples) == len(verdicts) > 0
    assert "pass@8" in results["prover eval --verdicts verdicts.jsonl --k 1,8"].stderr
    assert "torch" in results["prover --version"].stdout


def _parse_only(app, args: list[str]) -> None:
    """Parse `args` with the real command (options, types, required arguments) without running it."""
    import typer.main

    command = typer.main.get_command(app)
    name, rest = "prover", list(args)
    while hasattr(command, "list_commands"):  # a group: descend to the subcommand
        name, rest = rest[0], rest[1:]
        sub = command.get_command(command.context_class(command), name)
        assert sub is not None, f"no command {name!r}"
        command = sub
    command.make_context(name, rest)  # raises a usage error on an unknown option or a bad value
