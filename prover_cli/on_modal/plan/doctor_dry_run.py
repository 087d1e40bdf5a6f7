"""`prover doctor --backend modal --dry-run`: the steps, what each starts, and what it costs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prover_cli.config import Config
from prover_cli.on_modal.calibration import check_physics, generation_batch
from prover_cli.verify.lean.canary import canaries_for
from prover_cli.on_modal.plan.containers import resources
from prover_cli.on_modal.plan.pins import image_specs
from prover_cli.on_modal.plan.sizing import decode_tokens_per_s, gpu_spec, _Line, Resources


# --------------------------------------------------------------------------------------------
# `prover doctor --backend modal`: the steps, what each starts, and what it costs
# --------------------------------------------------------------------------------------------
# The one command to run before a paid run: every image, one Lean Sandbox running the canary,
# the configured model on one GPU for one short prompt, and the Volumes' round trip. Its
# `--dry-run` is this function's output (no `modal` import); on_modal/doctor.py runs the steps.

DOCTOR_EST_MODEL_LOAD_S = 180.0  # container start + weights from the models Volume + engine start (estimate)
DOCTOR_EST_VOLUME_CALL_S = 15.0  # one small container: start, write or read a file, commit or reload


@dataclass(frozen=True)
class DoctorStep:
    name: str
    where: str
    what: str
    resources: Resources | None   # None: not a container of ours (the image builders)
    est_s: float | None
    sandbox: bool = False
    containers: int = 1

    def usd(self, config: Config, seconds: float | None) -> float | None:
        """What `seconds` of this step's containers cost at the `[modal]` prices (None: unpriced)."""
        if self.resources is None or seconds is None:
            return None
        line = _Line(self.name, self.resources, self.containers, 1, self.containers * seconds, sandbox=self.sandbox)
        return sum(line.usd(config).values())


def doctor_steps(config: Config) -> list[DoctorStep]:
    m, res = config.modal, resources(config)
    canaries = len(canaries_for(config.verify))
    sandbox = res["verify_sandbox"]
    return [
        DoctorStep("images", "Modal's image builders",
                   "build (or find, when cached) the four images: " + ", ".join(image_specs(
                       config.verify.lean_toolchain, config.verify.mathlib_rev))
                   + " (a first build takes minutes: Mathlib's cache, vLLM's wheels)",
                   None, None),
        DoctorStep("lean sandbox", f"one Sandbox of the lean image, {sandbox.cpu:g} cores, "
                                   f"{sandbox.memory_mb // 1024} GiB, no network",
                   "start the image's REPL (`lake env repl` in the Mathlib project) in it and run the verify canary "
                   f"({canaries} proofs: honest ones must verify, each cheat be rejected); then, for the calibration, "
                   "the honest ones again on a fresh REPL (the header, then Lean seconds per proof with it warm) and "
                   "the honest kernel canary through the kernel stage (seconds and peak memory per step)",
                   sandbox, 2 * m.est_header_s + 2 * canaries * m.est_verify_s_per_proof, sandbox=True),
        DoctorStep("gpu model", f"one {gpu_spec(config)} container of the gpu image",
                   f"load {config.model.name} with the {config.generate.backend} sampler (downloading it into the "
                   f"models Volume once) and generate one ES member's call: {generation_batch(config)} sequences of up "
                   f"to {config.generate.max_tokens} tokens (generate.max_tokens), whose tokens/s the calibration "
                   "records",
                   res["doctor_gpu"], DOCTOR_EST_MODEL_LOAD_S + config.generate.max_tokens / decode_tokens_per_s(config)),
        DoctorStep("volumes", "two small containers of the orchestrator image",
                   f"write a probe file to {m.runs_volume} and {m.models_volume} and commit in one container; "
                   "reload and read it back in another (a separate Function), then remove it",
                   res["doctor_volumes"], DOCTOR_EST_VOLUME_CALL_S, containers=2),
    ]


def doctor_plan(config: Config) -> dict[str, Any]:
    """`prover doctor --backend modal --dry-run`: each step, where it runs, its estimated time and cost."""
    check_physics(config)   # a figure of 1e308 is refused, never priced
    steps = doctor_steps(config)
    rows, total = [], 0.0
    for step in steps:
        usd = step.usd(config, step.est_s)
        total += usd or 0.0
        rows.append([step.name, step.where, step.what, "-" if step.est_s is None else f"~{step.est_s:.0f} s",
                     "not priced" if usd is None else round(usd, 4)])
    return {
        "ok": True,
        "dry_run": True,
        "backend": "modal",
        "app": config.modal.app_name,
        "steps": [{"name": r[0], "where": r[1], "what": r[2], "est": r[3], "est_usd": r[4]} for r in rows],
        "est_usd_total": round(total, 4),
        "tables": [{"title": f"prover doctor --backend modal (app `{config.modal.app_name}`): what it would do; "
                             "nothing started", "columns": ["step", "where", "what", "est. time", "est. USD"],
                    "rows": rows}],
    }
