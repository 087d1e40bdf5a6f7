# # Images and Volumes, as declarations
#
# The apps (one per role), the two Volumes and one image per job, built from the pins in `plan/pins.py`.
# Nothing here runs anything: Modal builds an app's images on its `app.run()` / `modal deploy`.

# No `from __future__ import annotations`: Modal reads the class parameters' types at runtime.
import dataclasses
import os
import shlex
from typing import Any

import modal

from prover_cli.config import Config
from prover_cli.on_modal.plan import MODELS_MOUNT, PYTHON_VERSION, RUNS_MOUNT, image_specs, repl_tag
from prover_cli.verify.kernel.job import elaborate_argv
from prover_cli.verify.kernel.pins import (
    CHECKER_ENV,
    OWN_CHECKER_FILES,
    SAFEVERIFY_URL,
    CheckerPin,
    own_checker_sources,
    pin_for,
)

# ## Settings read at import
#
# Modal declares functions when this package is imported, on your machine and again in every
# container, so the few config values that shape the declarations (the app and Volume names, the
# Lean and Mathlib versions baked into the Lean image) are read from the environment, with the
# config defaults as fallback, and baked into every image so containers agree. `remote.run_remote`
# re-imports the package when your config asks for other values.

DEFAULTS = Config()


def deploy_settings(config: Config) -> dict[str, str]:
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
SPECS = image_specs(LEAN_TOOLCHAIN, MATHLIB_REV)
PINS = {"python": PYTHON_VERSION, "elan": SPECS["lean"].toolchain["elan"]}

# ## Apps, one per role
#
# `app.run()` creates every function and class registered on the app, and creating a function
# loads its image: modal/runner.py `_create_all_objects` indexes `{**functions, **classes}` and
# loads each; modal/_functions.py `_deps` lists the image among a function's dependencies
# (modal-labs/modal-client@69519aef, py/; the same in the modal 1.6.4 we pin). One app for
# everything made every command build (and fail with) the TRL and Lean images. So each role has
# its app and a command runs only the one its function is in (`remote.APP_OF`):
# - `gpu_app` (the GPU image): generate, ES (loop, members, held-out), eval, replay, the doctor's GPU step;
# - `data_app` (the orchestrator image): prepare-data, verify, the doctor's Volume probe;
# - `grpo_app` (the TRL image): train_grpo and its own model download;
# - `lean_app` (the Lean image): `lean_image_check`, and the Sandboxes started from your machine.
# The Lean and kernel images belong to no function a command runs: a Sandbox's image is loaded
# (built, or found cached) when the Sandbox is created (modal/sandbox.py `_Sandbox._create`,
# its `_load` resolves `image`), so verification builds them at its first Sandbox.
# A function calls only functions of its own app: a container initialises the app of the function
# it runs and no other (modal/app.py `_init_container`, modal/_container_entrypoint.py), so caller
# and callee share an app (tests/test_modal_apps.py checks every cross-container call).

APP_NAME = SETTINGS["PROVER_MODAL_APP"]
gpu_app = modal.App(APP_NAME)
data_app = modal.App(f"{APP_NAME}-data")
grpo_app = modal.App(f"{APP_NAME}-grpo")
lean_app = modal.App(f"{APP_NAME}-lean")
APPS = {"gpu": gpu_app, "data": data_app, "grpo": grpo_app, "lean": lean_app}


def sandbox_app() -> Any:
    """The `app=` of a Sandbox: inside a container none, so Modal attaches it to the container's own
    app (the only one running there: modal/sandbox/_common.py `_resolve_app_id_and_client`); on
    your machine (the doctor) the Lean app, which the caller runs."""
    return lean_app if modal.is_local() else None

# ## Volumes
#
# `prover-models` holds base weights, downloaded once from the Hugging Face hub (`HF_HOME` points
# into it). `prover-ledgers` holds run directories: problems, samples, verdicts, ledgers, metrics.
# A relative path of your machine is the same path under RUNS_MOUNT; functions turn it into that
# absolute path and never `chdir` into a Volume: Modal refuses `reload()` while any process of
# the container has its working directory (or an open file) inside the Volume. Writers
# `commit()` before readers `reload()`.

