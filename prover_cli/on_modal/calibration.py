"""The calibration file: figures `prover doctor --backend modal` measured, which the plan then uses.

    prover doctor --config configs/kimina-es.toml --backend modal      # measures, writes the file
    prover train es --config configs/kimina-es.toml --backend modal --dry-run   # uses it, says so

The plan's timings are `modal.est_*` estimates. The doctor measures five of them on the configured
GPU, model and Lean image (decode speed at the configured batch and length, the header import,
Lean seconds per proof with the header warm, the kernel stage's seconds per proof and per checker
import) and the kernel stage's peak memory per step, and writes them here with what they were
measured on. The plan replaces an estimate with a measured figure only when the file was
measured on this config's fingerprint (`fingerprint`); it labels every figure "measured (doctor,
<date>)" or "default (assumption)". A key set in the config file or with `--set` is the user's
and wins over both.

The format (JSON, one object; docs/modal.md, *Calibration*):

    {"format": "prover-calibration/1", "measured_at": "2026-12-02T03:10:00Z",
     "by": "prover doctor --backend modal",
     "fingerprint": {"modal.gpu": "H100", "model.name": "...", ...},     # fingerprint(config)
     "figures": {"decode_tokens_per_s": {"value": 97.3, "measured": true, "samples": 8,
                                         "unit": "tokens/s per sequence", "how": "..."}, ...}}

Only the figures in FIGURES are allowed; each must say measured = true with a sample size >= 1
and a finite value >= 0 (> 0 for speeds) inside its physical range (PHYSICAL); anything else
refuses the whole file, naming it and the key. A figure the doctor could not measure is left out
(its estimate stays, labelled default). scripts/gpu_first_contact.py writes the same file (the GPU
figures: decode speed, the resident slowdown, what an engine and es_init hold); a write keeps the
figures of the other writer when the file was measured on the same fingerprint, each figure with
its own `by` and `measured_at`.

Physics bounds (`check_physics`): every figure the plan prices with, measured or set in the config
(`modal.est_*`, the prices), must lie in a physical range (a decode speed of 1e308 or 1e-308
tokens/s, a header of 1e308 s, a NaN are no one's measurement); outside it the plan refuses,
naming the file (or `--set`) and the key, never pricing with it.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from prover_cli.config import Config
from prover_cli.errors import ConfigError

FORMAT = "prover-calibration/1"
DIR_ENV = "PROVER_CALIBRATION_DIR"
NEVER = "none"

# figure -> (the [modal] key it replaces, unit, must be > 0); kernel_peak_memory_gib replaces no
# key: it sizes (the plan warns when the kernel Sandbox is smaller than the measured peak); nor do
# the memory figures of scripts/gpu_first_contact.py, which replace the memory model's estimates
# (gpu_memory.py) in the plan's "memory per GPU" table.
FIGURES: dict[str, tuple[str | None, str, bool]] = {
    "decode_tokens_per_s": ("est_decode_tokens_per_s", "tokens/s per sequence", True),
    "header_s": ("est_header_s", "s per header import", False),
    "verify_s_per_proof": ("est_verify_s_per_proof", "s per proof, header warm", True),
    "kernel_check_s_per_proof": ("est_kernel_check_s_per_proof", "s per pass (`lean -o`)", False),
    "kernel_import_s": ("est_kernel_import_s", "s per checker process", False),
    "kernel_peak_memory_gib": (None, "GiB peak RSS of one kernel-stage step", True),
    "resident_slowdown": ("est_resident_slowdown", "fraction of a generation per further engine on the GPU", False),
    "engine_overhead_gib": (None, "GiB one engine takes at start beyond its vLLM budget (its CUDA context, NCCL)", False),
    "es_init_gib": (None, "GiB es_init keeps (the fp32 master and what its allocator holds)", True),
}
BY_SHORT = {"prover doctor --backend modal": "doctor", "scripts/gpu_first_contact.py": "gpu_first_contact"}

DAY_S = 86400.0
# The physical range of every figure and of the [modal] key it replaces: (low, high, why).
PHYSICAL: dict[str, tuple[float, float, str]] = {
    "decode_tokens_per_s": (0.5, 20000.0, "tokens/s of one sequence: no GPU decodes a sequence faster than its "
                                          "memory bandwidth over the weights allows"),
    "header_s": (0.0, DAY_S, "seconds, at most a day"),
    "verify_s_per_proof": (0.001, DAY_S, "seconds, from a millisecond to a day"),
    "kernel_check_s_per_proof": (0.0, DAY_S, "seconds, at most a day"),
    "kernel_import_s": (0.0, DAY_S, "seconds, at most a day"),
    "kernel_peak_memory_gib": (0.001, 4096.0, "GiB of one process"),
    "resident_slowdown": (0.0, 4.0, "each further engine adds at most a few generations' time (1 = fully serial)"),
    "engine_overhead_gib": (0.0, 2048.0, "GiB of one GPU"),
    "es_init_gib": (0.001, 2048.0, "GiB of one GPU"),
}
# [modal] keys the plan prices with that no figure replaces: (low, high, why); 0 is allowed where
# the key's default means "the table's figure" (ZERO_MEANS_DEFAULT).
PHYSICAL_KEYS: dict[str, tuple[float, float, str]] = {
    "est_update_s": (0.0, DAY_S, "seconds, at most a day"),
    "est_replay_s_per_iteration": (0.0, DAY_S, "seconds, at most a day"),
    "gpu_price_per_hour": (0.01, 1000.0, "USD per GPU-hour"),
    "cpu_price_per_core_hour": (0.0, 100.0, "USD per core-hour"),
    "memory_price_per_gib_hour": (0.0, 100.0, "USD per GiB-hour"),
    "sandbox_cpu_price_per_core_hour": (0.0, 100.0, "USD per core-hour"),
    "sandbox_memory_price_per_gib_hour": (0.0, 100.0, "USD per GiB-hour"),
}
ZERO_MEANS_DEFAULT = ("est_decode_tokens_per_s", "gpu_price_per_hour")


def physical_problem(value: Any, low: float, high: float, why: str) -> str | None:
    """Why `value` is not a physical figure in [low, high], or None."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return f"must be a finite number in [{low:g}, {high:g}] ({why})"
    if not low <= value <= high:
        return f"outside the physical range [{low:g}, {high:g}] ({why})"
    return None


