# # `prover doctor --backend modal`: the whole path, once, before a paid run
#
#     prover doctor --config configs/kimina-es.toml --backend modal --dry-run   # the steps and their cost
#     prover doctor --config configs/kimina-es.toml --backend modal             # run them
#
# In one ephemeral app: build (or find) the four images, start one Lean Sandbox and run the
# verify canary in it, load the configured model on one GPU for one short prompt, and check the
# Volumes' commit/reload round trip. Each step reports its result, its time and what it cost
# (its containers' reserved GPUs, cores and GiB for the seconds it took, at the `[modal]`
# prices). A failing step does not stop the others, except that a step whose image did not
# build is not run. The steps and their estimates come from `plan.doctor_steps`.
#
# What only stand-ins exercise: tests run this module with the Sandbox and Volume stand-ins
# (tests/modal_standin.py), images "built" by a fake, the functions run with `.local()` on the
# tiny model. No test has run it against Modal.

import contextlib
import dataclasses
import secrets
import time
from typing import Any, Callable

import modal

from prover_cli.on_modal import functions, images, sandbox
from prover_cli.on_modal.plan import doctor_steps

# Seams the tests replace (with the stand-ins); on your machine these are Modal's own calls.


def app_running() -> Any:
    """The ephemeral app every step runs in (its containers stop when it ends)."""
    stack = contextlib.ExitStack()
    stack.enter_context(modal.enable_output())
    stack.enter_context(images.app.run())
    return stack


def build(image: Any) -> str:
    """Build the image (a no-op when Modal has it cached) and return its id."""
    return image.build(images.app).object_id


def call(function: Any, *args: Any) -> Any:
    return function.remote(*args)


IMAGE_OF_STEP = {"lean sandbox": "lean", "gpu model": "gpu", "volumes": "orchestrator"}


def run_doctor(config: Any) -> dict[str, Any]:
    """Run every step; the result has one row per step (result, detail, seconds, USD)."""
    if images.deploy_settings(config) != images.SETTINGS:
        # Your config names other Volumes, app or Lean versions than this import declared.
        import os
        import sys

        from prover_cli.on_modal import remote

        os.environ.update(images.deploy_settings(config))
        remote.reload_package()
        return sys.modules["prover_cli.on_modal.doctor"].run_doctor(config)
    steps = {step.name: step for step in doctor_steps(config)}
    bodies: dict[str, Callable[[], tuple[bool, str]]] = {
        "lean sandbox": lambda: _lean_sandbox(config),
        "gpu model": lambda: _gpu_model(config),
        "volumes": _volumes,
    }
    rows, report = [], []
    with app_running():
        built: dict[str, bool] = {}
        started = time.monotonic()
        details = []
        for name, image in images.IMAGES.items():
            try:
                details.append(f"{name} {build(image)}")
                built[name] = True
            except Exception as exc:  # one image's failure: the others are still worth knowing
                details.append(f"{name} FAILED: {type(exc).__name__}: {str(exc)[:300]}")
                built[name] = False
        report.append(("images", all(built.values()), "; ".join(details), time.monotonic() - started))
        for name, body in bodies.items():
            if not built.get(IMAGE_OF_STEP[name], False):
                report.append((name, None, f"not run: the {IMAGE_OF_STEP[name]} image did not build", None))
                continue
            started = time.monotonic()
            try:
                ok, detail = body()
            except Exception as exc:
                ok, detail = False, f"{type(exc).__name__}: {str(exc)[:500]}"
            report.append((name, ok, detail, time.monotonic() - started))
    total = 0.0
    for name, ok, detail, seconds in report:
        usd = steps[name].usd(config, seconds)
        total += usd or 0.0
        rows.append([name, "not run" if ok is None else "ok" if ok else "FAILED", detail,
                     "-" if seconds is None else round(seconds, 1), "not priced" if usd is None else round(usd, 4)])
    return {
        "ok": all(ok for _, ok, _, _ in report),
        "backend": "modal",
        "app": config.modal.app_name,
        "steps": [{"name": r[0], "result": r[1], "detail": r[2], "seconds": r[3], "usd": r[4]} for r in rows],
        "usd_total": round(total, 4),
        "tables": [{"title": f"prover doctor --backend modal (app `{config.modal.app_name}`): each step's "
                             "result, time and cost (reserved resources x seconds x [modal] prices)",
                    "columns": ["step", "result", "detail", "seconds", "USD"], "rows": rows}],
    }


def _lean_sandbox(config: Any) -> tuple[bool, str]:
    """One Sandbox exactly as verification creates them; the canary on one REPL in it; then the
    kernel stage's canary, each of its steps in a fresh Sandbox as verification runs them."""
    from prover_cli.doctor import check_canary, check_kernel_canary

    verify = dataclasses.replace(sandbox._sandbox_verify_config(config.verify), workers=1)
    box = sandbox.SandboxBox(config)
    try:
        check = check_canary(verify, transport_factory=box.transport)
    finally:
        box.terminate()
    if not verify.kernel_check:
        return check.ok, check.detail + "; kernel stage off (verify.kernel_check = false)"
    from prover_cli.verify.engine import fast_path_once

    fast_box = sandbox.SandboxBox(config)   # the fooled case's fast path: a REPL as verification runs it
    try:
        kernel = check_kernel_canary(verify, runner=sandbox.SandboxRunner(config),
                                     fast_path=lambda c: fast_path_once(verify, c, transport_factory=fast_box.transport))
    finally:
        fast_box.terminate()
    detail = f"{check.detail}; kernel stage: {kernel.detail}"
    if not kernel.ok and images.KERNEL_PIN is not None:
        # the checker's build is confined to its own steps (images.KERNEL_CHECKER_STEPS): when it
        # failed, the image has no checker and every kernel step that runs one cannot start
        detail += (f"; if the kernel checker did not build in the Lean image, {images.KERNEL_CHECKER_FAILED} exists "
                   f"there and {images.KERNEL_CHECKER_LOG} says why ({images.KERNEL_PIN.describe})")
    return check.ok and kernel.ok, detail


def _gpu_model(config: Any) -> tuple[bool, str]:
    from prover_cli.on_modal import remote

    config_dict, _, uploads = remote.to_wire("generate", config, {})  # paths relative to the runs Volume
    remote.upload(uploads)
    # The declaration carries the default config's GPU; run on the configured one (modal.gpu,
    # gpus_per_container, the GPU containers' cores and memory), as every training call does.
    out = call(functions.doctor_gpu.with_options(**functions.options("doctor_gpu", config)), config_dict)
    detail = (f"{out['model']} with {out['sampler']} on {out['gpu']}: loaded in {out['load_s']} s, "
              f"{out['completion_tokens']} tokens in {out['generate_s']} s: {out['text']!r}")
    return out["completion_tokens"] > 0, detail


def _volumes() -> tuple[bool, str]:
    nonce = secrets.token_hex(8)
    call(functions.doctor_volume_write, nonce)
    out = call(functions.doctor_volume_read, nonce)
    seen = ", ".join(f"{path}: {'read back' if ok else 'NOT seen'}" for path, ok in out["read_back"].items())
    return bool(out["ok"]), f"written and committed in one container, reloaded in another: {seen}"
