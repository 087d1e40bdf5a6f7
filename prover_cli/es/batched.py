"""Batched ES members on the transformers sampler: many members in one `generate`, each row with its own member's weights.

    members = BatchedMembers(sampler, weights)                    # the loop's sampler and its NamedWeights
    texts = members.completions(task, batch, iteration, [0, 1, ..., k - 1], es=config.es,
                                generate=config.generate, run_seed=config.run.seed, family=config.model.family)

One member at a time (es/population.py, `member_completions`) writes theta + sign * sigma * eps
into the live model, generates that member's `problems x samples` rows, and restores theta: for a
small model on a CPU with few rows per member, most of that time is the per-step overhead of
`generate`, paid once per member (at 8 rows a member, batching gave 3x). With hundreds of rows a
member, as the demo's 256, one member at a time is already ~90 % bare forward passes, which
full-rank members cannot share, and batching gains little on a CPU (benchmarks/results/
bench-population-42.md, the forward floor). Here k members generate together, k x
`problems x samples` rows in one `generate` call:

- Each member's weights are built exactly as `NamedWeights.perturb` builds them (the same fused
  `perturb_many` of the same fp32 master, stream key and fp32 scale), into one stacked tensor per
  parameter, [k, *shape], in the live dtype. The live model is never written: theta stays as it is.
- Every module that holds parameters directly (Linear, Embedding, the norms) runs through
  `torch.func.vmap` over `functional_call` with the stacked parameters, its input rows split
  member-major ([k x rows] -> [k, rows]); everything else (attention, rotary embedding, the KV
  cache, the sampler's decoding and cutting at the end token) runs on all rows at once, as one batch.
  Each row attends only to itself, so a row's tokens depend on its own member's weights alone.
- Members are greedy (`es.member_temperature = 0`, the default): with sampling, one batch of k
  members would draw other random numbers than k batches of one, and members would no longer
  share their sampling noise, so that is refused.

What may differ from one member at a time: only floating-point rounding inside the batched matrix
products (a linear layer becomes a batched matmul, not the same BLAS call on one weight). Where
two tokens' logits tie to within that rounding, greedy decoding can pick the other one; the test
(tests/test_es_batched.py) checks that every completion of a fixed set on the tiny model is the same.
Replay never regenerates anything: it reads the rewards from the ledger, so a batched run's ledger
replays bit-exactly like any other.

Low-rank members (`es.noise = "lowrank"`, es/noise/lowrank.py): a linear layer's weight is never built
per member. Every row goes through the shared live weight in one product, x Wᵀ, and each member adds
its own rank-r term c_m (x B_m) A_mᵀ (c_m = sign * sigma / √r) and its bias, the EGGROLL form, so the
cost over one member's forward is two thin batched products. The other tensors (embedding, norms,
biases) are stacked as above. That is a different float computation from cast(W + sigma E) in one
weight: greedy completions then agree with one member at a time except where a near-tie flips a
token (tests/test_es_lowrank.py measures the agreement on the tiny model).
"""

from __future__ import annotations

import contextlib
import copy
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from prover_cli.policy import rollout
from prover_cli import streams
from prover_cli.errors import ConfigError
from prover_cli.es.noise import lowrank
from prover_cli.es.noise.full import fp32, perturb_many, stream_key
from prover_cli.es.update import member_noise
from prover_cli.policy.samplers import SamplingParams

if TYPE_CHECKING:
    from prover_cli.config import ESConfig, GenerateConfig


def check_batched(es: ESConfig, generate: GenerateConfig) -> None:
    """ConfigError unless `es.batched_members` can apply with these [es] and [generate] sections
    (run start, before the model loads)."""
    if not es.batched_members:
        return
    if generate.backend != "transformers":
        raise ConfigError(f"es.batched_members = {es.batched_members}: members generate together on the "
                          f"transformers sampler only, and generate.backend = {generate.backend!r}",
                          hint="set es.batched_members = 0, or generate.backend = \"transformers\"")
    if es.member_temperature != 0:
        raise ConfigError(f"es.batched_members = {es.batched_members}: batched members are greedy only "
                          f"(es.member_temperature = {es.member_temperature}): sampled members would no longer "
                          "share one sampling seed", hint="set es.member_temperature = 0, or es.batched_members = 0")


