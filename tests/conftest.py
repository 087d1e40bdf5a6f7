"""Shared test fixtures. Verify fixtures: the REPL stand-in and a small, fast `[verify]` config."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
FAKE_REPL = REPO / "tests" / "fake_repl.py"


def fake_repl_command(*args: str) -> list[str]:
    """argv that starts the REPL stand-in (tests/fake_repl.py), with its options."""
    return [sys.executable, str(FAKE_REPL), *args]


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
