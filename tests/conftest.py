"""Shared test fixtures. Verify fixtures: the REPL stand-in and a small, fast `[verify]` config."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

REPO = Path(__file__).resolve().parents[1]
# ../shared (real Lean transcripts and datasets) sits beside the checkout on the development
# machines only: a fresh clone has none. Tests reach it only through the `shared` fixture below
# (and `shared_files` for a parametrization), which skip, naming what is missing, when it is absent;
# tests/test_no_shared.py holds every other test to that. PROVER_TEST_SHARED=none makes them act
# as on a clone without it (.ci/run does, so CI sees what a newcomer sees); a path points them at
# another copy.
SHARED_ENV = "PROVER_TEST_SHARED"
_SHARED_BESIDE = REPO.parent / "shared"


def shared_root() -> Path | None:
    """The ../shared directory tests may read, or None where there is none (or PROVER_TEST_SHARED=none)."""
    chosen = os.environ.get(SHARED_ENV, "")
    if chosen == "none":
        return None
    root = Path(chosen) if chosen else _SHARED_BESIDE
    return root if root.is_dir() else None


def shared_files(*patterns: str) -> list[Path]:
    """Files of ../shared matching the glob `patterns` (sorted per pattern), for a parametrization;
    [] where there is no ../shared. A test parametrized by them still asks for the `shared` fixture,
    which is what skips it, and marks it, when ../shared is absent."""
    root = shared_root()
    return [] if root is None else [path for pattern in patterns for path in sorted(root.glob(pattern))]


def shared_name(path: Path) -> str:
    """`path` relative to ../shared (a test id)."""
    root = shared_root()
    return str(path.relative_to(root)) if root is not None else str(path)


@pytest.fixture
def shared() -> Callable[..., Path]:
    """A factory: `shared("data", "minif2f", "minif2f.jsonl")` -> the path inside ../shared, or a
    skip naming it when ../shared or that path is absent. Every test that reads ../shared asks for
    this fixture (conftest marks it `shared`: `pytest -m shared` selects them all)."""

    def need(*parts: str) -> Path:
        root = shared_root()
        wanted = "../shared/" + "/".join(parts)
        if root is None:
            why = f"{SHARED_ENV}=none" if os.environ.get(SHARED_ENV) == "none" else "no ../shared beside the checkout"
            pytest.skip(f"needs {wanted} ({why}: it holds real Lean transcripts and datasets, present only on "
                        "the development machines)")
        path = root.joinpath(*parts)
        if not path.exists():
            pytest.skip(f"needs {wanted}, absent from {root}")
        return path

    return need


def pytest_ignore_collect(collection_path, config):
    """tests/real_vllm runs in its own environment only (`make test-vllm` names that directory): the
    main suite does not even import it, whose conftest and test_pipeline.py would otherwise shadow
    this conftest and tests/test_pipeline.py (one module name each, pytest's default import mode)."""
    if collection_path.name == "real_vllm" and collection_path.parent == Path(__file__).parent:
        return not any("real_vllm" in str(arg) for arg in config.args)
    return None


def pytest_configure(config):
    config.addinivalue_line("markers", "shared: reads ../shared through the `shared` fixture (skipped without it)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "shared" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.shared)
FAKE_REPL = REPO / "tests" / "fake_repl.py"
# The kernel stage's stand-ins (tests/fake_lean.py, and tests/fake_checker.py for the default
# toolchain's checker, our prover_check at Lean 4.15): every verify test runs the stage.
# The one hang guard for waits on something healthy (a child starting, taking a lock, printing a
# line, exiting; a stand-in REPL answering): a slow or loaded machine only makes such a wait longer,
# it never fails it; only a real hang does, after this long. Under pytest-timeout's 600 s per test
# (pyproject.toml), so a hang fails with this file's message rather than a bare timeout.
PATIENCE_S = 500.0


def wait_until(predicate: Callable[[], Any], process: Any = None, what: str = "the condition",
               poll_s: float = 0.02) -> Any:
    """Poll `predicate` until it returns something true, and return that. Fails early if `process`
    (a `subprocess.Popen` expected to stay alive meanwhile) exits first, with its output, and
    after PATIENCE_S (a hang). Never fails merely because the machine is slow."""
    deadline = time.monotonic() + PATIENCE_S
    while True:
        # whether it exited is looked at before the predicate: an event just before the exit counts
        exited = process is not None and process.poll() is not None
        value = predicate()
        if value:
            return value
        if exited:
            out, err = process.communicate()
            pytest.fail(f"waiting for {what}: the process exited with {process.returncode} first\n"
                        f"stdout: {out}\nstderr: {err}")
        if time.monotonic() > deadline:
            pytest.fail(f"waiting for {what}: still not there after {PATIENCE_S:g} s (a hang?)")
        time.sleep(poll_s)


KERNEL_STAND_INS = {
    # tests/fake_lean.py, except for the kernel canaries' public attacks (tests/fake_checker.py)
    "lean_command": [sys.executable, str(REPO / "tests" / "fake_checker.py"), "--as-lean"],
    "kernel_checker_command": [sys.executable, str(REPO / "tests" / "fake_checker.py")],
}


def fake_repl_command(*args: str) -> list[str]:
    """argv that starts the REPL stand-in (tests/fake_repl.py), with its options."""
    return [sys.executable, str(FAKE_REPL), *args]


def kernel_stand_in_sets() -> list[str]:
    """`--set` arguments that point the kernel stage at its stand-ins."""
    import json

    return [arg for key, value in KERNEL_STAND_INS.items() for arg in ("--set", f"verify.{key}={json.dumps(value)}")]


@pytest.fixture
def verify_config():
    """A factory: `verify_config(workers=2, timeout_s=2, repl_args=["--delay", "0.1"])` -> VerifyConfig
    driving the stand-in. Its deadlines are for answers that should come, so they are the hang guard
    (PATIENCE_S): a test of a timeout sets its own small one against a stand-in that never answers."""
    from prover_cli.config import VerifyConfig

    def make(repl_args: list[str] | tuple[str, ...] = (), **overrides):
        config = VerifyConfig()
        config.repl_command = fake_repl_command(*repl_args)
        config.workers = 2
        config.timeout_s = PATIENCE_S
        config.header_timeout_s = PATIENCE_S
        config.memory_limit_gb = 0.0
        config.canary = False  # the canary has its own tests (test_verify_canary.py); here it would add requests
        for key, value in KERNEL_STAND_INS.items():
            setattr(config, key, list(value))
        for key, value in overrides.items():
            if not hasattr(config, key):
                raise AttributeError(f"VerifyConfig has no key {key!r}")
            setattr(config, key, value)
        return config

    return make


FAKE_BWRAP = REPO / "tests" / "fake_bwrap.py"


@pytest.fixture(scope="session", autouse=True)
def bwrap_stand_in(tmp_path_factory):
    """`bwrap` on PATH is the stand-in (tests/fake_bwrap.py: checks the box's argv as bwrap 0.8.0
    does, then runs the command unisolated), so every test that spawns a REPL or a kernel step
    goes through the box's argv the same way on every machine, bwrap installed or not. The real
    box is tested by tests/test_verify_box.py against the real bwrap, found past this directory."""
    import os

    directory = tmp_path_factory.mktemp("bwrap-stand-in")
    script = directory / "bwrap"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I -S "{FAKE_BWRAP}" "$@"\n')
    script.chmod(0o755)
    real_path = os.environ.get("PATH", "")
    os.environ["PATH"] = f"{directory}{os.pathsep}{real_path}"
    os.environ["PROVER_TEST_REAL_PATH"] = real_path   # where test_verify_box.py looks for the real bwrap
    yield script
    os.environ["PATH"] = real_path
    os.environ.pop("PROVER_TEST_REAL_PATH", None)


@pytest.fixture(scope="session", autouse=True)
def no_calibration_from_this_machine(tmp_path_factory):
    """Plans read the doctor's calibration from ~/.cache/prover-cli/calibration by default: a user
    who ran `prover doctor --backend modal` here would change every plan a test pins. Tests start
    from an empty calibration directory; a test that wants one sets PROVER_CALIBRATION_DIR itself."""
    import os

    previous = os.environ.get("PROVER_CALIBRATION_DIR")
    os.environ["PROVER_CALIBRATION_DIR"] = str(tmp_path_factory.mktemp("no-calibration"))
    yield
    if previous is None:
        os.environ.pop("PROVER_CALIBRATION_DIR", None)
    else:
        os.environ["PROVER_CALIBRATION_DIR"] = previous


@pytest.fixture
def no_modal_token(tmp_path, monkeypatch):
    """No Modal credentials anywhere: no token variables, and a HOME without ~/.modal.toml."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("MODAL_TOKEN_ID", raising=False)
    monkeypatch.delenv("MODAL_TOKEN_SECRET", raising=False)
    monkeypatch.delenv("MODAL_CONFIG_PATH", raising=False)
