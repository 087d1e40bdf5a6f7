# # `prover doctor --backend modal`: the whole path, once, before a paid run
#
#     prover doctor --config configs/kimina-es.toml --backend modal --dry-run   # the steps and their cost
#     prover doctor --config configs/kimina-es.toml --backend modal             # run them
#
# Build (or find) every image, each on its own, so a failing build is that image's failure and
# the others still build and report; then, each in the ephemeral app of its role (images.py),
# start one Lean Sandbox and run the verify canary in it, load the configured model on one GPU
# and generate one ES member's call, and check the Volumes' commit/reload round trip. Each step
# reports its result, its time and what it cost (its containers' reserved GPUs, cores and GiB
# for the seconds it took, at the `[modal]` prices). A failing step does not stop the others,
# except that a step whose image did not build is not run (nor its app, whose `app.run()` would
# build that image again and fail). The steps and their estimates come from `plan.doctor_steps`.
#
# The calibration (on_modal/calibration.py): the steps also measure what the plan otherwise
# assumes, and the doctor writes it to the calibration file the plan then uses:
# - decode tokens/s: the GPU step's call (the configured batch and max_tokens), the longest
#   sequence's tokens over the call's seconds; only when the container's device is the configured
#   GPU type (anything else, a CPU among them, is not recorded);
# - the header and Lean seconds per proof with the header warm: a fresh REPL Sandbox checks the
#   honest canaries one after another; the first pays the REPL start and the header;
# - the kernel stage's seconds per pass and per checker process, and its peak memory per step:
#   the honest kernel canary, several times, through the kernel stage's own runner
#   (sandbox.SandboxRunner: each step a fresh Sandbox, its peak RSS read inside it).
# A figure whose step failed is left out (the plan keeps its estimate, labelled default).
#
# What only stand-ins exercise: tests run this module with the Sandbox and Volume stand-ins
# (tests/modal_standin.py), images "built" and apps run by its stand-ins (Modal's rule: an app's
# `run()` builds every image of the app, a Sandbox's image builds at its creation; one image can
# be made to fail), the functions run with `.local()` on the tiny model. No test has run it against Modal, and no figure a test writes is a GPU or Lean
# figure: the stand-ins' own.

import dataclasses
import re
import secrets
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import modal

from prover_cli.config import Config
from prover_cli.doctor import check_canary, check_kernel_canary
from prover_cli.on_modal import calibration, functions, images, remote, sandbox
from prover_cli.on_modal.calibration import figure
from prover_cli.on_modal.plan import doctor_steps, kernel_imports_per_batch
from prover_cli.verify.engine import fast_path_once
from prover_cli.verify.kernel.job import KernelJob
from prover_cli.verify.kernel.kernel_canary import KERNEL_CANARIES
from prover_cli.verify.kernel.pins import CHECKER_AXIOMS
from prover_cli.verify.kernel.stage import KernelStage
from prover_cli.verify.lean.canary import STANDARD_AXIOMS, AllowedAxioms, canaries_for
from prover_cli.verify.lean.pool import ReplPool
from prover_cli.verify.text.statement import Candidate

# Seams the tests replace (with the stand-ins); on your machine these are Modal's own calls.


def app_running(app: Any) -> Any:
    """The ephemeral app a step runs in (its containers and Sandboxes stop when it ends)."""
    return app.run()


def build(image: Any) -> str:
    """Build the image (a no-op when Modal has it cached) and return its id. Without an app,
    `Image.build()` runs in an ephemeral app of its own (modal/_image.py `_Image.build`), so
    no other image is built with it."""
    return image.build().object_id


def call(function: Any, *args: Any) -> Any:
    return function.remote(*args)


IMAGE_OF_STEP = {"lean sandbox": "lean", "gpu model": "gpu", "volumes": "orchestrator"}
APP_OF_STEP = {"lean sandbox": "lean", "gpu model": "gpu", "volumes": "data"}   # images.APPS: the step's role


