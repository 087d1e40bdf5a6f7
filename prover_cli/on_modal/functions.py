# # Function bodies: the library's own functions, in containers sized for them
#
# Every wrapper rebuilds the config, turns its paths into absolute paths on the runs Volume,
# runs the same library function the local backend runs, and commits. None of them `chdir`s into
# a Volume (see images.py), so `reload()` never meets a working directory inside one.

# No `from __future__ import annotations`: Modal reads the class parameters' types at runtime.
import contextlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator

import modal

from prover_cli.backends import resolve_function
from prover_cli.config import Config, config_from_dict
from prover_cli.errors import ConfigError
from prover_cli.es.ledger import LEDGER_FILE
from prover_cli.es.population import LocalPopulation, lora_members
from prover_cli.fsio import jsonl
from prover_cli.fsio.jsonl import write_text_atomic  # the package's one atomic-file writer
from prover_cli.on_modal import sandbox
from prover_cli.on_modal.images import (
    DEFAULTS,
    IMAGES,
    LEAN_PROJECT_DIR,
    LEAN_TOOLCHAIN,
    MATHLIB_REV,
    data_app,
    gpu_app,
    grpo_app,
    lean_app,
    models_volume,
    mounts,
    runs_volume,
)
from prover_cli.on_modal.pipeline import LoopShare, MemberPipeline, shares
from prover_cli.on_modal.plan import MODELS_MOUNT, RUNS_MOUNT, gpu_spec, resources
from prover_cli.policy import samplers
from prover_cli.policy.built_models import BUILT_NAMES, resolve_model_path
from prover_cli.training import tracking
from prover_cli.verify.placement import verification_at

# The decorators below declare the resources of the default config; `remote.run_remote` applies
# yours with `.with_options()` (GPU type, containers, timeouts, retries, CPUs, memory).
R = resources(DEFAULTS)


def _declared(name: str) -> dict[str, Any]:
    """Decorator arguments for function `name`, from the plan's table (so the plan is what deploys)."""
    r = R[name]
    arguments: dict[str, Any] = dict(image=IMAGES[r.image], cpu=r.cpu, memory=r.memory_mb, timeout=r.timeout_s,
                                     retries=r.retries, max_containers=r.max_containers, volumes=mounts(*r.volumes))
    if r.gpu:
        arguments["gpu"] = r.gpu
    if r.scaledown_window_s is not None:
        arguments["scaledown_window"] = r.scaledown_window_s
    return arguments


# ## Helpers every function body uses

def _commit(volume: Any) -> None:
    """A real Volume commits only inside a container; `.local()` runs have none to commit to.
    Anything else (the tests' Volume stand-in) always applies Modal's rules. A commit reloads the
    Volume, which fails while a file in it is open: trackers close theirs first (tracking.py)."""
    tracking.release_files()
    if not (modal.is_local() and isinstance(volume, modal.Volume)):
        volume.commit()


def _reload(volume: Any) -> None:
    if not (modal.is_local() and isinstance(volume, modal.Volume)):
        volume.reload()


def on_volume(path: str | Path) -> Path:
    """Where a path sent over the wire (relative to the runs Volume) lives in this container."""
    p = Path(path)
    return p if p.is_absolute() else Path(RUNS_MOUNT) / p


WANDB_DIR = "/tmp/prover-wandb"  # W&B's local files, outside the Volumes (tracking.py)


def _config(config_dict: dict[str, Any]) -> Any:
    """Rebuild (and re-validate) the config sent over the wire, with its paths on the runs Volume."""
    config = config_from_dict(config_dict, source="modal")
    if not modal.is_local():
        os.environ.setdefault("WANDB_DIR", WANDB_DIR)
    jsonl.configure(max_line_bytes=config.io.max_line_bytes)  # io.max_line_bytes holds remotely too
    config.run.dir = str(on_volume(config.run.dir))
    config.model.cache_dir = str(on_volume(config.model.cache_dir))
    for section, key in (("data", "problems"), ("eval", "problems")):
        value = getattr(getattr(config, section), key)
        if value:
            setattr(getattr(config, section), key, str(on_volume(value)))
    # Either a hub id or a file uploaded to the Volume: only the latter becomes a path.
    for section, key in (("model", "name"), ("data", "source")):
        value = getattr(getattr(config, section), key)
        if value and not Path(value).is_absolute() and on_volume(value).exists():
            setattr(getattr(config, section), key, str(on_volume(value)))
    return config


