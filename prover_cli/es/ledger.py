"""ledger.json: an ES run as base weights plus ~115 bytes per iteration at population 30 (docs/ledger.md).

One JSON document: the header (what replay needs besides the base weights) and `iterations`,
one compact record per line, a JSON array (version 2):

    ["3fa2c1d09b7e54aa","05b06506404f07b063074"]
    ["3fa2c1d09b7e54aa","05b06506404f07b063074","<sha256 of a snapshot>"]

- [0] the start of the weights' (fp32 master's) fingerprint after the update;
- [1] each member's reward as an exact integer numerator over the header's
  `reward_denominator` (1000: rewards rounded to 3 decimals, as training uses them), written as
  fixed-width lowercase hex, width = length / population; a record with a negative reward
  writes its numerators as space-separated signed decimals instead;
- [2] (optional) the snapshot written after this iteration.

The iteration number is the position; "skipped" is implied by all-equal rewards. Seeds are not
stored: they derive from (run seed, iteration, member). Version 1 ledgers (one object per
record, rewards as decimal strings, the master in the model's dtype) still read and replay.

The file is rewritten whole after each iteration (temp file, fsync, rename, fsync of the
directory), so a `kill -9` at any moment leaves the previous or the new ledger, never a torn one.
Rewriting costs O(iterations) bytes per iteration: 115 KB at 1,000 iterations, nothing next to
sampling.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import math
import sys
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prover_cli import __version__
from prover_cli.config import check_key
from prover_cli.errors import ConfigError, InputError
from prover_cli.es.noise.full import NOISE_NAME, NOISE_VERSION
from prover_cli.fsio.jsonl import read_whole, write_text_atomic
from prover_cli.policy.built_models import BUILT_NAMES
from prover_cli.tasks import reward_range

if TYPE_CHECKING:
    from prover_cli.config import ESConfig, GenerateConfig, ModelConfig

FORMAT = "prover-es-ledger"
VERSION = 2
READABLE_VERSIONS = (1, 2)
LEDGER_FILE = "ledger.json"
REWARD_DECIMALS = 3
REWARD_DENOMINATOR = 10 ** REWARD_DECIMALS  # rewards are stored as numerator / 1000, exactly
REWARD_DENOMINATOR_MAX = 10 ** 18  # what a reader accepts (prover writes 1000)
FINGERPRINT_CHARS = 16  # 64 bits: a wrong replay passes a check with probability 2^-64
MASTER_DTYPE = "float32"  # es/weights.py keeps the master in fp32 whatever the model's dtype
# Header keys that may change when a run is resumed (everything else must match the config).
RESUMABLE_CHANGES = ("es.iterations", "created_by")
# Header keys added after version 2 was first written, and their value in ledgers that lack them.
LATER_KEYS = {"es.shuffle_rewards": False}


def make_header(es: ESConfig, *, model: ModelConfig, generate: GenerateConfig, run_seed: int, task: str, base_sha256: str, dtype: str,
                problems_sha256: str, master_dtype: str = MASTER_DTYPE) -> dict[str, Any]:
    """The header of a run with the [es], [model] and [generate] sections, run.seed and data.task
    given: all the config it pins (a resume must match it, replay reads it)."""
    gen = generate
    base: dict[str, Any] = {"name": model.name, "revision": model.revision, "sha256": base_sha256}

    if model.name in BUILT_NAMES:  # `tiny`, `tiny-countdown`: rebuilt offline from its seed by replay
        base["tiny_seed"] = model.tiny_seed
    return {
        "format": FORMAT,
        "version": VERSION,
        "created_by": f"prover-cli {__version__}",
        "noise": {"name": NOISE_NAME, "version": NOISE_VERSION},
        "base_model": base,
        "dtype": dtype,
        "master_dtype": master_dtype,
        "run_seed": run_seed,
        "task": task,
        "problems_sha256": problems_sha256,
        "es": {
            "population": es.population, "sigma": es.sigma, "learning_rate": es.learning_rate,
            "antithetic": es.antithetic, "fitness_shaping": es.fitness_shaping,
            "iterations": es.iterations, "problems_per_iteration": es.problems_per_iteration,
            "samples_per_problem": es.samples_per_problem, "snapshot_every": es.snapshot_every,
            "shuffle_rewards": es.shuffle_rewards,  # the null control: replay permutes as training did
            # low-rank noise (es/noise/lowrank.py): only then, so full-rank ledgers stay byte for byte as before
            **({"noise": es.noise, "rank": es.rank} if getattr(es, "noise", "full") != "full" else {}),
        },
        # How members are scored (temperature = es.member_temperature; 0 = greedy). These change
        # rewards, not replay; a resumed run needs them unchanged to stay bit-exact.
        "sampling": {"backend": gen.backend, "temperature": es.member_temperature, "top_p": gen.top_p,
                     "max_tokens": gen.max_tokens},
        "reward_denominator": REWARD_DENOMINATOR,
        "fingerprint_chars": FINGERPRINT_CHARS,
    }


def master_dtype_of(header: dict[str, Any]) -> str | None:
    """The dtype replay keeps the master in: the header's, or (version 1) the model's own."""
    return header.get("master_dtype")


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

    if stored.get("version") != current.get("version"):
        return [f"version: ledger {stored.get('version')!r} (written by {stored.get('created_by')}) != "
                f"{current.get('version')!r}: this prover replays it (`prover replay-seeds`) but resumes only "
                f"version-{current.get('version')} ledgers"]
    a, b = {**LATER_KEYS, **flat(stored)}, flat(current)
    return [f"{k}: ledger {a.get(k)!r} != now {b.get(k)!r}"
            for k in sorted(set(a) | set(b)) if k not in RESUMABLE_CHANGES and a.get(k) != b.get(k)]


def reward_text(reward: float) -> str:
    """A reward as the ledger writes it: rounded to REWARD_DECIMALS, without spare zeros."""
    text = f"{reward:.{REWARD_DECIMALS}f}".rstrip("0").rstrip(".")
    if text in ("-0", ""):
        text = "0"
    return text.replace("0.", ".", 1) if text.startswith(("0.", "-0.")) else text


def reward_numerator(reward: float | str, denominator: int = REWARD_DENOMINATOR) -> int:
    """round(reward * denominator), exactly (half to even, as `reward_text` rounds)."""
    return round(Fraction(reward) * denominator)


def encode_rewards(numerators: list[int]) -> str:
    """Fixed-width lowercase hex (the narrowest that fits); signed decimals if any is negative."""
    if min(numerators) < 0:
        return " ".join(map(str, numerators))
    width = len(f"{max(numerators):x}")
    return "".join(f"{n:0{width}x}" for n in numerators)


def decode_rewards(text: str, population: int) -> list[int]:
    """The numerators of one record; ValueError when `text` does not hold `population` of them."""
    if " " in text or text.startswith("-"):
        numerators = [int(part) for part in text.split(" ")]
    else:
        width, extra = divmod(len(text), population)
        if extra or width == 0 or any(c not in "0123456789abcdef" for c in text):
            raise ValueError(f"{len(text)} characters are not {population} fixed-width hex numerators")
        numerators = [int(text[i:i + width], 16) for i in range(0, len(text), width)]
    if len(numerators) != population:
        raise ValueError(f"{len(numerators)} rewards for a population of {population}")
    return numerators


def make_record(iteration: int, rewards: list[str] | list[float], fingerprint: str, skipped: bool,
                snapshot: str | None = None, denominator: int = REWARD_DENOMINATOR) -> dict[str, Any]:
    """A record in memory: `rewards` are the values training used (numerator / denominator)."""
    numerators = [reward_numerator(r, denominator) for r in rewards]
    record: dict[str, Any] = {"i": iteration, "fp": fingerprint[:FINGERPRINT_CHARS],
                              "rewards": [n / denominator for n in numerators], "numerators": numerators}
    if skipped:
        record["skip"] = 1
    if snapshot:
        record["snap"] = snapshot
    return record


def record_rewards(record: dict[str, Any]) -> list[float]:
    return list(record["rewards"])


def _record_json(record: dict[str, Any]) -> str:
    row = [record["fp"], encode_rewards(record["numerators"])]
    if record.get("snap"):
        row.append(record["snap"])
    return json.dumps(row, separators=(",", ":"))


def ledger_text(header: dict[str, Any], records: list[dict[str, Any]]) -> str:
    """The header indented for reading, then one compact line per iteration."""
    if header.get("version") != VERSION:
        raise ValueError(f"this prover writes ledger version {VERSION} only")
    head = json.dumps({**header, "iterations": []}, indent=1)[: -len("[]\n}")]
    if not records:
        return head + "[]\n}\n"
    return head + "[\n" + ",\n".join(_record_json(r) for r in records) + "\n]\n}\n"


def write_ledger(path: str | Path, header: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """Replace the ledger whole (prover_cli/fsio/jsonl.py's one atomic writer: a kill or a full disk
    leaves the old ledger or the new one, never a cut one)."""

    write_text_atomic(path, ledger_text(header, records))


def bytes_per_iteration(header: dict[str, Any], records: list[dict[str, Any]]) -> float:
    """On-disk bytes the records add to the ledger, per iteration."""
    size = len(ledger_text(header, records).encode())
    return (size - len(ledger_text(header, []).encode())) / max(len(records), 1)


def read_ledger(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(header, records in memory), checked enough that replay fails on a bad ledger, not midway.

    Reads versions 1 and 2; records come back in one form: {"i", "fp", "rewards", "numerators"
    (version 2), "skip" (all rewards equal), "snap"}.
    """
    path = Path(path)
    try:
        raw = read_whole(path)  # a FIFO too, and a stop signal still ends the wait
        if raw.startswith(codecs.BOM_UTF8):  # a UTF-8 byte order mark, as some editors write (TOML, JSONL: the same)
            raw = raw[len(codecs.BOM_UTF8):]
        data = json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: ledger not found") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, expected a ledger.json file") from None
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise InputError(f"{path}:{line}: not valid UTF-8 (byte 0x{raw[exc.start]:02x}); a ledger is UTF-8 JSON"
                         ) from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ledger: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except RecursionError:
        raise InputError(f"{path}: not valid JSON (nested too deeply)") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(f"{path}: not a prover ES ledger (expected \"format\": \"{FORMAT}\")")
    if data.get("version") not in READABLE_VERSIONS or isinstance(data.get("version"), bool):
        raise InputError(f"{path}: ledger version {data.get('version')!r}; this prover reads versions "
                         f"{', '.join(map(str, READABLE_VERSIONS))}",
                         hint="replay it with the prover version that wrote it (see `created_by`)")
    noise = data.get("noise", {})
    if noise != {"name": NOISE_NAME, "version": NOISE_VERSION}:
        raise InputError(f"{path}: noise {noise!r}; this prover implements {NOISE_NAME} v{NOISE_VERSION}")
    required: tuple[str, ...] = ("base_model", "dtype", "run_seed", "es", "iterations")
    if data["version"] >= 2:
        required += ("master_dtype", "reward_denominator")
    for key in required:
        if key not in data:
            raise InputError(f"{path}: ledger header lacks `{key}`")
    _check_header(data, path)
    rows = data.pop("iterations")
    population = data["es"]["population"]
    if not isinstance(rows, list):
        raise InputError(f"{path}: `iterations` must be a list")
    chars = data.get("fingerprint_chars", FINGERPRINT_CHARS)
    # The task's own reward range (prover_cli/tasks); a task this process does not know is held to finite rewards only.
    bounds = reward_range(data["task"]) if isinstance(data.get("task"), str) else None
    denominator = data.get("reward_denominator", REWARD_DENOMINATOR)
    longest = population * reward_chars_max(denominator)  # before any record is decoded: no huge number is built
    for index, row in enumerate(rows, 1):
        field = row.get("r") if isinstance(row, dict) else row[1] if isinstance(row, list) and len(row) > 1 else None
        if isinstance(field, str) and len(field) > longest:
            name = "`r`" if isinstance(row, dict) else "rewards (field 2)"
            raise InputError(f"{path}: iteration {index}: {name} has {len(field):,} characters; {population} rewards "
                             f"(the header's es.population) take at most {longest:,}, each a finite number; "
                             "edited by hand?")
    if data["version"] == 1:
        records = [_read_v1(row, index, population, chars, f"{path}: iteration {index}")
                   for index, row in enumerate(rows, 1)]
    else:
        records = [_read_v2(row, index, population, denominator, chars, f"{path}: iteration {index}")
                   for index, row in enumerate(rows, 1)]
    if bounds is not None:  # a member's reward is a mean of the task's rewards, so it lies in their range
        low, high = bounds
        for record in records:
            outside = [r for r in record["rewards"] if not low <= r <= high]
            if outside:
                raise InputError(f"{path}: iteration {record['i']}: reward {outside[0]:g} outside [{low:g}, {high:g}], "
                                 f"the reward range of task {data['task']!r}; edited by hand?")
    return data, records