models_volume = modal.Volume.from_name(SETTINGS["PROVER_MODELS_VOLUME"], create_if_missing=True)
runs_volume = modal.Volume.from_name(SETTINGS["PROVER_RUNS_VOLUME"], create_if_missing=True)


def mounts(*paths: str) -> dict[str, Any]:
    """The `volumes=` argument for the mount points a function's `Resources.volumes` names."""
    return {path: {MODELS_MOUNT: models_volume, RUNS_MOUNT: runs_volume}[path] for path in paths}


# ## Images, one per job
#
# Our own package goes in last (`add_local_python_source`), so editing it never rebuilds the
# layers below it, and whole: Modal's default leaves out non-Python files (`NON_PYTHON_FILES`),
# among them the lexer's token tables, the shipped configs and studies and the checker's Lean
# source, so `PACKAGE_IGNORE` drops bytecode only. Each image installs exactly
# `SPECS[name].python_packages`, the list that `--dry-run --json` shows and
# tests/test_modal_pins.py resolves.

PACKAGE_IGNORE = ["**/__pycache__", "**/*.pyc"]   # the package goes in whole but for its bytecode

orchestrator_image = (
    modal.Image.debian_slim(python_version=PYTHON_VERSION)
    .uv_pip_install(*SPECS["orchestrator"].python_packages)
    .env({**SETTINGS, "PROVER_IMAGE": "orchestrator"})
    .add_local_python_source("prover_cli", ignore=PACKAGE_IGNORE)
)

gpu_image = (
    modal.Image.debian_slim(python_version=PYTHON_VERSION)
    .uv_pip_install(*SPECS["gpu"].python_packages)
    .env({**SETTINGS, "HF_HOME": f"{MODELS_MOUNT}/hf", "PROVER_IMAGE": "gpu"})
    .add_local_python_source("prover_cli", ignore=PACKAGE_IGNORE)
)
trl_image = (
    modal.Image.debian_slim(python_version=PYTHON_VERSION)
    .uv_pip_install(*SPECS["trl"].python_packages)  # one resolution: TRL with the GPU image's pins
    .env({**SETTINGS, "HF_HOME": f"{MODELS_MOUNT}/hf", "PROVER_IMAGE": "trl"})
    .add_local_python_source("prover_cli", ignore=PACKAGE_IGNORE)
)

# The Lean image: a pinned toolchain through elan, the leanprover-community REPL built at the tag
# of that Lean release, and a Lake project requiring Mathlib whose build cache is fetched here,
# at image build, so no Sandbox ever compiles Mathlib. The last step elaborates `import Mathlib`
# once, so a broken cache fails the build instead of the first verification.
#
# Modal turns every step into ONE Dockerfile line (`RUN <step>`, modal/_image.py): a newline
# inside a step would end the RUN there and hand the rest to the builder as instructions. Files
# are therefore written by `write_file_step` (printf repeats its format for each line), and
# `one_line` refuses any step with a line break when this module is imported.
# tests/test_modal_images.py parses every image's Dockerfiles with buildkit's parser.

ELAN_HOME = "/opt/elan"
REPL_DIR = "/opt/repl"
LEAN_PROJECT_DIR = "/opt/lean-project"
REPL_COMMAND = ["lake", "env", "repl"]  # run in LEAN_PROJECT_DIR, inside a verification Sandbox
LEAN_PROJECT_LAKEFILE_LINES = [
    'name = "prover_verify"',
    "",
    "[[require]]",
    'name = "mathlib"',
    'git = "https://github.com/leanprover-community/mathlib4"',
    f'rev = "{MATHLIB_REV}"',
]
LEAN_PROJECT_LAKEFILE = "\n".join(LEAN_PROJECT_LAKEFILE_LINES) + "\n"