_PATH_ARGS = ("proofs_path", "out_path", "problems_path", "ledger_path", "out_dir", "ledger", "verdicts")


def _paths_in(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Path arguments cross the wire as strings relative to the runs Volume; the library gets absolute Paths."""
    out = {k: (on_volume(v) if k in _PATH_ARGS and v is not None else v) for k, v in kwargs.items()}
    for key in ("model", "source"):  # a hub id, or a file on the Volume
        value = out.get(key)
        if value and not Path(str(value)).is_absolute() and on_volume(value).exists():
            out[key] = str(on_volume(value))
    return out


def _as_sent(value: Any) -> Any:
    """A result with our absolute Volume paths turned back into the relative ones the caller sent."""
    prefix = str(RUNS_MOUNT).rstrip("/") + "/"
    if isinstance(value, dict):
        return {k: _as_sent(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_sent(v) for v in value]
    if isinstance(value, str) and value.startswith(prefix):
        return value[len(prefix):]
    return value


def options(name: str, config: Config, *, gpu: bool = False) -> dict[str, Any]:
    """`.with_options()` arguments that apply the caller's [modal] section to a declared function."""
    r = resources(config)[name]
    arguments: dict[str, Any] = dict(cpu=r.cpu, memory=r.memory_mb, timeout=r.timeout_s, retries=r.retries,
                                     max_containers=r.max_containers)
    if r.gpu or gpu:
        arguments["gpu"] = r.gpu or gpu_spec(config)
    if r.scaledown_window_s is not None:
        arguments["scaledown_window"] = r.scaledown_window_s
    return arguments


def fan_out(function: Any, inputs: list[tuple[Any, ...]], *, return_exceptions: bool) -> list[Any]:
    """`.starmap()` across containers on Modal; one after another in this process under `.local()`."""
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


# ## Verification goes to Lean Sandboxes
#
# GPU and orchestrator images have no Lean. While this is active, the library's own two entry
# points to Lean, `verify_records` (the RL reward, through tasks/lean.py) and `verify_file`
# (`prover verify`, `prover eval`), run where the placement says (prover_cli/verify/placement.py,
# sandbox.verification_placement): every REPL process in a Sandbox of its own, every kernel-stage
# step in another. Where the processes run changes; what is computed (verdicts, summary, resume)
# does not. Python-checked tasks (countdown, toy) never reach a Sandbox; with the Kimina backend
# (a server of its own) only the kernel stage's steps do (this container has no Lean).

@contextlib.contextmanager
def verification_in_sandboxes(config: Config, *, always: bool = False) -> Iterator[None]:
    lean = config.data.task == "lean" or always
    kimina_kernel = config.verify.backend != "repl" and config.verify.kernel_check
    if not lean or (config.verify.backend != "repl" and not kimina_kernel):
        yield
        return
    with verification_at(sandbox.verification_placement(config)):
        yield


def _call_library(name: str, config: dict[str, Any], kwargs: dict[str, Any], *, needs_model: bool = False,
                  route_verification: bool = False,
                  before: Callable[[Any, dict[str, Any]], dict[str, Any]] | None = None) -> Any:
    """The body of every wrapper: rebuild the config, run the library function on the Volume, commit.
    `before(config, arguments)` returns the library function's arguments (train_es: its population)."""
    cfg = _config(config)
    _reload(runs_volume)
    if needs_model:
        _ensure_model(config)
    with verification_in_sandboxes(cfg, always=route_verification):
        arguments = _paths_in(kwargs)
        if before is not None:
            arguments = before(cfg, arguments)
        result = resolve_function(name)(cfg, **arguments)
    _commit(runs_volume)
    return _as_sent(result)


# ## Model weights: downloaded once, into the models Volume

@gpu_app.function(**_declared("download_model"))  # one writer, so two runs never race on a file
def download_model(config: dict[str, Any]) -> dict[str, Any]:
    cfg = _config(config)
    _reload(runs_volume)
    name = cfg.model.name
    if name in BUILT_NAMES:
        where = resolve_model_path(name, cfg.model.cache_dir, cfg.model.tiny_seed)  # built offline, on the runs Volume
    elif Path(name).exists():
        where = name  # a model directory already on the runs Volume
    else:
        from huggingface_hub import snapshot_download

        where = snapshot_download(repo_id=name, revision=cfg.model.revision)  # resumes partial files
    _commit(models_volume)
    _commit(runs_volume)
    return {"model": name, "revision": cfg.model.revision, "path": str(where)}


def _ensure_model(config: dict[str, Any]) -> None:
    """Before any GPU container loads weights: fetch them once, then read them from the Volume only."""
    if modal.is_local():
        download_model.local(config)
        return
    # the download of this container's own app (images.py: a container calls no other app's functions)
    DOWNLOADS.get(os.environ.get("PROVER_IMAGE", ""), download_model).remote(config)
    _reload(models_volume)
    _reload(runs_volume)
    os.environ["HF_HUB_OFFLINE"] = "1"  # fail closed: never a second, racing download


# ## Data and verification entry points

@data_app.function(**_declared("prepare_data"))  # rewrites problems.jsonl whole: a retry is safe
def prepare_data(config: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    return _call_library("prepare_data", config, kwargs)


@data_app.function(**_declared("verify"))  # drives the Sandboxes; the verdict file resumes, so a retry redoes no proof
def verify(config: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    return _call_library("verify", config, kwargs, route_verification=True)


@lean_app.function(**_declared("lean_image_check"))  # builds the Lean image at deploy; runs no proof
def lean_image_check() -> dict[str, Any]:
    """What the Lean image holds: the toolchain `lean --version` reports and the pinned versions."""
    out = subprocess.run(["lake", "env", "lean", "--version"], cwd=LEAN_PROJECT_DIR, capture_output=True,
                         text=True, timeout=300)
    return {"ok": out.returncode == 0, "lean_version": out.stdout.strip() or out.stderr.strip()[-300:],
            "lean_toolchain": LEAN_TOOLCHAIN, "mathlib_rev": MATHLIB_REV}


# ## Generation: a GPU class that loads vLLM once per container
#
# The engine loads in `@modal.enter`, once per container, with this process's working directory
# outside the Volumes (vLLM's worker processes inherit it for their lifetime).

@gpu_app.cls(**_declared("generate"))
class Generator:
    config_json: str = modal.parameter()
    model: str = modal.parameter(default="")           # `prover generate --model`, if given

    @modal.enter()
    def load(self) -> None:
        config = json.loads(self.config_json)
        self.config = _config(config)
        _ensure_model(config)
        model = _paths_in({"model": self.model})["model"] if self.model else None
        self.sampler = samplers.load_sampler(self.config.model, self.config.generate, model_path=model)

    @modal.method()
    def generate_file(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        _reload(runs_volume)
        arguments = {**_paths_in(kwargs), "sampler": self.sampler}
        result = resolve_function("generate")(self.config, **arguments)
        _commit(runs_volume)
        return _as_sent(result)


# ## Evolution Strategies
#
# `train_es` runs the library's loop in one container: the only writer of the ledger. It hands
# each iteration's population to `ESMember` containers with `.starmap()`. A member container
# keeps theta between calls and replays only the iterations it has not applied; it stays warm
# through the gap between iterations (`scaledown_window`, from the plan: the longest gap the
# verification bound allows, up to Modal's 1 h), and a cold one starts from the newest snapshot
# in the ledger (`es.snapshot_every`), not the base. When the loop ends, it lowers the members'
# window to Modal's minimum so they do not idle out the long one. The loop
# commits the ledger before each fan-out, and members reload before reading it. A member that
# fails after its retries fails the iteration (a missing member would bias the update); the
# loop's own retry then resumes from the last ledger entry, which was written atomically.
#
# Two schedules (`modal.es_member_gpus`, docs/modal.md): 0, the barrier: one `completions` call
# per member, all at once, and the loop scores every sample when the last one is back; N > 0,
# the pipeline: share 0 on the loop's own GPU and N `share` calls, each GPU evaluating its share
# member after member (`modal.es_members_per_gpu` engines at once) and verifying each member's
# samples while it generates the next (on_modal/pipeline.py), so no GPU waits for Lean and none
# idles. The held-out evaluation: pipelined, on the loop's GPU with its live weights; barrier,
# on one `es_heldout` container that rebuilds theta from the ledger.

@gpu_app.cls(**_declared("es_member"))  # a member is a pure function of (ledger, t, i): retries are safe
class ESMember:
    config_json: str = modal.parameter()

    @modal.enter()
    def load(self) -> None:
        self.config = _config(json.loads(self.config_json))
        _reload(models_volume)
        _reload(runs_volume)
        if not modal.is_local():
            os.environ["HF_HUB_OFFLINE"] = "1"  # the loop fetched the weights; never 30 downloads at once
        # theta_{t-1} from the newest snapshot (or the base) + <run.dir>/ledger.json, replaying only
        # the iterations it has not applied yet; torch is imported here, inside the member container.
        self.pipeline = MemberPipeline(self.config)  # `modal.es_members_per_gpu` engines when pipelined, else one
        self.evaluator = self.pipeline.engines[0]

    @modal.method()
    def completions(self, iteration: int, member: int, problems: list[dict[str, Any]]) -> list[str]:
        _reload(runs_volume)  # the loop committed the ledger of iteration - 1
        return self.evaluator.completions(iteration=iteration, member=member, problems=problems)

    @modal.method()
    def share(self, iteration: int, members: list[int], problems: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The pipelined schedule: these members' completions and rewards, verified as each arrives."""
        _reload(runs_volume)
        with verification_in_sandboxes(self.config):  # the GPU image has no Lean
            return self.pipeline.evaluate(iteration, members, problems)


MIN_SCALEDOWN_WINDOW_S = 2  # Modal's smallest scaledown_window


class ModalPopulation(LocalPopulation):
    """train_es's population on Modal (es/population.py has the seam): the members in `ESMember`
    containers, and the held-out evaluation on one `es_heldout` container (barrier) or on the loop's
    GPU with its live weights (pipelined: no replay, no extra container). `close`, once the run
    ends or fails, lets the warm member containers go instead of after their long window."""

    def __init__(self, config: Config, config_dict: dict[str, Any]):
        if config.es.batched_members:
            raise ConfigError(f"es.batched_members = {config.es.batched_members}: batched members run in the loop's "
                              "own process (--backend local); on Modal each member container evaluates its members",
                              hint="set es.batched_members = 0 for --backend modal")
        super().__init__(config)
        self.config_dict = config_dict
        # modal.cls adds with_options to the class at run time; mypy sees the plain class
        member_cls = ESMember.with_options(**options("es_member", config))  # type: ignore[attr-defined]
        self.containers = member_cls(config_json=json.dumps(config_dict))
        self.loop_share = LoopShare(config) if config.modal.es_member_gpus else None  # the loop's GPU: share 0
        self.evaluation = None if self.loop_share is not None else \
            es_heldout.with_options(**options("eval", config, gpu=True))

    def load_sampler(self) -> Any:
        """Pipelined: the loop's sampler is engine 0 of its share (on_modal/pipeline.py, LoopShare)."""
        if self.loop_share is None:
            return super().load_sampler()
        self.sampler = self.loop_share.load_sampler()
        self.weights = self.sampler.es_weights()
        return self.sampler

    def members(self, iteration: int, problems: list[dict[str, Any]]) -> list[Any]:
        if lora_members(self.config):  # es.noise = "lora": every member a LoRA adapter on the loop's engine, one call
            return super().members(iteration, problems)
        _commit(runs_volume)  # the members read the ledger of iteration - 1
        population = self.config.es.population
        if self.loop_share is not None:  # pipelined: share 0 on the loop's GPU, one share per member container
            own, *theirs = shares(population, self.config.modal.es_member_gpus + 1)
            inputs = [(iteration, share, problems) for share in theirs]
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="es-shares") as remote:
                elsewhere = remote.submit(fan_out, self.containers.share, inputs, return_exceptions=False)
                here = self.loop_share.evaluate(iteration, own, problems)  # while the member containers run theirs
                done = [here, *elsewhere.result()]
            scored = {m["member"]: m for share in done for m in share}
            if sorted(scored) != list(range(population)):
                raise RuntimeError(f"iteration {iteration}: the shares came back with members {sorted(scored)}")
            return [{"completions": scored[i]["completions"], "rewards": scored[i]["rewards"]}
                    for i in range(population)]
        calls = [(iteration, member, problems) for member in range(population)]
        return fan_out(self.containers.completions, calls, return_exceptions=False)

    def heldout(self, iteration: int, record: dict[str, Any], problems: list[dict[str, Any]],
                reporter: Any) -> dict[str, Any]:
        if self.evaluation is None:  # pipelined: the loop's live weights, here
            return super().heldout(iteration, record, problems, reporter)
        _commit(runs_volume)  # this iteration's snapshot, if any, and the ledger of iteration - 1
        return self.evaluation.local(self.config_dict, iteration, record) if modal.is_local() else \
            self.evaluation.remote(self.config_dict, iteration, record)

    def close(self) -> None:
        """After the run: let the warm members go now instead of after their long window."""
        super().close()  # the LoRA path's temporary adapters (es/vllm_lora.py)
        if modal.is_local():
            return
        try:
            self.containers.update_autoscaler(scaledown_window=MIN_SCALEDOWN_WINDOW_S)
        except Exception as exc:  # the run is done; idle members cost at most one window each
            print(f"could not lower the ES members' scaledown_window: {type(exc).__name__}: {exc}", file=sys.stderr)



def es_arguments(config_dict: dict[str, Any]) -> Callable[[Config, dict[str, Any]], dict[str, Any]]:
    def before(cfg: Config, arguments: dict[str, Any]) -> dict[str, Any]:
        arguments = resume_after_retry(cfg, arguments)
        return {**arguments, "population": ModalPopulation(cfg, config_dict)}

    return before


def resume_after_retry(cfg: Config, arguments: dict[str, Any]) -> dict[str, Any]:
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
    write_text_atomic(marker, call_id)
    _commit(runs_volume)
    return arguments


@gpu_app.function(**_declared("train_es"))  # exactly one writer of a run's ledger; a retry resumes from it
def train_es(config: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    return _call_library("train_es", config, kwargs, needs_model=True, before=es_arguments(config))


# `eval`'s resources with a GPU: one container, up for one evaluation (no long scaledown window);
# it only reads the run directory, so a retry recomputes the same numbers
@gpu_app.function(**_declared("eval"))
def es_heldout(config: dict[str, Any], iteration: int, record: dict[str, Any]) -> dict[str, Any]:
    """The held-out evaluation of theta_iteration: the ledger + the loop's pending `record` (es/member.py)."""
    cfg = _config(config)
    _reload(models_volume)
    _reload(runs_volume)  # the loop committed the ledger and any snapshot of `iteration`
    if not modal.is_local():
        os.environ["HF_HUB_OFFLINE"] = "1"  # the loop fetched the weights
    # imported here, so a test that counts heldout_at's calls (patching es/member.py) sees this one
    from prover_cli.es.member import heldout_at

    with verification_in_sandboxes(cfg):
        return heldout_at(cfg, iteration, record)


# ## GRPO, replay and eval

@grpo_app.function(**_declared("train_grpo"))  # policy, optimizer state and colocated vLLM on one GPU
def train_grpo(config: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    return _call_library("train_grpo", config, kwargs, needs_model=True)


# GRPO's app has its own download (a container calls only its own app's functions, images.py),
# in the TRL image (the GPU image's pins and TRL), so `train grpo` builds that image only.
@grpo_app.function(**{**_declared("download_model"), "image": IMAGES["trl"]})
def download_model_grpo(config: dict[str, Any]) -> dict[str, Any]:
    return download_model.local(config)


DOWNLOADS = {"trl": download_model_grpo}   # by the container's PROVER_IMAGE (images.py); else the GPU app's


@gpu_app.function(**_declared("replay_seeds"))  # exact on CPU; `--device cuda` adds a GPU
def replay_seeds(config: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    return _call_library("replay_seeds", config, kwargs, needs_model=True)


@gpu_app.function(**_declared("eval"))  # scoring `--verdicts` needs no GPU; generating adds one
def evaluate(config: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    needs_model = kwargs.get("verdicts") is None
    return _call_library("eval", config, kwargs, needs_model=needs_model)


# ## `prover doctor --backend modal`: the GPU and the Volumes, checked before a paid run
#
# on_modal/doctor.py calls these (and starts one Lean Sandbox itself). The two Volume functions
# are separate Functions, so they always run in separate containers: the probe crosses from one
# to the other only through commit and reload, as a ledger does between the ES loop and members.

DOCTOR_PROMPT = "theorem doctor_probe : 1 + 1 = 2 := by"


@gpu_app.function(**_declared("doctor_gpu"))
def doctor_gpu(config: dict[str, Any]) -> dict[str, Any]:
    """Load the configured model with the configured sampler on this container's GPU and generate one
    ES member's call as training makes it: es.problems_per_iteration prompts x es.samples_per_problem
    sequences, up to generate.max_tokens each, at es.member_temperature (the calibration's
    decode speed: the longest sequence's tokens over the call's seconds)."""
    cfg = _config(config)
    _reload(runs_volume)
    _ensure_model(config)
    started = time.monotonic()
    sampler = samplers.load_sampler(cfg.model, cfg.generate)
    loaded = time.monotonic()
    params = samplers.SamplingParams(n=cfg.es.samples_per_problem, temperature=cfg.es.member_temperature, top_p=cfg.generate.top_p,
                            max_tokens=cfg.generate.max_tokens, seed=0)
    groups = sampler.generate([DOCTOR_PROMPT] * cfg.es.problems_per_iteration, params)
    done = time.monotonic()
    samples = [sample for group in groups for sample in group]
    sample = samples[0]
    gpu = "no CUDA device"
    try:
        import torch

        if torch.cuda.is_available():
            gpu = f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    except ImportError:
        pass
    return {"model": cfg.model.name, "sampler": cfg.generate.backend, "gpu": gpu, "load_s": round(loaded - started, 1),
            "generate_s": round(done - loaded, 3), "completion_tokens": sample.completion_tokens,
            "sequence_tokens": [s.completion_tokens for s in samples], "max_tokens": cfg.generate.max_tokens,
            "text": sample.text[:80]}


def _probe_paths(nonce: str) -> list[Path]:
    return [Path(mount) / ".prover-doctor" / nonce for mount in (RUNS_MOUNT, MODELS_MOUNT)]


@data_app.function(**_declared("doctor_volumes"))
def doctor_volume_write(nonce: str) -> dict[str, Any]:
    for path, volume in zip(_probe_paths(nonce), (runs_volume, models_volume)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(nonce, encoding="utf-8")
        _commit(volume)
    return {"written": [str(p) for p in _probe_paths(nonce)]}


@data_app.function(**_declared("doctor_volumes"))
def doctor_volume_read(nonce: str) -> dict[str, Any]:
    seen = {}
    for path, volume in zip(_probe_paths(nonce), (runs_volume, models_volume)):
        _reload(volume)
        seen[str(path)] = path.read_text(encoding="utf-8") == nonce if path.exists() else False
        if path.exists():
            path.unlink()
            _commit(volume)
    return {"read_back": seen, "ok": all(seen.values())}


# ## A study's runs: whole runs fanned out, one container each
#
# `prover study run --backend modal` (prover_cli/comparison/study/): every missing run of the study is one
# call of `train_es` or `train_grpo` above, as `--backend modal` makes it for one run, all of one
# method mapped at once. Each writes its own run directory on the runs Volume and commits it, so
# runs never share a file. A failed run comes back as its exception; the others still finish.

def study_runs(name: str, calls: list[tuple[dict[str, Any], dict[str, Any]]], config: Config) -> list[Any]:
    """`.starmap` (a `.map` over argument tuples) of `train_es` / `train_grpo` over whole runs,
    with the study's [modal] resources (`config`, one run's config; the study's runs share them)."""
    function = REMOTE_FUNCTIONS[name].with_options(**options(name, config))
    return fan_out(function, calls, return_exceptions=True)


REMOTE_FUNCTIONS: dict[str, Any] = {
    "prepare_data": prepare_data,
    "verify": verify,
    "train_es": train_es,
    "train_grpo": train_grpo,
    "replay_seeds": replay_seeds,
    "eval": evaluate,
}
