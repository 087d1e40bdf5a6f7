# # Run prover on Modal
#
# Every `prover` subcommand runs here with `--backend modal`: the same library function the local
# backend calls, in a container sized for it. This module computes nothing itself; it only says
# where each function runs and moves files between your machine and the Volumes.
#
#     modal deploy prover_cli/modal_app.py                      # optional: a persistent app
#     prover train es --config configs/kimina-es.toml --backend modal --dry-run
#     prover train es --config configs/kimina-es.toml --backend modal --detach
#     modal run --detach prover_cli/modal_app.py --command train_es --config configs/kimina-es.toml
#     modal app logs ap-XXXXXXXX                               # the app id --detach printed
#
# What runs where:
#
# | function            | image        | hardware                      | why                                  |
# |---------------------|--------------|-------------------------------|--------------------------------------|
# | prepare_data        | orchestrator | 2 CPUs                        | reads a dataset, writes problems     |
# | verify              | orchestrator | 1 CPU                         | splits proofs, waits on the batches  |
# | verify_shard/_batch | lean         | `modal.verify_cpus` CPUs      | one isolated REPL pool per batch     |
# | Generator           | gpu          | `modal.gpu`                   | vLLM loaded once per container       |
# | train_es            | gpu          | `modal.gpu`                   | holds theta, updates, writes ledger  |
# | ESMember            | gpu          | `modal.gpu` x population      | rebuilds theta_t, perturbs, samples  |
# | train_grpo          | trl          | `modal.gpu`                   | TRL's GRPOTrainer                    |
# | replay_seeds, eval  | gpu          | CPU, or a GPU when needed     | rebuild weights / generate + score   |
#
# Nothing here has run against the Modal cloud from this repository's CI: the tests check the
# declarations and run every wrapper in-process with `.local()`. See docs/modal.md.

# No `from __future__ import annotations`: Modal reads the class parameters' types at runtime.
import contextlib
import dataclasses
import importlib
import inspect
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import modal

from prover_cli.backends import resolve
from prover_cli.config import Config, config_from_dict, load_config
from prover_cli.errors import BackendError, InputError, NotBuiltError
from prover_cli.modal_plan import MODELS_MOUNT, PINS, RUNS_MOUNT, gpu_spec, repl_tag, resources
from prover_cli.progress import NULL_REPORTER

# ## Settings read at import
#
# Modal declares functions when this module is imported, on your machine and again in every
# container, so the few config values that shape the declarations (the app and Volume names,
# the Lean and Mathlib versions baked into the Lean image) are read from the environment, with
# the config defaults as fallback, and baked into every image so containers agree. `run_remote`
# re-imports this module when your config asks for other values.

DEFAULTS = Config()


def deploy_settings(config: Any) -> dict[str, str]:
    return {
        "PROVER_MODAL_APP": config.modal.app_name,
        "PROVER_MODELS_VOLUME": config.modal.models_volume,
        "PROVER_RUNS_VOLUME": config.modal.runs_volume,
        "PROVER_LEAN_TOOLCHAIN": config.verify.lean_toolchain,
        "PROVER_MATHLIB_REV": config.verify.mathlib_rev,
    }


SETTINGS = {key: os.environ.get(key, default) for key, default in deploy_settings(DEFAULTS).items()}
LEAN_TOOLCHAIN = SETTINGS["PROVER_LEAN_TOOLCHAIN"]
MATHLIB_REV = SETTINGS["PROVER_MATHLIB_REV"]

# The decorators below declare the resources of the default config; `run_remote` applies yours
# with `.with_options()` (GPU type, containers, timeouts, retries, CPUs, memory).
R = resources(DEFAULTS)

app = modal.App(SETTINGS["PROVER_MODAL_APP"])

# ## Volumes
#
# `prover-models` holds base weights, downloaded once from the Hugging Face hub (`HF_HOME` points
# into it). `prover-ledgers` holds run directories: problems, samples, verdicts, ledgers, metrics.
# Every container works with the runs Volume as its current directory, so a relative path means
# the same file on your machine and on Modal. Writers `commit()` before readers `reload()`.

models_volume = modal.Volume.from_name(SETTINGS["PROVER_MODELS_VOLUME"], create_if_missing=True)
runs_volume = modal.Volume.from_name(SETTINGS["PROVER_RUNS_VOLUME"], create_if_missing=True)
MODELS_AND_RUNS = {MODELS_MOUNT: models_volume, RUNS_MOUNT: runs_volume}
RUNS_ONLY = {RUNS_MOUNT: runs_volume}

# ## Images, one per job
#
# Our own package goes in last (`add_local_python_source`), so editing it never rebuilds the
# layers below it.

orchestrator_image = (
    modal.Image.debian_slim(python_version=PINS["python"])
    .uv_pip_install(PINS["typer"], PINS["rich"], PINS["datasets"], PINS["huggingface_hub"])
    .env({**SETTINGS, "PROVER_IMAGE": "orchestrator"})
    .add_local_python_source("prover_cli")
)

