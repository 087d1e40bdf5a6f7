"""The demo's comparison (scripts/demo.sh, benchmarks/bench_demo.py): ES and GRPO from one base, same budget.

    prover_cli.demo.build_base(config)             # the base, built on first use, with a line saying so
    prover_cli.demo.budget_line(config)            # both sample budgets, printed before training
    prover_cli.demo.noise_line(config)             # what ES's NOISE flag means here
    prover_cli.demo.grpo_eval_every(config)        # GRPO's run.eval_every at ES's evaluation budgets
    prover_cli.demo.comparison(config, es_dir, grpo_dir)["lines"]   # held-out: base -> es, grpo

The base (configs/demo.toml: `tiny-countdown`, prover_cli/policy/warmstart.py) is evaluated once on the
held-out problems, exactly as both trainers write it as their iteration 0 (heldout.py, cached).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from prover_cli.errors import ConfigError, InputError
from prover_cli.policy import samplers  # a module: `samplers.load_sampler` is looked up per call (tests swap it)
from prover_cli.policy.built_models import resolve_model_path
from prover_cli.policy.tiny_model import TINY_NAME, tiny_model_dir
from prover_cli.policy.warmstart import WARMSTART_NAME, warmstart_dir
from prover_cli.progress import NULL_REPORTER, Reporter, quiet_third_party_bars
from prover_cli.tasks.problems import heldout_problems
from prover_cli.training.heldout import evaluate_base, weights_sha256
from prover_cli.training.metrics import METRICS_FILE, read_metrics

if TYPE_CHECKING:
    from prover_cli.config import Config


def sample_budgets(config: Config) -> dict[str, int]:
    """Training samples each method generates with `config` (held-out evaluation not counted)."""
    es, g = config.es, config.grpo
    return {"es": es.iterations * es.population * es.problems_per_iteration * es.samples_per_problem,
            "grpo": g.steps * g.per_device_train_batch_size * g.gradient_accumulation_steps}


def grpo_eval_every(config: Config) -> int:
    """GRPO's `run.eval_every` that evaluates at ES's sample budgets (`run.eval_every` is in ES iterations)."""
    es, g = config.es, config.grpo
    per_iteration = es.population * es.problems_per_iteration * es.samples_per_problem
    per_step = g.per_device_train_batch_size * g.gradient_accumulation_steps
    every, rest = divmod(config.run.eval_every * per_iteration, per_step)
    if rest:
        raise ConfigError(f"ES evaluates every {config.run.eval_every * per_iteration} samples, GRPO takes {per_step} "
                          "per step: no GRPO run.eval_every matches; change run.eval_every")
    return every


def budget_line(config: Config) -> str:
    """One line stating both sample budgets, as `scripts/demo.sh` prints it before training."""
    es, g = config.es, config.grpo
    budgets = sample_budgets(config)
    per_step = g.per_device_train_batch_size * g.gradient_accumulation_steps
    return (f"sample budget: es {es.iterations} iterations x {es.population} members x {es.problems_per_iteration} "
            f"problems x {es.samples_per_problem} = {budgets['es']} samples; grpo {g.steps} steps x "
            f"{per_step // g.num_generations} prompts x {g.num_generations} completions = {budgets['grpo']} samples")


def base_is_built(config: Config) -> bool:
    """Whether `model.name` (`tiny-countdown`, `tiny`) is already in `model.cache_dir`; True for any
    other name (nothing to build)."""
    m = config.model
    if m.name == WARMSTART_NAME:
        return (warmstart_dir(m.cache_dir, m.tiny_seed) / "prover_warmstart.json").exists()
    if m.name == TINY_NAME:
        return tiny_model_dir(m.cache_dir, m.tiny_seed).is_dir()
    return True


def build_base(config: Config, say: Any = print) -> str:
    """The base model's path, built first if it is not cached yet, saying so before the wait (the
    first `generate` would otherwise sit at 0 % with no word while it is built)."""
    import time

    quiet_third_party_bars()   # called from scripts/demo.sh, outside `prover`: no transformers bars
    m = config.model
    if base_is_built(config):
        say(f"base model {m.name}: cached in {m.cache_dir}/")
        return resolve_model_path(m.name, m.cache_dir, m.tiny_seed)
    what = {"tiny-countdown": "the tiny model warm-started on generated countdown solutions, prover_cli/policy/warmstart.py",
            "tiny": "a tiny random Qwen2-style model, prover_cli/policy/tiny_model.py"}.get(m.name, m.name)
    say(f"building the base model {m.name} (first run only; then cached in {m.cache_dir}/): {what}")
    start = time.monotonic()
    path = resolve_model_path(m.name, m.cache_dir, m.tiny_seed)
    say(f"base model {m.name}: built in {time.monotonic() - start:.0f} s")
    return path


def noise_line(config: Config) -> str:
    """What the ES run's `NOISE` flag and warning mean in the demo, printed before it trains."""
    es = config.es
    samples = es.problems_per_iteration * es.samples_per_problem
    return (f"ES at this budget: its progress lines will end NOISE and a warning will follow. Every member is "
            f"scored greedily on the same {samples} problems, and a perturbation's effect measured on {samples} "
            f"problems is still partly which {samples} were drawn: the run's signal share (measured in "
            "configs/demo.toml) is above noise but below the 0.5 at which the update would be mostly signal. "
            "Expected here, not a fault: the run still trains, and the held-out lines at the end say what it learned.")


