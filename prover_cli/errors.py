"""Typed errors. The library raises these; `cli.py` prints each as one `Error:` line (exit 1).

Every error carries where it came from (file, line, key) so the user can fix the input without
reading a traceback.
"""

from __future__ import annotations


class ProverError(Exception):
    """Base class: a failure the user can act on. `hint` names the next thing to try."""

    hint: str | None = None

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        if hint is not None:
            self.hint = hint


class ConfigError(ProverError):
    """A config file or `--set` override is invalid: names the file, the key and what is allowed."""

    hint = "see docs/config.md for every key, its type and default"


class InputError(ProverError):
    """An input file (JSONL, ledger, dataset) is missing or malformed: names the file and line."""


class BackendError(ProverError):
    """A backend (Modal, vLLM, a Lean REPL) is unavailable or misconfigured."""

    hint = "run `prover doctor` to see what this machine has"


class NotBuiltError(ProverError):
    """A stage that this version of prover does not provide yet."""


class ReplayMismatchError(ProverError):
    """Replaying a seed ledger produced weights whose fingerprint differs from the record."""
