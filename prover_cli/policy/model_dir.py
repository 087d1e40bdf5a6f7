"""A model directory (`from_pretrained` layout): checked file by file before loading, compared by weights.

    check_model_dir(path)            # InputError naming the file and field at fault, else None
    same_weights(final, checkpoint)  # True when both hold the same tensors, bit for bit
    check_loaded_model(model, path, loading_info)   # after from_pretrained: no tensor missing, unexpected or NaN
    refuse_non_finite(named_tensors, out_dir)       # before a save: NonFiniteWeightsError, nothing written
    weights_fingerprint(tensors)                    # sha256 of names, dtypes, shapes and bytes: what ledgers record
    set_config_dtype(config_path, dtype)            # config.json says which dtype the weights are

A corrupt, empty or missing file would otherwise surface as whatever transformers, tokenizers
or safetensors raise (a JSONDecodeError, `HeaderTooSmall`, a TypeError deep in a tokenizer):
an "unexpected" error without a path. `check_model_dir` reads what loading reads: config.json
(a JSON object with a string `model_type`), the weights (model.safetensors, a sharded index and
its shards, or pytorch_model.bin; each safetensors header parsed and every tensor's bytes
inside the file, as the format specifies), and the tokenizer's JSON files. Standard library
only: no torch import to reject a broken directory (torch is imported only by the functions that
read tensors).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Callable, Iterator

from prover_cli.errors import InputError, ProverError
from prover_cli.fsio.jsonl import write_dir_atomic

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
TORCH_BIN = "pytorch_model.bin"
TORCH_BIN_INDEX = "pytorch_model.bin.index.json"
# Bytes per element of each safetensors dtype (the format's own list).
_DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2,
                "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
_MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors library's own limit


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
    data = path.read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):  # prover's own .json documents accept one; transformers' readers do not
        raise InputError(f"{path}: starts with a UTF-8 byte order mark, which transformers cannot read",
                         hint="save the file as UTF-8 without a BOM (the first 3 bytes EF BB BF removed)")
    try:
        value = json.loads(data.decode("utf-8"))
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


# -- weights that are all there and all finite: checked at load and before every save -------------

class NonFiniteWeightsError(ProverError):
    """A model about to be saved holds NaN or inf: nothing is written, the previous files are kept.

    `found` lists (tensor name, non-finite values, values); `out` is what was not written."""

    hint = ("the training diverged: lower the learning rate (grpo.learning_rate, es.learning_rate) or es.sigma, "
            "and start again (or --resume from a checkpoint saved before it)")

    def __init__(self, found: list[tuple[str, int, int]], out: str | Path, kept: str | Path | None = None):
        keep = f"; {kept} is kept as it was" if kept is not None and Path(kept).exists() else ""
        super().__init__(f"{out}: not written: {_describe(found)}; nothing was saved{keep}")
        self.found, self.out = found, out


_CHUNK = 1 << 24  # elements checked at a time: the mask of a huge tensor never takes more than 16 MiB


def non_finite_tensors(named: Any) -> list[tuple[str, int, int]]:
    """(name, non-finite values, values) of every floating-point tensor holding NaN or inf, in the
    order given; one pass over the data, a tensor shared under two names (tied) read once."""
    import torch

    found, seen = [], set()
    with torch.no_grad():
        for name, tensor in named:
            if not tensor.is_floating_point() or tensor.numel() == 0:
                continue
            key = (tensor.device, tensor.data_ptr(), tensor.dtype, tuple(tensor.shape))
            if key in seen:
                continue
            seen.add(key)
            flat = tensor.detach().reshape(-1)
            bad = sum(int((~torch.isfinite(flat[start:start + _CHUNK])).sum())
                      for start in range(0, flat.numel(), _CHUNK))
            if bad:
                found.append((name, bad, flat.numel()))
    return found


def _describe(found: list[tuple[str, int, int]]) -> str:
    """`tensor lm_head.weight holds NaN or inf (12 of 4,096 values)`, up to 3 tensors named."""
    shown = ", ".join(f"{name} ({bad:,} of {total:,} values)" for name, bad, total in found[:3])
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    if len(found) == 1:
        name, bad, total = found[0]
        return f"tensor {name} holds NaN or inf ({bad:,} of {total:,} values)"
    return f"tensors {shown}{more} hold NaN or inf"


def refuse_non_finite(named: Any, out: str | Path, kept: str | Path | None = None) -> None:
    """NonFiniteWeightsError before a model is saved to `out` when a tensor holds NaN or inf; call it
    before anything is written: nothing is, and `kept` (the previous final/, say) stays as it was."""
    found = non_finite_tensors(named)
    if found:
        raise NonFiniteWeightsError(found, out, kept)


def save_atomically(out: str | Path, write: Callable[[Path], None]) -> None:
    """The model directory `out` := what `write(directory)` saves, whole or not at all
    (jsonl.write_dir_atomic): final/, `replay-seeds --out`. When `write` refuses weights holding
    NaN or inf, the error names `out` and the old `out` is kept as it was."""

    try:
        write_dir_atomic(out, write)
    except NonFiniteWeightsError as exc:  # it named the temp directory: name `out` instead
        raise NonFiniteWeightsError(exc.found, out, kept=out) from None


def check_loaded_model(model: Any, path: str | Path, loading_info: dict[str, Any] | None = None) -> None:
    """InputError naming the model and the tensors when `from_pretrained` left one missing (freshly
    initialized: the model would sample garbage), found one it does not use, or one of another shape,
    or when a loaded tensor holds NaN or inf (sampling would fail). Tied weights (lm_head tied to
    embed_tokens, saved once) are not missing: transformers ties them and does not list them."""
    info = loading_info or {}
    for key, what in (("missing_keys", "missing from the weights (transformers would fill {them} with random values)"),
                      ("unexpected_keys", "in the weights but not in this model (config.json's `model_type`, "
                                          "sizes)"),
                      ("mismatched_keys", "in the weights with another shape than this model's (config.json)")):
        names = sorted(str(item[0] if isinstance(item, tuple) else item) for item in info.get(key) or ())
        if names:
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            plural = len(names) > 1
            described = what.format(them="them" if plural else "it")
            raise InputError(f"{path}: tensor{'s' if plural else ''} {shown} {described}",
                             hint="compare it with a directory `save_pretrained` wrote for this architecture; "
                                  "is a shard missing, or the weights of another model?")
    found = non_finite_tensors(model.state_dict().items())
    if found:
        raise InputError(f"{path}: {_describe(found)}; a model with such weights cannot be sampled",
                         hint="load the model it was made from, or the last checkpoint before training diverged")


def save_tokenizer(tokenizer: Any, out_dir: str | Path) -> None:
    """`tokenizer.save_pretrained(out_dir)` without the padding/truncation state a batch call
    leaves on a fast tokenizer's backend (it would be written into tokenizer.json): the files are
    the same whether or not this process sampled, so a resumed or replayed model directory
    matches one written at the end of an uninterrupted run."""
    backend: Any = getattr(tokenizer, "backend_tokenizer", None)  # a `tokenizers.Tokenizer`, or None (slow)
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
        where: dict[str, Path] = {}
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


# --------------------------------------------------------------------------------------------
# Identity of weights and of their dtype: generic, used by ES, GRPO, held-out and the samplers
# --------------------------------------------------------------------------------------------

def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def weights_fingerprint(tensors: dict[str, Any]) -> str:
    """sha256 (hex) over name, dtype, shape and raw bytes of each tensor, in name order.

    The bytes are read on the CPU, so the same weights give the same fingerprint on any device.
    """
    import torch

    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().to("cpu").contiguous()
        digest.update(f"{name}|{dtype_name(tensor.dtype)}|{list(tensor.shape)}|".encode())
        digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def set_config_dtype(config_path: Path, dtype: str) -> None:
    """Make config.json's `dtype` (and the older `torch_dtype`, where present) name `dtype`."""
    config = json.loads(config_path.read_text(encoding="utf-8-sig"))  # a BOM (a hand-edited file) is skipped
    keys = [key for key in ("dtype", "torch_dtype") if key in config] or ["dtype"]
    if "," in dtype:  # a mixed-dtype master: the widest one is what from_pretrained should load
        dtype = "float32"
    for key in keys:
        config[key] = dtype
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
