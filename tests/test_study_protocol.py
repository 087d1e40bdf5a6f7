"""The study protocol a reviewer would demand (#41): the registration locked into study.json at the
first run and a changed one refused; tuning on a dev split carved out of training with the same
budget for every method, every setting reported and the choice frozen before any test run; base and
null anchors registered by default, a non-inferiority verdict only beside a comparator that beat its
base; curves with >= 5 points and a paired-difference panel; the report directory written whole or
not at all; every fault refused at `plan` with the file and key named, before anything is written;
one comparison rule (prover_cli/comparison/compare.py) for `prover report` and `prover study`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prover_cli.cli import app
from prover_cli.errors import ConfigError, InputError, UsageError
from prover_cli.comparison.study.design import BASE, Comparison
from prover_cli.comparison.study.plan import plan_study
from prover_cli.comparison.study.power import power_of, power_table
from prover_cli.comparison.study.registration import read_record
from prover_cli.comparison.study.report import _exploratory_entry, _verdict, report_study
from prover_cli.comparison.study.run import run_study
from prover_cli.comparison.study.runs import run_state
from prover_cli.comparison.study.study_file import load_study

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "configs" / "tiny.toml"
runner = CliRunner()

# 5 ES iterations / GRPO steps of 4 samples each, evaluated after every one: 5 points per curve.
SETS = ["generate.max_tokens=8", "grpo.max_completion_length=8", "run.eval_every=1", "es.iterations=5",
        "es.population=2", "es.problems_per_iteration=2", "grpo.steps=5", "grpo.num_generations=2",
        "grpo.per_device_train_batch_size=4", "task.countdown.problems=96"]
ARMS = """
[arms.es]
method = "es"
[arms.grpo]
method = "grpo"
[arms.es-null]
method = "es"
set = ["es.shuffle_rewards=true"]
[arms.grpo-null]
method = "grpo"
set = ["grpo.shuffle_rewards=true"]
"""
TUNE = """
[tune]
seeds = [100]
dev_problems = 4
es = [["es.sigma=0.01"], ["es.sigma=0.03", "es.learning_rate=0.01"]]
grpo = [["grpo.learning_rate=1e-4"], ["grpo.learning_rate=3e-4"]]
"""
PRIMARY = """
[[primary]]
a = "es"
b = "grpo"
size = 4
metric = "greedy"
test = "non-inferiority"
margin = 0.1
"""


def text(directory: Path, *, study: str = "", arms: str = ARMS, tune: str = TUNE, primary: str = PRIMARY,
         sizes: str = "[4, 8]", seeds: str = "[0, 1]", name: str = "proto", where: str | None = None) -> str:
    sets = json.dumps([*SETS, f"model.cache_dir={REPO / '.prover-cache'}"])
    where = json.dumps(str(directory)) if where is None else where
    return (f'[study]\nname = "{name}"\nconfig = "{TINY}"\ndir = {where}\nseeds = {seeds}\n'
            f"train_sizes = {sizes}\nset = {sets}\n{study}\n{arms}\n{tune}\n{primary}\n")


def write(tmp_path: Path, **kwargs) -> Path:
    path = tmp_path / "study.toml"
    path.write_text(text(tmp_path / "study", **kwargs), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    tmp_path = tmp_path_factory.mktemp("proto")
    path = write(tmp_path)
    study = load_study(path)
    run = run_study(study)
    return path, load_study(path), run, report_study(load_study(path))


# -- tuning ---------------------------------------------------------------------------------------

def test_tuning_runs_first_on_a_dev_split_carved_out_of_training(done):
    from prover_cli.fsio.jsonl import load_jsonl_strict
    from prover_cli.tasks.problems import content_key

    path, study, run, report = done
    assert run["tune"]["trained"] == 4 and run["trained"] == 16
    study_rows = load_jsonl_strict(study.dir / "problems.jsonl")
    tune_rows = load_jsonl_strict(study.dir / "tune" / "problems.jsonl")
    test = {content_key(p) for p in study_rows if p["split"] == "valid"}
    dev = {content_key(p) for p in tune_rows if p["split"] == "valid"}
    trained = {content_key(p) for p in study_rows if p["split"] == "train"}
    assert len(dev) == 4 and dev <= trained and not dev & test                 # carved out of training
    assert not test & {content_key(p) for p in tune_rows}                       # the test set is not there at all
    # every setting of both methods reported with its dev result, the choice marked once per method
    table = next(t for t in report["tables"] if t["title"].startswith("tuning on the dev split"))
    assert [(r[0], r[1]) for r in table["rows"]] == [("es", 0), ("es", 1), ("grpo", 0), ("grpo", 1)]
    assert sum(r[-1] == "CHOSEN" for r in table["rows"]) == 2 and len({r[3] for r in table["rows"]}) == 1
    chosen = json.loads((study.dir / "tune" / "chosen.json").read_text(encoding="utf-8"))["chosen"]
    assert study.chosen == chosen
    # frozen into the registration, and applied to every arm of the method, its null arm too
    record = read_record(study)
    assert record["registration"]["tune"]["chosen"] == chosen
    sigma = {0: 0.01, 1: 0.03}[chosen["es"]]
    for arm in ("es", "es-null"):
        config = (study.dir / "runs" / arm / "n4" / "seed0" / "config.toml").read_text(encoding="utf-8")
        assert re.search(rf"^sigma = {sigma}$", config, re.M)


def test_a_test_set_a_tuning_run_was_scored_on_is_refused(done):
    path, study, _, _ = done
    metrics = study.dir / "tune" / "runs" / "es" / "k0" / "seed100" / "metrics.jsonl"
    before = metrics.read_text(encoding="utf-8")
    test_sha = read_record(study)["test_set"]["heldout_sha256"]
    try:
        metrics.write_text(before + json.dumps({"iteration": 9, "eval/problems_sha256": test_sha}) + "\n",
                           encoding="utf-8")
        with pytest.raises(InputError, match="scored on the study's test set"):
            run_study(load_study(path))
    finally:
        metrics.write_text(before, encoding="utf-8")


def test_tuning_budgets_must_be_equal_and_seeds_fresh(tmp_path):
    unequal = TUNE.replace('grpo = [["grpo.learning_rate=1e-4"], ["grpo.learning_rate=3e-4"]]',
                           'grpo = [["grpo.learning_rate=1e-4"], ["grpo.learning_rate=3e-4"], ["grpo.learning_rate=1e-3"]]')
    with pytest.raises(ConfigError, match=r"study\.toml: tune: unequal tuning budgets"):
        load_study(write(tmp_path, tune=unequal))
    samples = TUNE.replace('["es.sigma=0.01"]', '["es.sigma=0.01", "es.population=4"]')
    with pytest.raises(ConfigError, match=r"tune: unequal tuning budgets"):
        load_study(write(tmp_path, tune=samples))
    with pytest.raises(ConfigError, match=r"tune\.seeds: \[0\] are also study\.seeds"):
        load_study(write(tmp_path, tune=TUNE.replace("seeds = [100]", "seeds = [0]")))
    with pytest.raises(ConfigError, match=r"arms\.es\.set: 'es\.sigma=0\.02' sets a key that \[tune\] chooses"):
        load_study(write(tmp_path, arms=ARMS.replace('method = "es"\n[arms.grpo]',
                                                     'method = "es"\nset = ["es.sigma=0.02"]\n[arms.grpo]')))


# -- the locked registration ----------------------------------------------------------------------

def test_a_changed_registration_is_refused_by_report_and_run(done, tmp_path):
    path, study, _, _ = done
    original = path.read_text(encoding="utf-8")
    try:
        path.write_text(original.replace('metric = "greedy"', 'metric = "sampled"'), encoding="utf-8")
        with pytest.raises(UsageError, match=r"registration changed since the study's first run.*primary\[0\]\.metric: "
                                             r'"greedy" -> "sampled"'):
            report_study(load_study(path))
        result = runner.invoke(app, ["study", "report", str(path)])
        assert result.exit_code != 0 and "registration changed" in result.stderr
        with pytest.raises(UsageError, match="registration changed"):
            run_study(load_study(path))
        path.write_text(original.replace("margin = 0.1", "margin = 0.2"), encoding="utf-8")
        with pytest.raises(UsageError, match=r"primary\[0\]\.margin: 0\.1 -> 0\.2"):
            plan_study(load_study(path))
    finally:
        path.write_text(original, encoding="utf-8")
    assert report_study(load_study(path))["primary"][0]["name"] == "es@n4 - grpo@n4 (greedy)"


@pytest.mark.parametrize("content, why", [("", "not valid JSON"), ('{"study": "pro', "not valid JSON"),
                                          ("[]", "holds a JSON list"), ('{"study": "x"}', "no 'registration'")])
def test_a_damaged_study_json_is_named_not_unexpected(done, content, why):
    path, study, _, _ = done
    record = study.dir / "study.json"
    before = record.read_text(encoding="utf-8")
    try:
        record.write_text(content, encoding="utf-8")
        for command in ("plan", "report", "run"):
            result = runner.invoke(app, ["study", command, str(path)])
            assert result.exit_code != 0 and f"{record}: " in result.stderr and why in result.stderr
            assert "unexpected" not in result.stderr
    finally:
        record.write_text(before, encoding="utf-8")


def test_a_study_run_json_holding_a_list_is_a_stale_run_not_a_block(done):
    _, study, _, _ = done
    from prover_cli.comparison.study.run_configs import run_config

    config = run_config(study, study.arms["es"], 4, 0)
    done_file = Path(config.run.dir) / "study-run.json"
    before = done_file.read_text(encoding="utf-8")
    try:
        done_file.write_text("[]", encoding="utf-8")
        state, why = run_state(config)
        assert state == "stale" and "holds a list" in why
    finally:
        done_file.write_text(before, encoding="utf-8")


# -- anchors and the verdict -------------------------------------------------------------------------

def test_anchors_are_registered_and_shown(done):
    _, study, _, report = done
    names = [c.name for c in study.secondary]
    for arm in ("es", "grpo"):
        for n in (4, 8):
            assert f"{arm}@n{n} - base (greedy)" in names and f"{arm}@n{n} - {arm}-null@n{n} (greedy)" in names
    anchors = next(t for t in report["tables"] if t["title"].startswith("ANCHORS"))
    assert len(anchors["rows"]) == 8
    base = next(e for e in report["secondary"] if e["name"] == "es@n4 - base (greedy)")
    assert base["budget"]["a"]["samples"] == 20 and base["budget"]["b"]["samples"] == 0


def test_a_method_without_a_null_arm_is_refused_unless_anchors_are_off(tmp_path):
    arms = '[arms.es]\nmethod = "es"\n[arms.grpo]\nmethod = "grpo"\n[arms.grpo-null]\nmethod = "grpo"\n' \
           'set = ["grpo.shuffle_rewards=true"]\n'
    with pytest.raises(ConfigError, match=r"study\.toml: arms: arm es \(es\) has no null arm"):
        load_study(write(tmp_path, arms=arms))
    assert load_study(write(tmp_path, arms=arms, study="anchors = false")).secondary == []


def test_non_inferiority_is_printed_only_beside_a_comparator_that_beat_its_base():
    entry = {"name": "es@n16 - grpo@n16 (greedy)", "test": "non-inferiority", "margin": 0.05, "alpha": 0.05,
             "mean": 0.01, "b": "grpo", "role": "primary"}
    flat = {"mean": -0.02, "lo": -0.05, "hi": 0.01}
    text_flat = _verdict(entry, 0.001, flat)
    assert "NO VERDICT" in text_flat and "did not beat its base" in text_flat and "non-inferior within" not in text_flat
    text_up = _verdict(entry, 0.001, {"mean": 0.08, "lo": 0.03, "hi": 0.13})
    assert "non-inferior within 0.05" in text_up and "beat its base by +0.080" in text_up
    assert "NO VERDICT" in _verdict(entry, 0.001, None)


# -- figures, report directory, exploratory ---------------------------------------------------------

def test_the_figures_pass_the_layout_check(done):
    _, study, _, report = done
    layout = report["layout"]
    assert sorted(layout["files"]) == ["curves_samples.png", "curves_seconds.png", "curves_tokens.png",
                                       "limited_data.png"]
    assert not any("iteration" in name for name in layout["files"])
    assert layout["min_points"] >= 5 and all(n >= 5 for n in layout["curves"]["curves_samples.png"].values())
    assert "es@n4 - grpo@n4 (greedy)" in layout["difference_panels"]["greedy"]
    assert "es@n4 - es-null@n4 (greedy)" in layout["difference_panels"]["greedy"]
    assert all((study.dir / "report" / name).stat().st_size > 0 for name in layout["files"])
    import os

    umask = os.umask(0)
    os.umask(umask)
    assert (study.dir / "report").stat().st_mode & 0o777 == 0o777 & ~umask   # not mkdtemp's 0700
    data = next(t for t in report["tables"] if t["title"].startswith("limited data"))
    assert data["columns"][4:] == [f"{b:,} samples" for b in range(0, 24, 4)]   # sizes x budgets


def test_the_report_directory_is_written_whole_or_not_at_all(done, monkeypatch):
    from prover_cli.comparison.study import report as module

    path, study, _, _ = done
    out = study.dir / "report"
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def killed(*args, **kwargs):
        raise KeyboardInterrupt   # as a Ctrl-C while the figures are drawn

    monkeypatch.setattr(module, "plot_study", killed)
    with pytest.raises(KeyboardInterrupt):
        report_study(load_study(path))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before      # the old report, whole
    assert [p.name for p in study.dir.iterdir() if p.name.startswith(".report")] == []


def test_an_exploratory_pair_that_cannot_be_compared_is_listed_not_fatal(tmp_path):
    study = load_study(write(tmp_path))

    def run(seed: int, samples: int) -> dict:
        evaluation = {"eval/greedy_verified_rate": 0.5, "eval/by_problem": {"p1": [1, 1], "p2": [0, 0]},
                      "eval/samples": 2, "eval/problems": 2}
        return {"dir": Path(f"r{seed}-{samples}"), "seed": seed,
                "records": [{"iteration": 0, "samples/total": 0, **evaluation},
                            {"iteration": 1, "samples/total": samples, **evaluation}]}

    loaded = {("es", 4, s): run(s, 20) for s in (0, 1)} | {("grpo", 4, s): run(s, 200) for s in (0, 1)}
    entry = _exploratory_entry(study, Comparison("es", 4, "grpo", 4, "greedy", role="exploratory"), loaded)
    assert entry["not_comparable"] and "more than 5% apart" in entry["not_comparable"]


# -- power -------------------------------------------------------------------------------------------

def test_the_power_table_says_lower_bound_when_the_training_variance_was_clipped():
    c = Comparison("es", 0, "grpo", 0, "greedy", margin=0.05)
    # seed means all equal (0.1), per-problem spread large: between-seed variance 0 < within / N
    per_seed = [[1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]] * 2 + [[0.0] * 9 + [1.0]]
    power = power_of(c, per_seed, "pilot")
    assert power["var_train_clipped"] and power["bound"] == "lower"
    row = power_table([power], "t")["rows"][0]
    assert "(lower bound)" in row[5] and "(upper bound)" in row[4] and row[4].startswith("<= ")
    assert "LOWER BOUND" in row[7] and ">= 5 pilot seeds" in row[7]
    spread = [[0.3] * 10, [0.0] * 9 + [0.1], [0.1] * 10, [0.2] * 10, [0.05] * 10]
    fine = power_of(c, spread, "pilot")
    assert fine["bound"] is None and fine["pilot_notes"] == []


# -- faults refused at plan, before anything is written ----------------------------------------------

@pytest.mark.parametrize("change, key, why", [
    (dict(where='""'), "study.dir", "the study's own directory is needed"),
    (dict(where='"."'), "study.dir", "the study's own directory is needed"),
    (dict(name="../escape"), "study.name", "a study name is letters"),
    (dict(seeds=json.dumps(list(range(1001)))), "study.seeds", "at most 1,000"),
    (dict(sizes="[4, 1000000]"), "study.train_sizes", "1,000,000 but the training split"),
    (dict(study="min_test_problems = 200"), "study.min_test_problems", "fewer than 200"),
    (dict(arms=ARMS.replace('method = "es"\n[arms.grpo]', 'method = "es"\nset = ["data.valid_split=train"]\n[arms.grpo]')),
     "arms.es", "the test set would be the training set"),
    (dict(tune=TUNE.replace("dev_problems = 4", "dev_problems = 5000")), "tune.dev_problems", "to carve them from"),
])
def test_faults_are_refused_at_plan_naming_file_and_key(tmp_path, change, key, why):
    path = write(tmp_path, **change)
    result = runner.invoke(app, ["study", "plan", str(path)])
    assert result.exit_code == 2, result.output
    assert f"{path}: {key}" in result.stderr and why in result.stderr, result.stderr
    assert not (tmp_path / "study").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["study.toml"]


def test_plan_refuses_a_device_or_huge_study_file():
    result = runner.invoke(app, ["study", "plan", "/dev/zero"])
    assert result.exit_code == 2 and "not a regular file" in result.stderr


def test_an_arm_in_no_registered_comparison_is_noted_by_plan(tmp_path):
    arms = ARMS + '[arms.es-long]\nmethod = "es"\nset = ["es.iterations=9"]\n'
    # anchored (the default), a third arm of another budget is refused at plan: its anchor is registered
    with pytest.raises(ConfigError, match=r"secondary es-long@n4 - es-null@n4 \(greedy\): unequal budgets, 36 against 20"):
        load_study(write(tmp_path, arms=arms))
    plan = plan_study(load_study(write(tmp_path, arms=arms, study="anchors = false")))
    assert plan["unregistered_arms"] == ["es-null", "grpo-null", "es-long"] and "exploratory only" in plan["note"]


# -- one comparison rule ------------------------------------------------------------------------------

def test_report_and_study_share_one_final_at_rule():
    from prover_cli.comparison import arms, compare

    assert arms.final_at is compare.final_at
    defined = [p.relative_to(REPO).as_posix() for p in (REPO / "prover_cli").rglob("*.py")
               if re.search(r"^def _?final_at\(", p.read_text(encoding="utf-8"), re.M)]
    assert defined == ["prover_cli/comparison/compare.py"]
    source = "".join(p.read_text(encoding="utf-8") for p in sorted((REPO / "prover_cli" / "comparison" / "study").glob("*.py")))
    assert "from prover_cli.comparison.compare import" in source and "final_at" in source


# -- the shipped studies ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["demo", "demo-10seeds"])
def test_the_shipped_studies_tune_anchor_and_test_on_200_problems(name):
    study = load_study(name)
    plan = plan_study(study)
    assert plan["problems"]["test_problems"] >= 200 and study.min_test_problems >= 200
    assert study.tune is not None and set(study.tune.settings) == {"es", "grpo"}
    assert len(study.tune.settings["es"]) == len(study.tune.settings["grpo"])
    es_keys = {item.split("=")[0] for s in study.tune.settings["es"] for item in s}
    assert {"es.sigma", "es.learning_rate", "es.problems_per_iteration"} <= es_keys
    assert {item.split("=")[0] for s in study.tune.settings["grpo"] for item in s} == {"grpo.learning_rate"}
    assert {r["samples"] for r in plan["runs"]} == {r["samples"] for r in plan["runs"] if r["phase"] == "tune"}
    assert any(c.anchor == "base" for c in study.secondary) and any(c.anchor == "null" for c in study.secondary)
    for arm in study.arms.values():   # >= 5 evaluations after the base, on the samples axis
        from prover_cli.comparison.study.run_configs import run_config

        config = run_config(study, arm, study.train_sizes[0], study.seeds[0])
        steps = config.es.iterations if arm.method == "es" else config.grpo.steps
        assert steps // config.run.eval_every >= 5
    assert BASE not in study.arms
