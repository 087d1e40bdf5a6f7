"""Seeds derived from their parts: every random choice of a run is a pure function of `run.seed` and where it is made."""

from __future__ import annotations

import hashlib
from typing import Any


def derive_seed(*parts: Any, bits: int = 63) -> int:
    """A seed from its parts via sha256: stable across machines and Python versions."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> (64 - bits)