_gpu_base = (
    modal.Image.debian_slim(python_version=PINS["python"])
    .uv_pip_install(PINS["vllm"], PINS["transformers"], PINS["huggingface_hub"], PINS["safetensors"],
                    PINS["datasets"], PINS["typer"], PINS["rich"], PINS["matplotlib"])
    .env({**SETTINGS, "HF_HOME": f"{MODELS_MOUNT}/hf"})
)
gpu_image = _gpu_base.env({"PROVER_IMAGE": "gpu"}).add_local_python_source("prover_cli")
trl_image = _gpu_base.uv_pip_install(PINS["trl"]).env({"PROVER_IMAGE": "trl"}).add_local_python_source("prover_cli")

# The Lean image: a pinned toolchain through elan, the leanprover-community REPL built at the tag
# of that Lean release, and a Lake project requiring Mathlib whose build cache is fetched here,
# at image build, so no container ever compiles Mathlib. The last step elaborates
# `import Mathlib` once, so a broken cache fails the build instead of the first verification.

ELAN_HOME = "/opt/elan"
REPL_DIR = "/opt/repl"
LEAN_PROJECT_DIR = "/opt/lean-project"
LEAN_PROJECT_LAKEFILE = f"""name = "prover_verify"

[[require]]
name = "mathlib"
git = "https://github.com/leanprover-community/mathlib4"
rev = "{MATHLIB_REV}"
"""

# Each list is one image layer; a layer rebuilds only when its own commands change.
ELAN_STEPS = [
    f"curl -sSfL https://github.com/leanprover/elan/releases/download/{PINS['elan']}/"
    "elan-x86_64-unknown-linux-gnu.tar.gz | tar xz -C /tmp",
    f"/tmp/elan-init -y --no-modify-path --default-toolchain {LEAN_TOOLCHAIN}",
]
REPL_STEPS = [
    f"git clone --depth 1 --branch {repl_tag(LEAN_TOOLCHAIN)} https://github.com/leanprover-community/repl {REPL_DIR}",
    f"cd {REPL_DIR} && lake build repl",
    f"ln -s {REPL_DIR}/.lake/build/bin/repl /usr/local/bin/repl",  # so `lake env repl` finds it
]
MATHLIB_STEPS = [
    f"mkdir -p {LEAN_PROJECT_DIR}",
    f"printf %s {shlex.quote(LEAN_TOOLCHAIN)} > {LEAN_PROJECT_DIR}/lean-toolchain",
    f"printf %s {shlex.quote(LEAN_PROJECT_LAKEFILE)} > {LEAN_PROJECT_DIR}/lakefile.toml",
    f"cd {LEAN_PROJECT_DIR} && lake update && lake exe cache get",  # prebuilt .olean files, no compile
    f"cd {LEAN_PROJECT_DIR} && printf 'import Mathlib\\n#eval Lean.versionString\\n' > /tmp/check.lean"
    " && lake env lean /tmp/check.lean",
]

lean_image = (
    modal.Image.debian_slim(python_version=PINS["python"])
    .apt_install("curl", "git", "ca-certificates")  # elan, lake and `cache get` download over https
    .env({"ELAN_HOME": ELAN_HOME,
          "PATH": f"{ELAN_HOME}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"})
    .run_commands(*ELAN_STEPS)
    .run_commands(*REPL_STEPS)
    .run_commands(*MATHLIB_STEPS)
    .uv_pip_install(PINS["typer"], PINS["rich"])
    .env({**SETTINGS, "PROVER_IMAGE": "lean", "PROVER_IMAGE_LEAN_TOOLCHAIN": LEAN_TOOLCHAIN,
          "PROVER_IMAGE_MATHLIB_REV": MATHLIB_REV})
    .add_local_python_source("prover_cli")
)


# ## Helpers every function body uses
#
# Volumes only commit and reload inside a Modal container; with `.local()` (tests) the Volume
# is a local directory and both are no-ops.

def _commit(volume: Any) -> None:
    if not modal.is_local():
        volume.commit()


def _reload(volume: Any) -> None:
    if not modal.is_local():
        volume.reload()


@contextlib.contextmanager
def _in_runs_dir() -> Iterator[None]:
    """Relative paths (run.dir, data.problems, model.cache_dir, path arguments) resolve on the runs Volume."""
    previous = os.getcwd()
    Path(RUNS_MOUNT).mkdir(parents=True, exist_ok=True)
    os.chdir(RUNS_MOUNT)
    try:
        yield
    finally:
        os.chdir(previous)


def _config(config_dict: dict[str, Any]) -> Any:
    """Rebuild (and re-validate) the config sent over the wire; adapt [verify] to the Lean image."""
    config = config_from_dict(config_dict, source="modal")
    image_toolchain = os.environ.get("PROVER_IMAGE_LEAN_TOOLCHAIN")
    if image_toolchain is None:
        return config  # not the Lean image: nothing to adapt
    image_mathlib = os.environ.get("PROVER_IMAGE_MATHLIB_REV")
    if (config.verify.lean_toolchain, config.verify.mathlib_rev) != (image_toolchain, image_mathlib):
        # Fail closed: a verdict must never name a Lean or Mathlib version that did not produce it.
        raise BackendError(
            f"verify.lean_toolchain = {config.verify.lean_toolchain!r}, verify.mathlib_rev = "
            f"{config.verify.mathlib_rev!r}, but this Lean image has {image_toolchain!r} and {image_mathlib!r}",
            hint="set PROVER_LEAN_TOOLCHAIN / PROVER_MATHLIB_REV to the config values and rerun (the image rebuilds)",
        )
    # Your machine's Lean project and REPL command mean nothing here: use the image's.
    config.verify.project_dir = LEAN_PROJECT_DIR
    config.verify.repl_command = ["lake", "env", "repl"]
    return config


