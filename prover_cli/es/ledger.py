"""ledger.json: an ES run as base weights plus ~150 bytes per iteration (docs/ledger.md).

One JSON document: the header (what replay needs besides the base weights) and `iterations`,
one compact record per line:

    {"i":12,"r":".25 0 .125 1 ...","fp":"3fa2c1d09b7e54aa"}

`r` holds each member's reward in member order, rounded to REWARD_DECIMALS (training uses the
rounded values, so replay reads exactly what training used); `fp` is the start of the weights'
fingerprint after the update; `skip` marks an iteration whose rewards were all equal; `snap`
names a snapshot. Seeds are not stored: they derive from (run seed, iteration, member).

The file is rewritten whole after each iteration (temp file, fsync, rename, fsync of the
directory), so a `kill -9` at any moment leaves the previous or the new ledger, never a torn one.
Rewriting costs O(iterations) bytes per iteration: 200 KB at 1,000 iterations, nothing next to
sampling.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from prover_cli import __version__
from prover_cli.errors import InputError
from prover_cli.es.noise import NOISE_NAME, NOISE_VERSION

FORMAT = "prover-es-ledger"
VERSION = 1
LEDGER_FILE = "ledger.json"
REWARD_DECIMALS = 3
FINGERPRINT_CHARS = 16  # 64 bits: a wrong replay passes a check with probability 2^-64
# Header keys that may change when a run is resumed (everything else must match the config).
RESUMABLE_CHANGES = ("es.iterations", "created_by")


def make_header(config: Any, *, base_sha256: str, dtype: str, problems_sha256: str) -> dict[str, Any]:
    es, model, gen = config.es, config.model, config.generate
    base = {"name": model.name, "revision": model.revision, "sha256": base_sha256}
    if model.name == "tiny":  # rebuilt offline from its seed by replay
        base["tiny_seed"] = model.tiny_seed
    return {
        "format": FORMAT,
        "version": VERSION,
        "created_by": f"prover-cli {__version__}",
        "noise": {"name": NOISE_NAME, "version": NOISE_VERSION},
        "base_model": base,
        "dtype": dtype,
        "run_seed": config.run.seed,
        "task": config.data.task,
        "problems_sha256": problems_sha256,
        "es": {
            "population": es.population, "sigma": es.sigma, "learning_rate": es.learning_rate,
            "antithetic": es.antithetic, "fitness_shaping": es.fitness_shaping,
            "iterations": es.iterations, "problems_per_iteration": es.problems_per_iteration,
            "samples_per_problem": es.samples_per_problem, "snapshot_every": es.snapshot_every,
        },
        # These change rewards, not replay; a resumed run needs them unchanged to stay bit-exact.
        "sampling": {"backend": gen.backend, "temperature": gen.temperature, "top_p": gen.top_p,
                     "max_tokens": gen.max_tokens},
        "reward_decimals": REWARD_DECIMALS,
        "fingerprint_chars": FINGERPRINT_CHARS,
    }


def header_differences(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """`key: ledger value != config value` for every header value a resume may not change."""
    def flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in d.items():
            if isinstance(value, dict):
                out.update(flat(value, f"{prefix}{key}."))
            else:
                out[prefix + key] = value
        return out

    a, b = flat(stored), flat(current)
    return [f"{k}: ledger {a.get(k)!r} != now {b.get(k)!r}"
            for k in sorted(set(a) | set(b)) if k not in RESUMABLE_CHANGES and a.get(k) != b.get(k)]


def reward_text(reward: float) -> str:
    """A reward as the ledger writes it: rounded to REWARD_DECIMALS, without spare zeros."""
    text = f"{reward:.{REWARD_DECIMALS}f}".rstrip("0").rstrip(".")
    if text in ("-0", ""):
        text = "0"
    return text.replace("0.", ".", 1) if text.startswith(("0.", "-0.")) else text


def make_record(iteration: int, rewards: list[str], fingerprint: str, skipped: bool,
                snapshot: str | None = None) -> dict[str, Any]:
    record: dict[str, Any] = {"i": iteration, "r": " ".join(rewards), "fp": fingerprint[:FINGERPRINT_CHARS]}
    if skipped:
        record["skip"] = 1
    if snapshot:
        record["snap"] = snapshot
    return record


def record_rewards(record: dict[str, Any]) -> list[float]:
    return [float(text) for text in record["r"].split()]


def ledger_text(header: dict[str, Any], records: list[dict[str, Any]]) -> str:
    """The header indented for reading, then one compact line per iteration."""
    head = json.dumps({**header, "iterations": []}, indent=1)[: -len("[]\n}")]
    if not records:
        return head + "[]\n}\n"
    return head + "[\n" + ",\n".join(json.dumps(r, separators=(",", ":")) for r in records) + "\n]\n}\n"


def write_ledger(path: str | Path, header: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """Atomically replace the ledger: temp file, fsync, rename, fsync of the directory."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(ledger_text(header, records))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # make the rename itself durable
    finally:
        os.close(directory)


def bytes_per_iteration(header: dict[str, Any], records: list[dict[str, Any]]) -> float:
    """On-disk bytes the records add to the ledger, per iteration."""
    size = len(ledger_text(header, records).encode())
    return (size - len(ledger_text(header, []).encode())) / max(len(records), 1)


def read_ledger(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(header, records), checked enough that replay fails on a bad ledger, not midway."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: ledger not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read ledger: {exc}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(f"{path}: not a prover ES ledger (expected \"format\": \"{FORMAT}\")")
    if data.get("version") != VERSION:
        raise InputError(f"{path}: ledger version {data.get('version')!r}; this prover reads version {VERSION}",
                         hint="replay it with the prover version that wrote it (see `created_by`)")
    noise = data.get("noise", {})
    if noise != {"name": NOISE_NAME, "version": NOISE_VERSION}:
        raise InputError(f"{path}: noise {noise!r}; this prover implements {NOISE_NAME} v{NOISE_VERSION}")
    for key in ("base_model", "dtype", "run_seed", "es", "iterations"):
        if key not in data:
            raise InputError(f"{path}: ledger header lacks `{key}`")
    records = data.pop("iterations")
    population = data["es"]["population"]
    for index, record in enumerate(records, start=1):
        where = f"{path}: iteration {index}"
        if not isinstance(record, dict) or record.get("i") != index:
            raise InputError(f"{where}: expected a record with \"i\": {index}")
        try:
            rewards = record_rewards(record)
        except (KeyError, AttributeError, ValueError):
            raise InputError(f"{where}: `r` must be a string of space-separated numbers") from None
        if len(rewards) != population:
            raise InputError(f"{where}: {len(rewards)} rewards for a population of {population}")
        if not isinstance(record.get("fp"), str) or not record["fp"]:
            raise InputError(f"{where}: missing fingerprint `fp`")
    return data, records


def sha256_file(path: str | Path) -> str:
    """sha256 (hex) of a file's bytes: how records name their snapshots."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
