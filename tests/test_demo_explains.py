"""The demo says what it is doing (issue #38): a line before the base is built, what ES's NOISE
flag means there and advice that matches the settings, `eval` counting each problem once as the
held-out evaluation does, a GRPO steps table that does not scroll the results away, and no
third-party progress bar between the result lines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from conftest import REPO
from prover_cli.config import config_from_dict, load_config
from prover_cli.es.signal import WINDOW, noise_warning

runner = CliRunner()
DEMO = REPO / "configs" / "demo.toml"


def test_the_noise_warning_advises_only_what_can_still_change():
    noisy = [(0.1, 0.9)] * WINDOW
    greedy = noise_warning(noisy, config_from_dict({"es": {"member_temperature": 0.0}}).es)
    assert "lower member sampling temperature" not in greedy
    assert "already decode greedily (es.member_temperature = 0)" in greedy and "es.sigma" in greedy
    sampled = noise_warning(noisy, config_from_dict({"es": {"member_temperature": 0.7}}).es)
    assert "lower member sampling temperature (es.member_temperature = 0.7" in sampled
    assert "already decode greedily" not in sampled


def test_the_demo_script_explains_before_it_waits():
    script = (REPO / "scripts" / "demo.sh").read_text(encoding="utf-8")
    stage3 = script.index('stage "3/8')
    assert stage3 < script.index("build_base(") < script.index('prover generate --config "$CONFIG"')
    assert script.index("print(noise_line(config))") < script.index('prover train es --config "$CONFIG"')
    from prover_cli.demo import noise_line

    config = load_config(DEMO)
    line = noise_line(config)
    problems = config.es.problems_per_iteration  # 256 since #42 (8 before)
    assert "NOISE" in line and f"scored greedily on the same {problems} problems" in line and "\n" not in line


def test_building_the_base_says_so_first_and_only_the_first_time(tmp_path):
    from prover_cli.demo import base_is_built, build_base

    config = load_config(DEMO, ["model.name=tiny", f"model.cache_dir={tmp_path / 'cache'}"])
    said: list[str] = []
    assert not base_is_built(config)
    path = build_base(config, say=said.append)
    assert said[0].startswith("building the base model tiny (first run only;") and said[1].startswith("base model tiny: built in")
    assert Path(path).is_dir() and base_is_built(config)
    said.clear()
    assert build_base(config, say=said.append) == path and said == [f"base model tiny: cached in {tmp_path / 'cache'}/"]
    warm = load_config(DEMO, [f"model.cache_dir={tmp_path / 'cache'}"])
    assert not base_is_built(warm)   # tiny-countdown: its own directory, not built by the above


def test_eval_counts_each_problem_once_as_the_held_out_evaluation_does(tmp_path):
    problems = tmp_path / "problems.jsonl"
    rows = [{"id": "a", "numbers": [1, 2, 3], "target": 6, "split": "valid"},
            {"id": "b", "numbers": [3, 2, 1], "target": 6, "split": "valid"},    # the same puzzle as a
            {"id": "c", "numbers": [2, 2, 5], "target": 9, "split": "valid"}]
    problems.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    result = runner.invoke(app_(), ["eval", "--config", str(DEMO), "--json", "--k", "1", "--set",
                                    f"data.problems={problems}", "--set", "model.name=tiny", "--set",
                                    f"model.cache_dir={tmp_path / 'cache'}", "--set", "eval.n=1", "--set", "eval.k=[1]", "--set",
                                    "generate.max_tokens=4"])
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    assert (found["problems"], found["samples"], found["repeated_rows"]) == (2, 2, 1)
    assert "1 row(s) of split 'valid' repeat an earlier problem" in " ".join(result.stderr.split())


def app_():
    from prover_cli.cli import app

    return app


def test_a_long_grpo_run_prints_a_thinned_steps_table(tmp_path):
    from prover_cli.grpo.train import summarize

    records = [{"iteration": i, "reward/mean": 0.5, "reward/max": 1.0, "verify/verified": 1, "samples": 32,
                "samples/total": 32 * i, "time/wall_s": 1.0, "time/elapsed_s": float(i)} for i in range(1, 161)]
    table = summarize(records, tmp_path / "final", tmp_path / "metrics.jsonl")["tables"][0]
    steps = [row[0] for row in table["rows"]]
    assert steps == list(range(16, 161, 16)) and steps[-1] == 160
    assert table["title"] == f"grpo steps: every 16th of 160 (each step, one line: {tmp_path / 'metrics.jsonl'})"
    short = summarize(records[:6], tmp_path / "final", tmp_path / "metrics.jsonl")["tables"][0]
    assert [row[0] for row in short["rows"]] == [1, 2, 3, 4, 5, 6] and short["title"] == "grpo steps"
    twelve = summarize(records[:12], tmp_path / "final", tmp_path / "metrics.jsonl")["tables"][0]
    assert twelve["title"].startswith("grpo steps: every 2nd of 12") and [r[0] for r in twelve["rows"]] == [2, 4, 6, 8, 10, 12]


def test_no_third_party_progress_bar(tmp_path):
    """transformers' own "Loading weights" bar (its logging's tqdm) is off after the call, whether
    transformers was imported before it (the demo's scripts) or after (`prover`); a user's explicit
    HF_HUB_DISABLE_PROGRESS_BARS=0 is kept."""
    code = ("import sys\n{before}\nfrom prover_cli.progress import quiet_third_party_bars\nquiet_third_party_bars()\n"
            "from transformers.utils import logging\nprint(logging.is_progress_bar_enabled())\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    for before in ("import transformers.utils.logging", ""):
        done = subprocess.run([sys.executable, "-c", code.format(before=before)], capture_output=True, text=True,
                              env=env, cwd=REPO, timeout=300)
        assert done.stdout.strip() == "False", done.stderr
    kept = subprocess.run([sys.executable, "-c", code.format(before="")], capture_output=True, text=True,
                          env={**env, "HF_HUB_DISABLE_PROGRESS_BARS": "0"}, cwd=REPO, timeout=300)
    assert kept.stdout.strip() == "True", kept.stderr
    datasets = ("import datasets\nfrom prover_cli.progress import quiet_third_party_bars\nquiet_third_party_bars()\n"
                "from datasets.utils import are_progress_bars_disabled\nprint(are_progress_bars_disabled())\n")
    env.pop("HF_DATASETS_DISABLE_PROGRESS_BARS", None)
    done = subprocess.run([sys.executable, "-c", datasets], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=300)
    assert done.stdout.strip() == "True", done.stderr   # TRL's `Map: 100%` bars


def demo_outputs() -> set[str]:
    """What `make demo` writes: scripts/demo.sh's `$RUN/...` paths, braces expanded."""
    import re

    script = (REPO / "scripts" / "demo.sh").read_text(encoding="utf-8")
    run = re.search(r'^RUN=(\S+)$', script, re.M).group(1)
    found = set()
    for tail in re.findall(r'\$RUN/([A-Za-z0-9_./{},-]*)', script):
        head, _, rest = tail.partition("{")
        names = rest.split("}", 1)[0].split(",") if rest else [""]
        found |= {f"{run}/{head}{name}".rstrip("/.") for name in names}
    return found


def test_every_runs_demo_path_in_the_docs_is_one_the_demo_writes():
    """docs/cli.md named runs/demo/ledger.json, which the demo never writes (its ES run is runs/demo/es)."""
    import re

    outputs = demo_outputs()
    assert {"runs/demo/es/ledger.json", "runs/demo/es/replayed", "runs/demo/grpo", "runs/demo/samples.jsonl"} <= outputs
    texts = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "prover_cli" / "cli.py"]   # cli.py: --help
    wrong = []
    for path in texts:
        for found in re.findall(r"runs/demo/[A-Za-z0-9_./-]*[A-Za-z0-9_]", path.read_text(encoding="utf-8")):
            if not any(found == out or found.startswith(out + "/") for out in outputs):
                wrong.append(f"{path.relative_to(REPO)}: {found}")
    assert wrong == []


def test_generate_says_it_builds_the_base_before_it_does(tmp_path):
    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"id": "a", "numbers": [1, 2, 3], "target": 6, "split": "valid"}) + "\n",
                        encoding="utf-8")
    args = ["generate", "--config", str(DEMO), "--problems", str(problems), "--out", str(tmp_path / "s.jsonl"),
            "--set", "model.name=tiny", "--set", f"model.cache_dir={tmp_path / 'cache'}", "--set", "generate.n=1",
            "--set", "generate.max_tokens=4"]
    first = runner.invoke(app_(), args)
    assert first.exit_code == 0, first.output
    assert f"building the base model tiny (first run only; then cached in {tmp_path / 'cache'}/)" in first.stderr
    again = runner.invoke(app_(), [*args[:6], str(tmp_path / "t.jsonl"), *args[7:]])
    assert again.exit_code == 0 and "building the base model" not in again.stderr
