"""`prover report`: one table and one plot of ES and GRPO runs, and refusals to compare unlike runs."""

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prover_cli.cli import app
from prover_cli.config import load_config
from prover_cli.errors import InputError
from prover_cli.comparison.report import report_runs

runner = CliRunner()

# (verified, samples, elapsed_s, reward/mean) per iteration, chosen so the summary is easy by hand.
ES_ITERATIONS = [(2, 8, 360.0, 0.25), (4, 8, 720.0, 0.5), (6, 8, 1080.0, 0.75)]
GRPO_ITERATIONS = [(1, 4, 1800.0, 0.25), (3, 4, 3600.0, 0.75)]


def make_run(run_dir: Path, method: str, iterations, *overrides: str, heldout=None) -> Path:
    """A run directory; `heldout` maps iteration -> eval/verified_rate for the lines that have one."""
    run_dir.mkdir(parents=True)
    config = load_config(None, ["data.task=countdown", f"run.dir={run_dir}", *overrides])
    (run_dir / "config.toml").write_text(config.to_toml(), encoding="utf-8")
    lines, total, previous = [], 0, 0.0
    for i, (verified, samples, elapsed_s, mean) in enumerate(iterations, start=1):
        total += samples
        record = {
            "iteration": i, "method": method, "task": config.data.task, "reward/mean": mean, "reward/max": 1.0,
            "verify/verified": verified, "samples": samples, "samples/total": total, "tokens/total": 10 * total,
            "time/wall_s": elapsed_s - previous, "time/elapsed_s": elapsed_s}
        if heldout and i in heldout:
            record.update({"eval/verified_rate": heldout[i], "eval/solved_rate": heldout[i], "eval/reward_mean": 0.5,
                           "eval/verified": 1, "eval/samples": 10, "eval/problems": 10, "eval/wall_s": 1.0})
        lines.append(json.dumps(record))
        previous = elapsed_s
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return run_dir


