"""`prover report`: one table and one plot of ES and GRPO runs, and refusals to compare unlike runs."""

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prover_cli.cli import app
from prover_cli.config import load_config
from prover_cli.errors import InputError
from prover_cli.report import report_runs

runner = CliRunner()

# (verified, samples, elapsed_s, reward/mean) per iteration, chosen so the summary is easy by hand.
ES_ITERATIONS = [(2, 8, 360.0, 0.25), (4, 8, 720.0, 0.5), (6, 8, 1080.0, 0.75)]
GRPO_ITERATIONS = [(1, 4, 1800.0, 0.25), (3, 4, 3600.0, 0.75)]


def make_run(run_dir: Path, method: str, iterations, *overrides: str) -> Path:
    run_dir.mkdir(parents=True)
    config = load_config(None, ["data.task=countdown", f"run.dir={run_dir}", *overrides])
    (run_dir / "config.toml").write_text(config.to_toml(), encoding="utf-8")
    lines, total, previous = [], 0, 0.0
    for i, (verified, samples, elapsed_s, mean) in enumerate(iterations, start=1):
        total += samples
        lines.append(json.dumps({
            "iteration": i, "method": method, "task": config.data.task, "reward/mean": mean, "reward/max": 1.0,
            "verify/verified": verified, "samples": samples, "samples/total": total,
            "time/wall_s": elapsed_s - previous, "time/elapsed_s": elapsed_s}))
        previous = elapsed_s
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return run_dir


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
    assert pixels.shape[:2] == (450, 1500)  # three panels side by side
    assert pixels[..., :3].std() > 0.05  # curves and text, not a blank canvas


def test_report_goes_to_the_first_run_dir_by_default(two_runs):
    es, grpo = two_runs
    result = report_runs(run_dirs=[es, grpo])
    assert Path(result["plot"]) == es / "report.png" and (es / "report.json").exists()


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
def test_malformed_metrics_line_names_file_and_line(two_runs, bad_line, message):
    es, grpo = two_runs
    with (es / "metrics.jsonl").open("a") as handle:
        handle.write(bad_line + "\n")
    with pytest.raises(InputError, match=re.escape(f"{es / 'metrics.jsonl'}:4: ") + message):
        report_runs(run_dirs=[es, grpo])


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
    assert "verified proofs: ES vs GRPO" in result.stderr and "500.0" in result.stderr and "40.0" in result.stderr


def test_cli_report_refusal_is_one_error_line(tmp_path):
    es = make_run(tmp_path / "es", "es", ES_ITERATIONS)
    lean = make_run(tmp_path / "lean", "grpo", GRPO_ITERATIONS, "data.task=lean")
    result = runner.invoke(app, ["report", str(es), str(lean), "--json"])
    assert result.exit_code == 1 and result.stdout == ""
    assert "Error:" in result.stderr and "different tasks" in result.stderr and "Traceback" not in result.stderr