def reward_chars_max(denominator: int) -> int:
    """The most characters one member's reward takes in a record: the numerator of the largest
    finite reward, in decimal (wider than hex), with its sign and separator."""
    return len(str(int(sys.float_info.max) * denominator)) + 2


def _is_int(value: Any, low: int = 0) -> bool:
    return type(value) is int and value >= low


def _is_hex(value: Any, length: int | None = None) -> bool:
    return (isinstance(value, str) and bool(value) and all(c in "0123456789abcdef" for c in value)
            and (length is None or len(value) == length))


def _is_positive_number(value: Any) -> bool:
    if type(value) is int:  # math.isfinite(int) overflows past 2^1024
        return 0 < value < 2**1024
    return type(value) is float and math.isfinite(value) and value > 0


# What every header value replay or resume reads must be: key path -> (test, what it must be).
_HEADER_RULES: tuple[tuple[str, Any, str], ...] = (
    ("base_model", lambda v: isinstance(v, dict), "an object"),
    ("base_model.name", lambda v: isinstance(v, str) and bool(v), "a model name (a non-empty string)"),
    ("base_model.revision", lambda v: isinstance(v, str), "a string"),
    ("base_model.sha256", lambda v: _is_hex(v, 64), "64 lowercase hex digits"),
    ("dtype", lambda v: isinstance(v, str) and bool(v), "a dtype name"),
    ("run_seed", lambda v: _is_int(v), "a non-negative integer"),
    ("es", lambda v: isinstance(v, dict), "an object"),
    ("es.population", lambda v: _is_int(v, 2), "an integer >= 2"),
    ("es.sigma", _is_positive_number, "a finite number > 0"),
    ("es.learning_rate", _is_positive_number, "a finite number > 0"),
    ("es.antithetic", lambda v: isinstance(v, bool), "true or false"),
    ("es.fitness_shaping", lambda v: v in ("zscore", "centered_rank"), "\"zscore\" or \"centered_rank\""),
    ("es.iterations", lambda v: _is_int(v, 1), "an integer >= 1"),
)
_OPTIONAL_HEADER_RULES: tuple[tuple[str, Any, str], ...] = (
    ("base_model.tiny_seed", lambda v: _is_int(v), "a non-negative integer"),
    ("master_dtype", lambda v: v is None or (isinstance(v, str) and bool(v)), "a dtype name"),
    ("reward_denominator", lambda v: _is_int(v, 1) and v <= REWARD_DENOMINATOR_MAX, "a positive integer up to 10^18"),
    ("fingerprint_chars", lambda v: _is_int(v, 16) and v <= 64, "an integer from 16 to 64"),
    ("es.problems_per_iteration", lambda v: _is_int(v, 1), "an integer >= 1"),
    ("es.samples_per_problem", lambda v: _is_int(v, 1), "an integer >= 1"),
    ("es.snapshot_every", lambda v: _is_int(v), "a non-negative integer"),
    ("task", lambda v: isinstance(v, str), "a string"),
    ("sampling", lambda v: isinstance(v, dict), "an object"),
)


