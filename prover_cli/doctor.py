"""`prover doctor`: what this machine has, and what to do about what it lacks.

Each check returns a `Check(name, ok, detail, fix)`. Nothing here raises: a missing piece is a
finding, not an error. Heavy packages are probed with `importlib.util.find_spec` first so that a
missing one costs nothing, then imported only to read versions.

`summarize` then sorts the checks by what the config needs (`need_of`): what it cannot run
without, what only makes it faster, and what only a real run needs (Lean verification, a GPU,
Modal), so the demo's doctor does not open with rows of `missing` it never uses; it ends with one
summary line.
"""

from __future__ import annotations

import importlib.util
import platform
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prover_cli.backends import modal_credentials_present, modal_module
from prover_cli.errors import ProverError
from prover_cli.es import fused_cpu, fused_gpu
from prover_cli.on_modal.plan import doctor_plan
from prover_cli.verify.engine import fast_path_once
from prover_cli.verify.kernel.installed_checker import checker_manifest_problem, describe_installed_checker
from prover_cli.verify.kernel.kernel_canary import kernel_canary_failures, run_kernel_canary
from prover_cli.verify.kernel.pins import REFUSED_PINS, checker_command, pin_for, pin_warning, toolchain_version
from prover_cli.verify.kernel.stage import KernelStage
from prover_cli.verify.lean.box import INSTALL_HINT, boxed, probe
from prover_cli.verify.lean.canary import canaries_for, failures_message, run_canary
from prover_cli.verify.lean.pool import ReplPool

if TYPE_CHECKING:
    from prover_cli.config import Config, VerifyConfig


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    need: str = ""   # NEEDED, OPTIONAL or REAL_RUN for the config checked (`need_of`); set by `run_local_checks`

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


NEEDED, OPTIONAL, REAL_RUN = "needed", "optional", "real run"
LEAN_CHECKS = ("box", "lean repl", "lean canary", "kernel checker", "kernel canary")


def need_of(name: str, config: Config) -> str:
    """Whether `config`, run here (`--backend local`), needs the check `name`: NEEDED (it cannot run
    without), OPTIONAL (faster with it, same results) or REAL_RUN (only a run on Lean problems, a
    GPU or Modal uses it)."""
    gpu = config.generate.backend == "vllm" or config.model.device == "cuda"
    if name in LEAN_CHECKS:
        return NEEDED if config.data.task == "lean" else REAL_RUN
    if name == "cuda":
        return NEEDED if gpu else REAL_RUN
    if name == "vllm":
        return NEEDED if config.generate.backend == "vllm" else REAL_RUN
    if name in ("modal", "modal token"):
        return REAL_RUN   # --backend modal (its own doctor: `prover doctor --backend modal`)
    if name.startswith("es fused"):
        return OPTIONAL
    return NEEDED   # python, torch, transformers, trl


def config_label(config: Config) -> str:
    return (f"task {config.data.task}, model on {config.model.device}, {config.generate.backend} sampler, "
            "local backend")


def summarize(checks: list[Check], config: Config) -> dict[str, Any]:
    """The doctor's tables (what this config needs; what only a real run needs), what to do about
    each missing piece, and the one summary line (`ready`: nothing this config needs is missing)."""
    mine = [c for c in checks if c.need != REAL_RUN]
    real = [c for c in checks if c.need == REAL_RUN]
    blocking = [c.name for c in mine if c.need == NEEDED and not c.ok]
    slower = [c.name for c in mine if c.need == OPTIONAL and not c.ok]
    later = [c.name for c in real if not c.ok]
    status = {NEEDED: "missing", OPTIONAL: "missing (optional)", REAL_RUN: "missing"}

    def rows(group: list[Check]) -> list[tuple[str, str, str]]:
        return [(c.name, "ok" if c.ok else status[c.need], c.detail) for c in group]

    if blocking:
        line = (f"summary: NOT ready for this config ({config_label(config)}): it needs {', '.join(blocking)}, "
                "missing here (what to do: above)")
    else:
        line = f"summary: ready for this config ({config_label(config)}): all it needs is here"
        if slower:
            line += f" ({', '.join(slower)} would only make it faster)"
    if later:
        line += (f"; the {len(later)} missing ({', '.join(later)}) are for a real run only (Lean verification, a GPU, Modal: "
                 "README, *What a real run needs*)")
    tables = [{"title": "prover doctor: what this config needs", "columns": ["check", "status", "detail"],
               "rows": rows(mine)}]
    if real:
        tables.append({"title": "prover doctor: what only a real run needs (Lean verification, a GPU, Modal)",
                       "columns": ["check", "status", "detail"], "rows": rows(real)})
    return {"ready": not blocking, "missing_needed": blocking, "missing_real_run": later, "summary": line,
            "tables": tables, "fixes": _fixes(mine), "real_run_fixes": _fixes(real)}