def write_file_step(path: str, lines: list[str]) -> str:
    """One shell line that writes `lines` (each followed by a newline) to `path`."""
    return f"printf '%s\\n' {' '.join(shlex.quote(line) for line in lines)} > {path}"


def one_line(steps: list[str]) -> list[str]:
    for step in steps:
        if "\n" in step or "\r" in step:
            raise ValueError(f"an image step must be one Dockerfile line; this one has a line break: {step!r}")
    return steps


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
    write_file_step(f"{LEAN_PROJECT_DIR}/lean-toolchain", [LEAN_TOOLCHAIN]),
    write_file_step(f"{LEAN_PROJECT_DIR}/lakefile.toml", LEAN_PROJECT_LAKEFILE_LINES),
    f"cd {LEAN_PROJECT_DIR} && lake update && lake exe cache get",  # prebuilt .olean files, no compile
    write_file_step("/tmp/check.lean", ["import Mathlib", "#eval Lean.versionString"]),
    f"cd {LEAN_PROJECT_DIR} && lake env lean /tmp/check.lean",
]

# The kernel image: the same toolchain and Mathlib layers as the Lean image, then the kernel
# stage's checker (prover_cli/verify/kernel/), the one pinned for this toolchain:
# - Lean 4.9 - 4.21: `prover_check`, our own program (prover_cli/verify/kernel/checker: Main.lean, the
#   tag's replay file as ProverReplay.lean and lakefile.toml, written into the image line by line),
#   requiring lean4checker at the tag's release commit (its `replay'` at 4.20/4.21) and no Mathlib;
#   it reads the project's Mathlib from `lake env`'s search path when it runs.
# - Lean 4.27, 4.29: SafeVerify at the pinned commit, built in its own checkout (its lakefile
#   requires Mathlib, whose cache is fetched like the project's: nothing compiles Mathlib).
# Either is linked into /usr/local/bin. The build then runs the whole stage once on a two-line
# module (a target with `sorry`, a proof, each `lean -o` under the same module name), so a checker
# that cannot read this toolchain's .olean files does not count as built.
# The checker's build is CONFINED twice: it happens in the kernel image only (the Lean image, which
# the fast path's REPLs run in, never holds it), and its steps run from one script whose failure
# leaves KERNEL_CHECKER_FAILED, the log beside it, and in place of the checker a program that says
# so (`uncaught exception: the kernel checker did not build …` with the log's last line, exit 1):
# every kernel step that runs the checker ends in that `error`, and `prover doctor --backend
# modal`'s kernel canary reports it. No pin: no checker at all (verify.kernel_check = true refuses).
SAFEVERIFY_DIR = "/opt/safeverify"
OWN_CHECKER_DIR = "/opt/prover-check"
KERNEL_CHECKER_LOG = "/opt/kernel-checker-build.log"
KERNEL_CHECKER_FAILED = "/opt/kernel-checker-FAILED"
LEAN_COMMAND = ["lake", "env", "lean"]                  # the stage's `lean -o`, run in LEAN_PROJECT_DIR
KERNEL_PIN = pin_for(LEAN_TOOLCHAIN)
KERNEL_CHECKER_COMMAND = ["lake", "env", KERNEL_PIN.program if KERNEL_PIN else "safe_verify"]  # in LEAN_PROJECT_DIR


