"""The run directory's contract (prover_cli/training/run.py), for both trainers, without a model: refuse,
the resume check, completion, the base line, the one metrics reader, and atomic files and final/."""

from __future__ import annotations

import json
import os
import types
from pathlib import Path

import pytest

from prover_cli.config import load_config
from prover_cli.errors import ConfigError, InputError, MachineError
from prover_cli.fsio.jsonl import write_dir_atomic, write_text_atomic
from prover_cli.training.metrics import BUDGET_KEYS, REQUIRED_KEYS, Totals, append_metrics, read_metrics
from prover_cli.training.run import ResumePoint, Run

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "configs" / "tiny.toml"


class Logs:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, message: str) -> None:
        self.lines.append(message)


def config(run_dir: Path):
    return load_config(TINY, [f"run.dir={run_dir}"])


def line(iteration: int, method: str = "es") -> dict:
    record = {"iteration": iteration, "method": method, "task": "toy", "samples": 4 * iteration,
              "samples/total": 4 * iteration, "time/wall_s": 0.5, "time/elapsed_s": 0.5 * iteration,
              "tokens": 0, "tokens/total": 0, "checks": 0, "checks/total": 0}
    if iteration == 0:
        return {**record, "eval/verified_rate": 0.25}
    return {**record, "reward/mean": 0.5, "reward/max": 1.0, "verify/verified": 1}


def open_es(run_dir: Path, *, resume: bool, total: int = 3, reporter=None) -> Run:
    return Run.open(config(run_dir), "es", total=total, total_key="es.iterations", resume=resume,
                    markers=[run_dir / "ledger.json"], refusal="a ledger already exists",
                    **({"reporter": reporter} if reporter else {}))


# -- create or refuse ------------------------------------------------------------------------------

def test_an_existing_marker_is_refused_without_resume_and_nothing_changes(tmp_path):
    (tmp_path / "ledger.json").write_text("{}")
    append_metrics(tmp_path, line(1))
    before = (tmp_path / "metrics.jsonl").read_bytes()
    with pytest.raises(InputError, match=f"{tmp_path / 'ledger.json'}: a ledger already exists") as error:
        open_es(tmp_path, resume=False)
    assert "--resume" in error.value.hint and "run.dir" in error.value.hint
    assert (tmp_path / "metrics.jsonl").read_bytes() == before
    open_es(tmp_path, resume=True)  # the same directory is accepted with --resume


def test_metrics_of_another_method_are_refused_with_or_without_resume(tmp_path):
    append_metrics(tmp_path, line(1, method="grpo"))
    for resume in (False, True):
        with pytest.raises(InputError, match="holds metrics of method grpo, not of ES"):
            open_es(tmp_path, resume=resume)


# -- the resume check behind one interface ---------------------------------------------------------

def test_a_failing_resume_check_raises_its_message_and_leaves_the_metrics_as_they_were(tmp_path):
    (tmp_path / "ledger.json").write_text("{}")
    for i in (1, 2, 3):
        append_metrics(tmp_path, line(i))
    before = (tmp_path / "metrics.jsonl").read_bytes()
    run = open_es(tmp_path, resume=True)

    def refuse():
        raise ConfigError(f"{tmp_path / 'ledger.json'}: cannot resume, the config differs from the ledger: es.sigma")

    with pytest.raises(ConfigError, match="cannot resume, the config differs from the ledger: es.sigma"):
        run.resume(refuse)
    assert (tmp_path / "metrics.jsonl").read_bytes() == before


def test_resume_cuts_the_metrics_to_the_point_keeping_the_kept_lines_byte_for_byte(tmp_path):
    (tmp_path / "ledger.json").write_text("{}")
    for i in (0, 1, 2, 3):
        append_metrics(tmp_path, line(i))
    with (tmp_path / "metrics.jsonl").open("a") as handle:
        handle.write('{"iteration": 4, "meth')  # torn by a kill
    kept = (tmp_path / "metrics.jsonl").read_text().splitlines()[:3]
    run = open_es(tmp_path, resume=True, total=5)
    point = run.resume(lambda: ResumePoint(2, tmp_path / "ledger.json"))
    assert point.done == run.done == 2 and not run.complete
    assert (tmp_path / "metrics.jsonl").read_text().splitlines() == kept
    totals = run.begin()
    assert totals == run.totals == Totals(samples=8, tokens=0, checks=0, elapsed_s=1.0)
    assert (tmp_path / "config.toml").exists()
    assert not run.base_line_due([{"id": "p"}])  # trained iterations are kept: the weights are not the base


