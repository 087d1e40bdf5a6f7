"""es/signal.py and es/probe.py: is the ES update signal or noise, and the warning when it is noise.

Synthetic rewards with a known answer: pure noise (the estimate near 0, the warning fires) and a
reward linear in the perturbation (near 1, no warning), first as tables, then through the real
training loop on the tiny model's real weights, then the probe through the CLI.
"""

import json
import random
import statistics

import pytest
from typer.testing import CliRunner

from prover_cli.cli import app
from prover_cli.config import config_from_dict
from prover_cli.es.ledger import read_ledger, reward_text
from prover_cli.es.signal import (NOISE_BELOW, WINDOW, iteration_table, iteration_variances, noise_warning,
                                  pooled_share, progress_field, samples_for_share, single_scoring_share,
                                  variances)

runner = CliRunner()


def table(rng, units, cells, signal_sd, noise_sd):
    effects = [rng.gauss(0, signal_sd) for _ in range(units)]
    return [[effects[u] + rng.gauss(0, noise_sd) for _ in range(cells)] for u in range(units)]


def sparse_noise(rng, units, cells, rate):
    """Pure noise as common random numbers make pair differences: mostly 0, now and then +-1."""
    return [[rng.choice((-1, 1)) if rng.random() < rate else 0 for _ in range(cells)] for _ in range(units)]


def windows(rng, make, count=300):
    """The pooled share of `count` windows of WINDOW iterations, each iteration a table from `make`."""
    return [pooled_share([variances(make(rng)) for _ in range(WINDOW)]) for _ in range(count)]


# -- the statistics on tables with a known answer -----------------------------------------------

@pytest.mark.parametrize("units", [8, 16])
def test_pure_noise_reads_near_zero_and_a_strong_signal_near_one(units):
    rng = random.Random(units)
    gaussian = windows(rng, lambda r: table(r, units, 8, 0.0, 1.0))
    assert abs(statistics.mean(gaussian)) < 0.1
    assert statistics.stdev(gaussian) > 0.05  # an estimate, not a constant
    sparse = [s for s in windows(rng, lambda r: sparse_noise(r, units, 8, 0.03)) if s is not None]
    assert abs(statistics.mean(sparse)) < 0.1  # one iteration's own ratio reads +0.26 here (with 8 pairs)
    strong = windows(rng, lambda r: table(r, units, 8, 1.0, 0.1), count=50)
    assert min(strong) > 0.99


def test_a_half_signal_reads_half_and_the_probe_statistic_measures_the_same_quantity():
    rng = random.Random(7)
    # member effect sd 0.35, sample noise sd 1, 8 samples: share = 0.1225 / (0.1225 + 1/8) = 0.495
    pooled = windows(rng, lambda r: table(r, 16, 8, 0.35, 1.0))
    assert abs(statistics.mean(pooled) - 0.495) < 0.05
    # the probe's way: the same members scored 4 times, each scoring a mean of 8 samples
    scorings = [single_scoring_share(table(rng, 16, 4, 0.35, 1.0 / 8 ** 0.5)) for _ in range(300)]
    assert abs(statistics.mean(scorings) - 0.495) < 0.05


def test_the_parts_are_unbiased_variances_and_undefined_cases_are_none():
    rng = random.Random(3)
    parts = [variances(table(rng, 16, 8, 0.5, 1.0)) for _ in range(2000)]
    assert statistics.mean(p[0] for p in parts) == pytest.approx(0.25, abs=0.02)      # signal sd 0.5
    assert statistics.mean(p[1] for p in parts) == pytest.approx(1 / 8, abs=0.005)    # noise 1 / J
    assert variances([[1.0, 0.0]]) is None and variances([[1.0], [0.0]]) is None  # one unit; one sample
    assert pooled_share([]) is None and pooled_share([None, (0.0, 0.0)]) is None  # no reward varied
    assert pooled_share([(-0.95, 1.0)]) == -1.0                                     # clamped
    assert pooled_share([(1.0, 1.0)] * 3 + [(0.0, 1.0)] * WINDOW) == 0.0            # the last WINDOW only
    assert single_scoring_share([[0.0, 0.0], [0.0, 0.0]]) is None