def _stage_check_lines(pin: CheckerPin) -> list[str]:
    elaborate = " ".join(LEAN_COMMAND + elaborate_argv([])).replace("{dir}", "/tmp/prover-kernel-{which}")
    lines = ["mkdir -p /tmp/prover-kernel-target /tmp/prover-kernel-proof"]
    for which, proof in (("target", "sorry"), ("proof", "by decide")):
        lines.append(write_file_step(f"/tmp/prover-kernel-{which}/Proof.lean",
                                     [f"theorem prover_image_check : 2 + 2 = 4 := {proof}"]))
        lines.append(f"cd {LEAN_PROJECT_DIR} && {elaborate.format(which=which)}")
    if pin.dialect == "batch":   # one pair; the answer must be a pass
        lines.append("mkdir -p /tmp/prover-kernel-pairs && ln -s /tmp/prover-kernel-target/Proof.olean "
                     "/tmp/prover-kernel-pairs/T0.olean && ln -s /tmp/prover-kernel-proof/Proof.olean "
                     "/tmp/prover-kernel-pairs/P0.olean")
        lines.append(f"cd {LEAN_PROJECT_DIR} && env {' '.join(CHECKER_ENV)} {' '.join(KERNEL_CHECKER_COMMAND)} "
                     "/tmp/prover-kernel-pairs > /tmp/answer.txt")
        lines.append("grep -qx 'pair 0 passed' /tmp/answer.txt")
    else:
        lines.append(f"cd {LEAN_PROJECT_DIR} && {' '.join(KERNEL_CHECKER_COMMAND)} "
                     "/tmp/prover-kernel-target/Proof.olean /tmp/prover-kernel-proof/Proof.olean")
    return lines


def _own_checker_source(pin: CheckerPin, name: str) -> list[str]:
    """One file of our checker as built for this toolchain (kernel/pins.py own_checker_sources: the
    tag's replay file as ProverReplay.lean, lakefile.toml with lean4checker at the tag's commit)."""
    return own_checker_sources(pin.toolchain)[name].splitlines()


def _checker_build_lines(pin: CheckerPin) -> list[str]:
    if pin.dialect == "batch":
        # ProverReplay.lean: lean4checker's `replay'` (4.20, 4.21) or the core copy (4.9 - 4.15)
        return [f"mkdir -p {OWN_CHECKER_DIR}",
                write_file_step(f"{OWN_CHECKER_DIR}/lean-toolchain", [LEAN_TOOLCHAIN]),
                *(write_file_step(f"{OWN_CHECKER_DIR}/{name}", _own_checker_source(pin, name)) for name in OWN_CHECKER_FILES),
                f"cd {OWN_CHECKER_DIR} && lake build prover_check",
                f"ln -s {OWN_CHECKER_DIR}/.lake/build/bin/prover_check /usr/local/bin/prover_check"]
    return [f"git clone {SAFEVERIFY_URL} {SAFEVERIFY_DIR}",
            f"cd {SAFEVERIFY_DIR} && git checkout --detach {pin.commit}",
            f"cd {SAFEVERIFY_DIR} && lake exe cache get && lake build safe_verify",
            f"ln -s {SAFEVERIFY_DIR}/.lake/build/bin/safe_verify /usr/local/bin/safe_verify",
            MANIFEST_CHECK]


# SafeVerify is built against its own lake-manifest.json and then reads the project's .olean
# files: every package both manifests name must be at the same revision, or the build fails (its
# confined way), naming both files and both revisions (kernel/installed_checker.py `manifest_mismatch` is the same
# rule for a local checker). prover_check requires no package, so it has nothing to compare.
MANIFEST_CHECK = ("python -c " + shlex.quote(
    "import json, sys; revs = [{p['name']: p.get('rev') for p in json.load(open(f))['packages']} "
    "for f in sys.argv[1:]]; bad = sorted(n for n in revs[0] if n in revs[1] and revs[0][n] != revs[1][n]); "
    "sys.exit('the kernel checker was built against other packages than the project\\'s: ' + '; '.join("
    "f'{n} {revs[0][n][:12]} in {sys.argv[1]}, {revs[1][n][:12]} in {sys.argv[2]}' for n in bad) if bad else 0)")
    + f" {SAFEVERIFY_DIR}/lake-manifest.json {LEAN_PROJECT_DIR}/lake-manifest.json")


# One script (`set -e`: its first failing line ends it), written by one step and run by another.
KERNEL_CHECKER_SCRIPT = (["set -ex", *_checker_build_lines(KERNEL_PIN), *_stage_check_lines(KERNEL_PIN)]
                         if KERNEL_PIN else [])
