"""`prover replay-seeds`: rebuild ES weights from the base model and a ledger, on any device.

    prover replay-seeds runs/demo/ledger.json --out runs/demo/replayed [--upto N] [--device cuda]

Everything replay needs is in the ledger: the base model (name, revision, sha256 of its weights;
the seed of the tiny test model), the dtype and the master dtype, the run seed and the ES
parameters. The base is loaded in the model dtype, its master built (fp32 for a version-2
ledger; the model's dtype for a version-1 ledger, as those runs kept it), checked against the
recorded sha256, brought forward record by record (from the latest intact snapshot when there
is one), and each iteration's fingerprint is checked: the first mismatch stops replay with a
ReplayMismatchError naming that iteration. The output is a `from_pretrained`-loadable directory
holding the master, tensor for tensor identical to the run's final/.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prover_cli.errors import InputError, ReplayMismatchError
from prover_cli.es.ledger import master_dtype_of, read_ledger, record_rewards, sha256_file
from prover_cli.es.update import apply_rewards
from prover_cli.progress import NULL_REPORTER, Reporter

if TYPE_CHECKING:
    from prover_cli.config import Config
    from prover_cli.es.weights import ESWeights

_DTYPES = ("float32", "bfloat16", "float16")


def replay_seeds(config: Config, *, ledger_path: str | Path, out_dir: str | Path, upto: int | None = None,
                 device: str = "cpu", reporter: Reporter = NULL_REPORTER) -> dict[str, Any]:
    from prover_cli.es.weights import NamedWeights, save_model_dir
    from prover_cli.policy.model_dir import save_atomically
    from prover_cli.policy.samplers.transformers_sampler import load_model_and_tokenizer, resolve_device

    ledger_path, out_dir = Path(ledger_path), Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"--out {out_dir}: is a file; replay writes a model directory", hint="pass a new directory")
    if out_dir.exists() and any(out_dir.iterdir()) and not (out_dir / "config.json").exists():
        raise InputError(f"--out {out_dir}: exists and is not a model directory; it would be replaced",
                         hint="pass a new or empty directory")
    header, records = read_ledger(ledger_path)
    if upto is not None:
        if upto > len(records):
            raise InputError(f"{ledger_path}: --upto {upto}, but the ledger has {len(records)} iterations")
        records = records[:upto]
    base = header["base_model"]
    if header["dtype"] not in _DTYPES:
        raise InputError(f"{ledger_path}: dtype {header['dtype']!r} is not one of {', '.join(_DTYPES)}")
    if master_dtype_of(header) not in (None, "float32"):
        raise InputError(f"{ledger_path}: master_dtype {master_dtype_of(header)!r} is not \"float32\"")
    # The ledger decides what to load; only where the tiny model is cached comes from the config.
    model_config = dataclasses.replace(config.model, name=base["name"], revision=base["revision"],
                                       dtype=header["dtype"], tiny_seed=base.get("tiny_seed", 0))
    model, tokenizer, device = load_model_and_tokenizer(model_config, device=resolve_device(device))
    weights = NamedWeights.from_module(model, master_dtype=master_dtype_of(header))
    base_sha256 = weights.fingerprint()
    if base_sha256 != base["sha256"]:
        raise ReplayMismatchError(
            f"{ledger_path}: iteration 0: base model {base['name']!r} has weights sha256 {base_sha256[:16]}..., "
            f"the ledger recorded {base['sha256'][:16]}...; replay would build other weights",
            hint="load the exact base model revision the run used (base_model in the ledger header)")

    started_from = rebuild(weights, header, records, ledger_path=ledger_path, reporter=reporter)

    # whole or not at all; weights holding NaN or inf are refused before anything is written
    save_atomically(out_dir, lambda tmp: save_model_dir(model, tokenizer, weights, tmp))
    return {
        "ok": True,
        "iterations": len(records),
        "started_from": "base model" if started_from == 0 else f"snapshot at iteration {started_from}",
        "device": device,
        "dtype": header["dtype"],
        "master_dtype": weights.master_dtype,
        "fingerprint": weights.fingerprint()[:16],
        "out": str(out_dir),
    }


def rebuild(weights: ESWeights, header: dict[str, Any], records: list[dict[str, Any]], *, ledger_path: Path,
            reporter: Reporter = NULL_REPORTER) -> int:
    """Bring base `weights` to the end of `records`, checking every fingerprint on the way.

    Starts from the latest intact snapshot among the records when there is one; returns the
    iteration it started from (0: the base model). Shared by --resume and replay-seeds.
    """
    start = _load_latest_snapshot(weights, records, ledger_path)
    with reporter.task("replay", total=len(records) - start, unit="it") as bar:
        for record in records[start:]:
            apply_rewards(weights, record_rewards(record), header["run_seed"], record["i"], header["es"])
            got = weights.fingerprint()[:len(record["fp"])]
            if got != record["fp"]:
                raise ReplayMismatchError(
                    f"{ledger_path}: iteration {record['i']}: weights fingerprint {got} != ledger {record['fp']}; "
                    f"replay diverges first at iteration {record['i']}",
                    hint="a reward was edited, or the base model or the prover version differs from the run's")
            bar.advance(1)
    return start


def _load_latest_snapshot(weights: ESWeights, records: list[dict[str, Any]], ledger_path: Path) -> int:
    """Load the latest snapshot whose file exists and hashes to its name; 0 (the base) if none."""
    for record in reversed(records):
        path = ledger_path.parent / "snapshots" / f"{record.get('snap')}.safetensors"
        if record.get("snap") and path.exists() and sha256_file(path) == record["snap"]:
            weights.load(path)
            got = weights.fingerprint()[:len(record["fp"])]
            if got != record["fp"]:  # an intact file with other weights: fail closed, do not guess
                raise ReplayMismatchError(f"{path}: iteration {record['i']}: snapshot fingerprint {got} != "
                                          f"ledger {record['fp']}")
            return record["i"]
    return 0
