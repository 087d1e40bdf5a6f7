"""The four images as Modal's builder receives them, and the programs each one must have.

Modal builds an image layer by layer; each layer is a Dockerfile: "FROM base" plus one line per
step (`RUN <step>` for `run_commands`, `ENV K=V` for `env`, ...: modal/_image.py, modal 1.6.4).
These tests render every layer of every image exactly as that code does (the layers'
`dockerfile_function`s, read from the installed SDK, for the builder versions below) and parse
the text with buildkit's own Dockerfile parser (the `dockerfile` package on PyPI, the Go parser
moby/buildkit ships, wrapped for Python). Nothing here builds an image: the builder itself only
runs on `modal deploy` / `app.run()`.

Before this test existed, the Lean image wrote lakefile.toml with a `printf` whose argument held
literal newlines; buildkit read that layer as a `RUN printf %s 'name = "prover_verify"` line
followed by the instructions `[[require]]`, `name`, `git` and `rev`, so every Modal command
failed at app start. `test_a_step_with_a_line_break_is_read_as_stray_instructions` keeps that
old step and shows the check catches it.
"""

from __future__ import annotations

import ast
import shlex
import subprocess
from pathlib import Path

import dockerfile
import pytest

from prover_cli.config import Config
from prover_cli.on_modal import functions, images, plan, sandbox

REPO = Path(__file__).resolve().parents[1]
ON_MODAL = REPO / "prover_cli" / "on_modal"
BUILDER_VERSIONS = ("2024.10", "2025.06", "2026.10")  # what Modal's servers choose among for Python 3.11
INSTRUCTIONS = {"FROM", "RUN", "ENV", "COPY", "CMD"}   # what our images are meant to contain


def layers(image, builder_version: str) -> list[list[str]]:
    """Every Dockerfile layer of `image`, base first, as modal 1.6's `_Image._from_args` builds it
    (its `dockerfile_function`); mount layers (`add_local_python_source`) add no Dockerfile."""
    from modal._utils.async_utils import synchronizer

    impl, out = synchronizer._translate_in(image), []
    while impl is not None:
        cells = dict(zip(impl._load.__code__.co_freevars, (c.cell_contents for c in impl._load.__closure__)))
        if "dockerfile_function" not in cells:   # a mount layer: the files arrive at container start
            impl = cells["base_image"]
            continue
        out.append(cells["dockerfile_function"](builder_version).commands)
        impl = (cells["base_images"] or {}).get("base")
    return out[::-1]


def parse(commands: list[str]) -> list[dockerfile.Command]:
    return list(dockerfile.parse_string("\n".join(commands) + "\n"))


def problems(commands: list[str]) -> list[str]:
    """What is wrong with one layer's Dockerfile as buildkit reads it (empty: nothing)."""
    parsed = parse(commands)
    found = [f"line {c.start_line}: unexpected instruction {c.cmd!r} ({c.original[:60]!r})"
             for c in parsed if c.cmd.upper() not in INSTRUCTIONS]
    if len(parsed) != len(commands):
        found.append(f"{len(commands)} steps became {len(parsed)} instructions")
    for command, instruction in zip(commands, parsed):
        if instruction.original != command:
            found.append(f"step {command[:60]!r} was read as {instruction.original[:60]!r}")
    return found


@pytest.mark.parametrize("builder_version", BUILDER_VERSIONS)
@pytest.mark.parametrize("name", sorted(images.IMAGES))
def test_every_layer_is_a_dockerfile_buildkit_reads_as_intended(name, builder_version):
    rendered = layers(images.IMAGES[name], builder_version)
    assert rendered[0][0].startswith("FROM python:3.11")  # debian_slim(python_version="3.11")
    assert all(layer[0] == "FROM base" for layer in rendered[1:])
    for layer in rendered:
        assert problems(layer) == []
    runs = [c.value[0] for layer in rendered for c in parse(layer) if c.cmd == "RUN"]
    if name == "lean":  # every Lean build step reaches the builder whole, as one RUN
        for _, steps in images.LEAN_BUILD_STEPS:
            for step in steps:
                assert step in runs


