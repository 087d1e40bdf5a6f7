"""The image pins resolve: `uv pip compile` of each image's `python_packages` for Modal's platform.

This is the one test that needs the package registry (PyPI): a resolver, not a guess, decides
whether the images can be built. It installs uv from the registry if this environment lacks it
(it is in the `dev` extra), and uses uv's cache, so a rerun takes seconds.
"""

import importlib.util
import subprocess
import sys

import pytest

from conftest import PATIENCE_S
from prover_cli.on_modal.plan import PYTHON_VERSION, image_specs

# Modal's images: debian-slim (glibc 2.36) on x86_64; manylinux_2_28 wheels run there.
PLATFORM = "x86_64-manylinux_2_28"
SPECS = image_specs("leanprover/lean4:v4.15.0", "v4.15.0")


@pytest.fixture(scope="module")
def uv():
    if importlib.util.find_spec("uv") is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "uv"], check=True)
    return [sys.executable, "-m", "uv"]


@pytest.mark.parametrize("image", sorted(SPECS))
def test_image_python_packages_resolve_for_python_311_on_linux(uv, image, tmp_path):
    requirements = tmp_path / f"{image}.in"
    requirements.write_text("\n".join(SPECS[image].python_packages) + "\n", encoding="utf-8")
    out = subprocess.run([*uv, "pip", "compile", "--python-version", PYTHON_VERSION, "--python-platform", PLATFORM,
                          "--no-header", "--no-annotate", str(requirements)],
                         capture_output=True, text=True, timeout=PATIENCE_S)
    assert "No solution found" not in out.stderr, out.stderr
    assert out.returncode == 0, out.stderr
    resolved = {line.split("==")[0].lower().replace("_", "-") for line in out.stdout.splitlines() if "==" in line}
    for requirement in SPECS[image].python_packages:
        name = requirement.split("==")[0].split("[")[0].lower().replace("_", "-")
        assert name in resolved, f"{requirement} missing from the resolution"


def test_trl_supports_the_pinned_vllm_for_colocated_generation():
    """TRL 1.16 declares colocated vLLM support for 0.22.0-0.31.0 (trl/import_utils.py and its
    `vllm` extra); the GPU image's vllm must sit inside that range."""
    from packaging.version import Version

    [vllm] = [p for p in SPECS["trl"].python_packages if p.startswith("vllm==")]
    assert Version("0.22.0") <= Version(vllm.split("==")[1]) <= Version("0.31.0")
    assert any(p.startswith("trl==1.16") for p in SPECS["trl"].python_packages)
    assert set(SPECS["gpu"].python_packages) <= set(SPECS["trl"].python_packages)  # one set of pins
