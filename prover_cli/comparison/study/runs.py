"""The study's runs: which are planned (test and tuning), which are finished with this code and config
(`run_state`), and training the missing ones, locally or on Modal.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from prover_cli import backends
from prover_cli.comparison.study.design import DONE_FILE, METHODS, Study
from prover_cli.comparison.study.problem_sets import test_set
from prover_cli.comparison.study.run_configs import run_config, run_dir, samples_of, tune_config
from prover_cli.config import Config, tomllib
from prover_cli.errors import InputError
from prover_cli.fsio.jsonl import write_text_atomic
from prover_cli.progress import Reporter
from prover_cli.tasks.problems import train_problems
from prover_cli.training.metrics import CODE_FILE, code_version


def planned_runs(study: Study) -> list[dict[str, Any]]:
    """Every run of the study (arm x size x seed), in a fixed order, with its config and state."""
    runs = []
    for arm in study.arms.values():
        for size in study.train_sizes:
            for seed in study.seeds:
                config = run_config(study, arm, size, seed)
                state, why = run_state(config)
                if study.tune is not None and study.chosen is None:
                    state, why = "after tuning", "waits for the tuning phase to choose its method's setting"
                runs.append({"arm": arm.name, "method": arm.method, "size": size, "seed": seed,
                             "dir": run_dir(study, arm.name, size, seed), "config": config, "state": state,
                             "why": why, "samples": samples_of(config, arm.method)})
    return runs


def planned_tune_runs(study: Study) -> list[dict[str, Any]]:
    """Every tuning run (method x setting x tuning seed), with its config and state."""
    if study.tune is None:
        return []
    runs = []
    for method, settings in study.tune.settings.items():
        for index in range(len(settings)):
            for seed in study.tune.seeds:
                config = tune_config(study, method, index, seed)
                state, why = run_state(config)
                runs.append({"arm": f"tune-{method}-k{index}", "method": method, "setting": index, "size":
                             study.tune.train_size, "seed": seed, "dir": Path(config.run.dir), "config": config,
                             "state": state, "why": why, "samples": samples_of(config, method)})
    return runs


def _toml_dict(text: str) -> dict[str, Any]:
    return tomllib.loads(text)


def run_state(config: Config) -> tuple[str, str]:
    """("finished", "") for a run to reuse; ("missing" | "stale", why) for one to train (again)."""
    directory = Path(config.run.dir)
    if not directory.exists():
        return "missing", "not run yet"
    done_path = directory / DONE_FILE
    if not done_path.exists():
        return "stale", "did not finish (no study-run.json): trained again from the start"
    try:
        done = json.loads(done_path.read_text(encoding="utf-8"))
        recorded = json.loads((directory / CODE_FILE).read_text(encoding="utf-8"))
        (directory / "config.toml").read_text(encoding="utf-8")   # the run's own record is there too
    except (OSError, ValueError) as exc:
        return "stale", f"its records cannot be read ({exc}): trained again"
    if not isinstance(done, dict):
        return "stale", f"its {DONE_FILE} holds a {type(done).__name__}, not the record of a finished run: trained again"
    # The config the study planned for the run, as recorded when it finished: on Modal the run's own
    # config.toml holds the Volume's paths (`to_wire`), so it is not what to compare with.
    stored = done.get("config")
    if not isinstance(stored, dict):
        return "stale", "its study-run.json records no planned config: trained again"
    now = code_version()
    for record, label in ((recorded, CODE_FILE), (done.get("code"), DONE_FILE)):
        if record != now:
            keys = [k for k in now if not isinstance(record, dict) or record.get(k) != now[k]]
            return "stale", f"made by other code ({label}: {', '.join(keys)} differ{'s' if len(keys) == 1 else ''})"
    current = _toml_dict(config.to_toml())
    changed = [f"{section}.{key}" for section in current for key in current[section]
               if not isinstance(stored.get(section), dict) or stored[section].get(key) != current[section][key]]
    if changed:
        return "stale", f"its config.toml differs: {', '.join(changed[:4])}{' ...' if len(changed) > 4 else ''}"
    return "finished", ""


def train_missing(study: Study, runs: list[dict[str, Any]], backend: str, reporter: Reporter, fingerprint: dict[str, Any],
           phase: str) -> list[dict[str, Any]]:
    """Train every run of `runs` that is not finished, each whole (a stale directory removed first)."""
    todo = [run for run in runs if run["state"] != "finished"]
    for run in {run["size"]: run for run in todo}.values():  # a size the training split cannot hold fails now
        train_problems(run["config"])
    for run in todo:
        reporter.log(f"{run['dir']}: {run['why']}")
        if run["dir"].exists():
            shutil.rmtree(run["dir"])  # a run is trained whole or not reused: never a mix of two codes
    if backend == "modal":
        _run_on_modal(todo, reporter)
    else:
        for i, run in enumerate(todo, 1):
            reporter.log(f"study {study.name} ({phase}): run {i}/{len(todo)}: {run['arm']} n{run['size']} "
                         f"seed {run['seed']}")
            backends.run("local", f"train_{run['method']}", run["config"], reporter=reporter, resume=False)
            _mark_done(run, fingerprint)
    return todo


def _mark_done(run: dict[str, Any], fingerprint: dict[str, Any]) -> None:
    """The run finished: record it, with the code that made it (a run without this file is redone)."""
    if test_set(run["config"]) != fingerprint:
        raise InputError(f"{run['dir']}: evaluated on another test set than the study's ({fingerprint['sha256'][:12]})")
    write_text_atomic(run["dir"] / DONE_FILE, json.dumps(
        {"arm": run["arm"], "method": run["method"], "train_size": run["size"], "seed": run["seed"],
         "code": code_version(), "test_set": fingerprint, "config": _toml_dict(run["config"].to_toml())},
        indent=2, sort_keys=True) + "\n")


def _run_on_modal(todo: list[dict[str, Any]], reporter: Reporter) -> None:
    """Whole runs fanned out on Modal, one `train_es` / `train_grpo` call each (functions.study_runs),
    each writing its own directory on the runs Volume; the small files come back to the same paths.
    tests/test_study.py runs it with the Volume stand-in and each call in a stand-in container."""
    remote = backends.modal_module("prover_cli.on_modal.remote")
    functions = backends.modal_module("prover_cli.on_modal.functions")
    import modal

    for method in METHODS:
        batch = [run for run in todo if run["method"] == method]
        if not batch:
            continue
        name = f"train_{method}"
        wires = [remote.to_wire(name, run["config"], {"resume": False}) for run in batch]
        with modal.enable_output(), remote.app_of(name).run():   # this method's app only (images.py)
            for config, _, _ in wires:   # a stale run is trained whole on the Volume too, never on top
                try:
                    remote.runs_volume.remove_file(config["run"]["dir"], recursive=True)
                except modal.exception.NotFoundError:
                    pass
            remote.upload([upload for _, _, uploads in wires for upload in uploads])
            results = functions.study_runs(name, [(config, kwargs) for config, kwargs, _ in wires], batch[0]["config"])
        for run, (config, kwargs, _), result in zip(batch, wires, results):
            if isinstance(result, BaseException):
                raise InputError(f"{run['dir']}: the run failed on Modal: {type(result).__name__}: {result}",
                                 hint="rerun `prover study run` to retry the runs that did not finish")
            remote._pull([*remote._outputs(name, config, kwargs), str(Path(config["run"]["dir"]) / CODE_FILE)])
            _mark_done(run, test_set(run["config"]))
            reporter.log(f"{run['dir']}: finished on Modal")