def test_a_step_with_a_line_break_is_read_as_stray_instructions():
    """The Lean image's lakefile step before this fix: the check must fail on it."""
    old_lakefile = ('name = "prover_verify"\n\n[[require]]\nname = "mathlib"\n'
                    'git = "https://github.com/leanprover-community/mathlib4"\nrev = "v4.15.0"\n')
    old_layer = ["FROM base", "RUN mkdir -p /opt/lean-project",
                 f"RUN printf %s {shlex.quote(old_lakefile)} > /opt/lean-project/lakefile.toml"]
    found = problems(old_layer)
    assert [c.cmd for c in parse(old_layer)][2:] == ["RUN", "[[require]]", "name", "git", "rev", "'"]
    assert any("unexpected instruction '[[require]]'" in p for p in found)
    with pytest.raises(ValueError, match="one Dockerfile line"):
        images.one_line([f"printf %s {shlex.quote(old_lakefile)} > /opt/lean-project/lakefile.toml"])


def test_write_file_step_writes_exactly_the_lines(tmp_path):
    """The step, run by /bin/sh as the builder runs a RUN line, writes the intended file."""
    target = tmp_path / "lakefile.toml"
    step = images.write_file_step(str(target), images.LEAN_PROJECT_LAKEFILE_LINES)
    assert "\n" not in step
    subprocess.run(["/bin/sh", "-c", step], check=True)
    assert target.read_text() == images.LEAN_PROJECT_LAKEFILE
    assert 'rev = "v4.15.0"' in target.read_text()
    weird = ["it's", "", "$HOME `x` \\n %s", "#comment"]
    subprocess.run(["/bin/sh", "-c", images.write_file_step(str(target), weird)], check=True)
    assert target.read_text() == "".join(line + "\n" for line in weird)


# --------------------------------------------------------------------------------------------
# The programs each image has, and every program our steps and code run in it
# --------------------------------------------------------------------------------------------

SHELL_BUILTINS = {"cd"}
SPECS = plan.image_specs(images.LEAN_TOOLCHAIN, images.MATHLIB_REV)