def test_the_update_units_are_pair_differences_with_antithetic_pairs():
    rewards = [1, 0, 1, 0,   0, 0, 0, 0,   1, 1, 0, 0,   1, 1, 1, 1]  # 4 members x 4 samples, member-major
    assert iteration_table(rewards, 4, antithetic=True) == [[1, 0, 1, 0], [0, 0, -1, -1]]
    assert iteration_table(rewards, 4, antithetic=False)[2] == [1, 1, 0, 0]
    # every pair differs the same way on every sample: all signal, whatever the members' own levels
    members = [1, 1, 1,  0, 0, 0,   0, 0, 0,  1, 1, 1,   1, 1, 0,  1, 1, 0]
    assert pooled_share([iteration_variances(members, 6, antithetic=True)]) == 1.0
    assert pooled_share([iteration_variances(members, 6, antithetic=False)]) < 1.0  # members vary by sample


def test_spearman_brown_samples():
    assert samples_for_share(0.1, 8) == 72        # 8 * (0.9 / 0.1): nine times the samples
    assert samples_for_share(0.5, 8) == 8 and samples_for_share(0.8, 8) == 8
    assert samples_for_share(0.0, 8) is None and samples_for_share(-0.3, 8) is None


def test_the_warning_waits_for_a_window_and_names_every_knob_and_a_budget():
    config = config_from_dict({"es": {"problems_per_iteration": 8, "samples_per_problem": 1, "sigma": 0.01,
                                      "member_temperature": 0.7}})
    es = config.es  # the warning reads the [es] section only
    noisy, clean = (0.1, 0.9), (0.9, 0.1)                   # shares 0.1 and 0.9
    assert noise_warning([], es) is None and noise_warning([clean] * WINDOW, es) is None
    assert noise_warning([noisy] * (WINDOW - 1), es) is None  # not "the last few iterations" yet
    assert noise_warning([noisy], es, minimum=1) is not None  # the run summary of a short run
    text = noise_warning([clean] * 10 + [noisy, None] * WINDOW, es)  # the last WINDOW defined parts
    for knob in ("signal share 0.10 over the last 5 iterations", "es.problems_per_iteration",
                 "es.samples_per_problem", "es.member_temperature = 0.7", "es.sigma", "--probe", "= 8 now", "about 72"):
        assert knob in text, knob
    assert "no signal at all" in noise_warning([(-0.1, 0.5)] * WINDOW, es)
    assert progress_field([noisy], text) == "0.10 NOISE" and progress_field([noisy], None) == "0.10"
    assert progress_field([], None) == "-" and progress_field([None], None) == "-"


# -- through the training loop: the tiny model's real weights, synthetic rewards ------------------

@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.getbasetemp() / "tiny-model-cache"  # shared by every module of the session


class Recorder:
    """A reporter that keeps what the loop reports: the log lines and the progress fields."""

    def __init__(self):
        self.logs, self.fields = [], []

    def task(self, description, total=None, unit="it"):
        import contextlib

        recorder = self

        class Handle:
            def advance(self, n=1, **fields):
                if "signal" in fields:  # the iteration's line (not the bar's start, nor inner stages)
                    recorder.fields.append(fields)

        return contextlib.nullcontext(Handle())

    def log(self, message):
        self.logs.append(message)


def readout_sampler(config, direction_seed=0):
    """The tiny model, perturbed by the real ES loop; each 'sample' is not generated text but the
    readout (theta_live - theta_base) . v / sigma for a fixed unit vector v: +-(eps . v) plus the
    center's drift, exactly linear in the member's perturbation."""
    import torch

    from prover_cli.policy.samplers import Sample
    from prover_cli.policy.samplers.transformers_sampler import TransformersSampler

    class ReadoutSampler(TransformersSampler):
        def generate(self, prompts, params, seeds=None):
            value = float(((self.model.get_parameter(name).detach() - base) * direction).sum()) / config.es.sigma
            return [[Sample(repr(value), "stop", 0, 0) for _ in range(params.n)] for _ in prompts]

    sampler = ReadoutSampler(config.model, config.generate)
    name, tensor = next(iter(sampler.model.named_parameters()))
    base = tensor.detach().clone()
    direction = torch.randn(tensor.shape, generator=torch.Generator().manual_seed(direction_seed))
    direction /= direction.norm()
    return sampler