def run_doctor(config: Config) -> dict[str, Any]:
    """Run every step; the result has one row per step (result, detail, seconds, USD), and the
    calibration file written from what the steps measured."""
    if images.deploy_settings(config) != images.SETTINGS:
        # Your config names other Volumes, app or Lean versions than this import declared.
        os.environ.update(images.deploy_settings(config))
        remote.reload_package()
        return sys.modules["prover_cli.on_modal.doctor"].run_doctor(config)
    steps = {step.name: step for step in doctor_steps(config)}
    measured: dict[str, dict[str, Any]] = {}   # calibration figures, filled by the steps that measure
    bodies: dict[str, Callable[[], tuple[bool, str]]] = {
        "lean sandbox": lambda: _lean_sandbox(config, measured),
        "gpu model": lambda: _gpu_model(config, measured),
        "volumes": _volumes,
    }
    rows: list[list[Any]] = []
    report: list[tuple[str, bool | None, str, float | None]] = []   # step, ok (None: not run), detail, s
    builds: dict[str, dict[str, Any]] = {}   # each image's own build: ok, and its id or its error
    with modal.enable_output():
        started = time.monotonic()
        for name, image in images.IMAGES.items():
            try:
                builds[name] = {"ok": True, "detail": build(image)}
            except Exception as exc:  # one image's failure: the others are still worth knowing
                builds[name] = {"ok": False, "detail": f"FAILED: {type(exc).__name__}: {str(exc)[:300]}"}
        report.append(("images", all(b["ok"] for b in builds.values()),
                       "; ".join(f"{name} {b['detail']}" for name, b in builds.items()), time.monotonic() - started))
        for name, body in bodies.items():
            if not builds[IMAGE_OF_STEP[name]]["ok"]:
                report.append((name, None, f"not run: the {IMAGE_OF_STEP[name]} image did not build", None))
                continue
            started = time.monotonic()
            try:
                with app_running(images.APPS[APP_OF_STEP[name]]):
                    ok, detail = body()
            except Exception as exc:
                ok, detail = False, f"{type(exc).__name__}: {str(exc)[:500]}"
            report.append((name, ok, detail, time.monotonic() - started))
    total = 0.0
    for name, result, detail, seconds in report:
        usd = steps[name].usd(config, seconds)
        total += usd or 0.0
        rows.append([name, "not run" if result is None else "ok" if result else "FAILED", detail,
                     "-" if seconds is None else round(seconds, 1), "not priced" if usd is None else round(usd, 4)])
    written = _write_calibration(config, measured)
    return {
        "ok": all(result for _, result, _, _ in report),
        "backend": "modal",
        "app": config.modal.app_name,
        "steps": [{"name": r[0], "result": r[1], "detail": r[2], "seconds": r[3], "usd": r[4]} for r in rows],
        "usd_total": round(total, 4),
        "images": builds,
        "calibration": {"path": written, "figures": measured},
        "tables": [{"title": f"prover doctor --backend modal (app `{config.modal.app_name}`): each step's "
                             "result, time and cost (reserved resources x seconds x [modal] prices)",
                    "columns": ["step", "result", "detail", "seconds", "USD"], "rows": rows},
                   {"title": f"calibration: {written or 'not written'} (the plan uses it: `--dry-run` says which "
                             "figures are measured)",
                    "columns": ["figure", "value", "samples", "how"],
                    "rows": [[name, item["value"], item["samples"], item["how"]] for name, item in measured.items()]}],
    }


def _write_calibration(config: Config, measured: dict[str, dict[str, Any]]) -> str | None:
    """The calibration file at modal.calibration (or the default path); none with "none" or nothing measured."""
    setting = config.modal.calibration
    if setting == calibration.NEVER or not measured:
        return None
    path = Path(setting) if setting else calibration.default_path(config)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return str(calibration.write(path, config, measured, stamp))


