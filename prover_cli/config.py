"""One TOML config, typed and validated on load.

Each TOML section is one dataclass below; each field documents itself once, beside it, through
`_key(default, doc, ...)`. `docs/config.md` is generated from these (`python -m prover_cli.docgen`)
and a test fails when it drifts. Loading rejects unknown keys, wrong types and out-of-range
values with an error that names the file, the key, the value and what is allowed:

    configs/x.toml: es.population = -4: must be >= 2

`--set section.key=value` overrides any key after the file is read (value parsed as TOML, else
taken as a string), and is validated the same way; its errors name the `--set` as typed:

    --set es.sigma=nan: must be a finite number

Every number must be finite: `nan` never, `inf` only where a key documents it as "no limit".
Cross-key errors say where each value came from (`--set`, the file, or the default).

A task's own options are not here: the task declares them (prover_cli/tasks, `Option`) and a
config sets them in the task's table, `[task.<name>]` (`--set task.<name>.<option>=value`),
checked by the same rules once `data.task` (and `data.task_module`) are known (`_task_tables`).
A key an option replaced (`renamed`) is refused with its new name.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import re
import sys
import types
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

from prover_cli.errors import ConfigError
from prover_cli.fsio.jsonl import read_whole
from prover_cli.tasks import BUILTIN as BUILTIN_TASKS
from prover_cli.tasks import check_task, generates_problems, renamed_key, task_names, task_options
from prover_cli.training.tracking import parse_report_to  # stdlib only: no tracker is imported here
from prover_cli.verify.kernel.pins import policy_problem  # no Lean, no heavy import
from prover_cli.verify.text.allowlist import ALLOWED_COMMANDS, COMMAND_KEYWORDS, COMMAND_PREFIXES  # no Lean

DEFAULT_MODEL = "AI-MO/Kimina-Prover-Preview-Distill-1.5B"
# `data.preset`'s layouts: prover_cli/tasks/datasets.py's PRESETS and aliases (tests/test_config.py keeps them one).
DATA_LAYOUTS = ("auto", "deepseek", "minif2f", "goedel-v2", "lean-workbook", "putnambench", "problems")
# Bounds where a library would overflow (docs/config.md gives them per key).
INT64_MAX = 2**63 - 1               # TOML integers are 64-bit; every integer key stays inside
SEED_MAX = 2**32 - 1                # numpy's seed range (transformers' set_seed feeds it run.seed)
TIMEOUT_MAX_S = 1e6                 # poll() takes an int of milliseconds
MEMORY_LIMIT_MAX_GB = float(2**20)  # RLIMIT_AS is a 64-bit byte count
MAX_LINE_BYTES_MAX = 2**32
ES_SCALE_MIN, ES_SCALE_MAX = 1e-30, 1e3   # fp32 neither flushes it to 0 nor overflows sigma*eps in fp16
GRPO_LR_MAX = 1.0                   # AdamW moves every weight by about lr per step: above 1 nothing fine-tunes
# Sizes a run can hold (docs/config.md gives them per key): beyond them a run never finishes an iteration.
ES_POPULATION_MAX = 2**16           # every ledger record holds one reward per member (~200 KB per iteration here)
PROBLEMS_PER_ITERATION_MAX = 2**20  # above the largest training split prover reads (Lean Workbook: ~140k)
WORKERS_MAX = 1024                  # processes (a Lean REPL: GiBs each) or requests at once; no machine holds more

DEFAULT_HEADER = (
    "import Mathlib\nimport Aesop\n\nset_option maxHeartbeats 400000\n\n"
    "open BigOperators Real Nat Topology Rat\n"
)


def _key(default: Any, doc: str, *, choices: tuple | None = None, min: float | None = None,
         max: float | None = None, min_exclusive: bool = False, allow_inf: bool = False) -> Any:
    """A config field: default, one-line doc, and the range or choices it accepts.

    Floats must be finite; `allow_inf=True` lets a key take `inf`, which its doc must explain
    (e.g. "inf = no limit"). NaN is never accepted."""
    meta = {"doc": doc, "choices": choices, "min": min, "max": max, "min_exclusive": min_exclusive,
            "allow_inf": allow_inf}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


# --------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------

@dataclass
class ModelConfig:
    """The policy model: what to load and how."""

    name: str = _key(DEFAULT_MODEL, "Hugging Face model id, a local model directory, `tiny` "
                     "(a tiny random Qwen2-style model built offline into `cache_dir`, for CPU tests), or `tiny-countdown` "
                     "(that model after a short supervised warm-start on countdown, also built offline: the demo's base).")
    revision: str = _key("main", "Hub revision (branch, tag or commit) to load; pin a commit for reproducible runs.")
    dtype: str = _key("auto", "Weights dtype: `auto` (bfloat16 on CUDA, float32 on CPU), `float32`, `bfloat16`, `float16`.",
                      choices=("auto", "float32", "bfloat16", "float16"))
    device: str = _key("auto", "Where the transformers sampler runs: `auto` (CUDA if present), `cpu`, `cuda`.",
                       choices=("auto", "cpu", "cuda"))
    family: str = _key("auto", "Prompt template family (docs/eval.md): `auto` (from the model name, says which it "
                       "chose), `deepseek-v1.5`, `deepseek-v1.5-cot`, `deepseek-v2`, `deepseek-v2-noncot`, `goedel-v1`, "
                       "`goedel-v2`, `kimina-preview`, `kimina-prover`, `plain`; `kimina` and `deepseek` are aliases of "
                       "`kimina-preview` and `deepseek-v1.5`.",
                       choices=("auto", "deepseek-v1.5", "deepseek-v1.5-cot", "deepseek-v2", "deepseek-v2-noncot",
                                "goedel-v1", "goedel-v2", "kimina-preview", "kimina-prover", "plain", "kimina",
                                "deepseek"))
    cache_dir: str = _key(".prover-cache", "Where built artifacts (the tiny model) are kept.")
    tiny_seed: int = _key(0, "Seed of the tiny random model's weights (only for `name = \"tiny\"`).", min=0, max=SEED_MAX)


@dataclass
class DataConfig:
    """Problems: where they come from and how they are split."""

    # No `choices`: the registry's names are checked once every key is read (`_task_rule`), after data.task_module.
    task: str = _key("lean", "Task (docs/tasks.md): "
                     + ", ".join(f"`{name}` ({about})" for name, (_, about) in BUILTIN_TASKS.items())
                     + ", or one registered by the module `data.task_module` names.")
    task_module: str = _key("", "A Python module to import before `data.task` is looked up (dotted, e.g. `my_pkg.my_task`; "
                            "installed or on PYTHONPATH), which registers a task from outside prover with `register_task` "
                            "(docs/tasks.md). Empty: only the built-in tasks.")
    source: str = _key("", "Dataset for `prepare-data`: a Hugging Face dataset id, a local JSON/JSONL/Parquet file, "
                       "or `examples` (the few Lean problems shipped with prover). Empty: use `problems` as is.")
    # Checked with data.task (`_task_rule`): a layout, or a task that generates its problems.
    preset: str = _key("auto", "Layout of `source` (docs/formats.md): `auto` (detected), `deepseek` (miniF2F, ProofNet, "
                       "Goedel-V1 files; alias `minif2f`), `goedel-v2` (its miniF2F, MOBench), `lean-workbook`, "
                       "`putnambench` (a directory of `.lean` files), `problems` (our own schema); or the name of a task "
                       "that generates its problems from `run.seed` (no source; docs/tasks.md).")
    problems: str = _key("", "Path of problems.jsonl. Empty: `<run.dir>/problems.jsonl`.")
    train_split: str = _key("train", "Split the trainers draw problems from (miniF2F has `valid` and `test`).")
    valid_split: str = _key("valid", "Split of the held-out problems both trainers evaluate on every `run.eval_every` "
                            "iterations (never trained on).")
    valid_fraction: float = _key(0.1, "Fraction put in `valid` by the seeded split, for sources without splits.", min=0.0, max=1.0)
    dedupe: bool = _key(True, "Drop problems whose whitespace-normalized statement was already seen.")
    status: str = _key("any", "Lean Workbook filter on the `status` column: `any`, `proved`, `unproved`.",
                       choices=("any", "proved", "unproved"))
    limit: int = _key(0, "Keep at most this many problems (0 = all).", min=0)
    train_size: int = _key(0, "Training-set size, the limited-data axis: train on this many `data.train_split` problems "
                           "(0 = all), a subset drawn from `run.seed` (nested: a seed's 16 are among its 64). The "
                           "held-out set does not change with it; `prover report` keeps each size an arm of its own.",
                           min=0)
    fill_answers: bool = _key(False, "PutnamBench: fill each `abbrev …_solution := sorry` with the answer recorded in "
                              "the comment under it (proof-only evaluation). Off: such problems are reported as "
                              "needing an answer and not kept (a `sorry` never enters a trusted header).")


@dataclass
class GenerateConfig:
    """Sampling proofs (used by `generate`, `eval` and the ES sampler)."""

    backend: str = _key("transformers", "Sampler: `transformers` (CPU or GPU) or `vllm` (GPU extra).",
                        choices=("transformers", "vllm"))
    n: int = _key(8, "Samples per problem.", min=1)
    temperature: float = _key(1.0, "Sampling temperature; 0 means greedy.", min=0.0)
    top_p: float = _key(0.95, "Nucleus sampling mass.", min=0.0, max=1.0, min_exclusive=True)
    max_tokens: int = _key(8192, "Maximum new tokens per sample.", min=1)
    seed: int = _key(0, "Sampling seed (combined with the problem and sample index).", min=0, max=SEED_MAX)
    batch_size: int = _key(16, "Prompts per transformers `generate` call.", min=1)
    split: str = _key("", "Only generate for problems of this split (empty = all).")
    gpu_memory_utilization: float = _key(0.85, "vLLM: fraction of GPU memory the engine may take.", min=0.05, max=1.0)
    max_model_len: int = _key(0, "vLLM: context length (0 = the model's own).", min=0)


@dataclass
class VerifyConfig:
    """Lean verification: the reward. See docs/verify.md for the verdict rules."""

    backend: str = _key("repl", "Engine: `repl` (a pool of leanprover-community/repl processes) or `kimina` (a Kimina Lean Server).",
                        choices=("repl", "kimina"))
    repl_command: list[str] = _key(["lake", "env", "repl"], "argv that starts one Lean REPL, run in `project_dir`.")
    project_dir: str = _key("", "Lake project with Mathlib where `repl_command` runs (empty = current directory).")
    box: str = _key("bubblewrap", "Where the local processes that elaborate untrusted text (the REPLs, the kernel "
                    "stage's `lean -o` and checker) run: `bubblewrap` (in a `bwrap` box: no network, the toolchain "
                    "and `project_dir` read-only, only their own temporary directory writable; verification refuses "
                    "to run when `bwrap` is missing or cannot make the box) or `none` (unboxed, the explicit opt-out: "
                    "a proof that escapes the verdict rules runs code as you). Not used by `--backend modal` (its "
                    "Sandboxes isolate) nor by the Kimina server's REPLs; see docs/verify.md, *The box*.",
                    choices=("bubblewrap", "none"))
    header: str = _key(DEFAULT_HEADER, "Header used when a proof has none; run once per REPL process.")
    workers: int = _key(4, "REPL processes in the pool (with `backend = \"kimina\"`: requests at once); at most "
                        "1024, already more Lean processes (GiBs each) than one machine holds.", min=1, max=WORKERS_MAX)
    timeout_s: float = _key(60.0, "Wall-clock limit per proof, seconds (at most 10^6: a deadline `poll` can wait for).", min=0.0, min_exclusive=True, max=TIMEOUT_MAX_S)
    header_timeout_s: float = _key(600.0, "Wall-clock limit for running the header (`import Mathlib`), seconds (at most 10^6).", min=0.0, min_exclusive=True, max=TIMEOUT_MAX_S)
    memory_limit_gb: float = _key(16.0, "Address-space limit per REPL process, GiB (0 = none; at most 2^20, a limit the kernel can hold in bytes); it counts the memory-mapped Mathlib .olean files (several GiB), so keep it well above their size.", min=0.0, max=MEMORY_LIMIT_MAX_GB)
    max_proofs_per_process: int = _key(200, "Recycle a REPL process after this many proofs (Lean leaks memory).", min=1)
    allowed_axioms: list[str] = _key(["propext", "Classical.choice", "Quot.sound"],
                                     "Axioms a verified proof may depend on (`#print axioms`).")
    allow_native_decide: bool = _key(False, "Accept `native_decide` (trusts the compiler): adds the axioms native evaluation produces on the supported Lean versions (`Lean.ofReduceBool`, `Lean.trustCompiler`, and from Lean 4.29 `<decl>._native.native_decide.ax_…`) to the allowed axioms; see docs/verify.md.")
    allow_commands: list[str] = _key([], "Command keywords untrusted text may use beyond the allowlist (`theorem`, `lemma`, `set_option <resource limit> … in`), e.g. [\"open\"]: keywords the allowlist knows, `@[`, `#` commands (an unknown name is an error). Each widens what a proof can change; see docs/verify.md for the risk.")
    canary: bool = _key(True, "Before the first proof on a toolchain (cached per toolchain), run the built-in canary: honest proofs that must verify and one cheat per rule that must be rejected; refuse to verify if any comes out wrong. `prover doctor` always runs it.")
    kernel_check: bool = _key(True, "Second stage for every proof the fast path calls verified: elaborate it again with "
                              "`lean -o` in a fresh process and re-check the .olean with the checker pinned for the "
                              "toolchain (`prover_check`, Lean 4.9-4.21) in another: lean4checker's kernel replay, the target's type against the trusted "
                              "statement's, its axioms. Only a proof that passes both is `verified`. false: a warning "
                              "in the summary, recorded in every verdict's `verifier` and the policy digest; see "
                              "docs/verify.md.")
    lean_command: list[str] = _key(["lake", "env", "lean"], "argv of `lean` for the kernel stage (`-o` is added), run in "
                                   "`project_dir`.")
    kernel_checker_command: list[str] = _key(["lake", "env", "{checker}"],
                                             "argv of the kernel checker pinned for `lean_toolchain`, run in "
                                             "`project_dir`; `{checker}` becomes its program: `prover_check` (ours, on "
                                             "lean4checker, Lean 4.9-4.21; Lean 4.27/4.29 are refused, docs/verify.md); "
                                             "`prover doctor` checks it.")
    kernel_batch_size: int = _key(32, "Proofs one `prover_check` process checks (it imports the header once per "
                                  "process, then checks each proof against it). "
                                  "A batch whose process fails is split until each proof has its own verdict.",
                                  min=1, max=4096)
    kernel_check_workers: int = _key(0, "Kernel-stage steps at a time (`lean -o` of one proof, or one checker "
                                     "process: a batch with `prover_check`; on Modal a "
                                     "fresh Sandbox each); 0 = verify.workers; at most 1024.",
                                     min=0, max=WORKERS_MAX)
    kernel_check_timeout_s: float = _key(600.0, "Wall-clock limit for each kernel-stage process (`lean -o` of one proof, "
                                         "one checker run), seconds; each imports the header (Mathlib) afresh.",
                                         min=0.0, min_exclusive=True)
    max_proof_chars: int = _key(200000, "Longest untrusted text (a proof, or a completion's lean block) checked, characters; longer is `rejected` before Lean.", min=1)
    kimina_url: str = _key("http://localhost:8000", "Kimina Lean Server URL (backend `kimina`).")
    kimina_api_key_env: str = _key("", "Name of the environment variable holding the Kimina server's API key, sent as "
                                   "`Authorization: Bearer <key>` (empty = no key).")
    kimina_batch_size: int = _key(8, "Proofs per Kimina request; a request the server answers with HTTP 500 is "
                                  "retried proof by proof.", min=1)
    kimina_max_repls: int = _key(0, "REPLs the Kimina server runs (its LEAN_SERVER_MAX_REPLS; the server's default is its CPU "
                                 "count - 1): proofs in flight over all requests never exceed it, because a proof that "
                                 "waits over 60 s for a REPL fails its request with HTTP 429. 0 = unknown (the server's "
                                 "/health does not report it): `verify.workers` proofs at a time.", min=0)
    lean_toolchain: str = _key("leanprover/lean4:v4.15.0", "Lean toolchain of the verifier (recorded in verdicts; used by the Modal image).")
    mathlib_rev: str = _key("v4.15.0", "Mathlib revision of the verifier (recorded in verdicts; used by the Modal image).")


@dataclass
class ESConfig:
    """Evolution Strategies. Defaults from the ES-at-scale paper (population 30, sigma 1e-3, lr 5e-4, z-score)."""

    population: int = _key(30, "Members per iteration (with `antithetic`, an even number: +eps/-eps pairs); at most "
                           "2^16 = 65536, as every ledger record holds one reward per member.", min=2,
                           max=ES_POPULATION_MAX)
    sigma: float = _key(1e-3, "Noise scale of each perturbation (applied in fp32: 1e-30 to 1e3, so sigma * eps neither "
                        "rounds to 0 nor overflows fp16/bf16 weights).", min=ES_SCALE_MIN, max=ES_SCALE_MAX)
    learning_rate: float = _key(5e-4, "Step size of the update theta += lr * mean(f_i * eps_i) (an fp32 coefficient: "
                                "1e-30 to 1e3).", min=ES_SCALE_MIN, max=ES_SCALE_MAX)
    antithetic: bool = _key(True, "Evaluate +eps and -eps pairs (lower-variance gradient estimate).")
    fitness_shaping: str = _key("zscore", "Reward normalisation: `zscore` or `centered_rank`.",
                                choices=("zscore", "centered_rank"))
    iterations: int = _key(100, "ES iterations.", min=1)
    problems_per_iteration: int = _key(8, "Problems every member of an iteration is scored on (at most 2^20, and at "
                                       "most the size of `data.train_split`, checked when a run starts).", min=1,
                                       max=PROBLEMS_PER_ITERATION_MAX)
    samples_per_problem: int = _key(1, "Samples per problem per member.", min=1)
    snapshot_every: int = _key(0, "Also save the weights every K iterations so replay can start there (0 = never).", min=0)
    member_temperature: float = _key(0.0, "Sampling temperature members are scored with; 0 = greedy, as in the ES-at-scale "
                                     "paper (with `generate.top_p` when > 0; one sampling seed per iteration for all "
                                     "members either way). Recorded in the ledger as `sampling.temperature`; "
                                     "docs/ledger.md gives the evidence for the default.", min=0.0)
    shuffle_rewards: bool = _key(False, "Null control: permute the members' rewards within each iteration (a seeded "
                                 "permutation) before the update, so the update is noise with the real rewards' "
                                 "spread: what \"no learning\" looks like on your setup. The ledger keeps the true rewards.")
    batched_members: int = _key(0, "Members that generate together in one batched `generate` call, each row with its own "
                                "member's weights (es/batched.py; transformers sampler, greedy members, this process's "
                                "loop); 0 = one member at a time. Faster for small models; a completion may differ from "
                                "the one-at-a-time one only where a float tie flips a token. The ledger is the same format "
                                "and replays bit-exactly.", min=0)
    noise: str = _key("full", "Each member's perturbation: `full` (integer-hash noise on every weight) or `lowrank` "
                      "(each matrix perturbed by A B^T / sqrt(rank), A and B from the member's seed through the same "
                      "noise; es/noise/lowrank.py, EGGROLL). `lowrank` is recorded in the ledger and needs the transformers "
                      "sampler. `lora`: the same on the attention and MLP projection weights only, nothing else "
                      "perturbed, so each member is a LoRA adapter and vLLM generates the whole population in one "
                      "engine call (es/vllm_lora.py); both samplers.", choices=("full", "lowrank", "lora"))
    rank: int = _key(1, "Rank r of `lowrank` perturbations (ignored with `full`).", min=1)


@dataclass
class GRPOConfig:
    """GRPO through TRL's GRPOTrainer. Every value the reference work depends on is set explicitly."""

    steps: int = _key(100, "Optimizer steps (TRL `max_steps`).", min=1)
    num_generations: int = _key(8, "Completions per prompt (the group).", min=2)
    per_device_train_batch_size: int = _key(8, "Completions per device per step; times gradient_accumulation_steps it must be a multiple of num_generations (whole groups).", min=1)
    gradient_accumulation_steps: int = _key(1, "Gradient accumulation steps.", min=1)
    learning_rate: float = _key(1e-6, "AdamW learning rate (at most 1: AdamW moves every weight by about this much "
                                "per step, so above it training only diverges).", min=0.0, min_exclusive=True,
                                max=GRPO_LR_MAX)
    beta: float = _key(0.0, "KL coefficient; > 0 loads a reference model.", min=0.0)
    epsilon: float = _key(0.2, "PPO-style clipping range.", min=0.0, min_exclusive=True)
    loss_type: str = _key("grpo", "Loss aggregation: `grpo`, `dr_grpo`, `dapo`, `bnpo`.",
                          choices=("grpo", "dr_grpo", "dapo", "bnpo"))
    scale_rewards: str = _key("group", "Reward scaling: `group` (std of the group), `batch`, `none`.",
                              choices=("group", "batch", "none"))
    max_completion_length: int = _key(4096, "Maximum completion tokens.", min=1)
    temperature: float = _key(1.0, "Sampling temperature during training.", min=0.0, min_exclusive=True)
    use_vllm: bool = _key(False, "Generate with vLLM (colocate mode) instead of transformers.")
    vllm_gpu_memory_utilization: float = _key(0.3, "vLLM colocate: GPU memory fraction for the engine.", min=0.05, max=1.0)
    save_every: int = _key(50, "Checkpoint (weights, optimizer, scheduler, RNG) into `<run.dir>/checkpoints/` every this many "
                           "steps, keeping the last 2, for `--resume`; 0 = never.", min=0)
    shuffle_rewards: bool = _key(False, "Null control: permute the rewards within each prompt's group of completions (a "
                                 "seeded permutation) before TRL computes advantages, so the step follows no signal; "
                                 "metrics.jsonl keeps the true rewards.")
    fp32_master: bool = _key(True, "With `model.dtype` bfloat16/float16: train fp32 master weights (fp32 parameters, gradients and "
                             "AdamW state; forward/backward under autocast in the model dtype; `final/` in fp32). false: "
                             "AdamW updates the low-precision weights directly (half the memory; small steps round away).")