def _bounds() -> dict[str, tuple[float, float, str]]:
    return {key: PHYSICAL[name] for name, (key, _, _) in FIGURES.items() if key} | PHYSICAL_KEYS


def check_physical_key(config: Config, key: str) -> float:
    """`modal.<key>`, refused (ConfigError naming the file or `--set`) outside its physical range."""
    value = getattr(config.modal, key)
    if key in ZERO_MEANS_DEFAULT and value == 0:
        return value
    problem = physical_problem(value, *_bounds()[key])
    if problem:
        origin = config.origins.get(f"modal.{key}")
        where = (origin if origin and origin.startswith("--set ") else
                 f"{origin or config.source}: modal.{key} = {value!r}")
        raise ConfigError(f"{where}: {problem}", hint=f"set modal.{key} to a measured figure, or leave it out")
    return value


def check_physics(config: Config) -> None:
    """Every `[modal]` figure the plan prices with inside its physical range; ConfigError naming where it came from."""
    for key in _bounds():
        check_physical_key(config, key)


def generation_batch(config: Config) -> int:
    """Sequences in one generation call, as the doctor measures it: one ES member's batch."""
    return config.es.problems_per_iteration * config.es.samples_per_problem


def fingerprint(config: Config) -> dict[str, Any]:
    """What a measured figure depends on: the GPU, the model, the generation call, the Lean image."""
    return {
        "modal.gpu": config.modal.gpu,
        "modal.gpus_per_container": config.modal.gpus_per_container,
        "model.name": config.model.name,
        "model.revision": config.model.revision,
        "model.dtype": config.model.dtype,
        "generate.backend": config.generate.backend,
        "generate.max_tokens": config.generate.max_tokens,
        "generation_batch": generation_batch(config),
        "verify.lean_toolchain": config.verify.lean_toolchain,
        "verify.mathlib_rev": config.verify.mathlib_rev,
        "verify.kernel_check": bool(config.verify.kernel_check),
    }