# Header values that are config values -> their config key, whose type and range config.py checks.
CONFIG_KEYS = {
    "run_seed": "run.seed",
    "base_model.tiny_seed": "model.tiny_seed",
    **{f"es.{key}": f"es.{key}" for key in ("population", "sigma", "learning_rate", "antithetic", "fitness_shaping",
                                             "iterations", "problems_per_iteration", "samples_per_problem",
                                             "snapshot_every", "shuffle_rewards")},
    "sampling.backend": "generate.backend",
    "sampling.temperature": "es.member_temperature",
    "sampling.top_p": "generate.top_p",
    "sampling.max_tokens": "generate.max_tokens",
}


def _shown(value: Any) -> str:
    """A header value as an error message shows it: JSON, cut at 60 characters."""
    if type(value) is int and value.bit_length() > 64:
        return f"an integer of {len(f'{value:x}'):,} hex digits"  # json.dumps refuses ints past 4300 digits
    if isinstance(value, (str, int, float, bool, type(None))):
        text = json.dumps(value)
        return text if len(text) <= 60 else text[:57] + "..."
    return type(value).__name__


def _check_header(data: dict[str, Any], path: Path) -> None:
    """InputError naming the first header field replay or resume could not use (a wrong type, a
    value out of range), so a bad ledger never fails midway with a TypeError or KeyError."""
    missing = object()

    def value_at(dotted: str) -> Any:
        value: Any = data
        for part in dotted.split("."):
            if not isinstance(value, dict) or part not in value:
                return missing
            value = value[part]
        return value

    for dotted, test, what in (*_HEADER_RULES, *_OPTIONAL_HEADER_RULES):
        value = value_at(dotted)
        if value is missing:
            if (dotted, test, what) in _HEADER_RULES:
                raise InputError(f"{path}: ledger header lacks `{dotted}`")
            continue
        if not test(value):
            raise InputError(f"{path}: ledger header `{dotted}` = {_shown(value)}: must be {what}")
    for dotted, key in CONFIG_KEYS.items():  # config values: held to config.py's own rules (one source of truth)
        value = value_at(dotted)
        if value is not missing:
            try:
                check_key(key, value, f"{path}: ledger header `{dotted}` = {_shown(value)}")
            except ConfigError as exc:
                raise InputError(f"{exc}, as for config key {key}",
                                 hint="a ledger prover wrote holds config values; edited by hand?") from None
    if data["es"]["antithetic"] and data["es"]["population"] % 2:
        raise InputError(f"{path}: ledger header `es.population` = {data['es']['population']}: must be even with "
                         "`es.antithetic` = true (members come in +eps/-eps pairs)")