def _fixes(checks: list[Check]) -> list[str]:
    """`name: what to do` for each missing check, one line per distinct fix (`lean repl, lean canary: …`)."""
    names: dict[str, list[str]] = {}
    for check in checks:
        if not check.ok and check.fix:
            names.setdefault(check.fix, []).append(check.name)
    return [f"{', '.join(who)}: {fix}" for fix, who in names.items()]


def check_python() -> Check:
    import sys

    ok = sys.version_info >= (3, 10)
    return Check("python", ok, platform.python_version(), "" if ok else "install Python >= 3.10")


def check_torch() -> list[Check]:
    if importlib.util.find_spec("torch") is None:
        return [Check("torch", False, "not installed", "pip install torch==2.13.0 (CPU) or a CUDA build"),
                Check("cuda", False, "no torch", "install a CUDA build of torch on a GPU machine")]
    import torch

    checks = [Check("torch", True, torch.__version__)]
    if torch.cuda.is_available():
        names = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        checks.append(Check("cuda", True, f"{torch.cuda.device_count()} GPU(s): {names}"))
    else:
        checks.append(Check("cuda", False, "no CUDA GPU visible to torch",
                            "generation and training run on CPU (slow); use --backend modal for GPUs"))
    return checks


def check_es_fused() -> list[Check]:
    """The fused ES arithmetic: the C pass on CPU (es/fused_cpu.py), the Triton one on each visible GPU."""
    if importlib.util.find_spec("torch") is None:
        return []
    import torch

    checks = [Check("es fused (cpu)", fused_cpu.available(), fused_cpu.status(),
                    "" if fused_cpu.available() else "install a C compiler (gcc) for the fused path; "
                    "the eager torch path gives the same bits, slower")]
    if torch.cuda.is_available():
        ok = fused_gpu.available("cuda")
        checks.append(Check("es fused (cuda)", ok, fused_gpu.status("cuda"),
                            "" if ok else "the eager torch path gives the same bits, slower; the fused "
                            "path needs triton (it ships with CUDA builds of torch)"))
    return checks


def check_package(name: str, fix: str) -> Check:
    spec = importlib.util.find_spec(name)
    if spec is None:
        return Check(name, False, "not installed", fix)
    from importlib.metadata import PackageNotFoundError, version

    try:
        return Check(name, True, version(name))
    except PackageNotFoundError:
        return Check(name, True, "installed")


def check_box(verify_config: VerifyConfig) -> Check:
    """Whether the box (verify/lean/box.py) is in force: `bwrap` exists and runs `true` in the box."""
    name = "box"
    if verify_config.box == "none":
        return Check(name, False, "not in force (verify.box = \"none\", your opt-out): the REPLs and the kernel "
                                  "stage's processes run unboxed, with your network and write access to your files",
                     "install bubblewrap and set verify.box = \"bubblewrap\" (docs/verify.md, *The box*)")
    ok, detail = probe(verify_config=verify_config)   # its binds too: never $HOME or credentials
    if ok:
        return Check(name, True, f"in force: {detail} (REPLs, `lean -o`, the checker)")
    return Check(name, False, f"cannot be made, so verification refuses to run: {detail}", INSTALL_HINT)


