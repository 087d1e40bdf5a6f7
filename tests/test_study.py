"""comparison/study/ and `prover study`: the file's validation, the plan, an end-to-end study on the tiny model
(2 arms x 2 sizes x 2 seeds) that reruns nothing when run again and reruns a run made by other code,
the pairing across data sizes on one test set, the report's order (primary, Holm, exploratory)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prover_cli.cli import app
from prover_cli.errors import ConfigError, InputError
from prover_cli.comparison.study.design import resolve_study
from prover_cli.comparison.study.plan import plan_study
from prover_cli.comparison.study.report import exploratory, report_study
from prover_cli.comparison.study.run import run_study
from prover_cli.comparison.study.study_file import load_study

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "configs" / "tiny.toml"
runner = CliRunner()

# Small enough for seconds on one CPU thread: 4 training samples per run for both methods, greedy
# held-out evaluation of the ~6 held-out problems before and after the one iteration / step.
TINY_SETS = ["generate.max_tokens=8", "grpo.max_completion_length=8", "run.eval_every=1",
             "es.iterations=1", "es.population=2", "es.problems_per_iteration=2",
             "grpo.steps=1", "grpo.num_generations=2", "grpo.per_device_train_batch_size=4"]


ARMS = '[arms.es]\nmethod = "es"\n[arms.grpo]\nmethod = "grpo"'
PRIMARY = '[[primary]]\na = "es"\nb = "grpo"\nsize = 4\nmetric = "greedy"\ntest = "non-inferiority"\nmargin = 0.1'


def study_text(directory: Path, *, extra_study: str = "", primary: str = PRIMARY, arms: str = ARMS) -> str:
    sets = json.dumps([*TINY_SETS, f"model.cache_dir={REPO / '.prover-cache'}"])
    return f"""
[study]
name = "tiny"
config = "{TINY}"
dir = "{directory}"
seeds = [0, 1]
train_sizes = [4, 8]
set = {sets}
anchors = false
{extra_study}
{arms}
{primary}