def test_without_resume_the_point_function_is_never_asked(tmp_path):
    run = open_es(tmp_path, resume=False)

    def must_not_run():
        raise AssertionError("asked for a resume point without --resume")

    assert run.resume(must_not_run) is None and run.done == 0 and not run.complete


# -- completion ------------------------------------------------------------------------------------

def test_a_complete_run_says_so_and_changes_nothing(tmp_path):
    (tmp_path / "ledger.json").write_text("{}")
    for i in (1, 2, 3):
        append_metrics(tmp_path, line(i))
    with (tmp_path / "metrics.jsonl").open("a") as handle:
        handle.write("{\"torn")  # not even this is cut: a complete run rewrites nothing
    before = (tmp_path / "metrics.jsonl").read_bytes()
    logs = Logs()
    run = open_es(tmp_path, resume=True, total=3, reporter=logs)
    run.resume(lambda: ResumePoint(3, tmp_path / "ledger.json"))
    assert run.complete
    run.begin()
    assert (tmp_path / "metrics.jsonl").read_bytes() == before and not (tmp_path / "config.toml").exists()
    assert any("the run is complete (ledger.json is at es.iterations = 3)" in m for m in logs.lines)


# -- the base line ---------------------------------------------------------------------------------

def test_the_base_line_is_due_once_and_only_with_held_out_problems(tmp_path):
    run = open_es(tmp_path, resume=False)
    run.resume(lambda: None)
    assert not run.base_line_due([])
    assert run.base_line_due([{"id": "p"}])
    run.write_metrics(line(0))
    assert not run.base_line_due([{"id": "p"}])  # a resume of a run killed after it keeps it


# -- the one metrics reader ------------------------------------------------------------------------

def test_read_metrics_skips_a_torn_line_reports_malformed_ones_and_refuses_two_runs(tmp_path):
    append_metrics(tmp_path, line(1))
    with (tmp_path / "metrics.jsonl").open("a") as handle:
        handle.write("not json\n")
    append_metrics(tmp_path, line(2))
    assert [r["iteration"] for r in read_metrics(tmp_path)] == [1, 2]
    malformed: list = []
    read_metrics(tmp_path, malformed)
    assert [m["line"] for m in malformed] == [2]
    append_metrics(tmp_path, line(1))
    with pytest.raises(InputError, match=r"metrics.jsonl:4: iteration 1 after iteration 2; the file mixes two runs"):
        read_metrics(tmp_path)
    assert read_metrics(tmp_path / "nowhere") == []


# -- atomic files and directories ------------------------------------------------------------------

def test_a_failure_between_write_and_rename_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "ledger.json"
    write_text_atomic(path, "old\n")

    def failing_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(MachineError, match="ENOSPC"):
        write_text_atomic(path, "new\n")
    assert path.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["ledger.json"]


def test_a_file_writer_function_that_fails_leaves_the_old_file_and_no_temp(tmp_path):
    path = tmp_path / "weights.safetensors"
    write_text_atomic(path, b"old")

    def half_then_fail(tmp: Path) -> None:
        tmp.write_bytes(b"ha")
        raise RuntimeError("killed midway")

    with pytest.raises(RuntimeError, match="killed midway"):
        write_text_atomic(path, half_then_fail)
    assert path.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["weights.safetensors"]


def fill_with(files: dict[str, str]):
    def fill(tmp: Path) -> None:
        for name, text in files.items():
            (tmp / name).write_text(text)
    return fill


def test_final_is_replaced_whole_never_merged(tmp_path):
    final = tmp_path / "final"
    write_dir_atomic(final, fill_with({"model.safetensors": "old", "stale.json": "old"}))
    write_dir_atomic(final, fill_with({"model.safetensors": "new"}))
    assert {p.name: p.read_text() for p in final.iterdir()} == {"model.safetensors": "new"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]