def check_lean(repl_command: list[str], project_dir: str, timeout_s: float = 60.0, box: str = "none") -> Check:
    """Start the REPL (in the box when `box` is "bubblewrap") and send one trivial command; it must
    answer with an environment."""
    program = repl_command[0] if repl_command else ""
    fix = ("install elan and build leanprover-community/repl in a Lake project with Mathlib, then set "
           "verify.repl_command and verify.project_dir (see docs/verify.md), or use --backend modal")
    if not program or shutil.which(program) is None:
        return Check("lean repl", False, f"`{program}` not found on PATH", fix)
    try:
        argv = boxed(list(repl_command), box, project_dir or None)
    except ProverError as exc:
        return Check("lean repl", False, f"cannot box `{' '.join(repl_command)}`: {exc}", getattr(exc, "hint", "") or fix)
    where = " (in the box)" if box == "bubblewrap" else ""
    try:
        completed = subprocess.run(
            argv,
            input='{"cmd": "def prover_doctor_probe : Nat := 1"}\n\n',
            capture_output=True, text=True, timeout=timeout_s,
            cwd=project_dir or None,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("lean repl", False, f"`{' '.join(repl_command)}` did not answer: {exc}", fix)
    if '"env"' in completed.stdout:
        return Check("lean repl", True, f"`{' '.join(repl_command)}` answers in {project_dir or Path.cwd()}{where}")
    tail = (completed.stderr or completed.stdout).strip().splitlines()[-1:] or ["no output"]
    return Check("lean repl", False, f"`{' '.join(repl_command)}` gave no environment{where}: {tail[0]}", fix)


def check_canary(verify_config: VerifyConfig, transport_factory: Any = None) -> Check:
    """Run the verify canary (prover_cli/verify/lean/canary.py) on the configured REPL (or REPLs from
    `transport_factory`: a Modal Sandbox's): honest proofs must verify and each cheat must be
    rejected, else our rules do not hold on this toolchain."""
    fix = ("the verdict rules do not match this Lean version: verification refuses to run; report the "
           "failing rule, or use the toolchain of verify.lean_toolchain")
    pool = ReplPool(verify_config, transport_factory=transport_factory)
    try:
        results = run_canary(pool)
    except ProverError as exc:   # the REPL cannot start or the header does not elaborate
        return Check("lean canary", False, f"could not run: {exc}", getattr(exc, "hint", "") or fix)
    finally:
        pool.close()
    if all(r["ok"] for r in results):
        return Check("lean canary", True, f"{len(canaries_for(verify_config))} canaries as expected "
                                          "(honest proofs verified, every cheat rejected)")
    return Check("lean canary", False, failures_message(results), fix)


def check_kernel_checker(verify_config: VerifyConfig) -> Check:
    """The kernel stage's checker: found, which version, built for the configured toolchain."""
    name = "kernel checker"
    if not verify_config.kernel_check:
        return Check(name, True, "off (verify.kernel_check = false): `verified` rests on the fast path's "
                                 "answers alone, recorded in every verdict")
    want = toolchain_version(verify_config.lean_toolchain)
    pin = pin_for(verify_config.lean_toolchain)
    build = ("build the pinned checker next to the REPL (docs/verify.md, *The kernel stage*: prover_check from "
             "prover_cli/verify/kernel/checker, on lean4checker at the tag's commit) and put it on PATH, or set "
             "verify.kernel_checker_command")
    if pin is None and want in REFUSED_PINS:
        return Check(name, False, f"Lean {want} is refused: {REFUSED_PINS[want]}",
                     "use a toolchain of Lean 4.9-4.21 (docs/verify.md) or set verify.kernel_check = false")
    if pin is None:
        return Check(name, False, f"no kernel checker is pinned for Lean {want}",
                     "use a pinned toolchain (docs/verify.md) or set verify.kernel_check = false")
    info = describe_installed_checker(checker_command(verify_config, pin), verify_config.project_dir or None)
    if not info["found"]:
        return Check(name, False, f"`{info['program']}` not found on PATH (want {pin.describe})", build)
    where = f"{info['path']}"
    if info["toolchain"] is None:
        return Check(name, False, f"{where}: no lean-toolchain beside it, its version is unknown (want {pin.describe})",
                     build)
    if info["toolchain"] != want:
        return Check(name, False, f"{where} is built for Lean {info['toolchain']}, verify.lean_toolchain is {want}: "
                                  "it cannot read this toolchain's .olean files", build)
    commit = info["commit"] or "unknown commit"
    if info["commit"] != pin.commit:
        return Check(name, False, f"{where} (Lean {info['toolchain']}) is at {commit[:12]}, not the pinned "
                                  f"{pin.describe}", build)
    try:
        packages = checker_manifest_problem(verify_config, pin)
    except ProverError as exc:
        packages = str(exc)
    if packages is not None:
        return Check(name, False, f"{where}: {packages}", build)
    gap = pin_warning(verify_config)
    return Check(name, True, f"{where}: {pin.describe}" + (f"; warning: {gap}" if gap else ""))


def check_kernel_canary(verify_config: VerifyConfig, runner: Any = None, fast_path: Any = None) -> Check:
    """The kernel stage on this toolchain: an honest proof passes, each forged case is rejected;
    reports the seconds the honest one took (the stage's cost per proof here). `runner`: where
    each step runs (None: local processes; `prover doctor --backend modal`: fresh Sandboxes);
    `fast_path`: the fast path the fooled case goes through first (None: straight to the stage)."""
    fix = "the kernel stage does not hold on this toolchain: check the pinned checker and verify.lean_command"
    try:
        results = run_kernel_canary(KernelStage(verify_config, runner=runner), verify_config.header, fast_path)
    except ProverError as exc:
        return Check("kernel canary", False, f"could not run: {exc}", getattr(exc, "hint", "") or fix)
    if all(r["ok"] for r in results):
        honest = results[0]["time_s"]
        return Check("kernel canary", True, f"{len(results)} canaries as expected; the honest proof took "
                                            f"{honest:.1f} s through the stage (`lean -o` + checker)")
    return Check("kernel canary", False, kernel_canary_failures(results), fix)


def check_modal_credentials() -> Check:
    if modal_credentials_present():
        return Check("modal token", True, "found")
    return Check("modal token", False, "no MODAL_TOKEN_ID/MODAL_TOKEN_SECRET and no ~/.modal.toml",
                 "run `modal token new` to use --backend modal")


def run_local_checks(config: Config) -> list[Check]:
    """`prover doctor`'s checks of this machine for `config` (Modal's: on_modal/doctor.py `run_doctor`)."""
    checks = [check_python()]
    checks += check_torch()
    checks += check_es_fused()
    checks.append(check_package("transformers", "pip install 'transformers>=4.57'"))
    checks.append(check_package("trl", "pip install 'trl==1.16.*' (needed by `train grpo`)"))
    checks.append(check_package("vllm", "optional, GPU only: pip install 'prover-cli[gpu]'"))
    checks.append(check_package("modal", "pip install 'modal==1.6.*' (needed by --backend modal)"))
    box = check_box(config.verify)
    checks.append(box)
    # The REPL answers in the box verification will use; unboxed only when there is none (the box
    # check above already says verification then refuses, unless verify.box = "none").
    lean = check_lean(config.verify.repl_command, config.verify.project_dir,
                      box=config.verify.box if box.ok else "none")
    checks.append(lean)
    if lean.ok:
        checks.append(check_canary(config.verify))
    else:
        checks.append(Check("lean canary", False, "not run: no REPL", lean.fix))
    checker = check_kernel_checker(config.verify)
    checks.append(checker)
    if config.verify.kernel_check:
        if checker.ok and lean.ok:
            checks.append(check_kernel_canary(config.verify, fast_path=lambda c: fast_path_once(config.verify, c)))
        else:
            checks.append(Check("kernel canary", False, "not run: " + ("no checker" if not checker.ok else "no REPL"),
                                checker.fix or lean.fix))
    checks.append(check_modal_credentials())
    for check in checks:
        check.need = need_of(check.name, config)
    return checks


# -- `prover doctor --backend modal` -------------------------------------------------------------

def run_modal_doctor(config: Config, *, dry_run: bool = False) -> dict[str, Any]:
    """The steps of prover_cli/on_modal/doctor.py: with `dry_run`, what each would start and cost
    (no `modal` import, no credentials); else run them on Modal, each with result, time and cost."""
    if dry_run:
        return doctor_plan(config)
    return modal_module("prover_cli.on_modal.doctor").run_doctor(config)
