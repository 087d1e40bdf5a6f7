"""Test-only, on PYTHONPATH for the real-vLLM tests' processes alone (tests/real_vllm/conftest.py):
installs prover_vllm_keep_weights (its docstring says what and why) when the harness asks for it."""

import os

if os.environ.get("PROVER_TEST_VLLM_CPU_KEEP_WEIGHTS") == "1":
    import prover_vllm_keep_weights

    prover_vllm_keep_weights.install()
