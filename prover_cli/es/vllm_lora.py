"""Low-rank ES members as LoRA adapters: a whole iteration's population in one vLLM engine call.

    engine_kwargs(es)                                    # enable_lora, max_loras, max_lora_rank, max_cpu_loras
    members = LoRAMembers(sampler)                       # the loop's VLLMSampler (engine built with engine_kwargs)
    texts = members.completions(task, batch, iteration, range(es.population), es=..., generate=..., run_seed=..., family=...)

With `es.noise = "lora"` (es/noise/lowrank.py) member m's weights are W + c_m A_m B_mᵀ on each attention
and MLP projection (c_m = sign * sigma / √r, A [out, r] and B [in, r] from the member's noise seed
through the integer-hash noise) and the base weights everywhere else. That is a LoRA adapter:
vLLM computes base(x) + scaling * (x lora_Aᵀ) lora_Bᵀ (vllm/lora/layers/base_linear.py at 0.31.0;
`PunicaWrapperCPU` on the CPU build, the Punica kernels on GPU), so each member is written as

    lora_A = B_mᵀ  [r, in]      lora_B = c_m A_m  [out, r]   (fp32; lora_alpha = r, so scaling = alpha / r = 1)

and the engine's own weights stay theta, which the worker extension (es/vllm_worker.py) keeps as
the fp32 master and moves by the update, as for every other noise. The update itself is
`lowrank.update` on that master in fp32 (`ESWorkerExtension.es_lowrank_update`): only generation
goes through LoRA, so the ledger stays (seed, reward) and replay rebuilds final/ bit-exactly on
the transformers path or any other.

How adapters reach the engine: as PEFT-format directories (adapter_config.json,
adapter_model.safetensors) in a local temporary directory (not the run directory, which is a
Volume on Modal: nothing there needs them), each named by its iteration and member and given a
`LoRARequest` id that no other member of the run shares; vLLM's worker reads one when a request
first needs it (vllm/lora/worker_manager.py) and keeps up to `max_cpu_loras` in memory, so an
iteration's directories are deleted once its one `generate` returned. The files are a pure
function of (noise seed, sign, sigma, rank, tensor shapes), never read back by replay. Chosen over
handing tensors to the workers in memory (collective_rpc into vLLM's LoRA manager, whose internals
are not an API): the engine loads them by its own documented path.

What differs from the transformers sampler's one-member-at-a-time path (`lowrank.perturb` writes
cast(W + sigma E) into one weight): the float computation. LoRA adds c (x B) Aᵀ to x Wᵀ in the
engine's dtype, as the transformers batched path does (es/batched.py); greedy completions agree
except where a near-tie flips a token (tests/real_vllm/test_lowrank_lora.py measures it).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from prover_cli.policy import rollout
from prover_cli import streams
from prover_cli.es.noise import lowrank
from prover_cli.es.noise.full import fp32
from prover_cli.es.update import member_noise
from prover_cli.policy.samplers import SamplingParams

if TYPE_CHECKING:
    from prover_cli.config import ESConfig, GenerateConfig
    from prover_cli.tasks import Task

# vLLM 0.31.0's allowed `max_lora_rank` values (vllm/config/lora.py, MaxLoRARanks)
ENGINE_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
PEFT_PREFIX = "base_model.model."   # PEFT's key prefix; vLLM strips it (vllm/lora/utils.py parse_fine_tuned_lora_name)


def engine_rank(rank: int) -> int:
    """The smallest `max_lora_rank` vLLM accepts that holds rank `rank` (smaller adapters are zero-padded)."""
    for allowed in ENGINE_RANKS:
        if rank <= allowed:
            return allowed
    raise ValueError(f"es.rank = {rank}: vLLM's LoRA takes ranks up to {ENGINE_RANKS[-1]}")


def engine_kwargs(es: ESConfig) -> dict[str, Any]:
    """vllm.LLM arguments for `es.noise = "lora"`: every member of an iteration in the engine's LoRA
    slots at once (`max_loras` = population), all of them kept in its CPU cache."""
    return {"enable_lora": True, "max_loras": es.population, "max_lora_rank": engine_rank(es.rank),
            "max_cpu_loras": es.population}


def lora_memory_bytes(shapes: dict[str, Sequence[int]], slots: int, rank: int, dtype_bytes: int) -> int:
    """Bytes of the engine's LoRA slots: per slot and target weight [out, in], lora_A [r, in] and
    lora_B [out, r] at the engine's max_lora_rank (vllm/lora/layers/base_linear.py create_lora_weights)."""
    r = engine_rank(rank)
    return slots * sum((shape[0] + shape[1]) * r for shape in shapes.values()) * dtype_bytes