def chunks(members: Sequence[int], size: int) -> list[list[int]]:
    """`members` in consecutive chunks of at most `size`, in order."""
    return [list(members[start:start + size]) for start in range(0, len(members), size)]


class BatchedMembers:
    """Members of an iteration generated together on one transformers sampler (module docstring)."""

    # low-rank members: linear layers as x Wᵀ + c (x B) Aᵀ (False: each member's whole weight, stacked)
    factored = True

    def __init__(self, sampler: Any, weights: Any):
        import torch

        self.sampler, self.weights = sampler, weights
        model = sampler.model
        names = {id(p): name for name, p in model.named_parameters()}  # tied weights: the first name, as NamedWeights
        self.modules: list[tuple[Any, Any, dict[str, str]]] = []  # (module, its twin, {local name: weights name})
        for path, module in model.named_modules():
            direct = dict(module.named_parameters(recurse=False))
            if not direct:
                continue
            if any(True for child in module.children() for _ in child.parameters()):
                raise ConfigError(f"es.batched_members: module {path or type(module).__name__} holds parameters and "
                                  "submodules with parameters; batched members need parameters on leaf modules only",
                                  hint="set es.batched_members = 0 for this model")
            twin = copy.copy(module)  # calls the class's forward, never the batched one installed on `module`
            twin._parameters = dict(module._parameters)
            self.modules.append((module, twin, {local: names[id(p)] for local, p in direct.items()}))
        # linear weights no other module uses (a head tied to the embedding stays stacked: the lookup needs it)
        elsewhere = {name for module, _, mapping in self.modules if type(module) is not torch.nn.Linear
                     for name in mapping.values()}
        self.linear_weights = frozenset(mapping["weight"] for module, _, mapping in self.modules
                                        if type(module) is torch.nn.Linear and "weight" in mapping) - elsewhere
        self._vmap, self._functional_call = torch.func.vmap, torch.func.functional_call

    def stacked(self, seeds_and_scales: Sequence[tuple[int, float]], rank: int | None = None,
                skip: frozenset = frozenset()) -> dict[str, Any]:
        """{name: [k, *shape] tensor}: row m is cast(master + scale_m * eps(seed_m)) in the live dtype,
        bit for bit what `NamedWeights.perturb(seed_m, scale_m)` writes into the live model (with
        `rank`, what the low-rank `lowrank.perturb(weights, seed_m, scale_m, rank)` writes). `skip`:
        names left out (the low-rank linear weights, which `factors` gives instead)."""
        import torch

        base, dtypes = self.weights.base, self.weights.live_dtypes
        base = {name: master for name, master in base.items() if name not in skip}
        out = {name: torch.empty((len(seeds_and_scales), *master.shape), dtype=dtypes[name], device=master.device)
               for name, master in base.items()}
        for m, (seed, scale32) in enumerate(seeds_and_scales):
            if rank is None:
                perturb_many([(master, stream_key(seed, name), out[name][m]) for name, master in base.items()], scale32)
                continue
            for name, master in base.items():
                out[name][m].copy_(master.to(torch.float32) + lowrank.member_noise(seed, name, master, rank).mul_(scale32))
        return out

    def factors(self, seeds_and_scales: Sequence[tuple[int, float]], rank: int) -> dict[str, tuple[Any, Any, Any]]:
        """{linear weight name: (B [k, in, r], Aᵀ [k, r, out], c [k, 1, 1])}: member m's weight is
        W + c_m A_m B_mᵀ with c_m = scale_m / √r (es/noise/lowrank.py), in the weight's dtype."""
        import torch

        out = {}
        for name in sorted(self.linear_weights):
            master, dtype = self.weights.base[name], self.weights.live_dtypes[name]
            pairs = [lowrank.factors(seed, name, master.shape, rank, master.device) for seed, _ in seeds_and_scales]
            coefficients = torch.tensor([fp32(scale * lowrank.rank_scale(rank)) for _, scale in seeds_and_scales],
                                        dtype=torch.float32, device=master.device).view(-1, 1, 1)
            out[name] = (torch.stack([b for _, b in pairs]).to(dtype), torch.stack([a.t() for a, _ in pairs]).to(dtype),
                         coefficients.to(dtype))
        return out

    @contextlib.contextmanager
    def installed(self, stacked: dict[str, Any], members: int,
                  factored: dict[str, tuple[Any, Any, Any]] | None = None) -> Iterator[None]:
        """Every parameter-holding module of the model runs with `stacked` (member-major rows) inside;
        a linear layer whose weight is in `factored` computes x Wᵀ + c (x B) Aᵀ (+ its member's bias)."""
        vmap, functional_call = self._vmap, self._functional_call

        def batched(twin: Any, params: dict[str, Any], low: tuple[Any, Any, Any] | None):
            if low is not None:
                return _factored_forward(twin, low, params.get("bias"), members)
            kind = _kind(twin, params)
            if kind == "linear":  # [k, in, out], contiguous: bmm's fast layout, made once per call
                params = {**params, "weight": params["weight"].transpose(1, 2).contiguous()}

            def forward(x: Any, *args: Any, **kwargs: Any) -> Any:
                rows = x.shape[0]
                if rows % members:
                    raise RuntimeError(f"batched members: {rows} rows are not {members} members' equal shares")
                split = x.reshape(members, rows // members, *x.shape[1:])
                if kind == "linear" and not args and not kwargs:
                    out = _linear(split, params["weight"], params.get("bias"))
                elif kind == "embedding" and not args and not kwargs:
                    out = _embedding(twin, split, params["weight"])
                elif kind == "scale" and not args and not kwargs:  # weight * f(x): broadcast each member's
                    weight = params["weight"]
                    twin._parameters["weight"] = weight.view(members, *([1] * (split.dim() - 2)), *weight.shape[1:])
                    out = twin(split)
                else:  # any other module: vmap over functional_call of its own forward
                    out = vmap(lambda p, xm: functional_call(twin, p, (xm, *args), kwargs))(params, split)
                return out.reshape(rows, *out.shape[2:])

            return forward

        try:
            for module, twin, mapping in self.modules:
                low = (factored or {}).get(mapping.get("weight", ""))
                module.forward = batched(twin, {local: stacked[name] for local, name in mapping.items()
                                                if name in stacked}, low)
            yield
        finally:
            for module, twin, _ in self.modules:
                module.__dict__.pop("forward", None)
                twin._parameters = dict(module._parameters)  # holds no member's weights after the call

    def completions(self, task: Any, batch: list[dict[str, Any]], iteration: int, members: Sequence[int], *,
                    es: ESConfig, generate: GenerateConfig, run_seed: int, family: str) -> list[list[str]]:
        """Each of `members`' completions of `batch`, problem-major, as `member_completions` returns
        them one member at a time (up to ties, module docstring): one `generate` call for all.
        `es`, `generate`: the config's sections; `family`: model.family."""
        params = SamplingParams(n=es.samples_per_problem, temperature=es.member_temperature, top_p=generate.top_p,
                                max_tokens=generate.max_tokens, seed=streams.es_sampling_seed(run_seed, iteration))
        scales = []
        for member in members:
            seed, sign = member_noise(run_seed, iteration, member, es.antithetic)
            scales.append((seed, sign * fp32(es.sigma)))
        prompts = rollout.prompts(task, batch, self.sampler.tokenizer, family)
        if es.noise == "lowrank" and self.factored:  # the shared product x Wᵀ, then each member's rank-r term
            factored = self.factors(scales, es.rank)
            stacked = self.stacked(scales, es.rank, skip=frozenset(factored))
        else:
            factored, stacked = None, self.stacked(scales, es.rank if es.noise == "lowrank" else None)
        with self.installed(stacked, len(members), factored), self._one_batch(len(prompts) * len(members)):
            outputs = self.sampler.generate(prompts * len(members), params)
        width = len(prompts)
        return [rollout.texts(outputs[m * width:(m + 1) * width]) for m in range(len(members))]

    @contextlib.contextmanager
    def _one_batch(self, prompts: int) -> Iterator[None]:
        """The sampler generates all rows in one call: its batches would otherwise split a member's rows."""
        before = self.sampler.batch_size
        self.sampler.batch_size = prompts
        try:
            yield
        finally:
            self.sampler.batch_size = before


def _kind(module: Any, params: dict[str, Any]) -> str:
    """"linear", "embedding" or "scale" for the layers the fast paths below compute; else "other"."""
    import torch

    if type(module) is torch.nn.Linear and set(params) <= {"weight", "bias"}:
        return "linear"
    if (type(module) is torch.nn.Embedding and set(params) == {"weight"} and module.max_norm is None
            and not module.scale_grad_by_freq and not module.sparse):
        return "embedding"
    if type(module).__name__ in SCALE_NORMS and set(params) == {"weight"} and params["weight"].dim() == 2:
        return "scale"
    return "other"


# RMS norms whose forward is `self.weight * g(x)` with g acting on each row's last dimension alone
# (transformers' modeling_qwen2.py, modeling_llama.py, modeling_mistral.py, at transformers 5.25):
# given each member's weight broadcast over its rows, one call is every member's.
SCALE_NORMS = frozenset({"Qwen2RMSNorm", "LlamaRMSNorm", "MistralRMSNorm"})


def _linear(x: Any, weight_t: Any, bias: Any) -> Any:
    """x [k, rows..., in] with weight_t [k, in, out] (bias [k, out]): each member's F.linear, one batched matmul."""
    import torch

    flat = x.reshape(x.shape[0], -1, x.shape[-1])
    out = torch.bmm(flat, weight_t) if bias is None else torch.baddbmm(bias.unsqueeze(1), flat, weight_t)
    return out.reshape(*x.shape[:-1], weight_t.shape[2])


def _embedding(module: Any, ids: Any, weight: Any) -> Any:
    """ids [k, rows...] looked up in each member's own table, weight [k, vocab, dim]: one gather
    (`padding_idx` changes only the gradient, never the forward lookup)."""
    import torch

    k, vocab = weight.shape[0], weight.shape[1]
    offsets = (torch.arange(k, device=ids.device) * vocab).view(k, *([1] * (ids.dim() - 1)))
    return torch.nn.functional.embedding(ids + offsets, weight.reshape(k * vocab, -1))


def _factored_forward(twin: Any, low: tuple[Any, Any, Any], bias: Any, members: int):
    """A linear layer's forward for k members at once, from the shared weight and each member's factors."""
    import torch

    b, a_t, coefficients = low
    weight = twin.weight  # the live weight: cast(theta), shared by every member

    def forward(x: Any, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs:
            raise RuntimeError("batched low-rank members: a linear layer called with extra arguments")
        rows = x.shape[0]
        if rows % members:
            raise RuntimeError(f"batched members: {rows} rows are not {members} members' equal shares")
        flat = x.reshape(members, -1, x.shape[-1])
        out = torch.nn.functional.linear(flat.reshape(-1, x.shape[-1]), weight).view(members, flat.shape[1], -1)
        out.add_(torch.bmm(torch.bmm(flat, b), a_t).mul_(coefficients))
        if bias is not None:
            out.add_(bias.unsqueeze(1))
        return out.reshape(*x.shape[:-1], out.shape[-1])

    return forward