def is_gpu_type(seen: str, gpu: str) -> bool:
    """Whether a device name ("1 x NVIDIA H100 80GB HBM3") is of the `modal.gpu` type: its name holds
    the type's family ("A100-80GB": "A100"); "no CUDA device" never is (the doctor's rule,
    doctor._is_configured_gpu). A decode speed measured on another GPU is never recorded."""
    family = gpu.split("-")[0].upper()
    return bool(re.search(rf"\b{re.escape(family)}\b", seen.upper())) and "NO CUDA" not in seen.upper()


IDENTITY_KEYS = ("modal.gpu", "model.name")   # another GPU or model: always refused, even when found by default


def default_path(config: Config) -> Path:
    """Where the doctor writes, and where the plan looks with `modal.calibration = ""`."""
    folder = Path(os.environ.get(DIR_ENV) or Path.home() / ".cache" / "prover-cli" / "calibration")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{config.modal.gpu}-{config.model.name}").strip("-")
    return folder / f"{slug}.json"


# --------------------------------------------------------------------------------------------
# Writing (the doctor)
# --------------------------------------------------------------------------------------------

def figure(value: float, samples: int, how: str) -> dict[str, Any]:
    return {"value": round(float(value), 4), "measured": True, "samples": int(samples), "how": how}


def write(path: Path, config: Config, figures: dict[str, dict[str, Any]], measured_at: str,
          by: str = "prover doctor --backend modal") -> Path:
    """The calibration file, written whole or not at all (a temporary file renamed over it). The
    figures of a file already there, measured on this fingerprint and not measured again now, stay
    (each with its own `by` and `measured_at`): the doctor and scripts/gpu_first_contact.py share it."""
    new = {name: {**item, "unit": FIGURES[name][1], "by": by, "measured_at": measured_at}
           for name, item in figures.items()}
    _check_figures(path, new)   # never write what the plan would refuse
    kept: dict[str, Any] = {}
    if path.is_file():
        try:
            old = load(path)
        except ConfigError:
            old = None     # unreadable or refused: replaced whole
        if old is not None and old["fingerprint"] == fingerprint(config):
            kept = {name: item for name, item in old["figures"].items() if name not in new}
    body = {"format": FORMAT, "measured_at": measured_at, "by": by, "fingerprint": fingerprint(config),
            "figures": {**kept, **new}}
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    partial.replace(path)
    return path


# --------------------------------------------------------------------------------------------
# Reading (the plan)
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Figures:
    """The config the plan prices (measured figures in place of estimates) and, per figure, its source."""

    config: Config
    sources: dict[str, str]           # figure -> "measured (doctor, <date>, n = ...)" / "default (assumption)" / ...
    path: str | None                  # the calibration file used, if any
    note: str                         # one line for the plan's notes
    kernel_peak_memory_gib: float | None = None
    memory: dict[str, float] = field(default_factory=dict)   # engine_overhead_gib, es_init_gib: measured, when there


def load(path: Path) -> dict[str, Any]:
    """A calibration file, checked; ConfigError naming the file and the key otherwise."""
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"modal.calibration = \"{path}\": no such file",
                          hint="run `prover doctor --backend modal` to measure one, or set modal.calibration = \"\"") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{path}: not a calibration file ({type(exc).__name__}: {exc})") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise ConfigError(f"{path}: format = {body.get('format') if isinstance(body, dict) else None!r}: "
                          f"expected {FORMAT!r}")
    if not isinstance(body.get("fingerprint"), dict) or not isinstance(body.get("figures"), dict):
        raise ConfigError(f"{path}: a calibration file needs `fingerprint` and `figures` objects")
    if not isinstance(body.get("measured_at"), str):
        raise ConfigError(f"{path}: measured_at must be the date the doctor measured on")
    _check_figures(path, body["figures"])
    return body