def _finish(record: dict[str, Any]) -> dict[str, Any]:
    if max(record["rewards"]) == min(record["rewards"]):
        record["skip"] = 1  # no update was made: shaping has no signal (replay derives it the same way)
    return record


def _read_v2(row: Any, index: int, population: int, denominator: int, chars: int, where: str) -> dict[str, Any]:
    if not isinstance(row, list) or len(row) not in (2, 3) or not all(isinstance(v, str) for v in row):
        raise InputError(f"{where}: expected [fingerprint, rewards] or [fingerprint, rewards, snapshot] strings")
    _check_fingerprint(row[0], chars, where)
    try:
        numerators = decode_rewards(row[1], population)
    except ValueError as exc:
        raise InputError(f"{where}: rewards {row[1][:40]!r}: {exc}") from None
    if encode_rewards(numerators) != row[1]:  # e.g. doubled digits: read as other, wider numbers
        raise InputError(f"{where}: rewards {row[1][:40]!r}: not as prover writes them "
                         f"({encode_rewards(numerators)[:40]!r} for the same values); edited by hand?")
    try:
        rewards = [n / denominator for n in numerators]
    except OverflowError:
        raise InputError(f"{where}: rewards {row[1][:40]!r}: a reward too large for a number; edited by hand?"
                         ) from None
    record = {"i": index, "fp": row[0], "rewards": rewards, "numerators": numerators}
    if len(row) == 3:
        if not _is_hex(row[2], 64):
            raise InputError(f"{where}: snapshot {row[2][:70]!r} is not a sha256 (64 lowercase hex digits)")
        record["snap"] = row[2]
    return _finish(record)