_PATH_ARGS = ("proofs_path", "out_path", "problems_path", "ledger_path", "out_dir", "ledger", "verdicts")


def _paths_in(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Path arguments cross the wire as strings relative to the runs Volume; the library gets Paths."""
    return {k: (Path(v) if k in _PATH_ARGS and v is not None else v) for k, v in kwargs.items()}


def _accepts(function: Callable[..., Any], parameter: str) -> bool:
    return parameter in inspect.signature(function).parameters


def _options(name: str, config: Any, *, gpu: bool = False) -> dict[str, Any]:
    """`.with_options()` arguments that apply the caller's [modal] section to a declared function."""
    r = resources(config)[name]
    options: dict[str, Any] = dict(cpu=r.cpu, memory=r.memory_mb, timeout=r.timeout_s, retries=r.retries,
                                   max_containers=r.max_containers)
    if r.gpu or gpu:
        options["gpu"] = r.gpu or gpu_spec(config)
    return options


def _fan_out(function: Any, inputs: list[tuple[Any, ...]], *, return_exceptions: bool) -> list[Any]:
    """`.starmap()` across containers on Modal; one after another in this process under `.local()`.

    With `return_exceptions`, a call that failed after its retries comes back as the exception, in
    its place, instead of ending the whole fan-out.
    """
    if modal.is_local():
        results: list[Any] = []
        for args in inputs:
            try:
                results.append(function.local(*args))
            except Exception as exc:
                if not return_exceptions:
                    raise
                results.append(exc)
        return results
    return list(function.starmap(inputs, order_outputs=True, return_exceptions=return_exceptions))


# Library pieces the Modal functions need beyond `backends.FUNCTIONS`, resolved lazily like them.
BUILDING_BLOCKS = {
    # MemberEvaluator(config).completions(iteration=, member=, problems=) -> list[str]: theta_{t-1}
    # from the base weights + <run.dir>/ledger.json (replaying only iterations it has not applied
    # yet), plus member `member`'s perturbation; samples problem-major, as the local loop does.
    "es_member": "prover_cli.es.member:MemberEvaluator",
}


def _building_block(key: str) -> Any:
    module_name, _, attr = BUILDING_BLOCKS[key].partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ModuleNotFoundError, AttributeError):
        raise NotBuiltError(f"--backend modal needs {BUILDING_BLOCKS[key]}, which this version of prover "
                            "does not provide") from None


# ## Model weights: downloaded once, into the models Volume

@app.function(
    image=gpu_image,
    cpu=R["download_model"].cpu,
    memory=R["download_model"].memory_mb,
    timeout=R["download_model"].timeout_s,               # a 7B model is ~15 GB; hub downloads can crawl
    retries=R["download_model"].retries,                 # snapshot_download resumes partial files
    max_containers=R["download_model"].max_containers,   # one writer, so two runs never race on a file
    volumes=MODELS_AND_RUNS,
)
def download_model(config: dict[str, Any]) -> dict[str, Any]:
    cfg = _config(config)
    _reload(runs_volume)
    with _in_runs_dir():
        from prover_cli.tiny_model import TINY_NAME, resolve_model_path

        name = cfg.model.name
        if name == TINY_NAME:
            where = resolve_model_path(name, cfg.model.cache_dir, cfg.model.tiny_seed)  # built offline, on the runs Volume
        elif Path(name).exists():
            where = name  # a model directory already on the runs Volume
        else:
            from huggingface_hub import snapshot_download

            where = snapshot_download(repo_id=name, revision=cfg.model.revision)
    _commit(models_volume)
    _commit(runs_volume)
    return {"model": name, "revision": cfg.model.revision, "path": str(where)}


def _ensure_model(config: dict[str, Any]) -> None:
    """Before any GPU container loads weights: fetch them once, then read them from the Volume only."""
    if modal.is_local():
        download_model.local(config)
        return
    download_model.remote(config)
    _reload(models_volume)
    _reload(runs_volume)
    os.environ["HF_HUB_OFFLINE"] = "1"  # fail closed: never a second, racing download


# ## Verification: isolated Lean containers
#
# A batch of proofs goes to its own container with its own REPL pool. The container's timeout
# covers the header plus every proof hitting its own timeout, so a wedged batch is killed and
# retried, then failed: it is never waited on forever. A batch that still fails becomes `error`
# verdicts for its proofs (`return_exceptions`), and the rest of the run goes on.

@app.function(
    image=lean_image,
    cpu=R["verify_shard"].cpu,                         # one REPL process per core (verify.workers)
    memory=R["verify_shard"].memory_mb,                # each REPL holds Mathlib's environment, several GiB
    timeout=R["verify_shard"].timeout_s,               # header + every proof at its timeout, then killed
    retries=R["verify_shard"].retries,                 # verify_file resumes, so a retry redoes no proof
    max_containers=R["verify_shard"].max_containers,   # bounds the CPU bill of one huge file
    volumes=RUNS_ONLY,
)
def verify_shard(config: dict[str, Any], proofs_path: str, out_path: str) -> dict[str, Any]:
    """`prover verify` on one shard file of the runs Volume, with the library's own rules and resume."""
    cfg = _config(config)
    _reload(runs_volume)  # the orchestrator committed the shard just before
    with _in_runs_dir():
        result = _library_verify("verify_file")(cfg, proofs_path=Path(proofs_path), out_path=Path(out_path))
    _commit(runs_volume)
    return result