def _lean_sandbox(config: Config, measured: dict[str, dict[str, Any]]) -> tuple[bool, str]:
    """One Sandbox exactly as verification creates them; the canary on one REPL in it; then the
    kernel stage's canary, each of its steps in a fresh Sandbox as verification runs them; then
    the calibration's Lean figures (`_measure_lean`, `_measure_kernel`)."""
    verify = dataclasses.replace(sandbox._sandbox_verify_config(config.verify), workers=1)
    box = sandbox.SandboxBox(config)
    try:
        check = check_canary(verify, transport_factory=box.transport)
    finally:
        box.terminate()
    if check.ok:
        measured.update(_measure_lean(config, verify))
    if not verify.kernel_check:
        return check.ok, check.detail + "; kernel stage off (verify.kernel_check = false)"
    fast_box = sandbox.SandboxBox(config)   # the fooled case's fast path: a REPL as verification runs it
    try:
        kernel = check_kernel_canary(verify, runner=sandbox.SandboxRunner(config),
                                     fast_path=lambda c: fast_path_once(verify, c, transport_factory=fast_box.transport))
    finally:
        fast_box.terminate()
    detail = f"{check.detail}; kernel stage: {kernel.detail}"
    if kernel.ok:
        measured.update(_measure_kernel(config, verify))
    if not kernel.ok and images.KERNEL_PIN is not None:
        # the checker's build is confined to its own steps (images.KERNEL_CHECKER_STEPS): when it
        # failed, the image has no checker and every kernel step that runs one cannot start
        detail += (f"; if the kernel checker did not build in the kernel image, {images.KERNEL_CHECKER_FAILED} exists "
                   f"there and {images.KERNEL_CHECKER_LOG} says why ({images.KERNEL_PIN.describe})")
    return check.ok and kernel.ok, detail


def _gpu_model(config: Config, measured: dict[str, dict[str, Any]] | None = None) -> tuple[bool, str]:
    config_dict, _, uploads = remote.to_wire("generate", config, {})  # paths relative to the runs Volume
    remote.upload(uploads)
    # The declaration carries the default config's GPU; run on the configured one (modal.gpu,
    # gpus_per_container, the GPU containers' cores and memory), as every training call does.
    out = call(functions.doctor_gpu.with_options(**functions.options("doctor_gpu", config)), config_dict)
    tokens = out.get("sequence_tokens") or [out["completion_tokens"]]
    detail = (f"{out['model']} with {out['sampler']} on {out['gpu']}: loaded in {out['load_s']} s, {len(tokens)} "
              f"sequences (up to {out.get('max_tokens', '?')} tokens) in {out['generate_s']} s, the longest "
              f"{max(tokens)} tokens: {out['text']!r}")
    ok = out["completion_tokens"] > 0
    if ok and measured is not None:
        if not _is_configured_gpu(out["gpu"], config.modal.gpu):
            detail += f"; decode speed not recorded: the container's device is {out['gpu']}, not a {config.modal.gpu}"
        elif out["generate_s"] > 0:
            speed = max(tokens) / out["generate_s"]
            measured["decode_tokens_per_s"] = figure(speed, len(tokens), (
                f"{len(tokens)} sequences of one call on {out['gpu']}, the longest {max(tokens)} tokens in "
                f"{out['generate_s']} s"))
            detail += f"; {speed:.1f} tokens/s per sequence"
    return ok, detail


def _is_configured_gpu(seen: str, gpu: str) -> bool:
    """Whether the device the container reports ("1 x NVIDIA H100 80GB HBM3") is the configured type:
    its name holds the type's family ("A100-80GB": "A100"); "no CUDA device" never is."""
    family = gpu.split("-")[0].upper()
    return bool(re.search(rf"\b{re.escape(family)}\b", seen.upper())) and "NO CUDA" not in seen.upper()


HONEST = "verified"
WARM_PROOFS_MIN = 3   # warm proofs the Lean figure needs (the honest canaries after the first)


def _measure_lean(config: Config, verify: Any) -> dict[str, dict[str, Any]]:
    """The header and Lean seconds per proof with the header warm, on one REPL in a fresh Sandbox:
    the honest canaries one after another (each its own statement, as training's problems are);
    the first pays the REPL's start and the header, the others only their proof."""
    honest = [c for c in canaries_for(verify) if c.expect == HONEST and not c.native]
    box = sandbox.SandboxBox(config)
    pool = ReplPool(dataclasses.replace(verify, canary=False), transport_factory=box.transport)
    times = []
    try:
        for canary in honest:
            verdict = pool.check(pool.processes[0], Candidate(id=f"calibration: {canary.name}", header=verify.header,
                                                              body=canary.body, target=canary.target,
                                                              statement=canary.statement),
                                 AllowedAxioms(STANDARD_AXIOMS, native=False))
            if verdict.status != HONEST:
                return {}   # an honest proof that does not verify measures nothing
            times.append(verdict.time_s)
    finally:
        pool.close()
        box.terminate()
    warm = times[1:]
    if len(warm) < WARM_PROOFS_MIN:
        return {}
    per_proof = sum(warm) / len(warm)
    return {"header_s": figure(max(0.0, times[0] - per_proof), 1, "the first honest canary on a fresh REPL Sandbox "
                               "(REPL start + header + proof) less the mean warm proof"),
            "verify_s_per_proof": figure(per_proof, len(warm), f"{len(warm)} honest canaries on one REPL with the "
                                         "header warm, each its own statement")}