def test_a_failure_while_final_is_written_leaves_the_old_final(tmp_path):
    final = tmp_path / "final"
    write_dir_atomic(final, fill_with({"model.safetensors": "old"}))

    def half_then_fail(tmp: Path) -> None:
        (tmp / "model.safetensors").write_text("ha")
        raise RuntimeError("killed midway")

    with pytest.raises(RuntimeError):
        write_dir_atomic(final, half_then_fail)
    assert {p.name: p.read_text() for p in final.iterdir()} == {"model.safetensors": "old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]


def test_a_disk_error_after_final_is_written_and_before_the_rename_leaves_the_old_final(tmp_path, monkeypatch):
    final = tmp_path / "final"
    write_dir_atomic(final, fill_with({"model.safetensors": "old"}))

    def failing_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing_fsync)  # the new files are written; syncing them fails
    with pytest.raises(MachineError, match="ENOSPC"):
        write_dir_atomic(final, fill_with({"model.safetensors": "new"}))
    assert {p.name: p.read_text() for p in final.iterdir()} == {"model.safetensors": "old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]


def test_a_failed_rename_into_place_puts_the_old_final_back(tmp_path, monkeypatch):
    final = tmp_path / "final"
    write_dir_atomic(final, fill_with({"model.safetensors": "old"}))
    real_rename = Path.rename

    def rename(self, target):
        if self.name == "final.tmp":  # the old final/ has moved aside; the new one fails to move in
            raise OSError(5, "Input/output error")
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", rename)
    with pytest.raises(MachineError, match="EIO"):
        write_dir_atomic(final, fill_with({"model.safetensors": "new"}))
    assert {p.name: p.read_text() for p in final.iterdir()} == {"model.safetensors": "old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]


def test_a_shared_cache_keeps_the_copy_already_in_place(tmp_path):
    cache = tmp_path / "tiny-model"
    write_dir_atomic(cache, fill_with({"config.json": "first"}), shared=True)
    inode = (cache / "config.json").stat().st_ino
    write_dir_atomic(cache, fill_with({"config.json": "second"}), shared=True)  # a racing build, finished later
    assert (cache / "config.json").read_text() == "first" and (cache / "config.json").stat().st_ino == inode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny-model"]


def test_save_final_refuses_non_finite_weights_naming_final_and_keeps_the_old_one(tmp_path):
    from prover_cli.policy.model_dir import NonFiniteWeightsError

    run = open_es(tmp_path, resume=False)
    run.save_final(fill_with({"model.safetensors": "old"}))

    def diverged(tmp: Path) -> None:
        raise NonFiniteWeightsError([("lm_head.weight", 3, 64)], tmp)

    with pytest.raises(NonFiniteWeightsError) as error:
        run.save_final(diverged)
    assert str(error.value).startswith(f"{run.final_dir}: not written: tensor lm_head.weight holds NaN or inf")
    assert f"{run.final_dir} is kept as it was" in str(error.value)
    assert (run.final_dir / "model.safetensors").read_text() == "old"


def test_settle_final_mends_a_missing_or_stale_final_and_leaves_a_good_one_untouched(tmp_path):
    logs = Logs()
    run = open_es(tmp_path, resume=False, reporter=logs)
    good = fill_with({"model.safetensors": "end"})
    run.settle_final(lambda d: (d / "model.safetensors").read_text() == "end", good, source="ledger.json")
    assert (run.final_dir / "model.safetensors").read_text() == "end"
    assert any("was missing; written from ledger.json" in m for m in logs.lines)

    inode = (run.final_dir / "model.safetensors").stat().st_ino
    run.settle_final(lambda d: (d / "model.safetensors").read_text() == "end", good, source="ledger.json")
    assert (run.final_dir / "model.safetensors").stat().st_ino == inode  # not rewritten

    run.save_final(fill_with({"model.safetensors": "earlier end"}))
    run.settle_final(lambda d: (d / "model.safetensors").read_text() == "end", good, source="ledger.json")
    assert (run.final_dir / "model.safetensors").read_text() == "end"
    assert any("did not hold the weights of ledger.json" in m for m in logs.lines)


def test_metrics_written_through_the_run_reach_the_tracker_and_the_one_reader(tmp_path):
    class Tracker:
        def __init__(self) -> None:
            self.logged: list[dict] = []

        def log(self, record: dict) -> None:
            self.logged.append(record)

    tracker = Tracker()
    run = open_es(tmp_path, resume=False)
    run.write_metrics(line(0), tracker)
    run.write_metrics(line(1), tracker)
    assert run.records() == tracker.logged == [json.loads(x) for x in
                                               (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert run.last_record()["iteration"] == 1


# -- one metrics line for both trainers ----------------------------------------------------------------

OWN_PREFIXES = ("es/", "grpo/")  # each trainer's own keys; everything else is the line both write


def common_difference(a: dict, b: dict) -> set:
    """Keys one line has and the other lacks, leaving out each trainer's own prefix."""
    shared = lambda line: {k for k in line if not k.startswith(OWN_PREFIXES)}  # noqa: E731
    return shared(a) ^ shared(b)


class Tokenizer:  # what completion_tokens needs: one id per character
    def __call__(self, texts, add_special_tokens=True):
        return {"input_ids": [list(text) for text in texts]}


def test_an_es_line_and_a_grpo_line_share_every_common_key_by_construction(tmp_path):
    from prover_cli.es.signal import SignalMonitor
    from prover_cli.es.train import es_line
    from prover_cli.grpo.trl_glue import StepRewards, make_metrics_callback
    from prover_cli.progress import NULL_REPORTER
    from prover_cli.training.heldout import HeldOutSchedule

    rewards, completions = [1.0, 0.0, 0.5, 1.0], ["ab", "c", "", "def"]
    es_run = open_es(tmp_path / "es", resume=False)
    es_run.resume(lambda: None)
    es_run.begin()
    es = es_line(es_run, SignalMonitor(es_run.config.es, []), 1, rewards, completions, Tokenizer(), wall_s=0.5,
                 norm=0.1, skipped=False)

    grpo_dir = tmp_path / "grpo"
    grpo_run = Run.open(config(grpo_dir), "grpo", total=3, total_key="grpo.steps", resume=False, markers=[],
                        refusal="-")
    grpo_run.resume(lambda: None)
    grpo_run.begin()
    stats = StepRewards(rewards=list(rewards), tokens=6)
    with NULL_REPORTER.task("grpo", total=3) as progress:
        callback = make_metrics_callback(stats, progress, run=grpo_run, heldout=HeldOutSchedule(grpo_run.config, 3),
                                         evaluation=None)
        step = types.SimpleNamespace(global_step=1)
        callback.on_step_end(None, step, None, model=None)
        callback.on_log(None, step, None, logs={"loss": 0.25, "grad_norm": 1.0})
    grpo = read_metrics(grpo_dir)[-1]

    assert common_difference(es, grpo) == set()
    assert {k for k in es if not k.startswith("es/")} == set(REQUIRED_KEYS) | set(BUDGET_KEYS)
    for key in ("samples", "samples/total", "tokens", "tokens/total", "checks", "checks/total", "verify/verified",
                "reward/mean", "reward/max"):
        assert es[key] == grpo[key], key  # the same samples give the same values, not only the same keys
    assert grpo["grpo/loss"] == 0.25 and "es/update_norm" in es
    # the comparison fails where one trainer's line lacks a shared key, or adds one of its own unprefixed
    assert common_difference({k: v for k, v in es.items() if k != "checks/total"}, grpo) == {"checks/total"}
    assert common_difference({**es, "member/mean": 0.0}, grpo) == {"member/mean"}


def test_the_running_totals_continue_from_the_last_kept_line(tmp_path):
    (tmp_path / "ledger.json").write_text("{}")
    for i in (1, 2):
        append_metrics(tmp_path, line(i))
    run = open_es(tmp_path, resume=True, total=5)
    run.resume(lambda: ResumePoint(2, tmp_path / "ledger.json"))
    run.begin()
    third = run.line(3, [1.0, 0.0], tokens=7, wall_s=0.25)
    assert (third["samples/total"], third["tokens/total"], third["checks/total"]) == (8 + 2, 0 + 7, 0 + 2)
    assert third["time/elapsed_s"] == 1.0 + 0.25 and third["verify/verified"] == 1 and third["reward/mean"] == 0.5
    assert run.line(4, [], tokens=0, wall_s=0.5)["samples/total"] == 10  # a step that scored nothing adds nothing