class SyntheticTask:
    """Rewards with a known signal share: `linear` = 0.5 + 0.1 x readout + N(0, 0.05) (share ~0.98
    at 8 pairs x 16 samples); `noise` = a coin of probability 0.3 that ignores the weights (share 0)."""

    name = "synthetic"

    def __init__(self, kind):
        self.kind = kind

    def build_prompt(self, problem, tokenizer, family):
        return problem["prompt"]

    def rewards(self, problems, completions, config, reporter=None):
        # seeded by what is scored (the iteration's problems and readouts), so a resumed run agrees
        rng = random.Random(json.dumps([[p["id"] for p in problems], list(completions)]))
        if self.kind == "noise":
            return [float(rng.random() < 0.3) for _ in completions]
        return [0.5 + 0.1 * float(text) + rng.gauss(0, 0.05) for text in completions]


def synthetic_run(tmp_path, cache_dir, monkeypatch, kind, name=None, iterations=8, resume=False, **run):
    from prover_cli.es import population as es_population
    from prover_cli.es import train as es_train

    run_dir = tmp_path / (name or kind)
    config = config_from_dict({
        "model": {"name": "tiny", "cache_dir": str(cache_dir), "device": "cpu", "dtype": "float32"},
        "data": {"task": "toy"},
        "generate": {"temperature": 0.7, "max_tokens": 4},
        "es": {"population": 16, "sigma": 0.01, "learning_rate": 0.001, "iterations": iterations,
               "problems_per_iteration": 8, "samples_per_problem": 2, "member_temperature": 0.7},
        "run": {"dir": str(run_dir), "seed": 3, **run},
    })
    task = SyntheticTask(kind)
    # the members' task and sampler are the run's population's (es/population.py LocalPopulation)
    monkeypatch.setattr(es_population, "load_es_sampler", readout_sampler)
    population = es_population.LocalPopulation(config)
    population.task = task
    reporter = Recorder()
    result = es_train.train_es(config, reporter=reporter, resume=resume, population=population)
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return result, lines, reporter


@pytest.mark.slow
def test_pure_noise_rewards_read_near_zero_and_the_warning_fires(tmp_path, cache_dir, monkeypatch):
    result, lines, reporter = synthetic_run(tmp_path, cache_dir, monkeypatch, "noise")
    parts = [(line["es/signal_var"], line["es/noise_var"]) for line in lines]
    assert len(parts) == 8 and abs(pooled_share(parts, window=8)) < 0.2
    assert lines[-1]["es/signal_share"] == pooled_share(parts) < NOISE_BELOW
    # said when it starts, once WINDOW iterations have an estimate; the progress line flags it from then on
    assert reporter.logs and reporter.logs[0].startswith(f"Warning (iteration {WINDOW}): the ES update is mostly")
    flagged = ["NOISE" in fields["signal"] for fields in reporter.fields]
    assert flagged[:WINDOW - 1] == [False] * (WINDOW - 1) and flagged[WINDOW - 1]
    assert "mostly sampling noise" in result["warning"] and "es.problems_per_iteration" in result["warning"]
    assert result["signal_share"] == lines[-1]["es/signal_share"]


@pytest.mark.slow
def test_a_reward_linear_in_the_perturbation_reads_near_one_without_a_warning(tmp_path, cache_dir, monkeypatch):
    result, lines, reporter = synthetic_run(tmp_path, cache_dir, monkeypatch, "linear", report_to="tensorboard")
    shares = [line["es/signal_share"] for line in lines]
    assert len(shares) == 8 and min(shares) > 0.9
    assert min(line["es/signal_var"] / (line["es/signal_var"] + line["es/noise_var"]) for line in lines) > 0.9
    assert reporter.logs == [] and "warning" not in result
    assert not any("NOISE" in fields["signal"] for fields in reporter.fields)
    # the trackers get it too (TensorBoard here: every key of the metrics line)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "linear" / "tensorboard")).Reload()
    assert [e.value for e in events.Scalars("es/signal_share")] == pytest.approx(shares, rel=1e-6)  # fp32 there


@pytest.mark.slow
def test_a_resumed_run_pools_the_iterations_before_it_as_an_uninterrupted_one(tmp_path, cache_dir, monkeypatch):
    _, straight, straight_reporter = synthetic_run(tmp_path, cache_dir, monkeypatch, "noise", name="straight")
    synthetic_run(tmp_path, cache_dir, monkeypatch, "noise", name="resumed", iterations=3)
    _, resumed, reporter = synthetic_run(tmp_path, cache_dir, monkeypatch, "noise", name="resumed", resume=True)
    keys = ("es/signal_var", "es/noise_var", "es/signal_share")
    assert [[line[k] for k in keys] for line in resumed] == [[line[k] for k in keys] for line in straight]
    assert reporter.logs[:1] == straight_reporter.logs[:1]  # the window spans the resume: same warning, same iteration


