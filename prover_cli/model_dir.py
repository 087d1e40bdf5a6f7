"""A model directory (`from_pretrained` layout): checked file by file before loading, compared by weights.

    check_model_dir(path)            # InputError naming the file and field at fault, else None
    same_weights(final, checkpoint)  # True when both hold the same tensors, bit for bit

A corrupt, empty or missing file would otherwise surface as whatever transformers, tokenizers
or safetensors raise (a JSONDecodeError, `HeaderTooSmall`, a TypeError deep in a tokenizer):
an "unexpected" error without a path. `check_model_dir` reads what loading reads: config.json
(a JSON object with a string `model_type`), the weights (model.safetensors, a sharded index and
its shards, or pytorch_model.bin; each safetensors header parsed and every tensor's bytes
inside the file, as the format specifies), and the tokenizer's JSON files. Standard library
only: no torch import to reject a broken directory.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterator

from prover_cli.errors import InputError

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
TORCH_BIN = "pytorch_model.bin"
TORCH_BIN_INDEX = "pytorch_model.bin.index.json"
# Bytes per element of each safetensors dtype (the format's own list).
_DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2,
                "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
_MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors library's own limit


def is_model_dir(path: str | Path) -> bool:
    return Path(path).is_dir()


def check_model_dir(path: str | Path) -> None:
    """InputError naming the first file (and field) of `path` that `from_pretrained` could not read."""
    path = Path(path)
    config = _json_object(path / "config.json", "the model's config")
    if not isinstance(config.get("model_type"), str) or not config["model_type"]:
        raise InputError(f"{path / 'config.json'}: `model_type` is missing or not a string; "
                         "transformers cannot tell which model this is")
    for weights in weight_files(path):
        if weights.suffix == ".safetensors":
            check_safetensors(weights)
        elif weights.stat().st_size == 0:
            raise InputError(f"{weights}: empty weights file")
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json"):
        if (path / name).exists():
            _json_object(path / name, "a tokenizer or generation file")
    if not any((path / name).exists() for name in ("tokenizer.json", "tokenizer.model", "vocab.json")):
        raise InputError(f"{path}: no tokenizer (tokenizer.json, tokenizer.model or vocab.json)",
                         hint="save the tokenizer beside the model (`tokenizer.save_pretrained(dir)`)")


def weight_files(path: Path) -> list[Path]:
    """The weight files `from_pretrained` loads from `path`, checked to exist; InputError if none."""
    for index_name in (SAFETENSORS_INDEX, TORCH_BIN_INDEX):
        index_path = path / index_name
        if index_path.exists():
            index = _json_object(index_path, "a sharded-weights index")
            weight_map = index.get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map or \
                    not all(isinstance(v, str) for v in weight_map.values()):
                raise InputError(f"{index_path}: `weight_map` must map tensor names to shard files")
            shards = sorted({path / name for name in weight_map.values()})
            for shard in shards:
                if not shard.is_file():
                    raise InputError(f"{shard}: missing (listed in {index_path.name}'s weight_map)")
            return shards
    for name in (SAFETENSORS, TORCH_BIN):
        if (path / name).is_file():
            return [path / name]
    raise InputError(f"{path}: no weights ({SAFETENSORS}, {SAFETENSORS_INDEX} or {TORCH_BIN})",
                     hint="a `from_pretrained` directory holds config.json, the weights and the tokenizer")


def check_safetensors(path: Path) -> dict[str, Any]:
    """The header of a safetensors file, checked as the format specifies: an 8-byte little-endian
    header length, a JSON object, and every tensor's [begin, end) inside the data, of the size its
    dtype and shape give. InputError naming the file and the tensor otherwise."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise InputError(f"{path}: not a safetensors file ({size} bytes; the header length alone takes 8)")
        length = int.from_bytes(head, "little")
        if length > min(_MAX_HEADER_BYTES, size - 8):
            raise InputError(f"{path}: not a safetensors file (a header of {length:,} bytes in a file of {size:,}; "
                             "cut short or not safetensors)")
        try:
            header = json.loads(handle.read(length).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise InputError(f"{path}: not a safetensors file (its header is not JSON: {exc})") from None
    if not isinstance(header, dict):
        raise InputError(f"{path}: not a safetensors file (its header is not a JSON object)")
    data_bytes = size - 8 - length
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        where = f"{path}: tensor {name!r}"
        if not isinstance(entry, dict) or entry.get("dtype") not in _DTYPE_BYTES:
            raise InputError(f"{where}: unknown dtype {entry.get('dtype') if isinstance(entry, dict) else entry!r}")
        shape, offsets = entry.get("shape"), entry.get("data_offsets")
        if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)
                and isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)):
            raise InputError(f"{where}: malformed shape or data_offsets")
        begin, end = offsets
        if not 0 <= begin <= end <= data_bytes:
            raise InputError(f"{where}: bytes {begin:,}..{end:,} lie outside the file's {data_bytes:,} data bytes "
                             "(cut short?)")
        if end - begin != math.prod(shape) * _DTYPE_BYTES[entry["dtype"]]:
            raise InputError(f"{where}: {end - begin:,} bytes for shape {shape} of {entry['dtype']}")
    return header