@app.function(
    image=lean_image,
    cpu=R["verify_batch"].cpu,                         # one REPL process per core (verify.workers)
    memory=R["verify_batch"].memory_mb,                # each REPL holds Mathlib's environment, several GiB
    timeout=R["verify_batch"].timeout_s,               # header + every proof at its timeout, then killed
    retries=R["verify_batch"].retries,                 # a batch is pure: retrying it is always safe
    max_containers=R["verify_batch"].max_containers,   # bounds the CPU bill of one reward batch
    volumes=RUNS_ONLY,
)
def verify_batch(verify: dict[str, Any], records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The RL reward path: `verify_records` on one batch, in memory (nothing touches the Volume)."""
    cfg = _config({"verify": verify})
    return _library_verify("verify_records")(records, cfg.verify)


def _error_verdict(record: dict[str, Any], exc: BaseException, verify: Any) -> dict[str, Any]:
    """A batch that failed after its retries: every proof in it is an `error`, never a silent 0.
    The line is built by the library's own `verdict_record`, so it has every field a verdict has."""
    from prover_cli.verify.engine import verdict_record, verifier_identity
    from prover_cli.verify.rules import Verdict

    reason = f"modal: verification batch failed after retries: {type(exc).__name__}: {exc}"
    return verdict_record(record, Verdict(status="error", reason=reason), verifier_identity(verify))


def _verify_records_in_lean_containers(config: Any) -> Callable[..., list[dict[str, Any]]]:
    """`verify_records` with the same signature, fanned out over `verify_batch` containers."""

    def verify_records(records: list[dict[str, Any]], verify_config: Any, reporter: Any = NULL_REPORTER,
                       keep_warm: bool = False) -> list[dict[str, Any]]:
        # keep_warm is moot here: the Lean containers keep their own REPL pools warm
        size = config.modal.verify_batch_size
        batches = [records[i:i + size] for i in range(0, len(records), size)]
        section = dataclasses.asdict(verify_config)
        function = verify_batch.with_options(**_options("verify_batch", config))
        verdicts: list[dict[str, Any]] = []
        with reporter.task("verify on Modal", total=len(records), unit="proofs") as task:
            results = _fan_out(function, [(section, batch) for batch in batches], return_exceptions=True)
            for batch, result in zip(batches, results):
                if isinstance(result, BaseException):
                    result = [_error_verdict(record, result, verify_config) for record in batch]
                verdicts.extend(result)
                task.advance(len(batch))
        return verdicts

    return verify_records


def _verify_file_in_lean_containers(config: Any) -> Callable[..., dict[str, Any]]:
    """`verify_file` with the same signature: the proofs file is cut into shards of
    `modal.verify_batch_size` lines (`<out>.shards/lines-<first>-<last>.jsonl`), each verified by
    the library's own `verify_file` in its own container, then the shard verdicts are joined, in
    input order, into `out_path`. Rerunning resumes shard by shard; a failed shard's proofs get
    `error` verdicts in `out_path` only, so the next run retries them."""

    def verify_file(cfg: Any, *, proofs_path: Path, out_path: Path, reporter: Any = NULL_REPORTER) -> dict[str, Any]:
        proofs_path, out_path = Path(proofs_path), Path(out_path)
        if not proofs_path.exists():
            raise InputError(f"{proofs_path}: proofs file not found on the runs Volume")
        lines = proofs_path.read_text(encoding="utf-8").splitlines(keepends=True)
        shard_dir = out_path.with_name(out_path.name + ".shards")
        shard_dir.mkdir(parents=True, exist_ok=True)
        size = cfg.modal.verify_batch_size
        shards = []
        for start in range(0, len(lines), size):
            chunk = "".join(lines[start:start + size])
            shard = shard_dir / f"lines-{start + 1:07d}-{min(start + size, len(lines)):07d}.jsonl"
            if not shard.exists() or shard.read_text(encoding="utf-8") != chunk:
                _write_atomic(shard, chunk)
            shards.append(shard)
        _commit(runs_volume)  # the shard containers reload before reading

        config_dict = cfg.to_dict()
        function = verify_shard.with_options(**_options("verify_shard", cfg))
        inputs = [(config_dict, str(s), str(s.with_suffix(".verdicts.jsonl"))) for s in shards]
        with reporter.task("verify on Modal", total=len(shards), unit="shards") as task:
            results = _fan_out(function, inputs, return_exceptions=True)
            task.advance(len(shards))
        _reload(runs_volume)

        joined: list[str] = []
        failed = 0
        ok = True
        for shard, result in zip(shards, results):
            if isinstance(result, BaseException):
                failed += 1
                for line in shard.read_text(encoding="utf-8").splitlines():
                    record = _json_or_none(line) or {"id": None, "line": line[:200]}
                    joined.append(json.dumps(_error_verdict(record, result, cfg.verify), ensure_ascii=False) + "\n")
                continue
            ok = ok and result.get("ok", True) is not False
            joined.extend(line + "\n" for line in
                          shard.with_suffix(".verdicts.jsonl").read_text(encoding="utf-8").splitlines() if line.strip())
        _write_atomic(out_path, "".join(joined))
        _commit(runs_volume)

        counts: dict[str, int] = {}
        for line in joined:
            verdict = (_json_or_none(line) or {}).get("verdict", "unreadable")
            counts[verdict] = counts.get(verdict, 0) + 1
        return {
            "ok": ok and failed == 0,
            "proofs": len(lines),
            "shards": len(shards),
            "failed_shards": failed,
            "out_path": str(out_path),
            **counts,
            "tables": [{"title": f"verify on Modal: {proofs_path}",
                        "columns": ["verdict", "count"], "rows": sorted(counts.items())}],
        }

    return verify_file


def _json_or_none(line: str) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


@contextlib.contextmanager
def _verification_in_lean_containers(config: Any, *, always: bool = False) -> Iterator[None]:
    """GPU and orchestrator images have no Lean. While this is active, the library's two entry
    points to Lean, `prover_cli.verify.verify_records` (the RL reward, through tasks/lean.py) and
    `verify_file` (`prover verify`, `prover eval`), send their proofs to the Lean containers above.
    Where verification runs changes; what it computes does not: the Lean containers call the very
    same functions. Python-checked tasks (countdown, toy) never reach Lean and are left alone."""
    if (config.data.task != "lean" and not always) or _UNROUTED:
        yield  # nothing reaches Lean, or this process already routes it
        return
    import prover_cli.verify as verify_module

    _UNROUTED.update(verify_records=verify_module.verify_records, verify_file=verify_module.verify_file)
    verify_module.verify_records = _verify_records_in_lean_containers(config)
    verify_module.verify_file = _verify_file_in_lean_containers(config)
    try:
        yield
    finally:
        verify_module.verify_records = _UNROUTED.pop("verify_records")
        verify_module.verify_file = _UNROUTED.pop("verify_file")


# The library's own functions while this process routes verification elsewhere. On Modal the Lean
# containers are other processes; under `.local()` they run here and must not route again.
_UNROUTED: dict[str, Any] = {}


def _library_verify(attr: str) -> Any:
    if attr in _UNROUTED:
        return _UNROUTED[attr]
    try:
        return getattr(importlib.import_module("prover_cli.verify"), attr)
    except (ModuleNotFoundError, AttributeError):
        raise NotBuiltError(f"`verify` is not built in this version of prover (no prover_cli.verify.{attr})") from None


def _call_library(name: str, config: dict[str, Any], kwargs: dict[str, Any], *, needs_model: bool = False,
                  route_verification: bool = False, before: Callable[[Any, dict[str, Any]], dict[str, Any]] | None = None) -> Any:
    """The body of every wrapper: rebuild the config, run the library function on the Volume, commit."""
    cfg = _config(config)
    _reload(runs_volume)
    if needs_model:
        _ensure_model(config)
    with _in_runs_dir(), _verification_in_lean_containers(cfg, always=route_verification):
        function = resolve(name)
        arguments = _paths_in(kwargs)
        if before is not None:
            arguments = before(cfg, arguments)
        result = function(cfg, **arguments)
    _commit(runs_volume)
    return result


# ## Data and verification entry points

@app.function(
    image=orchestrator_image,
    cpu=R["prepare_data"].cpu,
    memory=R["prepare_data"].memory_mb,
    timeout=R["prepare_data"].timeout_s,               # large hub datasets download slowly
    retries=R["prepare_data"].retries,                 # it rewrites problems.jsonl whole: safe to redo
    max_containers=R["prepare_data"].max_containers,
    volumes=RUNS_ONLY,
)
def prepare_data(config: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    return _call_library("prepare_data", config, kwargs)


@app.function(
    image=orchestrator_image,
    cpu=R["verify"].cpu,                               # it only splits files and waits
    memory=R["verify"].memory_mb,
    timeout=R["verify"].timeout_s,                     # bounds the run; each batch has its own timeout
    retries=R["verify"].retries,                       # shards resume, so a retry redoes no proof
    max_containers=R["verify"].max_containers,
    volumes=RUNS_ONLY,
)
def verify(config: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    return _call_library("verify", config, kwargs, route_verification=True)


# ## Generation: a GPU class that loads vLLM once per container
#
# The engine loads in `@modal.enter`, once per container; later calls with the same config (the
# class parameter) reuse the warm container until it scales down.

@app.cls(
    image=gpu_image,
    gpu=R["generate"].gpu,                             # vLLM needs one GPU per engine
    cpu=R["generate"].cpu,
    memory=R["generate"].memory_mb,                    # host RAM to stage the weights
    timeout=R["generate"].timeout_s,                   # one `prover generate` call
    retries=R["generate"].retries,                     # generate resumes from samples.jsonl
    max_containers=R["generate"].max_containers,       # one call per command; the class keeps it warm
    volumes=MODELS_AND_RUNS,
)
class Generator:
    config_json: str = modal.parameter()
    model: str = modal.parameter(default="")           # `prover generate --model`, if given

    @modal.enter()
    def load(self) -> None:
        config = json.loads(self.config_json)
        self.config = _config(config)
        self.sampler = None
        if not _accepts(resolve("generate"), "sampler"):
            return  # the library loads its own sampler per call
        _ensure_model(config)
        with _in_runs_dir():
            from prover_cli.samplers import load_sampler

            self.sampler = load_sampler(self.config, model_path=self.model or None)

    @modal.method()
    def generate_file(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        _reload(runs_volume)
        if self.sampler is None:
            _ensure_model(json.loads(self.config_json))
        with _in_runs_dir():
            arguments = _paths_in(kwargs)
            if self.sampler is not None:
                arguments["sampler"] = self.sampler
            result = resolve("generate")(self.config, **arguments)
        _commit(runs_volume)
        return result


# ## Evolution Strategies
#
# `train_es` runs the library's loop in one container: the only writer of the ledger. It hands
# each iteration's population to `ESMember` containers with `.starmap()`; each member container
# rebuilds theta_t from the base weights and the ledger on the runs Volume, keeps it between
# calls, and replays only the iterations it has not seen. The loop commits the ledger before each
# fan-out, and members reload before reading it. A member that fails after its retries fails the
# iteration (a missing member would bias the update); the loop's own retry then resumes from the
# last ledger entry, which was written atomically, so a lost container never corrupts the ledger.

@app.cls(
    image=gpu_image,
    gpu=R["es_member"].gpu,                            # sampling a perturbed model needs the GPU
    cpu=R["es_member"].cpu,
    memory=R["es_member"].memory_mb,                   # host RAM to stage the weights
    timeout=R["es_member"].timeout_s,                  # one member's samples, replay included
    retries=R["es_member"].retries,                    # a member is a pure function of (ledger, t, i)
    max_containers=R["es_member"].max_containers,      # one per member: the population in one wave
    volumes=MODELS_AND_RUNS,
)
class ESMember:
    config_json: str = modal.parameter()

    @modal.enter()
    def load(self) -> None:
        self.config = _config(json.loads(self.config_json))
        _reload(models_volume)
        _reload(runs_volume)
        if not modal.is_local():
            os.environ["HF_HUB_OFFLINE"] = "1"  # the loop fetched the weights; never 30 downloads at once
        with _in_runs_dir():
            self.evaluator = _building_block("es_member")(self.config)

    @modal.method()
    def completions(self, iteration: int, member: int, problems: list[dict[str, Any]]) -> list[str]:
        _reload(runs_volume)  # the loop committed the ledger of iteration - 1
        with _in_runs_dir():
            return self.evaluator.completions(iteration=iteration, member=member, problems=problems)


def _population_on_modal(config: Any, config_dict: dict[str, Any]) -> Callable[[int, list[dict[str, Any]]], list[list[str]]]:
    members = ESMember.with_options(**_options("es_member", config))(config_json=json.dumps(config_dict))

    def generate_population(iteration: int, problems: list[dict[str, Any]]) -> list[list[str]]:
        _commit(runs_volume)
        inputs = [(iteration, member, problems) for member in range(config.es.population)]
        return _fan_out(members.completions, inputs, return_exceptions=False)

    return generate_population


LEDGER_FILE = "ledger.json"


def _es_arguments(config_dict: dict[str, Any]) -> Callable[[Any, dict[str, Any]], dict[str, Any]]:
    def before(cfg: Any, arguments: dict[str, Any]) -> dict[str, Any]:
        arguments = _resume_after_retry(cfg, arguments)
        if _accepts(resolve("train_es"), "generate_population"):
            arguments["generate_population"] = _population_on_modal(cfg, config_dict)
        else:
            print("ES members run one after another in this container: prover_cli.es.train.train_es "
                  "takes no generate_population hook", file=sys.stderr)
        return arguments

    return before


def _resume_after_retry(cfg: Any, arguments: dict[str, Any]) -> dict[str, Any]:
    """Modal retries a lost or timed-out call with the same function-call id: that retry resumes
    from the ledger instead of starting over. A first attempt leaves its id in the run directory."""
    call_id = modal.current_function_call_id()
    if call_id is None:
        return arguments  # `.local()`: no retries
    marker = Path(cfg.run.dir) / ".modal-call"
    if marker.exists() and marker.read_text(encoding="utf-8").strip() == call_id:
        if (Path(cfg.run.dir) / LEDGER_FILE).exists():
            print(f"retry of {call_id}: resuming from {cfg.run.dir}/{LEDGER_FILE}", file=sys.stderr)
            return {**arguments, "resume": True}
        return arguments
    _write_atomic(marker, call_id)
    _commit(runs_volume)
    return arguments


@app.function(
    image=gpu_image,
    gpu=R["train_es"].gpu,                             # theta_t lives here: updates and fingerprints
    cpu=R["train_es"].cpu,
    memory=R["train_es"].memory_mb,
    timeout=R["train_es"].timeout_s,                   # Modal's 24 h ceiling; longer runs resume
    retries=R["train_es"].retries,                     # a retry resumes from the atomic ledger
    max_containers=R["train_es"].max_containers,       # exactly one writer of a run's ledger
    volumes=MODELS_AND_RUNS,
)
def train_es(config: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    return _call_library("train_es", config, kwargs, needs_model=True, before=_es_arguments(config))


# ## GRPO, replay and eval

@app.function(
    image=trl_image,
    gpu=R["train_grpo"].gpu,                           # policy, optimizer state and (colocated) vLLM
    cpu=R["train_grpo"].cpu,
    memory=R["train_grpo"].memory_mb,
    timeout=R["train_grpo"].timeout_s,                 # Modal's 24 h ceiling
    retries=R["train_grpo"].retries,                   # 0: resume is explicit, `--resume` from checkpoints/
    max_containers=R["train_grpo"].max_containers,     # one run, one trainer
    volumes=MODELS_AND_RUNS,
)
def train_grpo(config: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    return _call_library("train_grpo", config, kwargs, needs_model=True)


@app.function(
    image=gpu_image,
    cpu=R["replay_seeds"].cpu,                         # replay is exact on CPU; `--device cuda` adds a GPU
    memory=R["replay_seeds"].memory_mb,                # the weights plus one fp32 update buffer
    timeout=R["replay_seeds"].timeout_s,
    retries=R["replay_seeds"].retries,                 # replay rewrites out_dir whole: safe to redo
    max_containers=R["replay_seeds"].max_containers,
    volumes=MODELS_AND_RUNS,
)
def replay_seeds(config: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    return _call_library("replay_seeds", config, kwargs, needs_model=True)


@app.function(
    image=gpu_image,
    cpu=R["eval"].cpu,                                 # scoring `--verdicts` needs no GPU; generating adds one
    memory=R["eval"].memory_mb,
    timeout=R["eval"].timeout_s,                       # generation + verification of a whole split
    retries=R["eval"].retries,                         # generate and verify both resume
    max_containers=R["eval"].max_containers,
    volumes=MODELS_AND_RUNS,
)
def evaluate(config: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    needs_model = kwargs.get("verdicts") is None
    return _call_library("eval", config, kwargs, needs_model=needs_model)


# ## Calling it from your machine
#
# `run_remote` is what `prover <command> --backend modal` calls (through `backends.MODAL_RUNNER`).
# It uploads the inputs that exist on your machine to the runs Volume (same relative path),
# runs the function in an ephemeral app, and downloads the small outputs back. With `--detach`
# it spawns the call in a detached app and returns at once; the outputs stay on the Volume.

REMOTE_FUNCTIONS: dict[str, Any] = {
    "prepare_data": prepare_data,
    "verify": verify,
    "train_es": train_es,
    "train_grpo": train_grpo,
    "replay_seeds": replay_seeds,
    "eval": evaluate,
}
REMOTE_NAMES = (*REMOTE_FUNCTIONS, "generate")

# Arguments that name inputs (uploaded when they exist here) and outputs (downloaded when small).
_INPUT_ARGS = ("source", "proofs_path", "problems_path", "ledger_path", "ledger", "verdicts", "model")
_OUTPUT_ARGS = ("out_path", "out_dir")


def volume_path(path: str | Path) -> str:
    """Where a path of your machine lives on the runs Volume: the same path, relative to here."""
    p = Path(path)
    if p.is_absolute():
        try:
            p = p.resolve().relative_to(Path.cwd().resolve())
        except ValueError:
            raise InputError(f"{path}: --backend modal maps paths onto the runs Volume relative to the current "
                             f"directory; use a path inside {Path.cwd()}") from None
    if ".." in p.parts:
        raise InputError(f"{path}: --backend modal cannot map a path outside the current directory")
    return p.as_posix()


def to_wire(name: str, config: Any, kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], list[tuple[Path, str]]]:
    """(config dict, keyword arguments, uploads) for a remote call: every path relative to the runs Volume."""
    if name not in REMOTE_NAMES:
        raise BackendError(f"`{name}` has no Modal function; --backend modal runs {', '.join(REMOTE_NAMES)}")
    uploads: list[tuple[Path, str]] = []

    def local_input(value: Any, *, may_be_id: bool) -> Any:
        if value is None:
            return None
        if Path(str(value)).exists():
            uploads.append((Path(str(value)), volume_path(value)))
            return volume_path(value)
        return str(value) if may_be_id else volume_path(value)  # a hub id, or already on the Volume

    remote_kwargs: dict[str, Any] = {}
    for key, value in kwargs.items():
        if key in _INPUT_ARGS:
            remote_kwargs[key] = local_input(value, may_be_id=key in ("source", "model"))
        elif key in _OUTPUT_ARGS:
            remote_kwargs[key] = None if value is None else volume_path(value)
        else:
            remote_kwargs[key] = value

    config_dict = config.to_dict()
    config_dict["run"]["dir"] = volume_path(config.run.dir)
    try:
        config_dict["model"]["cache_dir"] = volume_path(config.model.cache_dir)
    except InputError:  # only a cache (the tiny model): rebuild it on the Volume rather than refuse
        config_dict["model"]["cache_dir"] = DEFAULTS.model.cache_dir
    config_dict["model"]["name"] = local_input(config.model.name, may_be_id=True)
    for section, key in (("data", "problems"), ("data", "source"), ("eval", "problems")):
        value = config_dict[section][key]
        if value:
            config_dict[section][key] = local_input(value, may_be_id=key == "source")
    if not config.data.problems and config.problems_path.exists():
        uploads.append((config.problems_path, volume_path(config.problems_path)))
    return config_dict, remote_kwargs, uploads


def _outputs(name: str, config_dict: dict[str, Any], remote_kwargs: dict[str, Any]) -> list[str]:
    """Small files worth bringing back after a call (weights stay on the Volume: `modal volume get`)."""
    run_dir = Path(config_dict["run"]["dir"])
    out = remote_kwargs.get("out_path")
    if name == "prepare_data":
        return [out or config_dict["data"]["problems"] or str(run_dir / "problems.jsonl")]
    if name in ("verify", "generate"):
        return [out or str(run_dir / "samples.jsonl")]
    if name == "train_es":
        return [str(run_dir / f) for f in (LEDGER_FILE, "metrics.jsonl", "config.toml")]
    if name == "train_grpo":
        return [str(run_dir / f) for f in ("metrics.jsonl", "config.toml")]
    return []


def run_remote(name: str, config: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Run library function `name` on Modal and return its result dict (what the local backend returns)."""
    if deploy_settings(config) != SETTINGS:
        # Your config names other Volumes, app or Lean versions than this import declared.
        os.environ.update(deploy_settings(config))
        return importlib.reload(sys.modules[__name__]).run_remote(name, config, kwargs)
    kwargs = dict(kwargs)
    detach = bool(kwargs.pop("detach", False))
    config_dict, remote_kwargs, uploads = to_wire(name, config, kwargs)
    with contextlib.redirect_stdout(sys.stderr), modal.enable_output():  # stdout carries only --json
        with app.run(detach=detach):
            if uploads:
                with runs_volume.batch_upload(force=True) as batch:
                    for local, remote in uploads:
                        (batch.put_directory if local.is_dir() else batch.put_file)(local, "/" + remote)
            call = _remote_call(name, config, config_dict, remote_kwargs)
            if detach:
                handle = call.spawn()
                return {
                    "ok": True,
                    "detached": True,
                    "function_call_id": handle.object_id,
                    "app_id": app.app_id,
                    "watch": f"modal app logs {app.app_id}",
                    "results": f"on Volume {config.modal.runs_volume} under {config_dict['run']['dir']}: "
                               f"modal volume get {config.modal.runs_volume} {config_dict['run']['dir']}",
                }
            result = call.remote()
    pulled = _pull(_outputs(name, config_dict, remote_kwargs))
    return {**result, "modal_volume": config.modal.runs_volume, "modal_pulled": ", ".join(pulled) or "-"}


@dataclasses.dataclass
class _Call:
    """One remote call, ready to `.remote()` (wait) or `.spawn()` (detach)."""

    target: Any
    args: tuple[Any, ...]

    def remote(self) -> Any:
        return self.target.remote(*self.args)

    def spawn(self) -> Any:
        return self.target.spawn(*self.args)


def _remote_call(name: str, config: Any, config_dict: dict[str, Any], remote_kwargs: dict[str, Any]) -> _Call:
    if name == "generate":
        model = remote_kwargs.pop("model", None) or ""
        cls = Generator.with_options(**_options("generate", config))
        return _Call(cls(config_json=json.dumps(config_dict), model=model).generate_file, (remote_kwargs,))
    needs_gpu = ((name == "eval" and remote_kwargs.get("verdicts") is None)
                 or (name == "replay_seeds" and remote_kwargs.get("device") == "cuda"))
    function = REMOTE_FUNCTIONS[name].with_options(**_options(name, config, gpu=needs_gpu))
    return _Call(function, (config_dict, remote_kwargs))


def _pull(paths: list[str]) -> list[str]:
    pulled = []
    for remote in paths:
        try:
            data = b"".join(runs_volume.read_file(remote))
        except modal.exception.NotFoundError:
            continue
        local = Path(remote)
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp = local.with_name(local.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, local)
        pulled.append(remote)
    return pulled


# `modal run [--detach] prover_cli/modal_app.py --command train_es --config configs/kimina-es.toml`:
# the same call from Modal's own CLI. The call is spawned, then awaited, so with `--detach` it
# keeps running when this terminal closes (`modal app logs` to watch, `modal volume get` for results).

ENTRYPOINT_COMMANDS = ("prepare_data", "generate", "train_es", "train_grpo", "eval")


@app.local_entrypoint()
def main(command: str, config: str = "", overrides: str = "", resume: bool = False) -> None:
    if command not in ENTRYPOINT_COMMANDS:
        raise SystemExit(f"--command {command!r}: use one of {', '.join(ENTRYPOINT_COMMANDS)}; "
                         "commands that take files run as `prover <command> ... --backend modal`")
    cfg = load_config(config or None, [o for o in overrides.split(",") if o])
    kwargs: dict[str, Any] = {"resume": resume} if command in ("train_es", "train_grpo") else {}
    config_dict, remote_kwargs, uploads = to_wire(command, cfg, kwargs)
    if uploads:
        with runs_volume.batch_upload(force=True) as batch:
            for local, remote in uploads:
                (batch.put_directory if local.is_dir() else batch.put_file)(local, "/" + remote)
    handle = _remote_call(command, cfg, config_dict, remote_kwargs).spawn()
    print(f"function call {handle.object_id}", file=sys.stderr)
    result = handle.get()
    print(json.dumps({k: v for k, v in result.items() if k != "tables"}, indent=2, default=str))
