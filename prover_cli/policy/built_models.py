"""Model names built offline from `model.tiny_seed`, never downloaded: what `model.name` loads.

    resolve_model_path("tiny", cache_dir, seed)              # prover_cli/policy/tiny_model.py, built on first use
    resolve_model_path("tiny-countdown", cache_dir, seed)    # prover_cli/policy/warmstart.py: tiny, warm-started
    resolve_model_path("AI-MO/Kimina-Prover-Preview-Distill-1.5B", cache_dir)   # any other name: as is

The samplers, the GRPO policy, Modal's model staging and the ledger's base check ask here; the
builders themselves know nothing of each other's names (warmstart builds on tiny_model).
"""

from __future__ import annotations

import errno
from pathlib import Path

from prover_cli.errors import ConfigError
from prover_cli.policy.tiny_model import TINY_NAME, build_tiny_model, tiny_model_dir
from prover_cli.policy.warmstart import WARMSTART_NAME, build_warmstart, warmstart_dir

BUILT_NAMES = (TINY_NAME, WARMSTART_NAME)  # model names built offline from `model.tiny_seed`, never downloaded


def resolve_model_path(name: str, cache_dir: str | Path, seed: int = 0) -> str:
    """The path or hub id transformers should load: builds `tiny` and `tiny-countdown` on first use."""
    if name in BUILT_NAMES:
        ensure_cache_dir(cache_dir)
    if name == TINY_NAME:
        return str(build_tiny_model(tiny_model_dir(cache_dir, seed), seed))
    if name == WARMSTART_NAME:
        return str(build_warmstart(warmstart_dir(cache_dir, seed), cache_dir, seed))
    return name


def ensure_cache_dir(cache_dir: str | Path) -> Path:
    """`model.cache_dir`, created if missing; a ConfigError naming the key and the path when it
    cannot be (a parent that does not exist and cannot be made, a file in the way, no permission)."""
    path = Path(cache_dir)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        name = errno.errorcode.get(exc.errno or 0, "")
        reason = "a file is in the way" if isinstance(exc, FileExistsError) else (exc.strerror or str(exc))
        raise ConfigError(f"model.cache_dir = \"{cache_dir}\": cannot create that directory ({exc.filename or path}: "
                          f"{reason}{f' [{name}]' if name else ''}); built models (`tiny`, `tiny-countdown`) are "
                          "kept there", hint="set model.cache_dir to a directory this user can create and write, "
                                             "e.g. --set model.cache_dir=.prover-cache") from None
    return path