KERNEL_PROOFS = 4   # honest kernel canaries per measurement: one checker batch


class _RecordingRunner:
    """The kernel stage's own runner, each step's wall seconds and peak memory written down."""

    def __init__(self, runner: Any):
        self.runner = runner
        self.canary_key = getattr(runner, "canary_key", "local")
        self.steps: list[tuple[str, bytes | None, Any]] = []

    def run(self, argv: list[str], inputs: dict[str, bytes], outputs: tuple[str, ...], timeout_s: float,
            what: str = "command") -> Any:
        result = self.runner.run(argv, inputs, outputs, timeout_s, what=what)
        source = next((data for name, data in inputs.items() if name.endswith(".lean")), None)
        self.steps.append((what, source, result))
        return result

    def kill_all(self) -> None:
        self.runner.kill_all()


def _measure_kernel(config: Config, verify: Any) -> dict[str, dict[str, Any]]:
    """The kernel stage's seconds per pass (`lean -o` of the proof), per checker process (its
    import, per import the pin makes) and its peak memory per step: the honest kernel canary
    KERNEL_PROOFS times through `KernelStage` on `sandbox.SandboxRunner`."""
    canary = KERNEL_CANARIES[0]
    recorder = _RecordingRunner(sandbox.SandboxRunner(config))
    stage = KernelStage(verify, runner=recorder)
    try:
        results = stage.check([KernelJob(verify.header, canary.statement, canary.target, canary.body)] * KERNEL_PROOFS,
                              CHECKER_AXIOMS)
    finally:
        stage.stop()
    if any(r.status != "passed" for r in results):   # KernelResult: passed, rejected or error
        return {}
    # the proof's `lean -o` (its module holds the proof's text), not the trusted target's (compiled once)
    body = canary.body.encode("utf-8")
    proofs = [r.wall_s for what, source, r in recorder.steps
              if what == "verify.lean_command" and source is not None and body in source]
    checkers = [r.wall_s for what, _, r in recorder.steps if what == "verify.kernel_checker_command"]
    peaks = [r.peak_rss_kib for _, _, r in recorder.steps if r.peak_rss_kib is not None]
    out: dict[str, dict[str, Any]] = {}
    if proofs:
        out["kernel_check_s_per_proof"] = figure(sum(proofs) / len(proofs), len(proofs), (
            f"`lean -o` of the honest kernel canary, {len(proofs)} times, each in a fresh kernel Sandbox"))
    imports = stage.header_imports or kernel_imports_per_batch(config, KERNEL_PROOFS)[1]   # as the checker reported
    if checkers and imports:
        out["kernel_import_s"] = figure(sum(checkers) / imports, len(checkers), (
            f"{len(checkers)} checker process(es) on {KERNEL_PROOFS} passes, their seconds over the {imports:g} header "
            "import(s) the pin makes (the checks themselves included: an upper bound)"))
    if peaks and len(peaks) == len(recorder.steps):
        out["kernel_peak_memory_gib"] = figure(max(peaks) / (1 << 20), len(peaks), (
            "the largest peak RSS of one kernel-stage step (ru_maxrss of its process, read inside its Sandbox)"))
    return out


def _volumes() -> tuple[bool, str]:
    nonce = secrets.token_hex(8)
    call(functions.doctor_volume_write, nonce)
    out = call(functions.doctor_volume_read, nonce)
    seen = ", ".join(f"{path}: {'read back' if ok else 'NOT seen'}" for path, ok in out["read_back"].items())
    return bool(out["ok"]), f"written and committed in one container, reloaded in another: {seen}"
