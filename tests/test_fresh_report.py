"""Issue #30: the report's figure (layout, axes, legend, a lone base point), the eval plot's title,
the same-problems check from any directory, and the configs an installed package ships."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import REPO
from prover_cli.cli import app
from prover_cli.config import load_config
from prover_cli.errors import InputError
from prover_cli.comparison.report import report_runs
from prover_cli.comparison.report_figure import build_figure
from prover_cli.comparison.run_reader import load_run
from test_report import make_eval_run, make_run, write_problems

runner = CliRunner()


@pytest.fixture(autouse=True)
def in_tmp_dir(tmp_path, monkeypatch):
    """Default reports go to ./reports/, and every test runs outside the checkout."""
    monkeypatch.chdir(tmp_path)


def with_signal(run_dir: Path) -> Path:
    """Give an ES run's iterations an `es/signal_share`: the figure gets its fourth row."""
    path = run_dir / "metrics.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line in lines:
        if line["iteration"] >= 1:
            line.update({"es/signal_share": 0.1 * line["iteration"], "es/signal_var": 1.0, "es/noise_var": 1.0})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return run_dir


@pytest.fixture
def es_and_grpo(tmp_path):
    """ES: 4 iterations of 128 samples; GRPO: 16 steps of 32; the same 512 samples, seed 0, both metrics."""
    es = make_eval_run(tmp_path / "es", "es", 0, {0: (0.2, 0.3), 2: (0.25, 0.35), 4: (0.3, 0.4)},
                       steps=4, samples_per_step=128)
    grpo = make_eval_run(tmp_path / "grpo", "grpo", 0, {0: (0.2, 0.3), 8: (0.3, 0.2), 16: (0.35, 0.3)},
                         steps=16, samples_per_step=32)
    return es, grpo