# What stands in for the checker when its build failed: the marker, and a program of the checker's
# name that fails every run with the log's last line (the reason: a compile error, the manifests).
KERNEL_CHECKER_MISSING = ("python -c " + shlex.quote(
    "import os, shlex, sys; open(sys.argv[1], 'w').close(); "
    "lines = [l for l in open(sys.argv[2], errors='replace').read().splitlines() if l.strip()][-1:]; "
    "why = 'uncaught exception: the kernel checker did not build in the kernel image (' + sys.argv[2] + ': ' "
    "+ ''.join(lines)[:300] + ')'; "
    "open(sys.argv[3], 'w').write('#!/bin/sh\\necho ' + shlex.quote(why) + ' >&2\\nexit 1\\n'); "
    "os.chmod(sys.argv[3], 0o755)")
    + f" {KERNEL_CHECKER_FAILED} {KERNEL_CHECKER_LOG} /usr/local/bin/{KERNEL_PIN.program if KERNEL_PIN else ''}")
KERNEL_CHECKER_STEPS = [
    write_file_step("/opt/kernel-checker-build.sh", KERNEL_CHECKER_SCRIPT),
    f"sh /opt/kernel-checker-build.sh > {KERNEL_CHECKER_LOG} 2>&1 || {KERNEL_CHECKER_MISSING}",
] if KERNEL_PIN is not None else []

# The two Lean images' builds, layer by layer, in order: the same toolchain and Mathlib layers
# first (built once, shared), then the REPL (the fast path's Lean image) or the checker (the
# kernel image). Add a layer by appending (name, steps); every program a new step or new code runs
# in an image goes into plan.LEAN_EXECUTABLES too.
LEAN_BASE_STEPS: list[tuple[str, list[str]]] = [("elan", ELAN_STEPS), ("mathlib", MATHLIB_STEPS)]
LEAN_BUILD_STEPS: list[tuple[str, list[str]]] = [*LEAN_BASE_STEPS, ("repl", REPL_STEPS)]
KERNEL_BUILD_STEPS: list[tuple[str, list[str]]] = [
    *LEAN_BASE_STEPS, *([("kernel checker", KERNEL_CHECKER_STEPS)] if KERNEL_CHECKER_STEPS else [])]


def _lean_image(build_steps: list[tuple[str, list[str]]], name: str) -> Any:
    image = (
        modal.Image.debian_slim(python_version=PYTHON_VERSION)
        .apt_install(*SPECS["lean"].apt_packages)  # elan, lake and `cache get` download over https
        .env({"ELAN_HOME": ELAN_HOME,
              "PATH": f"{ELAN_HOME}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"})
    )
    for _layer, steps in build_steps:
        image = image.run_commands(*one_line(steps))
    return (
        image
        .uv_pip_install(*SPECS["lean"].python_packages)
        .env({**SETTINGS, "PROVER_IMAGE": name, "PROVER_IMAGE_LEAN_TOOLCHAIN": LEAN_TOOLCHAIN,
              "PROVER_IMAGE_MATHLIB_REV": MATHLIB_REV})
        .add_local_python_source("prover_cli", ignore=PACKAGE_IGNORE)
    )


lean_image = _lean_image(LEAN_BUILD_STEPS, "lean")   # the fast path's REPL Sandboxes
# The kernel stage's Sandboxes run `lean -o` and the checker here, so a checker that does not
# build breaks this image's kernel steps only, never the fast path's Lean image.
kernel_image = _lean_image(KERNEL_BUILD_STEPS, "kernel")
# The kernel image has the Lean image's packages and programs but the REPL, and the checker
# (plan.LEAN_EXECUTABLES lists both images' programs together).
SPECS["kernel"] = dataclasses.replace(
    SPECS["lean"], executables={k: v for k, v in SPECS["lean"].executables.items() if k != "repl"})

IMAGES = {"orchestrator": orchestrator_image, "gpu": gpu_image, "trl": trl_image, "lean": lean_image,
          "kernel": kernel_image}
