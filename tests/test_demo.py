"""The demo's main stage in miniature: ES and GRPO from the warm-started base, one line per held-out metric."""

import json
import re
from pathlib import Path

import pytest

from prover_cli.demo import heldout_lines, sample_budgets
from prover_cli.policy.warmstart import build_warmstart, warmstart_dir

DEMO_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "demo.toml"
RATE = r"(\d\.\d{3}) \(\d\.\d{3}\.\.\d\.\d{3}\)"
LINE = re.compile(rf"held-out (\w+) \((\d+) problems\), (sampled|greedy) \(([^)]*)\): base {RATE} -> es {RATE}, grpo {RATE}")


@pytest.fixture(scope="session")
def warm_cache(tmp_path_factory):
    """A model cache holding the real `tiny-countdown` base, built once per test session."""
    cache = tmp_path_factory.getbasetemp() / "warmstart-cache"  # tests/test_warmstart.py reuses it
    build_warmstart(warmstart_dir(cache, 0), cache, 0)
    return cache


def test_line_format():
    record = lambda rate, greedy: {"eval/verified_rate": rate, "eval/verified_rate_lo": rate - 0.05,  # noqa: E731
                                   "eval/verified_rate_hi": rate + 0.05, "eval/greedy_verified_rate": greedy,
                                   "eval/greedy_verified_rate_lo": greedy - 0.1, "eval/greedy_verified_rate_hi": greedy + 0.1}
    what = {"sampled": "4 samples/problem at temperature 0.7", "greedy": "1 sample/problem at temperature 0"}
    sampled, greedy = heldout_lines("countdown", 40, what, record(0.0625, 0.25), record(0.1, 0.3), record(0.15625, 0.2))
    assert sampled == ("held-out countdown (40 problems), sampled (4 samples/problem at temperature 0.7): "
                       "base 0.062 (0.012..0.113) -> es 0.100 (0.050..0.150), grpo 0.156 (0.106..0.206)")
    assert greedy.startswith("held-out countdown (40 problems), greedy (1 sample/problem at temperature 0): base 0.250")
    assert LINE.fullmatch(sampled) and LINE.fullmatch(greedy)


def test_demo_budgets_are_equal():
    from prover_cli.config import load_config

    budgets = sample_budgets(load_config(DEMO_CONFIG))
    assert budgets["es"] == budgets["grpo"] > 0


@pytest.fixture
def one_torch_thread():
    """torch on one thread for the test (restored after). The tiny model gains nothing from two, and
    on a loaded 2-core machine two threads that wait on each other made training several times
    slower (measured, the same ES run back to back: 30-43 s with two threads, 6 s with one)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# What the test asserts needs little work: a few held-out problems, 2 iterations of each trainer
# (an evaluation at 0, 1, 2), and an ES population of one +eps/-eps pair on 2 problems.
EVAL_PROBLEMS = 8
SMALL = ["run.eval_every=1", f"run.eval_problems={EVAL_PROBLEMS}", "es.iterations=2", "grpo.steps=2",
         "es.population=2", "es.problems_per_iteration=2", "grpo.per_device_train_batch_size=8"]


@pytest.mark.slow
def test_short_demo_run_ends_with_the_comparison_line(warm_cache, tmp_path, one_torch_thread):
    from prover_cli.config import load_config
    from prover_cli.tasks.datasets import prepare_data
    from prover_cli.es.train import train_es
    from prover_cli.grpo.train import train_grpo
    from prover_cli.demo import base_heldout, comparison

    common = [f"model.cache_dir={warm_cache}", f"data.problems={tmp_path / 'problems.jsonl'}", *SMALL]
    config = load_config(DEMO_CONFIG, [*common, f"run.dir={tmp_path}"])
    prepare_data(config)
    train_es(load_config(DEMO_CONFIG, [*common, f"run.dir={tmp_path / 'es'}"]))
    train_grpo(load_config(DEMO_CONFIG, [*common, f"run.dir={tmp_path / 'grpo'}"]))

    base = base_heldout(config)
    result = comparison(config, tmp_path / "es", tmp_path / "grpo", base=base)
    for line, metric, key in zip(result["lines"], ("sampled", "greedy"), ("eval/verified_rate", "eval/greedy_verified_rate")):
        match = LINE.fullmatch(line)
        assert match, line
        task, problems, name, _, a, b, c = match.groups()
        assert (task, int(problems), name) == ("countdown", EVAL_PROBLEMS, metric) and a == f"{base[key]:.3f}"
        for run, value in (("es", b), ("grpo", c)):
            last = [json.loads(x) for x in (tmp_path / run / "metrics.jsonl").read_text().splitlines()][-1]
            assert value == f"{last[key]:.3f}"  # the line reports the last evaluation
    first_lines = []
    for run in ("es", "grpo"):
        lines = [json.loads(x) for x in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
        assert [x["iteration"] for x in lines if "eval/verified_rate" in x] == [0, 1, 2]  # the base first
        assert [x["iteration"] for x in lines if "eval/greedy_verified_rate" in x] == [0, 1, 2]  # both metrics
        first_lines.append({k: v for k, v in lines[0].items() if k.startswith("eval/")})
    # Both runs start at the very same base evaluation (evaluated once, by the first run), the one
    # `base_heldout` returns.
    assert first_lines[0] == first_lines[1]
    assert first_lines[0]["eval/verified_rate"] == base["eval/verified_rate"]
    assert first_lines[0]["eval/by_problem"] == base["eval/by_problem"]

    with pytest.raises(ValueError, match="not the same held-out set"):
        comparison(config, tmp_path / "es", tmp_path / "grpo", base={**base, "eval/problems": EVAL_PROBLEMS + 1})
