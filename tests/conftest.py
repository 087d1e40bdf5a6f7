"""Shared test fixtures. Verify fixtures: the REPL stand-in and a small, fast `[verify]` config."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
FAKE_REPL = REPO / "tests" / "fake_repl.py"
# The kernel stage's stand-ins (tests/fake_lean.py, tests/fake_safe_verify.py) at the default
# toolchain's pin (SafeVerify minif2f-kimina-check, Lean 4.15): every verify test runs the stage.
KERNEL_PIN_COMMIT = "577e95319a2bb1bb8df541f0c645811f6577a0ae"
KERNEL_STAND_INS = {
    "lean_command": [sys.executable, str(REPO / "tests" / "fake_lean.py")],
    "kernel_checker_command": [sys.executable, str(REPO / "tests" / "fake_safe_verify.py"), "--pin", KERNEL_PIN_COMMIT],
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
    driving the stand-in, with small deadlines so fault tests stay fast."""
    from prover_cli.config import VerifyConfig

    def make(repl_args: list[str] | tuple[str, ...] = (), **overrides):
        config = VerifyConfig()
        config.repl_command = fake_repl_command(*repl_args)
        config.workers = 2
        config.timeout_s = 2.0
        config.header_timeout_s = 10.0
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


@pytest.fixture
def no_modal_token(tmp_path, monkeypatch):
    """No Modal credentials anywhere: no token variables, and a HOME without ~/.modal.toml."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("MODAL_TOKEN_ID", raising=False)
    monkeypatch.delenv("MODAL_TOKEN_SECRET", raising=False)
    monkeypatch.delenv("MODAL_CONFIG_PATH", raising=False)
