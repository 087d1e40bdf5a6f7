"""The kernel checker's packages against the project's (kernel/installed_checker.py `checker_manifest_problem`):
`prover doctor` names both lake-manifest.json files and both revisions when Mathlib or Batteries
differ, and verification refuses to start the kernel stage with such a checker.

The manifests are real ones in shape: `SAFEVERIFY_MANIFEST` is GasStationManager/SafeVerify's
`lake-manifest.json` at b291b588a53999a7e837dda61c7dbfe8c550c814 (the 4.27 pin), its mathlib and
batteries entries verbatim, the other seven packages (Cli, plausible, LeanSearchClient,
importGraph, proofwidgets, aesop, Qq) left out."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

from prover_cli.errors import BackendError, ConfigError
from prover_cli.verify.kernel.installed_checker import checker_manifest_problem, manifest_mismatch
from prover_cli.verify.kernel.pins import PINS, SAFEVERIFY_PINS
from prover_cli.verify.kernel.stage import KernelStage

SAFEVERIFY_MANIFEST = {
    "version": "1.1.0",
    "packagesDir": ".lake/packages",
    "packages": [
        {"url": "https://github.com/leanprover-community/mathlib4.git", "type": "git", "subDir": None, "scope": "",
         "rev": "a3a10db0e9d66acbebf76c5e6a135066525ac900", "name": "mathlib", "manifestFile": "lake-manifest.json",
         "inputRev": "v4.27.0", "inherited": False, "configFile": "lakefile.lean"},
        {"url": "https://github.com/leanprover-community/batteries", "type": "git", "subDir": None,
         "scope": "leanprover-community", "rev": "b25b36a7caf8e237e7d1e6121543078a06777c8a", "name": "batteries",
         "manifestFile": "lake-manifest.json", "inputRev": "main", "inherited": True, "configFile": "lakefile.toml"},
    ],
    "name": "SafeVerify",
    "lakeDir": ".lake",
}
PIN_2026 = SAFEVERIFY_PINS["v4.27.0"]   # refused by the stage (#39); its manifest rule still read here
PIN_OWN = PINS["v4.15.0"]


def write_manifest(path: Path, **revs: str) -> Path:
    """SAFEVERIFY_MANIFEST with the given packages' revisions changed, at `path`."""
    manifest = copy.deepcopy(SAFEVERIFY_MANIFEST)
    for package in manifest["packages"]:
        package["rev"] = revs.get(package["name"], package["rev"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest, indent=1))
    return path


def checkout(root: Path, program: str, toolchain: str, manifest: bool = True, **revs: str) -> Path:
    """A checker build as the image makes it: the binary in .lake/build/bin, lean-toolchain, its manifest."""
    binary = root / ".lake" / "build" / "bin" / program
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    (root / "lean-toolchain").write_text(f"leanprover/lean4:{toolchain}\n")
    if manifest:
        write_manifest(root / "lake-manifest.json", **revs)
    return binary


@pytest.fixture
def config(tmp_path, monkeypatch):
    from prover_cli.config import VerifyConfig

    def make(pin, **revs):
        binary = checkout(tmp_path / "checker", pin.program, pin.toolchain, **revs)
        monkeypatch.setenv("PATH", f"{binary.parent}:/usr/bin:/bin")
        project = write_manifest(tmp_path / "project" / "lake-manifest.json").parent
        config = VerifyConfig()
        config.lean_toolchain = f"leanprover/lean4:{pin.toolchain}"
        config.project_dir = str(project)
        config.lean_command = [sys.executable, "-c", "pass"]
        return config
    return make


def test_the_same_revisions_pass(config):
    assert checker_manifest_problem(config(PIN_2026), PIN_2026) is None


@pytest.mark.parametrize("package", ["mathlib", "batteries"])
def test_another_revision_names_both_files_and_both_revisions(config, tmp_path, package):
    cfg = config(PIN_2026, **{package: "0123456789abcdef0123456789abcdef01234567"})
    problem = checker_manifest_problem(cfg, PIN_2026)
    want = next(p["rev"] for p in SAFEVERIFY_MANIFEST["packages"] if p["name"] == package)
    assert problem is not None and f"{package} 0123456789ab in {tmp_path / 'checker' / 'lake-manifest.json'}" in problem
    assert f"{want[:12]} in {tmp_path / 'project' / 'lake-manifest.json'}" in problem


def test_a_package_the_checker_does_not_require_is_not_compared(tmp_path):
    checker, project = tmp_path / "c.json", write_manifest(tmp_path / "p.json")
    checker.write_text(json.dumps({**SAFEVERIFY_MANIFEST, "packages": [
        {**SAFEVERIFY_MANIFEST["packages"][0], "name": "Cli", "rev": "55c37290ff6186e2e965d68cf853a57c0702db82"}]}))
    assert manifest_mismatch(checker, project) is None


def test_a_project_without_the_checkers_mathlib_is_a_mismatch(tmp_path):
    checker = write_manifest(tmp_path / "c.json")
    project = tmp_path / "p.json"
    project.write_text(json.dumps({**SAFEVERIFY_MANIFEST, "packages": []}))
    assert "absent from" in manifest_mismatch(checker, project)


@pytest.mark.parametrize("text, key", [
    ("{", "not JSON"), ('{"packages": {}}', "`packages` must be a list"),
    ('{"packages": [{"name": "mathlib"}]}', "`packages[0]` must have string `name` and `rev`"),
])
def test_a_manifest_that_is_not_one_names_the_file_and_the_key(tmp_path, text, key):
    bad = tmp_path / "lake-manifest.json"
    bad.write_text(text)
    with pytest.raises(ConfigError) as raised:
        manifest_mismatch(bad, write_manifest(tmp_path / "p.json"))
    assert str(raised.value).startswith(f"{bad}: ") and key in str(raised.value)


def test_safeverify_without_a_manifest_is_unknown_and_prover_check_requires_none(config, tmp_path, monkeypatch):
    cfg = config(PIN_2026)
    (tmp_path / "checker" / "lake-manifest.json").unlink()
    assert "which Mathlib it was built against is unknown" in checker_manifest_problem(cfg, PIN_2026)
    own = checkout(tmp_path / "own", PIN_OWN.program, PIN_OWN.toolchain, manifest=False)
    monkeypatch.setenv("PATH", f"{own.parent}:/usr/bin:/bin")
    cfg.lean_toolchain = f"leanprover/lean4:{PIN_OWN.toolchain}"
    assert checker_manifest_problem(cfg, PIN_OWN) is None


def test_the_doctor_fails_and_verification_refuses_such_a_checker(config, tmp_path):
    """A mismatched SafeVerify build is named by the manifest rule; and since #39 the 2026 pin is
    refused whatever its build (kernel/pins.py REFUSED_PINS), by the doctor and by the stage."""
    from prover_cli.doctor import check_kernel_checker

    cfg = config(PIN_2026, mathlib="0123456789abcdef0123456789abcdef01234567")
    problem = checker_manifest_problem(cfg, PIN_2026)
    assert "built against other packages than the project's" in problem and "0123456789ab" in problem
    assert SAFEVERIFY_MANIFEST["packages"][0]["rev"][:12] in problem
    write_manifest(tmp_path / "checker" / "lake-manifest.json")   # rebuilt against the project's
    assert checker_manifest_problem(cfg, PIN_2026) is None
    assert not check_kernel_checker(cfg).ok
    with pytest.raises(BackendError, match="refuses verify.lean_toolchain"):
        KernelStage(cfg)