@dataclass
class EvalConfig:
    """`prover eval`: generate + verify + pass@k."""

    split: str = _key("test", "Split to evaluate (miniF2F: `test` or `valid`).")
    n: int = _key(32, "Samples per problem.", min=1)
    k: list[int] = _key([1, 8, 32], "k values of pass@k (each <= n).")
    problems: str = _key("", "Problems to evaluate (empty = `data.problems`).")
    plot: bool = _key(True, "Write a pass@k PNG into the run directory.")


@dataclass(frozen=True)
class ModalGpu:
    """One GPU type Modal rents: its list price and this project's decode-speed estimate."""

    usd_per_s: float                 # Modal's list price per GPU-second
    est_decode_tokens_per_s: float   # one sequence of a 1.5B model in a batch (an estimate, not measured)

    @property
    def usd_per_hour(self) -> float:
        return self.usd_per_s * 3600


# `modal.gpu`: the GPU types Modal accepts (its `gpu=` strings), each with Modal's list price per
# GPU-second (https://modal.com/pricing, as listed in May 2026; H100 0.001097 USD/s = 3.9492 USD/h)
# and a decode-speed estimate: 100 tokens/s on an H100 (the `modal.est_decode_tokens_per_s` guess
# the plan has always used), scaled for the others by their memory bandwidth (decoding a small
# model is bandwidth-bound). Not measured on any of them: measure one iteration and set
# `modal.est_decode_tokens_per_s`. `modal.gpu_price_per_hour` overrides the price (e.g. a discount).
MODAL_GPUS: dict[str, ModalGpu] = {
    "T4": ModalGpu(0.000164, 10.0),          # 320 GB/s
    "L4": ModalGpu(0.000222, 9.0),           # 300 GB/s
    "A10G": ModalGpu(0.000306, 18.0),        # 600 GB/s
    "L40S": ModalGpu(0.000542, 26.0),        # 864 GB/s
    "A100": ModalGpu(0.000583, 46.0),        # Modal's "A100" is the 40 GB one: 1.56 TB/s
    "A100-40GB": ModalGpu(0.000583, 46.0),
    "A100-80GB": ModalGpu(0.000694, 60.0),   # 2.0 TB/s
    "H100": ModalGpu(0.001097, 100.0),       # 3.35 TB/s: the reference
    "H200": ModalGpu(0.001261, 143.0),       # 4.8 TB/s
    "B200": ModalGpu(0.001736, 240.0),       # 8 TB/s
}
GPU_CONTAINER_CPUS_MAX = 256.0      # sanity bounds; Modal refuses, at function creation, what no worker holds
GPU_CONTAINER_MEMORY_GB_MAX = 2048


