"""The images: every requirement string each one installs, with the reason for each pin.

The Makefile reads `VLLM` and `TRANSFORMERS` from this file with sed (`make test-vllm`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from prover_cli.verify.kernel.pins import pin_for

# --------------------------------------------------------------------------------------------
# Images: every requirement string each one installs, with the reason for each pin
# --------------------------------------------------------------------------------------------
# The pins must resolve together: tests/test_modal_pins.py runs `uv pip compile` on each image's
# `python_packages` for Python 3.11 on x86_64 Linux. Bump them together, rerun that test, then
# rebuild with `modal deploy`.

PYTHON_VERSION = "3.11"
ELAN_VERSION = "v4.1.2"  # the toolchain manager; the Lean toolchain itself is a config value

VLLM = "vllm==0.31.0"                 # TRL 1.16 supports colocated vLLM 0.22.0-0.31.0 (trl/import_utils.py);
                                      # it brings its own CUDA torch, so torch is never pinned beside it;
                                      # pyproject.toml's [gpu] extra pins the same (a test compares them)
TRANSFORMERS = "transformers==5.17.*"  # vllm 0.31.0 requires transformers>=5.10.4,<5.18.0
HF_HUB = "huggingface_hub==1.33.*"     # transformers 5.17 requires huggingface-hub>=1.5.0,<2.0
TRL = "trl==1.16.*"                    # GRPOConfig defaults move between releases
DATASETS = "datasets==5.2.*"           # prepare-data's hub loader
SAFETENSORS = "safetensors==0.8.*"     # ES snapshots and replayed weights
TYPER = "typer==0.29.*"                # prover_cli's CLI, imported by the package
RICH = "rich==15.*"                    # prover_cli's tables and progress
MATPLOTLIB = "matplotlib==3.11.*"      # eval's pass@k plot
TENSORBOARD = "tensorboard==2.21.*"    # run.report_to = "tensorboard" (W&B and Trackio are not in the images)
MODAL_TRACKERS = ("tensorboard",)      # the run.report_to trackers the GPU images can stream to


@dataclass(frozen=True)
class ImageSpec:
    """One image: what it is based on and everything it installs, as `--dry-run --json` lists it.

    `executables` names every program that the image's build steps and our code run inside it,
    with what puts it there. tests/test_modal_images.py checks every build step and every
    `exec(...)` / subprocess argv in prover_cli/on_modal/ against it, and the Sandbox stand-in
    refuses to run a program its image does not list. Add a program here in the same change
    that installs it (a build step, an apt package) and the code that calls it.
    """

    base: str
    python_packages: tuple[str, ...]
    apt_packages: tuple[str, ...] = ()
    toolchain: dict[str, str] = field(default_factory=dict)  # Lean pins (lean image only)
    why: str = ""
    executables: dict[str, str] = field(default_factory=dict)  # program -> what puts it in the image

    def to_json(self) -> dict[str, Any]:
        return {"base": self.base, "python": PYTHON_VERSION, "python_packages": list(self.python_packages),
                "apt_packages": list(self.apt_packages), "toolchain": dict(self.toolchain), "why": self.why,
                "executables": dict(self.executables)}


# What every debian_slim image has: the Python of the base image, and Debian's Essential
# packages (dash, coreutils, tar: "Essential: yes", present in every Debian image). Not `kill`:
# /bin/kill is procps (Priority: important, not Essential), which no slim image has and none of
# our apt installs pulls in (`apt-get -s install` of debian_slim's build-essential layer plus
# the Lean image's packages on bookworm's package data: 154 packages, no procps).
BASE_EXECUTABLES = {
    "python": f"the python:{PYTHON_VERSION} slim base image (/usr/local/bin/python)",
    "sh": "Debian Essential (dash): runs every RUN step",
    "mkdir": "Debian Essential (coreutils)",
    "ln": "Debian Essential (coreutils)",
    "env": "Debian Essential (coreutils): runs the kernel checker with LEAN_ABORT_ON_PANIC=1 (verify/kernel/)",
    "printf": "Debian Essential (coreutils; also a dash builtin)",
    "tar": "Debian Essential (tar)",
}
# The Lean image adds these (images.LEAN_BUILD_STEPS installs them in this order).
LEAN_EXECUTABLES = {
    "curl": "apt_packages",
    "git": "apt_packages",
    "/tmp/elan-init": "unpacked by the first elan step",
    "elan": "the elan step: $ELAN_HOME/bin, on PATH",
    "lake": "the elan step: the pinned toolchain's lake, through elan's proxy on PATH",
    "lean": "the elan step: the pinned toolchain's lean, through elan's proxy on PATH",
    "repl": "the repl steps: built at the toolchain's tag, linked into /usr/local/bin",
    "touch": "Debian Essential (coreutils)",
    # the kernel checker steps run one script (images.KERNEL_CHECKER_SCRIPT); what it installs:
    "prover_check": "the kernel checker steps, Lean 4.9-4.21: prover_cli/verify/kernel/checker built with lake, linked "
                    "into /usr/local/bin (absent when its build failed: images.KERNEL_CHECKER_FAILED)",
    "safe_verify": "the kernel checker steps, Lean 4.27/4.29: SafeVerify built at the commit pinned for the "
                   "toolchain (verify/kernel/pins.py PINS), linked into /usr/local/bin",
}


def _checker_pin(lean_toolchain: str) -> str:
    pin = pin_for(lean_toolchain)
    return pin.describe if pin else "none pinned for this toolchain (verify.kernel_check = true refuses)"


def repl_tag(lean_toolchain: str) -> str:
    """leanprover-community/repl tags each Lean release it supports with the same name (v4.15.0)."""
    return lean_toolchain.rpartition(":")[2]


def image_specs(lean_toolchain: str, mathlib_rev: str) -> dict[str, ImageSpec]:
    """The four images, one per job. The Lean pins come from `[verify]` (baked in at import)."""
    base = f"debian_slim(python_version={PYTHON_VERSION!r})"
    gpu_packages = (VLLM, TRANSFORMERS, HF_HUB, SAFETENSORS, DATASETS, TYPER, RICH, MATPLOTLIB, TENSORBOARD)
    return {
        "orchestrator": ImageSpec(base, (TYPER, RICH, DATASETS, HF_HUB),
                                  why="prepare-data and `prover verify`: reads files, drives Lean Sandboxes",
                                  executables=dict(BASE_EXECUTABLES)),
        "gpu": ImageSpec(base, gpu_packages, why="vLLM generation, the ES loop and members, replay, eval",
                         executables=dict(BASE_EXECUTABLES)),
        "trl": ImageSpec(base, (*gpu_packages, TRL), why="TRL's GRPOTrainer with colocated vLLM",
                         executables=dict(BASE_EXECUTABLES)),
        "lean": ImageSpec(
            base, (TYPER, RICH), apt_packages=("curl", "git", "ca-certificates"),
            toolchain={"elan": ELAN_VERSION, "lean_toolchain": lean_toolchain,
                       "repl": f"leanprover-community/repl {repl_tag(lean_toolchain)}",
                       "mathlib": f"mathlib4 {mathlib_rev} (build cache fetched at image build)",
                       "kernel_checker": _checker_pin(lean_toolchain)},
            why="verification Sandboxes: the REPL with Mathlib, no network, no Volumes",
            executables={**BASE_EXECUTABLES, **LEAN_EXECUTABLES}),
    }


# Where the Volumes are mounted in every container.
MODELS_MOUNT = "/models"
RUNS_MOUNT = "/runs"