def _check_figures(path: Path, figures: dict[str, Any]) -> None:
    for name, item in figures.items():
        if name not in FIGURES:
            raise ConfigError(f"{path}: figures.{name}: not a calibrated figure (known: {', '.join(FIGURES)})")
        value = item.get("value") if isinstance(item, dict) else None
        samples = item.get("samples") if isinstance(item, dict) else None
        if not isinstance(item, dict) or item.get("measured") is not True:
            raise ConfigError(f"{path}: figures.{name}: measured must be true (only measured figures belong here)")
        if not isinstance(samples, int) or isinstance(samples, bool) or samples < 1:
            raise ConfigError(f"{path}: figures.{name}.samples = {samples!r}: must be an integer >= 1")
        if (not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0
                or (FIGURES[name][2] and value == 0)):
            raise ConfigError(f"{path}: figures.{name}.value = {value!r}: must be a finite number "
                              f"{'> 0' if FIGURES[name][2] else '>= 0'}")
        problem = physical_problem(value, *PHYSICAL[name])
        if problem:
            raise ConfigError(f"{path}: figures.{name}.value = {value!r}: {problem}")


def mismatches(body: dict[str, Any], config: Config) -> list[str]:
    want = fingerprint(config)
    have = body["fingerprint"]
    return [f"{key} = {have.get(key)!r} there, {value!r} here" for key, value in want.items() if have.get(key) != value]


def resolve(config: Config) -> Figures:
    """The figures the plan uses for `config`: the calibration's measured ones where it applies."""
    setting = config.modal.calibration
    explicit = setting not in ("", NEVER)
    path = Path(setting) if explicit else default_path(config)
    body = None
    note = "no calibration: every timing below is an estimate (`modal.est_*`); `prover doctor --backend modal` measures them"
    if setting == NEVER:
        note = "modal.calibration = \"none\": every timing below is an estimate (`modal.est_*`)"
    elif explicit or path.is_file():
        body = load(path)
        wrong = mismatches(body, config)
        identity = [w for w in wrong if w.split(" = ")[0] in IDENTITY_KEYS]
        if identity or (wrong and explicit):
            raise ConfigError(f"{path}: this calibration was measured on another "
                              f"{'GPU or model' if identity else 'configuration'} ({'; '.join(wrong)}): refused",
                              hint="run `prover doctor --backend modal` with this config to measure it, or set "
                                   "modal.calibration = \"none\"")
        if wrong:   # found by default, measured on the same GPU and model but another config
            note = (f"{path} not used: measured for another configuration ({'; '.join(wrong)}); every timing "
                    "below is an estimate")
            body = None
    sources: dict[str, str] = {}
    updates: dict[str, Any] = {}   # modal.est_* keys, each a float
    for name, (key, _, _) in FIGURES.items():
        item = body["figures"].get(name) if body else None
        origin = config.origins.get(f"modal.{key}") if key else None
        if origin is not None:
            sources[name] = f"set ({origin})"
        elif item is not None and body is not None:
            by = BY_SHORT.get(item.get("by") or body.get("by") or "", "doctor")
            sources[name] = f"measured ({by}, {str(item.get('measured_at') or body['measured_at'])[:10]}, n = {item['samples']})"
            if key:
                updates[key] = float(item["value"])
        else:
            sources[name] = "default (assumption)"
    peak = body["figures"].get("kernel_peak_memory_gib") if body else None
    if body is not None:
        note = f"calibrated: {path} (measured {body['measured_at'][:10]} by the doctor on {body['fingerprint']['modal.gpu']})"
    priced = replace(config, modal=replace(config.modal, **updates)) if updates else config
    check_physics(config)     # what the config says, named by its file or --set (the file's were checked at load)
    measured = {name: float(body["figures"][name]["value"]) for name in ("engine_overhead_gib", "es_init_gib")
                if body and name in body["figures"]}
    return Figures(priced, sources, str(path) if body else None, note,
                   float(peak["value"]) if peak and sources["kernel_peak_memory_gib"].startswith("measured") else None,
                   measured)