def _json_object(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise InputError(f"{path}: missing ({what})", hint="is this a `from_pretrained` model directory?")
    try:
        value = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not valid UTF-8 (byte at offset {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg}){' (empty file)' if not exc.doc else ''}"
                         ) from None
    except RecursionError:
        raise InputError(f"{path}: not valid JSON (nested too deeply)") from None
    if not isinstance(value, dict):
        raise InputError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


def save_tokenizer(tokenizer: Any, out_dir: str | Path) -> None:
    """`tokenizer.save_pretrained(out_dir)` without the padding/truncation state a batch call
    leaves on a fast tokenizer's backend (it would be written into tokenizer.json): the files are
    the same whether or not this process sampled, so a resumed or replayed model directory
    matches one written at the end of an uninterrupted run."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    padding = getattr(backend, "padding", None)
    truncation = getattr(backend, "truncation", None)
    if padding:
        backend.no_padding()
    if truncation:
        backend.no_truncation()
    try:
        tokenizer.save_pretrained(out_dir)
    finally:
        if padding:
            backend.enable_padding(**padding)
        if truncation:
            backend.enable_truncation(**truncation)


# -- weights compared, tensor by tensor (one in memory at a time per side) ---------------------------

def iter_tensors(path: Path) -> Iterator[tuple[str, Any]]:
    """(name, tensor) of every safetensors weight file of a model directory."""
    from safetensors import safe_open

    for weights in weight_files(path):
        if weights.suffix != ".safetensors":
            raise InputError(f"{weights}: only safetensors weights can be compared")
        with safe_open(str(weights), framework="pt") as handle:
            for name in handle.keys():
                yield name, handle.get_tensor(name)


def holds_weights(path: Path, tensors: dict[str, Any]) -> bool:
    """True when model directory `path` holds exactly `tensors` (name -> tensor), bit for bit.
    Tied weights are saved once, possibly under their other name: names either side lacks must
    pair up by equal tensors. False, never an error, for an unreadable or foreign directory."""
    try:
        check_model_dir(path)
        unmatched_saved = []
        seen = set()
        for name, saved in iter_tensors(path):
            if name in tensors:
                seen.add(name)
                if not _equal(saved, tensors[name]):
                    return False
            else:
                unmatched_saved.append(saved)
    except Exception:  # unreadable, cut short, not safetensors: not the same weights
        return False
    unmatched = [tensor for name, tensor in tensors.items() if name not in seen]
    if len(unmatched) != len(unmatched_saved):
        return False
    for tensor in unmatched:
        partner = next((i for i, saved in enumerate(unmatched_saved) if _equal(saved, tensor)), None)
        if partner is None:
            return False
        unmatched_saved.pop(partner)
    return True


def same_weights(path: Path, other: Path) -> bool:
    """True when two model directories hold the same tensors under the same names, bit for bit
    (one tensor of each in memory at a time). False for an unreadable directory."""
    from safetensors import safe_open

    try:
        check_model_dir(path)
        check_model_dir(other)
        where = {}
        for weights in weight_files(other):
            with safe_open(str(weights), framework="pt") as handle:
                where.update((name, weights) for name in handle.keys())
        count = 0
        for name, saved in iter_tensors(path):
            count += 1
            if name not in where:
                return False
            with safe_open(str(where[name]), framework="pt") as handle:
                if not _equal(saved, handle.get_tensor(name)):
                    return False
        return count == len(where)
    except Exception:  # unreadable, cut short, not safetensors: not the same weights
        return False


def _equal(a: Any, b: Any) -> bool:
    import torch

    b = b.detach().to("cpu")
    return a.dtype == b.dtype and a.shape == b.shape and bool(torch.equal(a, b))