def drawn(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


# --------------------------------------------------------------------------------------------
# 1. report.png
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("signal", [False, True], ids=["3 rows", "4 rows (ES signal share)"])
def test_suptitle_and_legend_overlap_no_panel_title(es_and_grpo, signal):
    es, grpo = es_and_grpo
    if signal:
        with_signal(es)
    fig = build_figure([load_run(es), load_run(grpo)])
    renderer = drawn(fig)
    suptitle = fig._suptitle.get_window_extent(renderer)
    for axis in fig.axes:
        assert not suptitle.overlaps(axis.title.get_window_extent(renderer)), axis.get_title()
    (legend,) = fig.legends
    legend_box = legend.get_window_extent(renderer)
    assert not suptitle.overlaps(legend_box)
    for axis in fig.axes:
        assert not legend_box.overlaps(axis.title.get_window_extent(renderer)), axis.get_title()
        assert not legend_box.overlaps(axis.xaxis.label.get_window_extent(renderer)), axis.get_xlabel()
    assert len(fig.axes) == (12 if signal else 9)
    for box in (suptitle, legend_box):  # inside the canvas
        assert 0 <= box.y0 and box.y1 <= fig.bbox.height


def test_samples_axis_first_and_no_axis_mixes_iterations_with_steps(es_and_grpo):
    es, grpo = es_and_grpo
    fig = build_figure([with_signal(es) and load_run(es), load_run(grpo)])
    rows = [fig.axes[i:i + 3] for i in range(0, len(fig.axes), 3)]
    # the comparison first, the training reward after it (README, docs/eval.md: tables in that order)
    assert [row[0].get_title() for row in rows[:3]] == [
        "held-out verified rate, sampled vs samples", "held-out verified rate, greedy vs samples",
        "training reward (mean) vs samples"]
    for samples, tokens, clock in rows:
        assert samples.get_xlabel() == "samples" and samples.get_title().endswith(" vs samples")
        assert tokens.get_xlabel() == "training tokens" and tokens.get_title().endswith(" vs tokens")
        assert clock.get_xlabel().startswith("wall-clock")
    # The ES signal share: one line per arm (its mean over seeds), not one per run.
    signal = rows[3][0]
    assert signal.get_title() == "ES signal share vs samples"
    assert [line.get_label() for line in signal.get_lines() if not line.get_label().startswith("below")] == ["es"]
    # Both arms end at 512 samples: on the first (samples) axis they end together.
    sampled = rows[1][0]
    ends = [line.get_xdata()[-1] for line in sampled.get_lines() if line.get_label() != "base (iteration 0)"]
    assert ends == [512, 512]
    # 10,000 samples and more: in thousands.
    big = make_eval_run(Path("big"), "es", 1, {0: (0.2, 0.2), 4: (0.3, 0.3)}, steps=4, samples_per_step=5000)
    assert build_figure([load_run(big)]).axes[0].get_xlabel() == "samples (thousands)"


def test_one_legend_for_the_figure_with_one_readable_label_per_arm(tmp_path, es_and_grpo):
    es, grpo = es_and_grpo
    fig = build_figure([load_run(es), load_run(grpo)])
    assert all(axis.get_legend() is None for axis in fig.axes)  # no legend repeated in every panel
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["es", "grpo", "base (iteration 0)", "95% interval"]
    assert fig._suptitle.get_text() == "countdown with AI-MO/Kimina-Prover-Preview-Distill-1.5B: es vs grpo"
    # One color per arm, the same in every panel.
    colors = {line.get_label(): line.get_color() for axis in fig.axes for line in axis.get_lines()
              if line.get_label() in ("es", "grpo")}
    assert colors["es"] != colors["grpo"]
    # A run directory that says more than the arm keeps its name, once.
    other = make_eval_run(tmp_path / "kimina-es", "es", 1, {0: (0.2, 0.2), 4: (0.3, 0.3)})
    null = make_eval_run(tmp_path / "es-null", "es", 1, {0: (0.2, 0.2), 4: (0.3, 0.3)}, "es.shuffle_rewards=true")
    labels = [t.get_text() for t in build_figure([load_run(other), load_run(null)]).legends[0].get_texts()]
    assert labels[:2] == ["es (kimina-es)", "es null"]


def test_a_base_only_curve_shares_the_columns_axes(tmp_path):
    """Held-out evaluated only at iteration 0: the panel spans the run on every axis."""
    base = make_eval_run(tmp_path / "base", "es", 0, {0: (0.2, 0.3)}, steps=2, samples_per_step=6)
    fig = build_figure([load_run(base)])
    drawn(fig)
    for column in range(3):
        sampled, greedy, reward = fig.axes[column], fig.axes[3 + column], fig.axes[6 + column]
        assert sampled.get_xlim() == reward.get_xlim() == greedy.get_xlim()
        low, high = sampled.get_xlim()
        assert low < 0 < high and -low < 0.05 * high  # the point at 0 shows whole, behind a small margin
    assert fig.axes[4].get_xlabel() == "training tokens"   # no iterations axis
    # Its interval is drawn, as a bar (a band of one point has no width).
    sampled = fig.axes[0]
    bars = [c for c in sampled.collections if hasattr(c, "get_segments") and c.get_segments()]
    assert bars and bars[0].get_segments()[0][:, 1].tolist() == pytest.approx(
        [json.loads((base / "metrics.jsonl").read_text().splitlines()[0])[k]
         for k in ("eval/verified_rate_lo", "eval/verified_rate_hi")])


def test_report_png_looks_right_on_disk(tmp_path, es_and_grpo):
    es, grpo = es_and_grpo
    result = report_runs(run_dirs=[with_signal(es), grpo], out_dir=tmp_path / "out")
    import matplotlib.image

    pixels = matplotlib.image.imread(result["plot"])
    assert pixels.shape[:2] == (1600, 1500)  # four rows of three panels


def _title_of_verdicts_plot(monkeypatch, verdicts, **kwargs):
    from prover_cli import evaluate

    titles = []
    real = evaluate.plot_pass_at_k

    def spy(problems, path, ks, title="pass@k"):
        titles.append(title)
        return real(problems, path, ks, title=title)

    monkeypatch.setattr(evaluate, "plot_pass_at_k", spy)
    evaluate.run_eval(load_config(None), verdicts=verdicts, k=[1], **kwargs)
    return titles[0]


def test_eval_verdicts_title_says_only_what_is_known(tmp_path, monkeypatch):
    rows = [{"id": f"p{i}/0", "problem_id": f"p{i}", "verdict": "verified" if i else "rejected"} for i in range(3)]
    Path("verdicts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    title = _title_of_verdicts_plot(monkeypatch, Path("verdicts.jsonl"))
    assert title == "pass@k\nverdicts.jsonl"  # no "model not recorded", no stray "."
    (tmp_path / "run").mkdir()
    named = [dict(r, model="AI-MO/Kimina") for r in rows]
    (tmp_path / "run" / "v.jsonl").write_text("".join(json.dumps(r) + "\n" for r in named))
    assert _title_of_verdicts_plot(monkeypatch, Path("run/v.jsonl")) == "pass@k of AI-MO/Kimina\nrun/v.jsonl"


# --------------------------------------------------------------------------------------------
# 2. the same-problems check, from any directory
# --------------------------------------------------------------------------------------------

def trained_in(start: Path, name: str, method: str, ids, seed: int = 0) -> Path:
    """A run started in `start` with `data.problems = "problems.jsonl"` and `run.dir = "runs/<name>"`, as
    `prover train` records them: relative to where it ran."""
    start.mkdir(parents=True, exist_ok=True)
    if not (start / "problems.jsonl").exists():
        write_problems(start / "problems.jsonl", ids)
    return make_run(start / "runs" / name, method, [(1, 4, 10.0, 0.5)], f"run.dir=runs/{name}",
                    "data.problems=problems.jsonl", f"run.seed={seed}")


def test_relative_problems_are_found_from_another_directory(tmp_path, monkeypatch):
    es = trained_in(tmp_path / "a", "es", "es", ["p1", "p2"])
    grpo = trained_in(tmp_path / "b", "grpo", "grpo", ["p1", "p3"])  # other problems, same file name
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # neither a/ nor b/: problems.jsonl is not here
    with pytest.raises(InputError, match="different train problem sets"):
        report_runs(run_dirs=[es, grpo], out_dir=elsewhere / "out")
    same = trained_in(tmp_path / "a", "grpo", "grpo", ["p1", "p2"])
    result = report_runs(run_dirs=[es, same], out_dir=elsewhere / "out")
    assert result["problem_sets_unchecked"] == 0 and result["problem_sets_not_checked"] == []
    # The CLI, from a subprocess in another directory, with relative run paths.
    cli = subprocess.run([sys.executable, "-m", "prover_cli", "report", "../a/runs/es", "../b/runs/grpo",
                          "--out", "out2"], cwd=elsewhere, capture_output=True, text=True, timeout=300)
    assert cli.returncode == 1 and "different train problem sets" in cli.stderr, cli.stderr


def test_problems_that_cannot_be_found_are_said_out_loud(tmp_path):
    es = trained_in(tmp_path / "a", "es", "es", ["p1", "p2"])
    grpo = trained_in(tmp_path / "a", "grpo", "grpo", ["p1", "p2"])
    (tmp_path / "a" / "problems.jsonl").unlink()
    result = runner.invoke(app, ["report", str(es), str(grpo), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.stderr
    err = " ".join(result.stderr.split())
    assert err.count("problem sets NOT checked") >= 2 and "Warning:" in err
    assert str(tmp_path / "a" / "problems.jsonl") in err  # the path it looked for
    payload = json.loads(runner.invoke(app, ["report", str(es), str(grpo), "--out", str(tmp_path / "o2"),
                                             "--json"]).stdout)
    assert payload["problem_sets_unchecked"] == 2
    assert [u["run"] for u in payload["problem_sets_not_checked"]] == ["es", "grpo"]
    assert "data.problems = 'problems.jsonl', relative to" in payload["problem_sets_not_checked"][0]["why"]
    saved = json.loads((tmp_path / "o2" / "report.json").read_text())
    assert saved["problem_sets_unchecked"] == payload["problem_sets_not_checked"]


def test_generated_problems_are_generated_again_and_checked(tmp_path):
    """Countdown with data.problems empty: ES writes no problems file; its seed says which it trained on."""
    es = make_run(tmp_path / "es", "es", [(1, 4, 10.0, 0.5)], "task.countdown.problems=64")
    grpo = make_run(tmp_path / "grpo", "grpo", [(1, 4, 10.0, 0.5)], "task.countdown.problems=32")
    with pytest.raises(InputError, match="different train problem sets"):
        report_runs(run_dirs=[es, grpo], out_dir=tmp_path / "out")
    same = make_run(tmp_path / "grpo2", "grpo", [(1, 4, 10.0, 0.5)], "task.countdown.problems=64")
    assert report_runs(run_dirs=[es, same], out_dir=tmp_path / "out")["problem_sets_unchecked"] == 0


# --------------------------------------------------------------------------------------------
# 3. configs shipped in the package
# --------------------------------------------------------------------------------------------

SHIPPED = ["demo.toml", "kimina-es-lowrank.toml", "kimina-es.toml", "kimina-grpo.toml", "toy.toml"]


def test_one_copy_of_each_config_in_the_package_and_configs_points_at_it():
    assert sorted(p.name for p in (REPO / "prover_cli" / "configs").glob("*.toml")) == SHIPPED
    assert (REPO / "configs").resolve() == (REPO / "prover_cli" / "configs").resolve()
    assert sorted(p.name for p in (REPO / "configs").glob("*.toml")) == SHIPPED


def test_wheel_ships_the_configs_and_examples_and_they_resolve_outside_a_checkout(tmp_path):
    import shutil

    source = tmp_path / "src"  # a copy: the build writes build/ and *.egg-info beside the sources
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "prover_cli", source / "prover_cli", ignore=shutil.ignore_patterns("__pycache__"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "-q", "-w", str(tmp_path / "dist"), str(source)],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    (wheel,) = (tmp_path / "dist").glob("prover_cli-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert [n for n in names if n.startswith("prover_cli/configs/")] == [f"prover_cli/configs/{n}" for n in SHIPPED]
    assert "prover_cli/examples/lean_examples.jsonl" in names
    checker = REPO / "prover_cli" / "verify" / "kernel" / "checker"  # the kernel stage builds every file of it
    assert sorted(n for n in names if n.startswith("prover_cli/verify/kernel/checker/")) == sorted(
        f"prover_cli/verify/kernel/checker/{p.relative_to(checker).as_posix()}" for p in checker.rglob("*") if p.is_file())
    for name in SHIPPED:  # the same bytes as the checkout's
        assert zipfile.ZipFile(wheel).read(f"prover_cli/configs/{name}") == (REPO / "configs" / name).read_bytes()

    installed = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(installed)  # a pure-Python wheel installs by unpacking
    empty = tmp_path / "empty"
    empty.mkdir()  # no configs/ here
    probe = ("import json, prover_cli\n"
             "from prover_cli.shipped import resolve_config\n"
             "from prover_cli.config import load_config\n"
             "from prover_cli.tasks.datasets import examples_path\n"
             "paths = [str(resolve_config(p)) for p in ('configs/demo.toml', 'kimina-es', 'toy.toml')]\n"
             "print(json.dumps({'package': prover_cli.__file__, 'paths': paths,\n"
             "                  'model': load_config(resolve_config('configs/demo.toml')).model.name,\n"
             "                  'examples': str(examples_path()), 'exists': examples_path().exists()}))\n")
    env = {**os.environ, "PYTHONPATH": str(installed)}
    run = subprocess.run([sys.executable, "-c", probe], cwd=empty, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout)
    assert found["package"].startswith(str(installed))  # the unpacked wheel, not the checkout
    assert found["paths"] == [str(installed / "prover_cli" / "configs" / n)
                              for n in ("demo.toml", "kimina-es.toml", "toy.toml")]
    assert found["model"] == "tiny-countdown" and found["exists"] and found["examples"].startswith(str(installed))


def test_config_resolves_to_the_shipped_one_from_a_directory_without_configs(tmp_path):
    assert not (tmp_path / "configs").exists()
    for given in ("configs/demo.toml", "demo", "demo.toml"):
        result = runner.invoke(app, ["train", "es", "--config", given, "--dry-run", "--json"])
        assert result.exit_code == 0, (given, result.stderr)
    # A file of your own at the path given wins over the shipped one.
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "demo.toml").write_text('[model]\nname = "mine"\n')
    from prover_cli.shipped import resolve_config

    assert resolve_config("configs/demo.toml") == Path("configs/demo.toml")
    assert resolve_config("toy").parent == REPO / "prover_cli" / "configs"
    missing = runner.invoke(app, ["train", "es", "--config", "configs/nosuch.toml", "--dry-run"])
    assert missing.exit_code == 2
    err = " ".join(missing.stderr.split())
    assert "configs/nosuch.toml: config file not found" in err and "demo, kimina-es-lowrank, kimina-es, kimina-grpo, toy" in err