@dataclass
class ModalConfig:
    """`--backend modal`: the cloud resources. Prices are for `--dry-run` cost estimates only."""

    app_name: str = _key("prover", "Modal app name.")
    gpu: str = _key("H100", "GPU type of every GPU container (generation, ES loop and members, GRPO, eval, "
                    "doctor); prices and decode speeds per type: `MODAL_GPUS` in prover_cli/config.py.",
                    choices=tuple(MODAL_GPUS))
    gpus_per_container: int = _key(1, "GPUs per generation/ES container.", min=1, max=8)
    gpu_container_cpus: float = _key(8.0, "CPU cores reserved by every container of the gpu and trl images (they "
                                     "stage the weights, tokenize, run the engine's CPU side); billed, used or not.",
                                     min=0.125, max=GPU_CONTAINER_CPUS_MAX)
    gpu_container_memory_gb: int = _key(64, "Memory reserved by every container of the gpu and trl images, GiB "
                                        "(host RAM for the weights and the engine); billed, used or not.",
                                        min=1, max=GPU_CONTAINER_MEMORY_GB_MAX)
    max_containers: int = _key(30, "Upper bound on parallel GPU containers (ES: one per member).", min=1)
    es_member_gpus: int = _key(0, "ES members' schedule: 0 = one GPU container per member, all at once, each "
                               "waiting for Lean (the barrier schedule); N > 0 = N GPU containers that each "
                               "evaluate their share of the members one after another, handing each member's "
                               "proofs to Lean and going on (the pipelined schedule, docs/modal.md); the ES "
                               "loop's own GPU container comes on top of the N and evaluates share 0 itself.", min=0)
    es_members_per_gpu: int = _key(1, "Pipelined schedule only: members resident on one GPU at once, each its own "
                                   "engine with 1/N of `generate.gpu_memory_utilization`.", min=1, max=16)
    calibration: str = _key("", "A calibration file written by `prover doctor --backend modal` (docs/modal.md, "
                            "*Calibration*): its measured figures replace the `modal.est_*` estimates in the plan. "
                            "\"\" = the doctor's default output for this GPU and model, if there is one "
                            "(`~/.cache/prover-cli/calibration/`, `PROVER_CALIBRATION_DIR` overrides); \"none\" = "
                            "never. A named file measured on another GPU, model or config is refused.")
    verify_cpus: float = _key(8.0, "CPU cores of a batch's worth of verification Sandboxes: each of its `verify.workers` REPL Sandboxes gets 1/workers of them.", min=0.25)
    verify_memory_gb: int = _key(64, "Memory of a batch's worth of verification Sandboxes, GiB, shared out as the cores are: at least `verify.workers` x "
                                 "`verify.memory_limit_gb` (4 x 16 by default), or the plan warns.", min=1)
    kernel_sandbox_memory_gb: int = _key(0, "Memory of one kernel-stage Sandbox, GiB; 0 = one REPL's share of "
                                         "`modal.verify_memory_gb` (at least 4). Size it from the kernel stage's "
                                         "peak that `prover doctor --backend modal` measures: a run refuses to start "
                                         "when the calibration's measured peak exceeds it.", min=0)
    verify_batch_size: int = _key(64, "Proofs per batch: sets how many REPL Sandboxes a call gets (ceil(proofs / this), each worth `verify.workers` REPLs) and how many proofs a REPL Sandbox checks before it is recycled.", min=1)
    verify_max_containers: int = _key(100, "Upper bound on batches verified at once (each `verify.workers` REPL Sandboxes).", min=1)
    timeout_min: int = _key(60, "Timeout of one remote call, minutes.", min=1)
    retries: int = _key(2, "Retries of a failed remote call.", min=0)
    models_volume: str = _key("prover-models", "Volume holding base model weights.")
    runs_volume: str = _key("prover-ledgers", "Volume holding run directories (ledgers, metrics, verdicts).")
    gpu_price_per_hour: float = _key(0.0, "USD per GPU-hour (cost estimate); 0 = Modal's list price of `modal.gpu` "
                                     "(`MODAL_GPUS`: 3.9492 for an H100, 0.7992 for an L4).", min=0.0)
    cpu_price_per_core_hour: float = _key(0.047, "USD per CPU core-hour (cost estimate).", min=0.0)
    memory_price_per_gib_hour: float = _key(0.008, "USD per GiB-hour of reserved memory (cost estimate; Modal bills "
                                            "it on every container, GPU ones included).", min=0.0)
    sandbox_cpu_price_per_core_hour: float = _key(0.142, "USD per CPU core-hour of a Sandbox (the Lean verification "
                                                  "Sandboxes; cost estimate): Modal prices Sandbox CPU apart from "
                                                  "Function CPU, about 3x when this was written.", min=0.0)
    sandbox_memory_price_per_gib_hour: float = _key(0.024, "USD per GiB-hour of a Sandbox's memory (cost estimate).",
                                                    min=0.0)
    est_decode_tokens_per_s: float = _key(0.0, "Cost estimate: decode speed of one sequence, tokens/s (a batch decodes its "
                                          "sequences in parallel); 0 = the estimate for `modal.gpu` (`MODAL_GPUS`: "
                                          "100 on an H100, scaled by memory bandwidth for the others; not measured).",
                                          min=0.0)
    est_verify_s_per_proof: float = _key(5.0, "Cost estimate: CPU seconds Lean spends per proof once the header is loaded.",
                                         min=0.0, min_exclusive=True)
    est_header_s: float = _key(60.0, "Cost estimate: seconds one REPL needs to load the header (`import Mathlib`).", min=0.0)
    est_kernel_check_s_per_proof: float = _key(4.5, "Cost estimate: seconds one fast-path pass spends in the kernel stage "
                                               "(verify.kernel_check) apart from the checker's header import: `lean -o` "
                                               "of the proof in a fresh Sandbox (the header's .olean files mmapped, "
                                               "then the proof; ASSUMED 4 s) and its replay check inside a checker "
                                               "batch (ASSUMED 0.5 s). Not measured on Lean here: `prover doctor` "
                                               "prints what the honest kernel canary took.", min=0.0)
    est_kernel_import_s: float = _key(5.0, "Cost estimate: seconds one checker process spends importing the header "
                                      "(Mathlib) before its first check; ASSUMED, not measured. prover_check pays it "
                                      "once per batch (verify.kernel_batch_size proofs).",
                                      min=0.0)
    est_pass_rate: float = _key(1.0, "Cost estimate: fraction of proofs the fast path calls verified; only those go "
                                "through the kernel stage (1.0 = every proof: an upper bound).", min=0.0, max=1.0)
    est_update_s: float = _key(30.0, "Cost estimate: seconds the ES loop spends after an iteration's last verdict "
                               "(the fp32 update, the ledger write and commit) while every GPU waits; ASSUMED, not "
                               "measured.", min=0.0)
    est_resident_slowdown: float = _key(0.25, "Cost estimate, pipelined ES schedule: each further member generating "
                                        "on the same GPU at once (`modal.es_members_per_gpu`) makes that GPU's "
                                        "generation this fraction of one member's slower; ASSUMED (vLLM engines "
                                        "sharing a GPU contend for its memory bandwidth), only a run on the GPU can "
                                        "say.", min=0.0)
    est_replay_s_per_iteration: float = _key(25.0, "Cost estimate: seconds a cold ES member needs to replay one ledger "
                                             "iteration (noise, update, fingerprint of every weight) before it "
                                             "generates; the plan prints the worst case.", min=0.0)