@pytest.fixture(autouse=True)
def in_tmp_dir(tmp_path, monkeypatch):
    """Default reports go to ./reports/: keep them out of the repository."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def two_runs(tmp_path):
    return (make_run(tmp_path / "es", "es", ES_ITERATIONS),
            make_run(tmp_path / "grpo", "grpo", GRPO_ITERATIONS))


def test_report_table_numbers_and_plot(tmp_path, two_runs):
    es, grpo = two_runs
    result = report_runs(run_dirs=[es, grpo], out_dir=tmp_path / "out")
    by_run = {s["run"]: s for s in result["runs"]}

    # ES: 12 verified in 3 iterations, 24 samples, 0.3 h.  GRPO: 4 verified in 2 iterations, 8 samples, 1 h.
    assert by_run["es"]["method"] == "es" and by_run["grpo"]["method"] == "grpo"
    assert by_run["es"]["verified"] == 12 and by_run["grpo"]["verified"] == 4
    assert by_run["es"]["verified_per_iteration"] == pytest.approx(4.0)
    assert by_run["grpo"]["verified_per_iteration"] == pytest.approx(2.0)
    assert by_run["es"]["verified_per_1k_samples"] == pytest.approx(500.0)
    assert by_run["grpo"]["verified_per_1k_samples"] == pytest.approx(500.0)
    assert by_run["es"]["verified_per_hour"] == pytest.approx(40.0)
    assert by_run["grpo"]["verified_per_hour"] == pytest.approx(4.0)
    assert by_run["es"]["final_reward"] == 0.75 and by_run["grpo"]["iterations"] == 2

    (table,) = result["tables"]
    rows = {row[0]: dict(zip(table["columns"], row)) for row in table["rows"]}
    assert rows["es"]["verified"] == 12 and rows["es"]["per iter"] == "4.00" and rows["es"]["per hour"] == "40.0"
    assert rows["grpo"]["per 1k samples"] == "500.0" and rows["grpo"]["final reward"] == "0.750"

    saved = json.loads((tmp_path / "out" / "report.json").read_text())
    assert saved["task"] == "countdown" and saved["runs"] == result["runs"]

    png = tmp_path / "out" / "report.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    pixels = matplotlib.image.imread(png)
    assert pixels.shape[:2] == (1200, 1500)  # three rows of three panels
    assert pixels[..., :3].std() > 0.05  # curves and text, not a blank canvas


def test_report_goes_to_a_new_reports_dir_by_default_never_into_a_run(tmp_path, two_runs, monkeypatch):
    es, grpo = two_runs
    monkeypatch.chdir(tmp_path)
    first = report_runs(run_dirs=[es, grpo])
    second = report_runs(run_dirs=[es, grpo])  # within the same second: still a new directory
    for result in (first, second):
        out = Path(result["out"])
        assert out.parent == Path("reports") and re.fullmatch(r"es-vs-grpo-\d{8}-\d{6}(-\d+)?", out.name)
        assert (out / "report.json").exists() and Path(result["plot"]) == out / "report.png"
    assert first["out"] != second["out"]
    assert not (es / "report.png").exists() and not (grpo / "report.json").exists()


@pytest.mark.parametrize("where", ["es", "grpo", "es/../es"])
def test_out_in_a_run_dir_is_refused(tmp_path, two_runs, where):
    es, grpo = two_runs
    with pytest.raises(InputError, match="is the input run directory"):
        report_runs(run_dirs=[es, grpo], out_dir=tmp_path / where)
    assert not (es / "report.png").exists() and not (grpo / "report.json").exists()
    # A subdirectory of a run holds only the report: allowed (scripts/demo.sh writes runs/demo/report/).
    assert Path(report_runs(run_dirs=[es, grpo], out_dir=es / "report")["plot"]) == es / "report" / "report.png"


def test_an_existing_report_is_not_overwritten(tmp_path, two_runs):
    es, grpo = two_runs
    report_runs(run_dirs=[es, grpo], out_dir=tmp_path / "out")
    before = (tmp_path / "out" / "report.json").read_bytes()
    with pytest.raises(InputError, match=r"report.json: a report is already there; not overwriting it"):
        report_runs(run_dirs=[es, grpo], out_dir=tmp_path / "out")
    assert (tmp_path / "out" / "report.json").read_bytes() == before


def test_heldout_numbers_in_the_table_and_on_the_plot(tmp_path):
    from prover_cli.comparison.report_figure import build_figure
    from prover_cli.comparison.run_reader import load_run

    es = make_run(tmp_path / "es", "es", ES_ITERATIONS, heldout={2: 0.4, 3: 0.3})
    grpo = make_run(tmp_path / "grpo", "grpo", GRPO_ITERATIONS, heldout={2: 0.1})
    result = report_runs(run_dirs=[es, grpo], out_dir=tmp_path / "out", allow_unequal_budgets=True)  # not about budgets
    by_run = {s["run"]: s for s in result["runs"]}
    assert by_run["es"]["heldout_verified_rate"] == 0.3 and by_run["es"]["heldout_iteration"] == 3
    assert by_run["es"]["heldout_best_verified_rate"] == 0.4 and by_run["es"]["heldout_best_iteration"] == 2
    assert by_run["es"]["heldout_evaluations"] == 2 and by_run["grpo"]["heldout_problems"] == 10
    # The held-out comparison is the first table (the headline); the training numbers come last, as a diagnostic.
    first, last = result["tables"][0], result["tables"][-1]
    rows = {row[0]: dict(zip(first["columns"], row)) for row in first["rows"]}
    assert first["title"].startswith("UNEQUAL BUDGETS: es 16 samples vs grpo 8 samples -- held-out verified rate")
    assert rows["es"]["sampled"] == "0.300" and rows["grpo"]["sampled"] == "0.100"  # the finals
    assert last["title"].startswith("training diagnostic, not the comparison") and "held-out" not in last["columns"]

    fig = build_figure([load_run(es), load_run(grpo)])
    # Columns: samples first (the budget compared), then training tokens, then time; no iterations axis
    # (an ES iteration and a GRPO step are different units).
    # rows: held-out sampled, held-out greedy, then the training reward (a diagnostic, last)
    eval_samples, eval_tokens, eval_time = fig.axes[:3]
    reward_samples, reward_tokens, reward_time = fig.axes[6:9]
    es_curve, grpo_curve = eval_tokens.get_lines()
    assert list(es_curve.get_xdata()) == [160, 240] and list(es_curve.get_ydata()) == [0.4, 0.3]
    assert list(grpo_curve.get_xdata()) == [80] and list(eval_samples.get_lines()[1].get_xdata()) == [8]
    assert reward_tokens.get_xlabel() == "training tokens" and reward_tokens.get_title().endswith(" vs tokens")
    assert list(reward_tokens.get_lines()[0].get_ydata()) == [0.25, 0.5, 0.75]
    for axis in fig.axes[:3] + fig.axes[6:9]:
        assert axis.get_ylim()[0] == 0  # y from 0
        assert "iteration" not in axis.get_xlabel() and "step" not in axis.get_xlabel()
    # The longest run took 3,600 s: minutes fit; GRPO's last point is at 60 min.
    assert reward_time.get_xlabel() == "wall-clock (min)" and list(reward_time.get_lines()[1].get_xdata()) == [30, 60]
    title = fig._suptitle.get_text()
    assert "countdown" in title and "AI-MO/Kimina-Prover-Preview-Distill-1.5B" in title
    assert title.endswith(": es vs grpo") and "es (es)" not in title


def test_runs_without_heldout_evaluations_say_so(tmp_path, two_runs):
    from prover_cli.comparison.report_figure import build_figure
    from prover_cli.comparison.run_reader import load_run

    fig = build_figure([load_run(d) for d in two_runs])
    assert not fig.axes[0].get_lines() and "no held-out evaluation" in fig.axes[0].texts[0].get_text()
    result = report_runs(run_dirs=list(two_runs), out_dir=tmp_path / "out")
    assert all(s["heldout_verified_rate"] is None for s in result["runs"])
    (table,) = result["tables"]  # the training diagnostic alone: nothing to compare on held-out problems
    assert table["title"].startswith("training diagnostic")


@pytest.mark.parametrize("seconds, unit", [(30, "s"), (119, "s"), (600, "min"), (7199, "min"), (7200, "h")])
def test_time_unit_fits_the_span(seconds, unit):
    from prover_cli.comparison.report_figure import time_unit

    assert time_unit(seconds)[0] == unit


def test_refuses_runs_with_different_heldout_subsets(tmp_path):
    problems = tmp_path / "problems.jsonl"
    problems.write_text("".join(json.dumps({"id": f"p{i}", "split": s}) + "\n"
                                for i, s in enumerate(["train", "valid"] * 5)))
    shared = (f"data.problems={problems}", "run.eval_problems=2")
    es = make_run(tmp_path / "es", "es", ES_ITERATIONS, *shared, "run.seed=1", heldout={3: 0.5})
    # Another run seed draws the same subset (run.eval_problems_seed): one test set for every seed.
    other_seed = make_run(tmp_path / "grpo", "grpo", GRPO_ITERATIONS, *shared, "run.seed=2", heldout={2: 0.5})
    report_runs(run_dirs=[es, other_seed], out_dir=tmp_path / "out0")
    # The test set's own seed draws another subset: runs of one seed on two test sets are refused.
    other_set = make_run(tmp_path / "grpo3", "grpo", GRPO_ITERATIONS, *shared, "run.seed=1",
                         "run.eval_problems_seed=5", heldout={2: 0.5})
    with pytest.raises(InputError, match="different heldout problem sets") as error:
        report_runs(run_dirs=[es, other_set], out_dir=tmp_path / "out")
    assert "run.eval_problems_seed = 5" in str(error.value) and "run.eval_problems_seed" in error.value.hint
    same = make_run(tmp_path / "grpo2", "grpo", GRPO_ITERATIONS, *shared, "run.seed=1", heldout={2: 0.5})
    assert report_runs(run_dirs=[es, same], out_dir=tmp_path / "out",
                       allow_unequal_budgets=True)["problem_sets_unchecked"] == 0  # not about budgets


def test_refuses_runs_of_different_tasks(tmp_path):
    es = make_run(tmp_path / "es", "es", ES_ITERATIONS)
    lean = make_run(tmp_path / "lean", "grpo", GRPO_ITERATIONS, "data.task=lean")
    with pytest.raises(InputError, match="different tasks") as error:
        report_runs(run_dirs=[es, lean])
    assert str(es) in str(error.value) and "'lean'" in str(error.value)
    assert not (es / "report.png").exists()


def write_problems(path: Path, ids, split="train"):
    path.write_text("".join(json.dumps({"id": i, "split": split}) + "\n" for i in ids), encoding="utf-8")


def test_refuses_runs_on_different_problems(tmp_path, two_runs):
    es, grpo = two_runs
    write_problems(es / "problems.jsonl", ["a", "b"])
    write_problems(grpo / "problems.jsonl", ["a", "c"])
    with pytest.raises(InputError, match="different train problem sets"):
        report_runs(run_dirs=[es, grpo])
    write_problems(grpo / "problems.jsonl", ["b", "a"])  # same set, other order: comparable
    assert report_runs(run_dirs=[es, grpo])["problem_sets_unchecked"] == 0


def test_refuses_runs_with_different_eval_sets(tmp_path):
    problems = tmp_path / "problems.jsonl"
    problems.write_text("".join(json.dumps({"id": i, "split": s}) + "\n"
                                for i, s in [("a", "train"), ("v", "valid"), ("t", "test")]))
    es = make_run(tmp_path / "es", "es", ES_ITERATIONS, f"data.problems={problems}", "eval.split=valid")
    grpo = make_run(tmp_path / "grpo", "grpo", GRPO_ITERATIONS, f"data.problems={problems}", "eval.split=test")
    with pytest.raises(InputError, match="different eval problem sets"):
        report_runs(run_dirs=[es, grpo])


def test_missing_metrics_names_the_file(tmp_path, two_runs):
    es, grpo = two_runs
    (grpo / "metrics.jsonl").unlink()
    with pytest.raises(InputError, match=re.escape(str(grpo / "metrics.jsonl")) + ": not found"):
        report_runs(run_dirs=[es, grpo])


@pytest.mark.parametrize("bad_line, message", [
    ("{not json", r"not valid JSON"),
    ('{"iteration": 3, "method": "es"}', r"missing task, reward/mean"),
    ('[1, 2]', r"expected a JSON object"),
])
def test_malformed_metrics_line_costs_that_line_only(tmp_path, two_runs, bad_line, message):
    """A bad line is reported by file and line, the rest is reported, and the command exits 1."""
    es, grpo = two_runs
    lines = (es / "metrics.jsonl").read_text().splitlines()
    lines.insert(1, bad_line)   # between iterations 1 and 2: both still reported
    (es / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    result = report_runs(run_dirs=[es, grpo], out_dir=tmp_path / "r")
    assert result["ok"] is False and result["malformed_lines"] == 1
    assert result["malformed"][0]["line"] == 2 and re.search(message, result["malformed"][0]["reason"])
    assert result["runs"][0]["iterations"] == 3   # every good line of the run is still there
    cli = runner.invoke(app, ["report", str(es), str(grpo), "--out", str(tmp_path / "r2")])
    assert cli.exit_code == 1 and "unexpected" not in cli.stderr
    assert f"{es / 'metrics.jsonl'}:2:" in " ".join(cli.stderr.split())


def test_repeated_iteration_is_refused(two_runs):
    es, grpo = two_runs
    first = (es / "metrics.jsonl").read_text().splitlines()[0]
    with (es / "metrics.jsonl").open("a") as handle:
        handle.write(first + "\n")
    with pytest.raises(InputError, match=r"metrics.jsonl:4: iteration 1 after iteration 3"):
        report_runs(run_dirs=[es, grpo])


def test_cli_report_json(tmp_path, two_runs):
    es, grpo = two_runs
    result = runner.invoke(app, ["report", str(es), str(grpo), "--out", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.stderr
    payload = json.loads(result.stdout)
    assert [r["run"] for r in payload["runs"]] == ["es", "grpo"] and "tables" not in payload
    assert Path(payload["plot"]).exists()


def test_cli_report_table_for_humans(two_runs):
    es, grpo = two_runs
    result = runner.invoke(app, ["report", str(es), str(grpo)])
    assert result.exit_code == 0 and result.stdout == ""
    err = " ".join(result.stderr.split())
    assert "training diagnostic, not the comparison" in err and "500.0" in err and "40.0" in err


def test_cli_report_refusal_is_one_error_line(tmp_path):
    es = make_run(tmp_path / "es", "es", ES_ITERATIONS)
    lean = make_run(tmp_path / "lean", "grpo", GRPO_ITERATIONS, "data.task=lean")
    result = runner.invoke(app, ["report", str(es), str(lean), "--json"])
    assert result.exit_code == 1  # with --json, the failure as one JSON object on stdout (README "Exit codes")
    assert json.loads(result.stdout)["ok"] is False and "different tasks" in json.loads(result.stdout)["error"]
    assert "Error:" in result.stderr and "different tasks" in result.stderr and "Traceback" not in result.stderr


# --------------------------------------------------------------------------------------------
# Several seeds per method: arms, bands, the base point, paired differences (known answers)
# --------------------------------------------------------------------------------------------

def counts_for(rate: float, problems: int = 10, per: int = 4) -> list[int]:
    """Per-problem verified counts (of `per` samples) whose mean rate is `rate` exactly."""
    total = round(rate * problems * per)
    return [min(per, max(0, total - per * i)) for i in range(problems)]


def make_eval_run(run_dir: Path, method: str, seed: int, evals: dict, *overrides: str, steps: int = 4,
                  samples_per_step: int = 8) -> Path:
    """A run whose evaluations are given per iteration as (sampled rate, greedy rate); iteration 0 = the base.

    Every seed has its own 10 held-out problems (`s<seed>-p<i>`), 4 samples each for the sampled
    metric; the per-problem results are laid out so the rates are exact."""
    from prover_cli.comparison.stats import rate_interval

    run_dir.mkdir(parents=True)
    config = load_config(None, ["data.task=countdown", f"run.dir={run_dir}", f"run.seed={seed}", "run.eval_n=4",
                                "run.eval_temperature=0.7", *overrides])
    (run_dir / "config.toml").write_text(config.to_toml(), encoding="utf-8")

    def evaluation(sampled: float, greedy: float) -> dict:
        counts, bits = counts_for(sampled), counts_for(greedy, per=1)
        ids = [f"s{seed}-p{i}" for i in range(10)]
        record = {"eval/verified_rate": sum(counts) / 40, "eval/greedy_verified_rate": sum(bits) / 10,
                  "eval/samples": 40, "eval/problems": 10, "eval/by_problem": {k: [c, b] for k, c, b in zip(ids, counts, bits)}}
        record["eval/verified_rate_lo"], record["eval/verified_rate_hi"] = rate_interval(counts, 4)[1:]
        record["eval/greedy_verified_rate_lo"], record["eval/greedy_verified_rate_hi"] = rate_interval(bits, 1)[1:]
        return record

    lines = []
    if 0 in evals:
        lines.append({"iteration": 0, "method": method, "task": "countdown", "samples": 0, "samples/total": 0,
                      "time/wall_s": 0.0, "time/elapsed_s": 0.0, **evaluation(*evals[0])})
    for i in range(1, steps + 1):
        record = {"iteration": i, "method": method, "task": "countdown", "reward/mean": 0.1 * i, "reward/max": 1.0,
                  "verify/verified": i, "samples": samples_per_step, "samples/total": i * samples_per_step,
                  "tokens/total": 10 * i * samples_per_step, "time/wall_s": 10.0, "time/elapsed_s": 10.0 * i}
        if i in evals:
            record.update(evaluation(*evals[i]))
        lines.append(record)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return run_dir


# Per seed: base, ES final, GRPO final, ES-null final; sampled rate (greedy = sampled + 0.1).
SEEDS = {0: (0.20, 0.30, 0.20, 0.20), 1: (0.20, 0.40, 0.40, 0.20), 2: (0.20, 0.50, 0.30, 0.30)}
T2 = 4.30265272975  # Student's t 0.975 quantile, 2 degrees of freedom


@pytest.fixture
def seeded_runs(tmp_path):
    dirs = []
    for seed, (base, es, grpo, null) in SEEDS.items():
        for name, method, final, extra in (("es", "es", es, ()), ("grpo", "grpo", grpo, ()),
                                           ("es-null", "es", null, ("es.shuffle_rewards=true",))):
            evals = {0: (base, base + 0.1), 2: ((base + final) / 2, (base + final) / 2 + 0.1), 4: (final, final + 0.1)}
            dirs.append(make_eval_run(tmp_path / f"seed{seed}" / name, method, seed, evals, *extra))
    return dirs


def band(values):
    mean = sum(values) / len(values)
    sd = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
    return mean, mean - T2 * sd / len(values) ** 0.5, mean + T2 * sd / len(values) ** 0.5


def test_seeds_aggregate_per_arm_with_t_intervals_and_the_base(tmp_path, seeded_runs):
    result = report_runs(run_dirs=seeded_runs, out_dir=tmp_path / "out")
    arms = {a["arm"]: a for a in result["arms"]}
    assert list(arms) == ["es", "grpo", "es null"] and arms["es null"]["null_control"] is True
    assert arms["es"]["seeds"] == [0, 1, 2] and arms["es"]["runs"] == ["es", "es", "es"]

    es = arms["es"]["heldout"]["sampled"]
    finals = [v[1] for v in SEEDS.values()]
    mean, low, high = band(finals)
    assert (es["final"]["mean"], es["final"]["lo"], es["final"]["hi"]) == pytest.approx((mean, low, high))
    assert (es["base"]["mean"], es["base"]["lo"], es["base"]["hi"]) == pytest.approx((0.20, 0.20, 0.20))
    gain = band([f - 0.20 for f in finals])
    assert (es["gain"]["mean"], es["gain"]["lo"], es["gain"]["hi"]) == pytest.approx(gain)
    assert es["gain"]["basis"] == "t over 3 seeds"
    # The curve per sample budget: the base at 0, then every budget all seeds were evaluated at.
    assert [p["samples"] for p in es["curve"]] == [0, 16, 32]
    assert [p["mean"] for p in es["curve"]] == pytest.approx([0.20, 0.30, 0.40])
    greedy = arms["grpo"]["heldout"]["greedy"]
    assert greedy["final"]["mean"] == pytest.approx(0.40) and greedy["base"]["mean"] == pytest.approx(0.30)

    saved = json.loads((tmp_path / "out" / "report.json").read_text())
    assert saved["arms"] == json.loads(json.dumps(result["arms"])) and "note" not in result


def test_paired_differences_es_minus_grpo_and_each_method_minus_its_null(tmp_path, seeded_runs):
    result = report_runs(run_dirs=seeded_runs, out_dir=tmp_path / "out")
    diffs = {d["name"]: d for d in result["differences"]}
    assert list(diffs) == ["es - grpo", "es - es null", "grpo - es null"]
    for name, index in (("es - grpo", 2), ("es - es null", 3)):
        expected = band([v[1] - v[index] for v in SEEDS.values()])
        for metric in ("sampled", "greedy"):  # greedy = sampled + 0.1 on both sides: the same differences
            d = diffs[name][metric]
            assert (d["mean"], d["lo"], d["hi"]) == pytest.approx(expected, abs=1e-12), (name, metric)
            assert d["pairs"] == 3 and diffs[name]["seeds"] == [0, 1, 2]
    # es - grpo: +0.100 (-0.148..+0.348), not clear of zero; es - null: +0.167 (+0.023..+0.310), clear.
    assert diffs["es - grpo"]["sampled"]["lo"] < 0 < diffs["es - es null"]["sampled"]["lo"]

    tables = {t["title"].split(":")[0].split(" (")[0]: t for t in result["tables"]}
    held = tables["held-out verified rate"]
    row = dict(zip(held["columns"], held["rows"][0]))
    assert row["arm"] == "es" and row["seeds"] == 3 and row["sampled"] == "0.200 -> 0.400 (0.152..0.648)"
    assert held["rows"][0][4] == "+0.200 (-0.048..+0.448)"
    rows = {r[0]: r for r in tables["paired difference at the final evaluation, same held-out problems"]["rows"]}
    assert rows["es - grpo"][2] == "+0.100 (-0.148..+0.348)" and rows["es - grpo"][4] == "t over 3 seeds"
    assert rows["es - es null"][2] == "+0.167 (+0.023..+0.310)"


def test_one_seed_per_arm_pairs_problem_by_problem_and_says_it_cannot_decide(tmp_path):
    from prover_cli.comparison.stats import mean_interval

    es = make_eval_run(tmp_path / "es", "es", 7, {0: (0.2, 0.2), 4: (0.5, 0.4)})
    grpo = make_eval_run(tmp_path / "grpo", "grpo", 7, {0: (0.2, 0.2), 4: (0.3, 0.4)})
    result = report_runs(run_dirs=[es, grpo], out_dir=tmp_path / "out")
    (diff,) = result["differences"]
    # Per problem (4 samples each): es counts 4,4,4,4,4,0,... grpo 4,4,4,0,...: differences 0,0,0,1,1,0,...
    per_problem = [a / 4 - b / 4 for a, b in zip(counts_for(0.5), counts_for(0.3))]
    mean, low, high = mean_interval(per_problem)
    assert (diff["sampled"]["mean"], diff["sampled"]["lo"], diff["sampled"]["hi"]) == pytest.approx((0.2, low, high))
    assert diff["sampled"]["basis"] == "t over 10 problems (one seed)"
    assert diff["greedy"]["mean"] == 0 and diff["greedy"]["lo"] == diff["greedy"]["hi"] == 0  # identical bits
    final = result["arms"][0]["heldout"]["sampled"]["final"]  # one run: its own interval
    assert (final["lo"], final["hi"]) == (json.loads((es / "metrics.jsonl").read_text().splitlines()[-1])[
        "eval/verified_rate_lo"], json.loads((es / "metrics.jsonl").read_text().splitlines()[-1])["eval/verified_rate_hi"])
    assert "cannot say which method is better" in result["note"] and "prover study run" in result["note"]
    assert result["tables"][0]["title"].startswith("held-out verified rate")  # the headline: held-out
    assert result["tables"][-1]["title"].startswith("training diagnostic") and result["tables"][-1]["title"].endswith(
        "per run")  # one run per arm: the per-run diagnostic


def test_plot_draws_bands_and_the_base_point(tmp_path, seeded_runs):
    from matplotlib.collections import PolyCollection

    from prover_cli.comparison.report_figure import build_figure
    from prover_cli.comparison.run_reader import load_run

    fig = build_figure([load_run(d) for d in seeded_runs])
    axes = fig.axes
    assert len(axes) == 9
    sampled_samples = axes[0]  # row 1 (held-out, sampled), column 1 (samples)
    curves = [line for line in sampled_samples.get_lines() if line.get_label() != "base (iteration 0)"]
    assert [c.get_label() for c in curves] == ["es (3 seeds)", "grpo (3 seeds)", "es null (3 seeds)"]
    steps = list(curves[0].get_xdata())
    assert steps[0] == 0 and len(steps) == 3 and list(curves[0].get_ydata()) == pytest.approx([0.2, 0.3, 0.4])
    assert sum(isinstance(c, PolyCollection) for c in sampled_samples.collections) == 3  # one band per arm
    (star,) = [line for line in sampled_samples.get_lines() if line.get_label() == "base (iteration 0)"]
    assert list(star.get_xdata()) == [0] and list(star.get_ydata()) == pytest.approx([0.2])
    greedy_star = [line for line in axes[3].get_lines() if line.get_label() == "base (iteration 0)"][0]
    assert list(greedy_star.get_ydata()) == pytest.approx([0.3])
    assert not any(isinstance(c, PolyCollection) for c in axes[6].collections)  # training reward: means only


def test_arms_of_one_method_are_named_by_what_differs_and_duplicate_seeds_are_refused(tmp_path):
    a = make_eval_run(tmp_path / "a", "es", 0, {0: (0.2, 0.2), 4: (0.3, 0.3)}, "es.sigma=0.01")
    b = make_eval_run(tmp_path / "b", "es", 0, {0: (0.2, 0.2), 4: (0.3, 0.3)}, "es.sigma=0.003")
    c = make_eval_run(tmp_path / "c", "es", 0, {0: (0.2, 0.2), 4: (0.3, 0.3)}, "es.sigma=0.003", "es.snapshot_every=5")
    g = make_eval_run(tmp_path / "g", "grpo", 0, {0: (0.2, 0.2), 4: (0.3, 0.3)})
    result = report_runs(run_dirs=[a, b, g], out_dir=tmp_path / "out")
    assert [x["arm"] for x in result["arms"]] == ["es (sigma=0.01)", "es (sigma=0.003)", "grpo"]
    assert [d["name"] for d in result["differences"]] == ["es (sigma=0.01) - grpo", "es (sigma=0.003) - grpo"]
    with pytest.raises(InputError, match="two runs of arm 'es' with run.seed = 0"):
        report_runs(run_dirs=[b, c, g], out_dir=tmp_path / "out2")  # snapshot cadence: the same arm


# --------------------------------------------------------------------------------------------
# The limited-data question (issue #31): arms per training-set size, paired on one test set
# --------------------------------------------------------------------------------------------

# Per seed: (base, final) sampled rates of ES on all training problems, ES on 4, GRPO on all, GRPO on 4.
SIZES = {0: (0.2, 0.5, 0.4, 0.3, 0.2), 1: (0.2, 0.4, 0.3, 0.4, 0.3), 2: (0.2, 0.6, 0.3, 0.3, 0.3)}


@pytest.fixture
def sized_runs(tmp_path):
    dirs = []
    for seed, (base, es_all, es_4, grpo_all, grpo_4) in SIZES.items():
        for name, method, final, size in (("es", "es", es_all, 0), ("es-4", "es", es_4, 4),
                                          ("grpo", "grpo", grpo_all, 0), ("grpo-4", "grpo", grpo_4, 4)):
            evals = {0: (base, base), 4: (final, final)}
            dirs.append(make_eval_run(tmp_path / f"seed{seed}" / name, method, seed, evals, f"data.train_size={size}"))
    return dirs


def test_runs_of_different_training_set_sizes_are_arms_of_their_own_paired_by_seed(tmp_path, sized_runs):
    result = report_runs(run_dirs=sized_runs, out_dir=tmp_path / "out")
    arms = {a["arm"]: a for a in result["arms"]}
    assert list(arms) == ["es (data.train_size=all)", "es (data.train_size=4)", "grpo (data.train_size=all)",
                          "grpo (data.train_size=4)"]
    assert [arms[name]["train_size"] for name in arms] == [0, 4, 0, 4]
    assert all(a["seeds"] == [0, 1, 2] for a in arms.values())  # never one arm of mixed sizes
    diffs = {d["name"]: d for d in result["differences"]}
    # ES - GRPO at each size, never across sizes; each method's limited-data contrast, less data first.
    assert {name: d["contrast"] for name, d in diffs.items()} == {
        "es (data.train_size=all) - grpo (data.train_size=all)": "method",
        "es (data.train_size=4) - grpo (data.train_size=4)": "method",
        "es (data.train_size=4) - es (data.train_size=all)": "training-set size",
        "grpo (data.train_size=4) - grpo (data.train_size=all)": "training-set size"}
    limited = diffs["es (data.train_size=4) - es (data.train_size=all)"]["sampled"]
    expected = band([v[2] - v[1] for v in SIZES.values()])  # what limiting ES to 4 problems cost
    assert (limited["mean"], limited["lo"], limited["hi"]) == pytest.approx(expected, abs=1e-12)
    assert limited["pairs"] == 3 and limited["basis"] == "t over 3 seeds"
    table = next(t for t in result["tables"] if t["title"].startswith("paired difference"))
    contrast = {row[0]: row[table["columns"].index("contrast")] for row in table["rows"]}
    assert contrast["grpo (data.train_size=4) - grpo (data.train_size=all)"] == "training-set size"


def test_a_differing_arm_key_never_merges_two_settings_into_one_arm(tmp_path):
    """Any resolved config key outside the allowlist of per-run keys (seed, paths, resources) splits the arm."""
    evals = {0: (0.2, 0.2), 4: (0.3, 0.3)}
    runs = [make_eval_run(tmp_path / "a0", "es", 0, evals, "data.train_size=8"),
            make_eval_run(tmp_path / "a1", "es", 1, evals, "data.train_size=8", "es.snapshot_every=3",
                          "verify.workers=2"),  # how a run saves and runs: the same arm
            make_eval_run(tmp_path / "b0", "es", 0, evals, "data.train_size=16"),
            make_eval_run(tmp_path / "c0", "es", 0, evals, "data.train_size=8", "generate.max_tokens=33")]
    result = report_runs(run_dirs=runs, out_dir=tmp_path / "out")
    assert [(a["arm"], a["seeds"]) for a in result["arms"]] == [
        ("es (data.train_size=8, generate.max_tokens=8192)", [0, 1]),
        ("es (data.train_size=16, generate.max_tokens=8192)", [0]),
        ("es (data.train_size=8, generate.max_tokens=33)", [0])]
    assert [d["contrast"] for d in result["differences"]] == ["training-set size"]  # max_tokens differs: not a contrast


def test_pairing_runs_whose_held_out_sets_differ_is_refused(tmp_path):
    """The test set's content fingerprint travels in every evaluation (eval/problems_sha256): two runs of one
    seed whose fingerprints differ are never paired, even where their problems files cannot be found."""
    evals = {0: (0.2, 0.2), 4: (0.3, 0.3)}
    es = make_eval_run(tmp_path / "es", "es", 0, evals, "data.problems=gone.jsonl")
    grpo = make_eval_run(tmp_path / "grpo", "grpo", 0, evals, "data.problems=gone.jsonl")
    for run_dir, sha in ((es, "aaaaaaaaaaaaaaaa"), (grpo, "bbbbbbbbbbbbbbbb")):
        lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        for line in lines:
            if "eval/verified_rate" in line:
                line["eval/problems_sha256"] = sha
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    with pytest.raises(InputError, match=r"held-out sets differ \(eval/problems_sha256 aaaaaaaaaaaaaaaa vs "
                                         r"bbbbbbbbbbbbbbbb\)") as error:
        report_runs(run_dirs=[es, grpo], out_dir=tmp_path / "out")
    assert str(es) in str(error.value) and "run.eval_problems_seed" in error.value.hint


def test_the_training_numbers_are_a_diagnostic_labelled_with_each_methods_decoding(tmp_path):
    evals = {0: (0.2, 0.2), 4: (0.3, 0.3)}
    runs = [make_eval_run(tmp_path / "es", "es", 0, evals, "es.population=16", "es.problems_per_iteration=8"),
            make_eval_run(tmp_path / "es-t", "es", 0, evals, "es.member_temperature=0.7", "es.samples_per_problem=2"),
            make_eval_run(tmp_path / "grpo", "grpo", 0, evals, "grpo.temperature=0.7", "grpo.num_generations=4")]
    result = report_runs(run_dirs=runs, out_dir=tmp_path / "out")
    titles = [t["title"] for t in result["tables"]]
    assert titles[0].startswith("held-out verified rate")  # the headline: the held-out comparison
    assert not any(t.startswith("training diagnostic") for t in titles[:-1])
    diagnostic = result["tables"][-1]
    assert diagnostic["title"] == ("training diagnostic, not the comparison: verified samples of the training "
                                   "problems, each method's own decoding, per run")
    assert {"per iter", "per 1k samples", "decoding"} <= set(diagnostic["columns"])
    decoding = {row[0]: row[diagnostic["columns"].index("decoding")] for row in diagnostic["rows"]}
    assert decoding == {"es": "16 members, each greedy (temperature 0), 8 problems x 1 sample(s)",
                        "es-t": f"{load_config(None).es.population} members, each sampled at temperature 0.7, "
                                f"{load_config(None).es.problems_per_iteration} problems x 2 sample(s)",
                        "grpo": "sampled at temperature 0.7, 4 per prompt"}
    # make_eval_run: iteration i verifies i samples of 8: 10 in 4 iterations, 10 / 32 samples.
    row = dict(zip(diagnostic["columns"], diagnostic["rows"][0]))
    assert (row["per iter"], row["per 1k samples"]) == ("2.50", "312.5")
    by_run = {s["run"]: s for s in result["runs"]}
    assert by_run["grpo"]["decoding"] == "sampled at temperature 0.7, 4 per prompt"


def test_real_es_runs_of_two_training_set_sizes_share_one_test_set_and_pair(tmp_path):
    """The trainer's path, not made-up metrics: two tiny ES runs of one seed, on all training problems
    and on 4 of them, record one test-set fingerprint and the report pairs them as a size contrast."""
    from prover_cli.tasks.datasets import prepare_data
    from prover_cli.es.train import train_es
    from prover_cli.training.metrics import read_metrics

    tiny = Path(__file__).parent / "configs" / "tiny.toml"
    dirs = []
    for size in (0, 4):
        config = load_config(tiny, [f"run.dir={tmp_path / f'es-{size}'}", f"model.cache_dir={tmp_path / 'cache'}",
                                    f"data.problems={tmp_path / 'problems.jsonl'}", "task.countdown.problems=200",
                                    "es.iterations=1", "es.population=2", "es.problems_per_iteration=3",
                                    "run.eval_every=1", "run.eval_problems=5", f"data.train_size={size}"])
        if size == 0:
            prepare_data(config)
        train_es(config)
        dirs.append(config.run_dir)
    fingerprints = {r["eval/problems_sha256"] for d in dirs for r in read_metrics(d) if "eval/problems" in r}
    assert len(fingerprints) == 1
    result = report_runs(run_dirs=dirs, out_dir=tmp_path / "out")
    assert result["problem_sets_unchecked"] == 0
    (diff,) = result["differences"]
    assert (diff["name"], diff["contrast"]) == ("es (data.train_size=4) - es (data.train_size=all)", "training-set size")