def target_shapes(checkpoint_dir: str | Path) -> dict[str, list[int]]:
    """{checkpoint name: [out, in]} of the weights `es.noise = "lora"` perturbs, from the
    safetensors headers (no tensor read)."""
    from safetensors import safe_open

    shapes: dict[str, list[int]] = {}
    for file in sorted(Path(checkpoint_dir).glob("*.safetensors")):
        with safe_open(str(file), framework="pt", device="cpu") as handle:
            for name in handle.keys():
                shape = list(handle.get_slice(name).get_shape())
                if lowrank.lora_target(name, len(shape)):
                    shapes[name] = shape
    if not shapes:
        raise ValueError(f"{checkpoint_dir}: no weight of {', '.join(lowrank.LORA_MODULES)} to carry LoRA noise")
    return dict(sorted(shapes.items()))


def adapter_tensors(noise_seed: int, scale32: float, rank: int, shapes: Mapping[str, Sequence[int]]) -> dict[str, Any]:
    """One member's PEFT tensors: lora_A = Bᵀ, lora_B = fp32(scale32 / √r) * A for each target weight (fp32)."""
    coefficient = fp32(scale32 * lowrank.rank_scale(rank))
    out = {}
    for name, shape in shapes.items():
        a, b = lowrank.factors(noise_seed, name, shape, rank)
        module = PEFT_PREFIX + name.removesuffix(".weight")
        out[module + ".lora_A.weight"] = b.t().contiguous()
        out[module + ".lora_B.weight"] = a.mul(coefficient).contiguous()
    return out


def write_adapter(directory: Path, noise_seed: int, scale32: float, rank: int, shapes: Mapping[str, Sequence[int]]) -> Path:
    """A PEFT LoRA directory vLLM loads (vllm/lora/peft_helper.py: r, lora_alpha, target_modules)."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    modules = sorted({name.split(".")[-2] for name in shapes})
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": rank,  # scaling alpha/r = 1
              "target_modules": modules, "bias": "none", "use_rslora": False, "use_dora": False,
              "modules_to_save": None}
    (directory / "adapter_config.json").write_text(json.dumps(config, indent=1) + "\n")
    save_file(adapter_tensors(noise_seed, scale32, rank, shapes), str(directory / "adapter_model.safetensors"),
              metadata={"format": "pt"})
    return directory


class LoRAMembers:
    """An iteration's members as LoRA adapters on one VLLMSampler, generated in one engine call."""

    def __init__(self, sampler: Any, adapter_root: str | Path | None = None):
        """`adapter_root`: where the adapters are written (default: a new temporary directory, removed by `close`)."""
        import tempfile

        self.sampler = sampler
        self._owned = adapter_root is None
        self.root = Path(tempfile.mkdtemp(prefix="prover-lora-") if adapter_root is None else adapter_root)
        self.shapes = target_shapes(sampler._checkpoint_dir())

    def close(self) -> None:
        if self._owned:
            shutil.rmtree(self.root, ignore_errors=True)

    def completions(self, task: Task, batch: list[dict[str, Any]], iteration: int, members: Sequence[int], *,
                    es: ESConfig, generate: GenerateConfig, run_seed: int, family: str) -> list[list[str]]:
        """Each of `members`' completions of `batch`, problem-major, as `member_completions` returns
        them one member at a time (up to near-ties, module docstring); one `generate` for all."""
        from vllm.lora.request import LoRARequest

        params = SamplingParams(n=es.samples_per_problem, temperature=es.member_temperature, top_p=generate.top_p,
                                max_tokens=generate.max_tokens, seed=streams.es_sampling_seed(run_seed, iteration))
        prompts = rollout.prompts(task, batch, self.sampler.tokenizer, family)
        here = self.root / f"iteration-{iteration}"
        requests = []
        try:
            for member in members:
                seed, sign = member_noise(run_seed, iteration, member, es.antithetic)
                path = write_adapter(here / f"member-{member}", seed, sign * fp32(es.sigma), es.rank, self.shapes)
                # an id no other member of the run has: vLLM caches adapters by id
                requests.append(LoRARequest(f"es-{iteration}-{member}", (iteration - 1) * es.population + member + 1,
                                            str(path)))
            outputs = self.sampler.generate(prompts * len(requests), params,
                                            lora_requests=[r for r in requests for _ in prompts])
        finally:
            shutil.rmtree(here, ignore_errors=True)
        width = len(prompts)
        return [rollout.texts(outputs[m * width:(m + 1) * width]) for m in range(len(requests))]