[[secondary]]
a = "es"
b = "grpo"
size = 8
metric = "greedy"
"""


def write_study(tmp_path: Path, **kwargs) -> Path:
    path = tmp_path / "study.toml"
    path.write_text(study_text(tmp_path / "study", **kwargs), encoding="utf-8")
    return path


# -- the study file ----------------------------------------------------------------------------

@pytest.mark.parametrize("change, key, why", [
    (dict(extra_study="sedes = [1]"), "study.sedes", "unknown key"),
    (dict(arms='[arms.es]\nmethod = "ppo"'), "arms.es.method", "must be one of es, grpo"),
    (dict(primary='[[primary]]\na = "es"\nb = "sft"\nsize = 4'), "primary[0].b", "unknown arm 'sft'"),
    (dict(primary='[[primary]]\na = "es"\nb = "grpo"\nsize = 5'), "primary[0].size", "not one of study.train_sizes"),
    (dict(primary='[[primary]]\na = "es"\nb = "grpo"'), "primary[0].size", "which training-set size"),
    (dict(primary='[[primary]]\na = "es"\nb = "grpo"\nsize = 4\ntest = "non-inferiority"'), "primary[0].margin",
     "needs margin > 0"),
    (dict(primary='[[primary]]\na = "es"\nb = "grpo"\nsize = 4\nmetric = "best"'), "primary[0].metric", "must be one of"),
    (dict(arms='[arms.es]\nmethod = "es"\nset = ["run.seed=3"]\n[arms.grpo]\nmethod = "grpo"'), "arms.es.set",
     "the study sets run.seed"),
    (dict(primary=" "), "primary", "pre-register at least one comparison"),
])
def test_study_file_errors_name_the_file_and_the_key(tmp_path, change, key, why):
    path = write_study(tmp_path, **change)
    with pytest.raises(ConfigError) as caught:
        load_study(path)
    assert str(caught.value).startswith(f"{path}: {key}: ") and why in str(caught.value)


def test_a_bad_override_and_unequal_budgets_are_refused(tmp_path):
    path = write_study(tmp_path, arms='[arms.es]\nmethod = "es"\nset = ["es.populaton=4"]\n[arms.grpo]\nmethod = "grpo"')
    with pytest.raises(ConfigError, match=r"study\.toml: arms\.es: --set es\.populaton=4: unknown key"):
        load_study(path)
    # GRPO at 2 steps consumes 8 samples against ES's 4: the comparison would mix budget with method.
    path = write_study(tmp_path, arms='[arms.es]\nmethod = "es"\n[arms.grpo]\nmethod = "grpo"\nset = ["grpo.steps=2"]')
    with pytest.raises(ConfigError, match=r"primary es@n4 - grpo@n4 \(greedy\): unequal budgets, 4 against 8"):
        load_study(path)
    path.write_text(path.read_text(encoding="utf-8").replace('name = "tiny"', 'name = "tiny"\nallow_unequal_budgets = true'),
                    encoding="utf-8")
    assert load_study(path).allow_unequal_budgets


def test_the_demo_study_ships_and_resolves_by_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # from any directory
    assert resolve_study("demo") == resolve_study("studies/demo.toml") == REPO / "prover_cli" / "studies" / "demo.toml"
    study = load_study("demo")
    assert [c.a for c in study.primary] == ["es"] and study.primary[0].test == "non-inferiority"
    plan = plan_study(study)
    assert plan["runs_total"] == 24 and plan["tune_runs_total"] == 6
    assert {r["samples"] for r in plan["runs"]} == {20480}  # matched budgets, tuning runs too: 5 x 16 x 256 = 80 x 256
    with pytest.raises(ConfigError, match="study file not found"):
        resolve_study("no-such-study")


def test_plan_lists_every_run_with_its_dir_and_cost(tmp_path):
    path = write_study(tmp_path)
    result = runner.invoke(app, ["study", "plan", str(path), "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    keys = [(r["arm"], r["train_size"], r["seed"]) for r in plan["runs"]]
    assert keys == [(a, n, s) for a in ("es", "grpo") for n in (4, 8) for s in (0, 1)]
    assert all(r["state"] == "missing" and r["samples"] == 4 for r in plan["runs"])
    assert plan["runs"][0]["dir"] == str(tmp_path / "study" / "runs" / "es" / "n4" / "seed0")
    assert plan["runs_to_run"] == 8 and plan["samples_total"] == 32
    modal = plan_study(load_study(path), backend="modal")
    assert modal["est_usd_total"] > 0 and all(r["est_usd"] >= 0 for r in modal["runs"])  # rounded to cents
    bad = runner.invoke(app, ["study", "plan", str(tmp_path / "missing.toml")])
    assert bad.exit_code == 2 and "study file not found" in bad.stderr


# -- end to end on the tiny model ---------------------------------------------------------------

@pytest.fixture(scope="module")
def finished_study(tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    tmp_path = tmp_path_factory.mktemp("study")
    study = load_study(write_study(tmp_path))
    first = run_study(study)
    return study, first


def test_a_study_runs_end_to_end_and_reruns_nothing(finished_study):
    study, first = finished_study
    assert (first["trained"], first["reused"]) == (8, 0)
    for n in (4, 8):
        config = json.loads((study.dir / "runs" / "es" / f"n{n}" / "seed0" / "code.json").read_text(encoding="utf-8"))
        assert set(config) == {"prover", "git_commit", "source_sha256"}
    again = run_study(study)
    assert (again["trained"], again["reused"]) == (0, 8)
    assert plan_study(study)["runs_to_run"] == 0


def test_one_command_runs_what_is_missing_then_reports(finished_study):
    study, _ = finished_study
    result = runner.invoke(app, ["study", "run", str(study.path), "--json"])
    assert result.exit_code == 0, result.output
    done = json.loads(result.stdout)
    assert (done["run"]["trained"], done["run"]["reused"]) == (0, 8)   # nothing reruns
    assert done["headline"] == done["primary"][0]["verdict"] and done["power"]
    assert done["headline"] in result.stderr
    quiet = runner.invoke(app, ["study", "run", str(study.path), "--no-report", "--json"])
    assert quiet.exit_code == 0 and "primary" not in json.loads(quiet.stdout)


def test_report_puts_the_primary_first_and_pairs_across_sizes(finished_study):
    study, _ = finished_study
    report = report_study(study)
    assert report["tables"][0]["title"].startswith("PRIMARY (pre-registered; Holm over 1)")
    primary = report["primary"][0]
    assert primary["name"] == "es@n4 - grpo@n4 (greedy)" and primary["seeds"] == [0, 1]
    assert primary["p_holm"] == primary["p"] or primary["p"] is None  # one primary: Holm changes nothing
    assert any(t["title"].startswith("EXPLORATORY") for t in report["tables"])
    # The limited-data contrast: the same arm and seed, 4 against 8 training problems, same test set.
    contrast = next(e for e in report["exploratory"] if e["name"] == "es@n4 - es@n8 (greedy)")
    assert contrast["seeds"] == [0, 1] and contrast["role"] == "exploratory"
    assert "es@n8 - grpo@n8 (greedy)" not in [e["name"] for e in report["exploratory"]]  # secondary, not exploratory
    out = Path(report["out"])
    rows = list(csv.DictReader((out / "per_seed.csv").open(encoding="utf-8")))
    assert len([r for r in rows if r["kind"] == "run"]) == 8
    jsonl = [json.loads(line) for line in (out / "per_seed.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(jsonl) == len(rows) and {r["seed"] for r in jsonl if r["kind"] == "difference"} == {0, 1}
    assert all(Path(p).stat().st_size > 0 for p in report["plots"])
    assert [Path(p).name for p in report["plots"]] == ["curves_samples.png", "curves_seconds.png", "curves_tokens.png",
                                                       "limited_data.png"]  # no iterations axis: it mixes units
    assert report["power"][0]["comparison"] == primary["name"]


def test_pairing_across_sizes_uses_one_test_set(finished_study):
    study, _ = finished_study
    from prover_cli.comparison.run_reader import load_run

    ids = set()
    for n in (4, 8):
        for seed in (0, 1):
            records = load_run(study.dir / "runs" / "es" / f"n{n}" / f"seed{seed}")["records"]
            ids.add(tuple(sorted(records[-1]["eval/by_problem"])))
    assert len(ids) == 1  # every size and seed scored on the same held-out problems
    names = [c.name for c in exploratory(study)]
    assert "grpo@n4 - grpo@n8 (sampled)" in names and "es@n4 - grpo@n4 (greedy)" not in names


def test_a_run_made_by_other_code_is_trained_again(finished_study):
    study, _ = finished_study
    code = study.dir / "runs" / "grpo" / "n8" / "seed1" / "code.json"
    recorded = json.loads(code.read_text(encoding="utf-8"))
    code.write_text(json.dumps({**recorded, "git_commit": "0" * 40}), encoding="utf-8")
    plan = plan_study(study)
    stale = [r for r in plan["runs"] if r["state"] != "finished"]
    assert len(stale) == 1 and "made by other code" in stale[0]["why"] and "git_commit" in stale[0]["why"]
    with pytest.raises(InputError, match="not finished with this code"):
        report_study(study)
    again = run_study(study)
    assert (again["trained"], again["reused"]) == (1, 7)
    assert json.loads(code.read_text(encoding="utf-8")) == recorded


def test_plan_shows_power_from_a_finished_study_as_pilot(finished_study, tmp_path):
    study, _ = finished_study
    result = runner.invoke(app, ["study", "plan", str(study.path), "--pilot", str(study.dir), "--json"])
    assert result.exit_code == 0, result.output
    power = json.loads(result.stdout)["power"][0]
    assert power["comparison"] == "es@n4 - grpo@n4 (greedy)" and power["seeds"] == 2
    assert "seeds_needed" in power or "note" in power


# -- the comparison's arithmetic on hand-made evaluations ---------------------------------------

def _run(seed: int, greedy: dict[str, int], samples: int = 100) -> dict:
    """A loaded run (report.load_run's shape) with the base and one final greedy evaluation."""
    base = {"iteration": 0, "samples/total": 0, "eval/greedy_verified_rate": 0.0,
            "eval/by_problem": {p: [0, 0] for p in greedy}, "eval/samples": len(greedy), "eval/problems": len(greedy)}
    final = {"iteration": 1, "samples/total": samples, "eval/greedy_verified_rate": sum(greedy.values()) / len(greedy),
             "eval/by_problem": {p: [g, g] for p, g in greedy.items()}, "eval/samples": len(greedy),
             "eval/problems": len(greedy)}
    return {"dir": Path(f"run{seed}"), "seed": seed, "records": [base, final]}


def test_compare_pairs_by_seed_and_problem_and_tests_against_the_margin(tmp_path):
    from prover_cli.comparison.stats import paired_t_test
    from prover_cli.comparison.study.design import Comparison
    from prover_cli.comparison.study.paired import compare

    study = load_study(write_study(tmp_path))
    a = {0: {"p1": 1, "p2": 1, "p3": 0, "p4": 0}, 1: {"p1": 1, "p2": 0, "p3": 0, "p4": 0}}
    b = {0: {"p1": 0, "p2": 1, "p3": 0, "p4": 0}, 1: {"p1": 1, "p2": 0, "p3": 1, "p4": 1}}
    loaded = {("es", 4, s): _run(s, a[s]) for s in a} | {("grpo", 4, s): _run(s, b[s]) for s in b}
    c = Comparison("es", 4, "grpo", 4, "greedy", "non-inferiority", margin=0.1)
    entry = compare(study, c, loaded)
    assert [p["difference"] for p in entry["per_seed"]] == [0.25, -0.5]  # (1 + 0 + 0 + 0) / 4, (0 + 0 - 1 - 1) / 4
    assert entry["p"] == pytest.approx(paired_t_test([0.25, -0.5], 0.1, "greater")["p"])
    # Another test set in one seed: refused, never paired by position.
    loaded[("grpo", 4, 1)] = _run(1, {"p1": 1, "p2": 0, "p3": 1, "p9": 1})
    with pytest.raises(InputError, match="not the same held-out problems"):
        compare(study, c, loaded)
    # GRPO trained to 130 samples and evaluated only there: at the common budget (100) its last
    # evaluation is the base's (0 samples), against ES's at 100: more than 5% apart, a usage error.
    from prover_cli.errors import UsageError

    loaded[("grpo", 4, 1)] = _run(1, b[1], samples=130)
    with pytest.raises(UsageError, match="evaluated at 100 and 0 training samples, more than 5% apart"):
        compare(study, c, loaded)


@pytest.mark.parametrize("path", sorted((REPO / "prover_cli" / "studies").glob("*.toml")), ids=lambda p: p.stem)
def test_every_shipped_study_loads_with_matched_budgets(path):
    study = load_study(path)
    plan = plan_study(study)
    for c in study.primary:  # each side of a primary comparison consumes the same training samples
        sides = [{r["samples"] for r in plan["runs"] if (r["arm"], r["train_size"]) == side}
                 for side in ((c.a, c.a_size), (c.b, c.b_size))]
        assert len(sides[0]) == 1 and sides[0] == sides[1]


def test_an_interrupted_run_is_trained_again_and_the_rest_reused(finished_study):
    study, _ = finished_study
    unfinished = study.dir / "runs" / "es" / "n4" / "seed1"
    (unfinished / "study-run.json").unlink()  # what a run killed before its last iteration leaves
    (unfinished / "leftover.txt").write_text("from the killed run", encoding="utf-8")
    again = run_study(study)
    assert (again["trained"], again["reused"]) == (1, 7)
    assert (unfinished / "study-run.json").exists() and not (unfinished / "leftover.txt").exists()


def test_a_training_size_the_split_cannot_hold_fails_before_any_run(tmp_path):
    path = write_study(tmp_path)
    path.write_text(path.read_text(encoding="utf-8").replace("train_sizes = [4, 8]", "train_sizes = [4, 8, 10000]"),
                    encoding="utf-8")
    with pytest.raises(ConfigError, match=r"study\.train_sizes: 10,000 but the training split .* has 56 problems"):
        run_study(load_study(path))
    assert not (tmp_path / "study").exists()  # refused before anything is written


# -- `prover study run --backend modal`: whole runs fanned out, through the run's Modal function ------

class ContainerRuns:
    """`train_es` / `train_grpo` as `functions.study_runs` calls them (`with_options`, then
    `fan_out`, which under `modal.is_local()` calls `.local(config, kwargs)` one run after another).
    Each call is a fresh stand-in container (tests/modal_standin.py): its mount shows what the
    Volume had committed, the library runs there with the Volume's paths (`to_wire`), and the
    container commits at the end, as the real function does; the local side reads back only what
    was committed. Not Modal: a test of our wiring around it."""

    def __init__(self, name, volume):
        self.name, self.volume, self.calls = name, volume, []

    def with_options(self, **options):
        self.options = options
        return self

    def local(self, config, kwargs):
        import os

        from prover_cli import backends
        from prover_cli.config import config_from_dict

        self.calls.append(config["run"]["dir"])
        with self.volume._container(f"{self.name}-{len(self.calls)}"):
            here = os.getcwd()
            os.chdir(self.volume._mount)
            try:
                result = backends.run("local", self.name, config_from_dict(config), resume=kwargs["resume"])
            finally:
                os.chdir(here)
            self.volume.commit()
        return result


def test_a_study_on_modal_fans_whole_runs_out_and_pulls_what_it_reports_on(tmp_path, monkeypatch):
    import torch

    from modal_standin import BUILDS, VolumeStandIn, apps_running
    from prover_cli.on_modal import functions, images, remote

    torch.set_num_threads(1)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-standin")   # credentials present; nothing reaches Modal
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-standin")
    volume = VolumeStandIn(tmp_path / "volume")
    monkeypatch.setattr(remote, "runs_volume", volume)
    apps_running(monkeypatch)   # each app's run() builds its functions' images, as Modal's does
    fakes = {name: ContainerRuns(name, volume) for name in ("train_es", "train_grpo")}
    for name, fake in fakes.items():
        monkeypatch.setitem(functions.REMOTE_FUNCTIONS, name, fake)
    path = tmp_path / "study.toml"
    path.write_text(study_text(Path("study")), encoding="utf-8")   # relative: the Volume's paths are too
    study = load_study(path)

    first = run_study(study, backend="modal")
    assert (first["trained"], first["reused"]) == (8, 0)
    assert sorted(fakes["train_es"].calls) == sorted(f"study/runs/es/n{n}/seed{s}" for n in (4, 8) for s in (0, 1))
    assert len(fakes["train_grpo"].calls) == 4 and "gpu" in fakes["train_es"].options   # the run's own resources
    # each method ran its own app only: ES the GPU image, GRPO the TRL image; never the Lean ones
    assert BUILDS.ran == [images.gpu_app.name, images.grpo_app.name] and set(BUILDS.built) == {"gpu", "trl"}
    for n in (4, 8):   # what the report reads came back from the Volume, with the code that made it
        run = Path("study/runs/grpo") / f"n{n}" / "seed0"
        assert {"metrics.jsonl", "config.toml", "code.json", "study-run.json"} <= {p.name for p in run.iterdir()}
    again = run_study(study, backend="modal")
    assert (again["trained"], again["reused"]) == (0, 8) and len(fakes["train_es"].calls) == 4
    report = report_study(study)
    assert report["primary"][0]["seeds"] == [0, 1]
    # A stale run is trained again whole, on the Volume too (its old ledger would refuse the run).
    (Path("study/runs/es/n8/seed1") / "study-run.json").unlink()
    third = run_study(study, backend="modal")
    assert (third["trained"], third["reused"]) == (1, 7) and fakes["train_es"].calls[-1] == "study/runs/es/n8/seed1"