def _check_fingerprint(value: Any, chars: int, where: str) -> None:
    shown = repr(value if not isinstance(value, str) or len(value) <= 70 else value[:67] + "...")
    if not _is_hex(value):
        raise InputError(f"{where}: fingerprint {shown} is not lowercase hex")
    if len(value) != chars:
        raise InputError(f"{where}: fingerprint {shown} has {len(value):,} characters, the header's "
                         f"fingerprint_chars = {chars}; a shorter one would check almost nothing")


def _read_v1(row: Any, index: int, population: int, chars: int, where: str) -> dict[str, Any]:
    """Version 1: {"i": 12, "r": ".25 0 1 ...", "fp": "...", "skip": 1, "snap": "..."}."""
    if not isinstance(row, dict) or row.get("i") != index:
        raise InputError(f"{where}: expected a record with \"i\": {index}")
    try:
        rewards = [float(text) for text in row["r"].split()]
    except (KeyError, AttributeError, ValueError):
        raise InputError(f"{where}: `r` must be a string of space-separated numbers") from None
    if not all(math.isfinite(r) for r in rewards):
        raise InputError(f"{where}: `r` holds a reward that is not a finite number")
    if len(rewards) != population:
        raise InputError(f"{where}: {len(rewards)} rewards for a population of {population}")
    if not isinstance(row.get("fp"), str) or not row["fp"]:
        raise InputError(f"{where}: missing fingerprint `fp`")
    _check_fingerprint(row["fp"], chars, where)
    record = {"i": index, "fp": row["fp"], "rewards": rewards}
    if row.get("snap"):
        if not _is_hex(row["snap"], 64):
            raise InputError(f"{where}: snapshot {str(row['snap'])[:70]!r} is not a sha256 (64 lowercase hex digits)")
        record["snap"] = row["snap"]
    return _finish(record)


def sha256_file(path: str | Path) -> str:
    """sha256 (hex) of a file's bytes: how records name their snapshots."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
