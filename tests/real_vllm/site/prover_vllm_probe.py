"""Test-only worker extension: ES's own (prover_cli.es.vllm_worker.ESWorkerExtension, unchanged)
plus read-only probes of the engine's live weights, for the real-vLLM tests. It lives beside
sitecustomize.py because vLLM imports it by name in its spawned worker process (PYTHONPATH)."""

from __future__ import annotations

import hashlib

from prover_cli.es.vllm_worker import ESWorkerExtension


class ProbeExtension(ESWorkerExtension):
    def probe_digests(self) -> dict[str, list]:
        """{engine parameter name: [shape, dtype, sha256 of its bytes]}, aliases once."""
        import torch

        out = {}
        for name, parameter in self.model_runner.model.named_parameters():
            tensor = parameter.detach().contiguous().cpu()
            out[name] = [list(tensor.shape), str(tensor.dtype).removeprefix("torch."),
                         hashlib.sha256(tensor.view(-1).view(torch.uint8).numpy().tobytes()).hexdigest()]
        return out

    def probe_load_alone(self, name: str) -> str:
        """What the engine's own `load_weights` says to one tensor sent alone ("" if it took it)."""
        parameter = dict(self.model_runner.model.named_parameters(remove_duplicate=False))[name]
        try:
            self.model_runner.model.load_weights([(name, parameter.detach().clone())])  # its own value: harmless if taken
        except Exception as exc:  # the message is the finding
            return f"{type(exc).__name__}: {exc}"
        return ""
