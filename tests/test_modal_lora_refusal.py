"""es.noise = "lora" puts the whole population in one call on the loop's engine (es/vllm_lora.py), so
it cannot be split over member containers (modal.es_member_gpus > 0). The dry run refuses it, and so
does a real run, in remote.run_remote before anything is uploaded or launched (issue #42). The
Modal SDK here is the stand-in (tests/modal_standin.py): nothing reaches Modal either way."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from prover_cli.cli import app
from prover_cli.config import load_config
from prover_cli.errors import ConfigError
from prover_cli.on_modal import plan as modal_plan

REPO = Path(__file__).resolve().parents[1]
KIMINA_LORA = REPO / "configs" / "kimina-es-lowrank.toml"
pytestmark = pytest.mark.filterwarnings("ignore:.*executing locally.*:UserWarning")


class Launched(Exception):
    """The run went past its refusals to its uploads and its call."""


@pytest.fixture(autouse=True)
def no_calibration(tmp_path, monkeypatch):
    from prover_cli.on_modal.calibration import DIR_ENV

    monkeypatch.setenv(DIR_ENV, str(tmp_path / "calibration"))


@pytest.fixture
def remote(monkeypatch):
    from prover_cli.on_modal import remote

    def launched(*args, **kwargs):
        raise Launched()

    for name in ("to_wire", "upload", "app_of"):   # what a run does once its refusals are passed
        monkeypatch.setattr(remote, name, launched)
    return remote


def test_a_real_run_refuses_lora_members_split_over_member_containers_naming_both_keys(remote):
    config = load_config(KIMINA_LORA, ["modal.es_member_gpus=2"])
    with pytest.raises(ConfigError) as refused:
        remote.run_remote("train_es", config, {})
    said = str(refused.value)
    assert str(KIMINA_LORA) in said
    assert 'es.noise = "lora"' in said and "modal.es_member_gpus = 2 would split it" in said
    assert f"es.noise set by {KIMINA_LORA}, modal.es_member_gpus by --set modal.es_member_gpus=2" in said
    assert "modal.es_member_gpus = 0" in refused.value.hint


def test_the_same_config_with_no_member_containers_goes_on_to_its_launch(remote):
    with pytest.raises(Launched):
        remote.run_remote("train_es", load_config(KIMINA_LORA), {})


def test_full_noise_over_member_containers_is_not_this_refusal(remote):
    config = load_config(REPO / "configs" / "kimina-es.toml")
    assert config.modal.es_member_gpus > 0 and modal_plan.es_schedule_problem(config) is None
    with pytest.raises(Launched):
        remote.run_remote("train_es", config, {})


def test_the_dry_run_refuses_it_with_the_same_words():
    config = load_config(KIMINA_LORA, ["modal.es_member_gpus=2"])
    result = CliRunner().invoke(app, ["train", "es", "--config", str(KIMINA_LORA), "--backend", "modal", "--dry-run",
                                      "--set", "modal.es_member_gpus=2"])
    assert result.exit_code != 0
    text = " ".join((result.output or "").split())
    assert " ".join(modal_plan.es_schedule_problem(config).split()) in text