def test_report_plots_the_signal_share_of_es_runs_only(tmp_path):
    from prover_cli.comparison.arms import summarize_run
    from prover_cli.comparison.report_figure import build_figure

    def run(name, method, signal):
        records = [{"iteration": i, "method": method, "task": "toy", "reward/mean": 0.1, "reward/max": 1.0,
                    "verify/verified": 1, "samples": 10, "samples/total": 10 * i, "time/wall_s": 1.0,
                    "time/elapsed_s": float(i),
                    **({"es/signal_share": 0.1 * i, "es/signal_var": 0.1, "es/noise_var": 0.1} if signal else {})}
                   for i in range(1, 4)]
        return {"name": name, "method": method, "model": "tiny", "task": "toy", "records": records, "seed": 0,
                "null": False, "settings": {}, "base": None}

    es, grpo = run("es", "es", True), run("grpo", "grpo", False)
    titles = [axis.get_title() for axis in build_figure([es, grpo]).axes]
    assert len(titles) == 12 and "ES signal share vs samples" in titles
    assert len(build_figure([grpo]).axes) == 9  # no ES estimate, no fourth row
    assert summarize_run({**es, "dir": tmp_path})["es_signal_share"] == pytest.approx(0.3)
    assert summarize_run({**grpo, "dir": tmp_path})["es_signal_share"] is None


# -- the probe ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_probe_prints_signal_and_curvature_for_three_sigmas_costs_what_it_says_and_writes_nothing(
        tmp_path, cache_dir):
    run_dir = tmp_path / "run"
    overrides = ["--set", "model.name=tiny", "--set", f"model.cache_dir={json.dumps(str(cache_dir))}",
                 "--set", "model.device=cpu", "--set", "data.task=toy", "--set", "generate.temperature=0.0",
                 "--set", "generate.n=1", "--set", "generate.max_tokens=6", "--set", "es.population=4", "--set", "es.iterations=1",
                 "--set", "es.problems_per_iteration=3", "--set", "es.sigma=0.02",
                 "--set", f"run.dir={json.dumps(str(run_dir))}"]
    probed = runner.invoke(app, ["train", "es", "--probe", "--probe-seeds", "2", *overrides, "--json"])
    assert probed.exit_code == 0, probed.stderr
    result = json.loads(probed.stdout)
    assert [round(row["sigma"], 6) for row in result["sigmas"]] == [round(0.02 / 3, 6), 0.02, 0.06]
    for row in result["sigmas"]:
        assert {"signal_share_pairs", "signal_share_members", "member_reward", "center_reward", "members_keep",
                "members_above_center", "verdict", "reason"} <= set(row)
        assert len(row["member_rewards"]) == 4 and all(len(r) == 2 for r in row["member_rewards"])
    # 2 scorings x 3 samples x (the center + 3 sigmas x 4 members), said before it starts
    assert result["samples"] == 2 * 3 * (1 + 3 * 4) == 78
    assert "probe: 78 samples" in probed.stderr and not run_dir.exists()

    human = runner.invoke(app, ["train", "es", "--probe", "--probe-seeds", "2", *overrides], env={"COLUMNS": "200"})
    assert human.exit_code == 0
    for text in ("signal share (pairs)", "members' reward", "center reward", "recommendation", "members above center",
                 "0.00667", "0.02", "0.06"):
        assert text in human.stderr, text
    assert not run_dir.exists()

    # scoring 1 at es.sigma is exactly what training's iteration 1 scores
    trained = runner.invoke(app, ["train", "es", *overrides, "--json"])
    assert trained.exit_code == 0, trained.stderr
    _, records = read_ledger(run_dir / "ledger.json")
    middle = result["sigmas"][1]["member_rewards"]
    assert [reward_text(member[0]) for member in middle] == [reward_text(r) for r in records[0]["rewards"]]


def test_probe_runs_alone_and_locally():
    for extra in (["--backend", "modal"], ["--resume"], ["--dry-run"]):
        refused = runner.invoke(app, ["train", "es", "--probe", *extra])
        assert refused.exit_code == 2 and "--probe runs alone" in refused.stderr