@dataclass
class IOConfig:
    """Reading input files (JSONL, TOML): limits that keep one broken line from costing the whole file."""

    max_line_bytes: int = _key(16 * 1024 * 1024, "Longest JSONL line read, bytes (default 16 MiB, at most 4 GiB); a "
                               "longer line is reported as malformed by its line number and skipped without being "
                               "loaded whole.", min=1024, max=MAX_LINE_BYTES_MAX)


@dataclass
class RunConfig:
    """Where a run writes, and its seed."""

    dir: str = _key("runs/default", "Run directory (ledger, metrics, verdicts, final model); must not be empty (`.` "
                    "for the current directory).")
    seed: int = _key(0, "Run seed: every other seed is derived from it (at most 2^32 - 1: TRL seeds numpy with it).",
                     min=0, max=SEED_MAX)
    eval_every: int = _key(0, "Held-out evaluation of the current weights (ES: the unperturbed center) every this many "
                           "iterations/steps and after the last one, logged as `eval/*` in metrics.jsonl "
                           "(prover_cli/training/heldout.py); 0 = never.", min=0)
    eval_problems: int = _key(0, "Held-out evaluation: a fixed subset of this many `data.valid_split` problems, "
                              "drawn once from `run.eval_problems_seed` (0 = all of them).", min=0)
    eval_problems_seed: int = _key(0, "Held-out evaluation: the seed that draws the `run.eval_problems` subset, on "
                                   "its own so that every seed, arm and training-set size evaluates on one test set "
                                   "(never derived from `run.seed`).", min=0, max=SEED_MAX)
    eval_n: int = _key(1, "Held-out evaluation: samples per problem (fixed seed, the same at every evaluation).", min=1)
    eval_temperature: float = _key(0.0, "Held-out evaluation: sampling temperature; 0 = greedy.", min=0.0)
    report_to: str | list[str] = _key("none", "Stream the metrics.jsonl records to trackers: `none`, `tensorboard` "
                                      "(`<run.dir>/tensorboard/`), `wandb`, `trackio`; several as a comma-separated "
                                      "string or a list. GRPO also passes them to TRL's `report_to`.")