def base_heldout(config: Config, reporter: Reporter | None = None) -> dict[str, Any]:
    """The held-out `eval/*` keys of the base model (`model.name`): the evaluation both trainers write
    as their iteration 0 (prover_cli/training/heldout.py `evaluate_base`, cached, so computed once)."""
    quiet_third_party_bars()   # called from scripts outside `prover` (scripts/demo.sh): no "Loading weights" bar
    sampler: Any = samplers.load_sampler(config.model, config.generate)  # a transformers sampler: `.model` is its torch module
    return evaluate_base(sampler, config, heldout_problems(config), weights_sha256(sampler.model),
                         reporter=reporter or NULL_REPORTER)


def last_heldout(run_dir: str | Path) -> dict[str, Any]:
    """The last metrics.jsonl line of a run that carries `eval/verified_rate`."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        raise InputError(f"{path}: no metrics (was the run trained?)")
    evaluated = [line for line in read_metrics(run_dir) if "eval/verified_rate" in line]
    if not evaluated:
        raise InputError(f"{path}: no held-out evaluation in the metrics", hint="set run.eval_every > 0")
    return evaluated[-1]


HELDOUT_KEYS = {"sampled": "eval/verified_rate", "greedy": "eval/greedy_verified_rate"}


def rate_text(record: dict[str, Any], key: str) -> str:
    """`0.177 (0.139..0.221)`: a held-out rate and its 95% interval."""
    return f"{record[key]:.3f} ({record[key + '_lo']:.3f}..{record[key + '_hi']:.3f})"


def heldout_lines(task: str, problems: int, what: dict[str, str], base: dict[str, Any], es: dict[str, Any],
                  grpo: dict[str, Any]) -> list[str]:
    """One line per held-out metric: `held-out <task> (<N> problems), <metric>: base a (lo..hi) -> es ..., grpo ...`."""
    return [f"held-out {task} ({problems} problems), {name} ({what[name]}): base {rate_text(base, key)} -> "
            f"es {rate_text(es, key)}, grpo {rate_text(grpo, key)}" for name, key in HELDOUT_KEYS.items()]


def comparison(config: Config, es_dir: str | Path, grpo_dir: str | Path, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """Base, ES and GRPO held-out results on the same problems, and the demo's closing lines."""
    base = base or base_heldout(config)
    es, grpo = last_heldout(es_dir), last_heldout(grpo_dir)
    for name, line in (("es", es), ("grpo", grpo)):
        if line["eval/problems"] != base["eval/problems"] or line["eval/samples"] != base["eval/samples"]:
            raise ValueError(f"{name}: evaluated on {line['eval/problems']} problems x {line['eval/samples']} samples, "
                             f"the base on {base['eval/problems']} x {base['eval/samples']}: not the same held-out set")
    r = config.run
    what = {"sampled": ("1 greedy sample" if r.eval_temperature == 0
                        else f"{r.eval_n} samples/problem at temperature {r.eval_temperature:g}"),
            "greedy": "1 sample/problem at temperature 0"}
    return {"base": base["eval/verified_rate"], "es": es["eval/verified_rate"], "grpo": grpo["eval/verified_rate"],
            "problems": base["eval/problems"],
            "lines": heldout_lines(config.data.task, base["eval/problems"], what, base, es, grpo)}