def programs_of(step: str) -> list[str]:
    """The programs a shell step starts: the first word of each command between && || | ;,
    and the program `lake env` runs."""
    lexer = shlex.shlex(step, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words, out, start = list(lexer), [], True
    for i, word in enumerate(words):
        if word in ("&&", "||", "|", ";"):
            start = True
            continue
        if word in (">", ">>", "<"):
            continue
        if start:
            out.append(word)
            if word == "lake" and words[i + 1:i + 2] == ["env"]:
                out.append(words[i + 2])
            start = False
    return out


def test_every_lean_build_step_runs_only_programs_the_image_has_by_then():
    have = set(SPECS["lean"].executables) | SHELL_BUILTINS
    assert programs_of("cd /x && lake env lean /tmp/a.lean | tar xz -C /tmp") == ["cd", "lake", "lean", "tar"]
    for _, steps in images.LEAN_BUILD_STEPS:
        for step in steps:
            missing = [p for p in programs_of(step) if p not in have]
            assert missing == [], f"{step!r} runs {missing}, which plan.LEAN_EXECUTABLES does not list"


def test_no_image_claims_kill():
    """/bin/kill is procps, which no slim image has: ending a process group is the image's Python."""
    for spec in SPECS.values():
        assert "kill" not in spec.executables and "pkill" not in spec.executables
        assert "python" in spec.executables


def _decorated_image(function: ast.FunctionDef) -> str | None:
    """The image of an `@app.function(**_declared("name"))` function, from the plan's table."""
    for decorator in function.decorator_list:
        for node in ast.walk(decorator):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "_declared":
                return functions.R[node.args[0].value].image
    return None


def _argv0(node: ast.AST, module: object) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
        return _argv0(node.elts[0], module)
    if isinstance(node, ast.Name) and isinstance(getattr(module, node.id, None), (list, tuple)):
        return getattr(module, node.id)[0]
    return None


SUBPROCESS_CALLS = {"run", "Popen", "call", "check_call", "check_output"}
OS_EXEC_CALLS = {"execv", "execvp", "execve", "execvpe", "spawnv", "spawnvp", "system", "popen"}


def calls_in_on_modal() -> list[tuple[str, int, str, str | None]]:
    """(file, line, image, program) of every process start in prover_cli/on_modal/*.py."""
    import importlib

    found = []
    for path in sorted(ON_MODAL.glob("*.py")):
        module = importlib.import_module(f"prover_cli.on_modal.{path.stem}")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for top in tree.body:
            image = _decorated_image(top) if isinstance(top, ast.FunctionDef) else None
            for node in ast.walk(top):
                if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                    continue
                owner = getattr(node.func.value, "id", None)
                attr = node.func.attr
                if attr == "exec" and owner != "os":  # Sandbox.exec: every Sandbox is made from the Lean image
                    found.append((path.name, node.lineno, "lean", _argv0(node.args[0], module) if node.args else None))
                elif owner == "subprocess" and attr in SUBPROCESS_CALLS:
                    found.append((path.name, node.lineno, image or "?", _argv0(node.args[0], module)))
                elif owner == "os" and attr in OS_EXEC_CALLS:
                    found.append((path.name, node.lineno, image or "?", None))
        for name, value in vars(module).items():  # argv constants the Sandbox runs: REPL_COMMAND, ...
            if name.endswith("_COMMAND") and isinstance(value, list) and path.stem == "images":
                found.append((path.name, 0, "lean", value[0]))
    return found


def test_every_exec_and_subprocess_argv_in_on_modal_names_a_program_its_image_has():
    assert sandbox.sandbox_arguments(Config())["image"] is images.lean_image  # why `.exec` means the Lean image
    found = calls_in_on_modal()
    assert {(f, p) for f, _, _, p in found} >= {("sandbox.py", "python"), ("functions.py", "lake"),
                                                 ("images.py", "lake")}
    for file, line, image, program in found:
        assert image != "?", f"{file}:{line}: a process started outside a declared function: which image?"
        assert program is not None, f"{file}:{line}: the program it runs is not a literal argv[0]"
        assert program in SPECS[image].executables, \
            f"{file}:{line} runs {program!r} in the {image} image, which does not list it (plan/pins.py)"


def test_the_kernel_checker_is_built_in_its_own_image_only():
    """The fast path's Lean image holds no checker step (a checker that does not build cannot fail
    it); the kernel image is the same toolchain and Mathlib layers, then the checker, no REPL; the
    kernel stage's Sandboxes use the kernel image, the REPLs' the Lean image."""
    runs = {name: [c.value[0] for layer in layers(images.IMAGES[name], BUILDER_VERSIONS[-1])
                   for c in parse(layer) if c.cmd == "RUN"] for name in ("lean", "kernel")}
    checker_steps = set(images.KERNEL_CHECKER_STEPS)
    assert checker_steps and not checker_steps & set(runs["lean"]) and checker_steps <= set(runs["kernel"])
    assert not set(images.REPL_STEPS) & set(runs["kernel"]) and set(images.REPL_STEPS) <= set(runs["lean"])
    base = [step for _, steps in images.LEAN_BASE_STEPS for step in steps]
    first = runs["lean"].index(base[0])   # after the apt layer, the same toolchain and Mathlib layers
    assert runs["lean"][:first + len(base)] == runs["kernel"][:first + len(base)]
    assert runs["lean"][first:first + len(base)] == base
    assert sandbox.kernel_sandbox_arguments(Config())["image"] is images.kernel_image
    assert sandbox.sandbox_arguments(Config())["image"] is images.lean_image
    assert "repl" not in images.SPECS["kernel"].executables and "lake" in images.SPECS["kernel"].executables


def _local(step: str, tmp_path: Path) -> str:
    """A build step with its /opt and /usr/local/bin paths moved under tmp_path, `python` as this one."""
    import sys

    return (step.replace("/opt/", f"{tmp_path}/opt/").replace("/usr/local/bin/", f"{tmp_path}/bin/")
            .replace("python -c", f"{shlex.quote(sys.executable)} -c"))


def test_a_checker_that_does_not_build_leaves_a_program_that_says_so(tmp_path):
    """The failure branch, run by /bin/sh as the builder runs a RUN line: the marker, and in the
    checker's place a program whose every run is an `error` of the kernel stage naming the log."""
    from prover_cli.verify.kernel.isolated import RunResult
    from prover_cli.verify.kernel.prover_check_reader import read_batch

    (tmp_path / "opt").mkdir()
    (tmp_path / "bin").mkdir()
    (tmp_path / "opt" / "kernel-checker-build.sh").write_text("echo compiling\necho 'error: unknown constant'\nexit 1\n")
    subprocess.run(["/bin/sh", "-c", _local(images.KERNEL_CHECKER_STEPS[-1], tmp_path)], check=True)
    assert (tmp_path / "opt" / "kernel-checker-FAILED").exists()
    done = subprocess.run([str(tmp_path / "bin" / images.KERNEL_PIN.program), "pairs.txt"],
                          capture_output=True, text=True)
    assert done.returncode == 1 and done.stderr.startswith(
        "uncaught exception: the kernel checker did not build in the kernel image (")
    assert "error: unknown constant" in done.stderr and "kernel-checker-build.log" in done.stderr
    answer = read_batch(RunResult(exit_code=1, stderr=done.stderr), ["t"], frozenset(), "x")
    assert isinstance(answer, str) and "did not build in the kernel image" in answer   # never a pass
    # a build that succeeded leaves neither the marker nor the stand-in program
    (tmp_path / "opt" / "kernel-checker-FAILED").unlink()
    (tmp_path / "bin" / images.KERNEL_PIN.program).unlink()
    (tmp_path / "opt" / "kernel-checker-build.sh").write_text("exit 0\n")
    subprocess.run(["/bin/sh", "-c", _local(images.KERNEL_CHECKER_STEPS[-1], tmp_path)], check=True)
    assert not (tmp_path / "opt" / "kernel-checker-FAILED").exists() and not list((tmp_path / "bin").iterdir())


def test_the_safeverify_build_compares_the_manifests_naming_both_files_and_revisions(tmp_path):
    """Real-format manifests (tests/test_kernel_manifest.py: SafeVerify's at b291b588)."""
    from test_kernel_manifest import write_manifest

    script = "\n".join(images.KERNEL_CHECKER_SCRIPT)
    assert "lake build prover_check" in script and "grep -qx 'pair 0 passed'" in script   # the default pin: ours
    project = write_manifest(tmp_path / "opt" / "lean-project" / "lake-manifest.json")
    checker = tmp_path / "opt" / "safeverify" / "lake-manifest.json"
    for revs, ok in (({}, True), ({"batteries": "0123456789abcdef0123456789abcdef01234567"}, False)):
        write_manifest(checker, **revs)
        done = subprocess.run(["/bin/sh", "-c", _local(images.MANIFEST_CHECK, tmp_path)], capture_output=True, text=True)
        assert (done.returncode == 0) == ok, done.stderr
    assert f"batteries 0123456789ab in {checker}, b25b36a7caf8 in {project}" in done.stderr


def test_every_image_takes_the_package_with_its_data_files():
    """Modal's `add_local_python_source` leaves out non-Python files by default (NON_PYTHON_FILES):
    the lexer's token tables, the shipped configs and the checker's Lean source would be missing
    in the containers. Each image passes an ignore list that drops bytecode only."""
    from modal.file_pattern_matcher import FilePatternMatcher

    from prover_cli.on_modal import images

    source = Path(images.__file__).read_text(encoding="utf-8")
    # one call per image; the Lean image and the kernel image come from one `_lean_image`
    assert source.count('.add_local_python_source("prover_cli", ignore=PACKAGE_IGNORE)') == len(images.IMAGES) - 1
    assert '.add_local_python_source("prover_cli")' not in source
    ignored = FilePatternMatcher(*images.PACKAGE_IGNORE)
    package = Path(images.__file__).resolve().parents[1]
    data = [p.relative_to(package.parent) for p in package.rglob("*") if p.is_file() and p.suffix in {".json", ".toml", ".lean", ".jsonl"}]
    assert any(p.parts[-2] == "tokens" for p in data) and any(p.suffix == ".lean" for p in data)
    assert not [p for p in data if ignored(p)]
    assert ignored(Path("prover_cli/verify/__pycache__/lexer.cpython-311.pyc"))