SECTIONS: dict[str, type] = {
    "model": ModelConfig,
    "data": DataConfig,
    "generate": GenerateConfig,
    "verify": VerifyConfig,
    "es": ESConfig,
    "grpo": GRPOConfig,
    "eval": EvalConfig,
    "modal": ModalConfig,
    "io": IOConfig,
    "run": RunConfig,
}


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    generate: GenerateConfig = field(default_factory=GenerateConfig)
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    es: ESConfig = field(default_factory=ESConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    modal: ModalConfig = field(default_factory=ModalConfig)
    io: IOConfig = field(default_factory=IOConfig)
    run: RunConfig = field(default_factory=RunConfig)
    # `[task.<name>]`: task -> its options (every option of data.task's, defaults included); prover_cli/tasks.
    task: dict[str, dict[str, Any]] = field(default_factory=dict)
    source: str = "<defaults>"  # where the config came from, for error messages
    # "section.key" -> where its value came from: the file's path or the `--set` as typed;
    # keys not listed have their default.
    origins: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    # -- derived values, computed once -------------------------------------------------------
    @property
    def run_dir(self) -> Path:
        return Path(self.run.dir)

    @property
    def problems_path(self) -> Path:
        return Path(self.data.problems) if self.data.problems else self.run_dir / "problems.jsonl"

    def to_dict(self) -> dict[str, dict[str, Any]]:
        sections = {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS}
        return {**sections, "task": {name: dict(values) for name, values in self.task.items()}}

    def check_problems_per_iteration(self, split_size: int) -> None:
        """Validation once a run has read its training split (`split_size` problems of
        `data.train_split`): es.problems_per_iteration cannot exceed it, since each iteration draws
        that many distinct problems. The config checks itself, as load_config does the rest."""
        _check_problems_per_iteration(self, split_size)

    def to_toml(self) -> str:
        """The resolved config as TOML (written into the run directory when a run starts)."""
        lines = [f"# resolved from {self.source}"]
        tables = [(name, values) for name, values in self.to_dict().items() if name != "task"]
        for name, values in tables + [(f"task.{name}", values) for name, values in self.task.items()]:
            lines.append(f"\n[{name}]")
            for key, value in values.items():
                lines.append(f"{key} = {_toml_value(value)}")
        return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# Loading and validation
# --------------------------------------------------------------------------------------------

def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a TOML file (or the defaults when `path` is None), apply `--set` overrides, validate."""
    raw: dict[str, Any] = {}
    source = "<defaults>"
    if path is not None:
        source = str(path)
        raw = read_toml(path, what="config file")
    origins: dict[str, str] = {}
    for override in overrides:
        section, key, value = parse_override(override)
        raw.setdefault(section, {})
        if not isinstance(raw[section], dict):
            raise ConfigError(f"{source}: [{section}] must be a table")
        raw[section][key] = value
        origins[f"{section}.{key}"] = f"--set {override.strip()}"
    return config_from_dict(raw, source=source, origins=origins)


def read_toml(path: str | Path, what: str = "TOML file") -> dict[str, Any]:
    """A TOML file as a dict; a BOM is skipped, and a bad byte or syntax error names the file and line."""
    try:
        data = read_whole(path)  # a FIFO too, and a stop signal still ends the wait
    except FileNotFoundError:
        raise ConfigError(f"{path}: {what} not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, expected a {what}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read {what}: {exc.strerror}") from None
    if data.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte order mark, as some editors write
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        row = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ConfigError(f"{path}:{row}: not valid UTF-8 (byte 0x{data[exc.start]:02x} at column {column}); "
                          "TOML files must be UTF-8") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        found = re.search(r"\(at line (\d+), column \d+\)$", message)
        line = f":{found.group(1)}" if found else ""
        raise ConfigError(f"{path}{line}: not valid TOML: {message}") from None


def parse_override(text: str) -> tuple[str, str, Any]:
    """`section.key=value` -> (section, key, value); value parsed as TOML, else a plain string."""
    name, sep, value_text = text.partition("=")
    section, dot, key = name.strip().partition(".")
    if not sep or not dot or not section or not key:
        raise ConfigError(f"--set {text!r}: expected section.key=value, e.g. --set es.population=8")
    try:
        value = tomllib.loads(f"v = {value_text.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = value_text.strip()
    return section, key.strip(), value


def config_from_dict(raw: dict[str, Any], source: str = "<dict>",
                     origins: dict[str, str] | None = None) -> Config:
    """Validate `raw` (TOML tables) into a Config; `origins` names the `--set` of overridden keys."""
    origins = origins or {}
    config = Config(source=source)
    for section_name, values in raw.items():
        if section_name not in SECTIONS and section_name != "task":
            set_text = next((o for k, o in origins.items() if k.startswith(section_name + ".")), None)
            raise ConfigError(
                f"{set_text or source}: unknown section [{section_name}]; allowed: {', '.join([*SECTIONS, 'task'])}"
            )
        if not isinstance(values, dict):
            raise ConfigError(f"{source}: [{section_name}] must be a table of keys")
        if section_name != "task":  # the task's own options are read once data.task is known (`_task_tables`)
            cls = SECTIONS[section_name]
            hints = get_type_hints(cls)
            rules = {f.name: (hints[f.name], f.metadata) for f in fields(cls)}
            for key, value in values.items():
                setattr(getattr(config, section_name), key, _read_key(config, section_name, key, value, rules, origins))
    _task_rule(config)
    config.task = _task_tables(config, raw.get("task", {}), origins)
    _cross_checks(config)
    return config


def _read_key(config: Config, section: str, key: str, value: Any, rules: dict[str, tuple[Any, Any]],
              origins: dict[str, str]) -> Any:
    """`section.key = value` checked by `rules` (key -> (type, checks)), its origin recorded. Errors
    start with where the value came from: "x.toml: es.sigma = 0.5", or the `--set` as typed."""
    dotted = f"{section}.{key}"
    origin = config.origins[dotted] = origins.get(dotted, config.source)
    where = origin if origin.startswith("--set ") else f"{config.source}: {dotted} = {_toml_value(value)}"
    if key not in rules:
        renamed = renamed_key(dotted)  # a key that a task's option replaced: refused, naming the new one
        if renamed is not None:
            task, option = renamed
            raise ConfigError(f"{where}: {dotted} is now task.{task}.{option}, an option of the {task} task in its "
                              f"own table: [task.{task}] {option} = {_toml_value(value)} (or --set "
                              f"task.{task}.{option}={_toml_value(value)})", hint="docs/config.md, [task.<name>]")
        close = _closest(key, rules)
        suggestion = f"; did you mean `{close}`?" if close else ""
        raise ConfigError(f"{where}: unknown key{suggestion} (allowed: {', '.join(rules) or 'none'})")
    return _check_value(where, value, *rules[key])


def _task_tables(config: Config, raw: dict[str, Any], origins: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The `[task.<name>]` tables (`--set task.<name>.<option>=v` arrives as the key `<name>.<option>`),
    each key an option task <name> declares, checked by its rules, defaults filled in; data.task's
    table is there whenever that task has options."""
    given: dict[str, dict[str, Any]] = {}
    for key, value in raw.items():
        name, dot, option = key.partition(".")
        if not dot and not isinstance(value, dict):
            raise ConfigError(f"{origins.get(f'task.{key}', f'{config.source}: task.{key}')}: [task] holds one table "
                              f"per task: [task.{config.data.task}], or --set task.{config.data.task}.<option>=value")
        given.setdefault(name, {}).update({option: value} if dot else value)
    tables: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys([config.data.task, *given]):
        if name != config.data.task:
            where = next((o for k, o in origins.items() if k.startswith(f"task.{name}.")), f"{config.source}: [task.{name}]")
            check_task(name, "", where=where, module_where="")
        options = task_options(name)
        rules = {key: (type(option.default), option.rules) for key, option in options.items()}
        values = {key: option.default for key, option in options.items()}
        values.update({key: _read_key(config, f"task.{name}", key, value, rules, origins)
                       for key, value in given.get(name, {}).items()})
        if values or name in given:
            tables[name] = values
    return tables


def _check_value(where: str, value: Any, annotation: Any, meta: Any) -> Any:
    """`value` checked against the key's type, choices and range; `where` prefixes every error."""
    expected = _type_name(annotation)
    if not _type_ok(value, annotation):
        raise ConfigError(f"{where}: expected {expected}, got {type(value).__name__}")
    if annotation is float:
        try:
            value = float(value)
        except OverflowError:  # an integer past 2^1024 (a JSON ledger's; TOML's are 64-bit)
            raise ConfigError(f"{where}: must be a finite number") from None
        if math.isnan(value):
            raise ConfigError(f"{where}: must be a finite number (nan is never accepted)")
        if math.isinf(value):
            if not (meta.get("allow_inf") and value > 0):
                also = "; use inf for no limit" if meta.get("allow_inf") else ""
                raise ConfigError(f"{where}: must be a finite number{also}")
            return value
    if annotation is int and not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise ConfigError(f"{where}: must fit in a 64-bit integer (TOML's integers)")
    choices = meta.get("choices")
    if choices and value not in choices:
        raise ConfigError(f"{where}: must be one of {', '.join(map(repr, choices))}")
    low, high = meta.get("min"), meta.get("max")
    if low is not None:
        if meta.get("min_exclusive") and not value > low:
            raise ConfigError(f"{where}: must be > {low}")
        if not meta.get("min_exclusive") and value < low:
            raise ConfigError(f"{where}: must be >= {low}")
    if high is not None and value > high:
        raise ConfigError(f"{where}: must be <= {high}")
    return value


def _where(config: Config, dotted: str) -> str:
    """A key and its value with their origin: `x.toml: es.population = 5`, `--set es.population=5`,
    or `es.population = 5 (the default)`."""
    section, key = dotted.split(".")
    shown = _toml_value(getattr(getattr(config, section), key))
    origin = config.origins.get(dotted)
    if origin is None:
        return f"{dotted} = {shown} (the default)"
    if origin.startswith("--set "):
        return origin
    return f"{origin}: {dotted} = {shown}"


def _from(config: Config, dotted: str) -> str:
    """Where a key's value came from, as a short phrase: `from --set`, `from x.toml`, `the default`."""
    origin = config.origins.get(dotted)
    if origin is None:
        return "the default"
    return "from --set" if origin.startswith("--set ") else f"from {origin}"


def _cross_checks(config: Config) -> None:
    """Rules between keys, each with the values, the reason and the fix."""
    if config.es.antithetic and config.es.population % 2:
        raise ConfigError(
            f"{_where(config, 'es.population')}: must be a positive even integer "
            f"with es.antithetic = true ({_from(config, 'es.antithetic')}: members come in +eps/-eps pairs); "
            "use an even population or set es.antithetic = false"
        )
    if config.es.batched_members and config.es.noise == "lora":  # es/batched.py builds "full" and "lowrank" only
        raise ConfigError(
            f"{_where(config, 'es.batched_members')} with es.noise = \"lora\" ({_from(config, 'es.noise')}): batched "
            "transformers members are built for es.noise = \"full\" and \"lowrank\" only; on vLLM the whole lora "
            "population is already one engine call",
            hint="set es.batched_members = 0, or es.noise = \"lowrank\" (the same low-rank noise on every weight)")
    for k in config.eval.k:
        if k < 1:
            raise ConfigError(f"{_where(config, 'eval.k')}: every k must be >= 1")
        if k > config.eval.n:
            raise ConfigError(
                f"{_where(config, 'eval.k')}: k = {k} exceeds eval.n = {config.eval.n} ({_from(config, 'eval.n')}) "
                "samples per problem; raise eval.n or drop that k"
            )
    _greedy_checks(config)
    if not config.verify.repl_command:
        raise ConfigError(f"{_where(config, 'verify.repl_command')}: must name a program, e.g. [\"lake\", \"env\", \"repl\"]")
    if not config.run.dir.strip():
        raise ConfigError(f"{_where(config, 'run.dir')}: must name a directory (an empty one would write the run "
                          "into the current directory); use \".\" for that, or e.g. \"runs/demo\"")
    _allow_commands_rule(config)
    _kernel_check_rules(config)
    origin = config.origins.get("run.report_to", "<defaults>")
    parse_report_to(config.run.report_to,
                    where="--set run.report_to" if origin.startswith("--set ") else f"{origin}: run.report_to")


def _task_rule(config: Config) -> None:
    """data.task must name a task of the registry: a built-in one, or one data.task_module registers
    (imported here, so every command that loads this config knows the task); data.preset a layout
    or a task that generates its problems."""
    check_task(config.data.task, config.data.task_module, where=_where(config, "data.task"),
               module_where=_where(config, "data.task_module"))
    check_preset(config.data.preset, _where(config, "data.preset"))


def check_preset(preset: str, where: str) -> None:
    """ConfigError, prefixed by `where`, unless `preset` is a layout or a task that generates its problems."""
    if preset not in DATA_LAYOUTS and not (preset in task_names() and generates_problems(preset)):
        tasks = ", ".join(repr(name) for name in task_names() if generates_problems(name))
        raise ConfigError(f"{where}: must be one of {', '.join(map(repr, DATA_LAYOUTS))}, or a task that generates "
                          f"its problems ({tasks})")


def allowed_command_names() -> tuple[frozenset[str], tuple[str, ...]]:
    """What `verify.allow_commands` may name: (the keywords the allowlist knows, the prefixes of
    the command families it knows: `elab_…`, `macro_…`, …). `#` commands (`#eval`) and `@[`
    (attributes) are accepted too; see prover_cli/verify/text/allowlist.py."""
    return frozenset(COMMAND_KEYWORDS | ALLOWED_COMMANDS), COMMAND_PREFIXES


def _allow_commands_rule(config: Config) -> None:
    """Every `verify.allow_commands` entry must be a command the allowlist would otherwise refuse
    by that name: an unknown word (a typo) would widen nothing, silently."""
    keywords, prefixes = allowed_command_names()
    for entry in config.verify.allow_commands:
        word = entry.strip()
        known = (word in keywords or word == "@[" or re.fullmatch(r"#[A-Za-z_][A-Za-z0-9_]*", word) is not None
                 or (re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", word) is not None and word.startswith(prefixes)))
        if not known:
            close = _closest(word, dict.fromkeys(keywords))
            suggestion = f"; did you mean `{close}`?" if close else ""
            raise ConfigError(
                f"{_where(config, 'verify.allow_commands')}: {_toml_value(entry)} is not a Lean command the verifier "
                f"knows{suggestion} (accepted: {', '.join(sorted(keywords))}; `@[` for attributes; any `#` command "
                f"such as `#eval`; names of the families {', '.join(p + '…' for p in prefixes)})")


def check_key(dotted: str, value: Any, where: str) -> Any:
    """`value` checked as config key `dotted` (`es.sigma`) checks it: type, choices, range. The one
    source of those rules for values read from elsewhere (a ledger header); errors start with `where`."""
    section, key = dotted.split(".")
    cls = SECTIONS[section]
    meta = next(f.metadata for f in fields(cls) if f.name == key)
    return _check_value(where, value, get_type_hints(cls)[key], meta)


def _check_problems_per_iteration(config: Config, split_size: int) -> None:
    """Config.check_problems_per_iteration (the validation that needs the training split's size)."""
    if config.es.problems_per_iteration > split_size:
        raise ConfigError(
            f"{_where(config, 'es.problems_per_iteration')}: more than the {split_size:,} problems of the training "
            f"split (data.train_split = {_toml_value(config.data.train_split)}); every iteration scores each member on "
            f"that many distinct problems: set es.problems_per_iteration <= {split_size:,}, or use more problems")


def _kernel_check_rules(config: Config) -> None:
    """With verify.kernel_check, the policy must be one the checker can hold proofs to."""
    verify = config.verify
    if not verify.kernel_check:
        return
    for key in ("lean_command", "kernel_checker_command"):
        if not getattr(verify, key):
            raise ConfigError(f"{_where(config, 'verify.' + key)}: must name a program while verify.kernel_check = "
                              f"true ({_from(config, 'verify.kernel_check')})")
    problem = policy_problem(verify)
    if problem:
        key, why = problem
        raise ConfigError(f"{_where(config, 'verify.' + key)}: {why} with verify.kernel_check = true "
                          f"({_from(config, 'verify.kernel_check')}); set verify.kernel_check = false to accept such "
                          "proofs without the kernel re-check (recorded in every verdict)")


def _greedy_checks(config: Config) -> None:
    """Greedy decoding (temperature 0) gives one answer per prompt: asking for several samples of
    it would make identical copies (vLLM) or fail at the first generate call (transformers)."""
    pairs = [("generate.n", "generate.temperature"), ("es.samples_per_problem", "es.member_temperature"),
             ("run.eval_n", "run.eval_temperature")]
    for count_key, temperature_key in pairs:
        count = getattr(getattr(config, count_key.split(".")[0]), count_key.split(".")[1])
        temperature = getattr(getattr(config, temperature_key.split(".")[0]), temperature_key.split(".")[1])
        if temperature == 0 and count > 1:
            raise ConfigError(f"{_where(config, count_key)}: more than one sample per problem with greedy decoding "
                              f"({_where(config, temperature_key)}) gives {count} identical samples; "
                              f"set {count_key} = 1, or a {temperature_key} above 0")


def check_eval_sampling(config: Config) -> None:
    """`prover eval` samples eval.n per problem at generate.temperature: refused for greedy n > 1."""
    if config.generate.temperature == 0 and config.eval.n > 1:
        raise ConfigError(f"{_where(config, 'eval.n')}: `prover eval` samples eval.n per problem at "
                          f"{_where(config, 'generate.temperature')} (greedy): {config.eval.n} identical samples; "
                          "set eval.n = 1 (and eval.k = [1]), or generate.temperature above 0")


def _type_ok(value: Any, annotation: Any) -> bool:
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if get_origin(annotation) is list:
        (item,) = get_args(annotation)
        return isinstance(value, list) and all(_type_ok(v, item) for v in value)
    if isinstance(annotation, types.UnionType):  # `str | list[str]`: either form is accepted
        return any(_type_ok(value, option) for option in get_args(annotation))
    raise TypeError(f"unsupported config type {annotation}")  # a bug in this module, not user input


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, types.UnionType):
        return " or ".join(_type_name(option) for option in get_args(annotation))
    if get_origin(annotation) is list:
        item = get_args(annotation)[0]
        return "a list of " + {int: "integers", str: "strings", float: "numbers", bool: "booleans"}[item]
    return {bool: "a boolean (true/false)", int: "an integer", float: "a number", str: "a string"}[annotation]


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return repr(value)


def _closest(key: str, known: dict[str, Any]) -> str | None:
    matches = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return matches[0] if matches else None
