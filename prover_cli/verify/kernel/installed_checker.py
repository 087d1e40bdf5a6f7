"""Which checker is installed (for `prover doctor`), and whether it was built against the
project's packages (their lake-manifest.json revisions): a local stage refuses one that was not."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prover_cli.errors import ConfigError
from prover_cli.verify.kernel.pins import OWN_CHECKER_FILES, CheckerPin, checker_command, toolchain_version

if TYPE_CHECKING:
    from prover_cli.config import VerifyConfig


# --------------------------------------------------------------------------------------------
# Which checker is installed (for `prover doctor`)
# --------------------------------------------------------------------------------------------

def checker_program(command: list[str]) -> str:
    """The checker executable in its argv (`lake env safe_verify` -> `safe_verify`)."""
    rest = list(command)
    if rest[:2] == ["lake", "env"]:
        rest = rest[2:]
    return rest[0] if rest else ""


def describe_installed_checker(command: list[str], cwd: str | None = None) -> dict[str, Any]:
    """{found, path, toolchain, commit} of the checker `command` runs: the binary on PATH, and
    the SafeVerify checkout it was built in (`<checkout>/.lake/build/bin/safe_verify`), whose
    `lean-toolchain` and git HEAD say which version it is."""
    import os
    import shutil
    from pathlib import Path

    program = checker_program(command)
    path = shutil.which(program) if program else None
    if path is None and program and os.path.isfile(os.path.join(cwd or ".", program)):
        path = os.path.join(cwd or ".", program)
    info: dict[str, Any] = {"program": program, "found": path is not None, "path": path,
                            "toolchain": None, "commit": None}
    if path is None:
        return info
    here = Path(os.path.realpath(path)).parent
    for directory in (here, *here.parents):
        toolchain_file = directory / "lean-toolchain"
        if toolchain_file.is_file():
            info["checkout"] = str(directory)
            info["toolchain"] = toolchain_version(toolchain_file.read_text(encoding="utf-8", errors="replace").strip())
            info["commit"] = _git_head(directory / ".git") or _source_digest(directory)
            break
    return info


# --------------------------------------------------------------------------------------------
# The checker's packages against the project's (lake-manifest.json)
# --------------------------------------------------------------------------------------------

# The packages whose .olean files both the checker's build and the project's proofs use: a checker
# built against other revisions reads a Mathlib it was not built with (SafeVerify requires Mathlib,
# which requires Batteries; prover_check requires nothing, so it has nothing to compare).
SHARED_PACKAGES = ("mathlib", "batteries")
MANIFEST = "lake-manifest.json"


def manifest_revisions(path: Path) -> dict[str, str]:
    """{package name: rev} of a lake-manifest.json (its `packages`: objects with `name` and
    `rev`, as Lake writes them); ConfigError naming the file and the key when it is not one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: not JSON ({exc})") from None
    packages = data.get("packages") if isinstance(data, dict) else None
    if not isinstance(packages, list):
        raise ConfigError(f"{path}: key `packages` must be a list (a lake-manifest.json)")
    for k, package in enumerate(packages):
        if not isinstance(package, dict) or not isinstance(package.get("name"), str) \
                or not isinstance(package.get("rev"), str):
            raise ConfigError(f"{path}: `packages[{k}]` must have string `name` and `rev` (a lake-manifest.json)")
    return {package["name"]: package["rev"] for package in packages}


def manifest_mismatch(checker_manifest: Path, project_manifest: Path) -> str | None:
    """Why the checker's shared packages are not the project's revisions (both files and both
    revisions named), or None. A package the checker's build does not require is not compared."""
    checker, project = manifest_revisions(checker_manifest), manifest_revisions(project_manifest)
    bad = [f"{name} {checker[name][:12]} in {checker_manifest}, "
           + (f"{project[name][:12]} in {project_manifest}" if name in project else f"absent from {project_manifest}")
           for name in SHARED_PACKAGES if name in checker and checker[name] != project.get(name)]
    return f"the kernel checker was built against other packages than the project's: {'; '.join(bad)}" if bad else None


def checker_manifest_problem(verify_config: VerifyConfig, pin: CheckerPin) -> str | None:
    """The installed checker's packages against verify.project_dir's lake-manifest.json: why they
    differ, or None (also None when no checkout of the checker is found: `prover doctor` reports
    that its version is unknown). ConfigError when a manifest is not one."""
    info = describe_installed_checker(checker_command(verify_config, pin), verify_config.project_dir or None)
    if not info.get("checkout"):
        return None
    checker = Path(info["checkout"]) / MANIFEST
    project = Path(verify_config.project_dir or ".") / MANIFEST
    if not checker.is_file():
        if pin.dialect == "batch":
            return None   # prover_check's lakefile requires no package: it reads the project's
        return f"no {MANIFEST} beside the kernel checker ({checker}): which Mathlib it was built against is unknown"
    if not project.is_file():
        revisions = manifest_revisions(checker)
        if not any(name in revisions for name in SHARED_PACKAGES):
            return None
        return f"the kernel checker's {checker} pins Mathlib, but the project has no {project}"
    return manifest_mismatch(checker, project)


def _source_digest(directory: Any) -> str | None:
    """Our checker's identity in a build directory holding its source (as `own_checker_digest`)."""
    import hashlib

    try:
        digest = hashlib.sha256()
        for name in OWN_CHECKER_FILES:
            digest.update(name.encode() + b"\0" + (directory / name).read_bytes() + b"\0")
    except OSError:
        return None
    return digest.hexdigest()[:40]


def _git_head(git_dir: Any) -> str | None:
    """The commit a checkout is at, read from `.git` without running git (None when unknown)."""
    try:
        head = (git_dir / "HEAD").read_text(encoding="utf-8").strip()
        if re.fullmatch(r"[0-9a-f]{40}", head):
            return head
        ref = head.removeprefix("ref: ").strip()
        loose = git_dir / ref
        if loose.is_file():
            return loose.read_text(encoding="utf-8").strip()
        for line in (git_dir / "packed-refs").read_text(encoding="utf-8").splitlines():
            sha, _, name = line.partition(" ")
            if name.strip() == ref:
                return sha
    except (OSError, ValueError):
        pass
    return None
