"""Config: typed, validated on load, errors name the file and the key; --set overrides."""

from pathlib import Path

import pytest

from prover_cli.config import Config, config_from_dict, load_config, parse_override
from prover_cli.docgen import config_reference
from prover_cli.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "x.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_are_the_paper_and_kimina_defaults():
    cfg = load_config(None)
    assert cfg.model.name == "AI-MO/Kimina-Prover-Preview-Distill-1.5B"
    assert (cfg.es.population, cfg.es.sigma, cfg.es.learning_rate) == (30, 1e-3, 5e-4)
    assert cfg.es.fitness_shaping == "zscore"
    assert cfg.verify.repl_command == ["lake", "env", "repl"]
    assert cfg.verify.allowed_axioms == ["propext", "Classical.choice", "Quot.sound"]


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "configs").glob("*.toml")))
def test_shipped_configs_load(name):
    cfg = load_config(REPO / "configs" / name)
    assert cfg.source.endswith(name)


def test_typo_in_key_names_file_key_and_suggestion(tmp_path):
    path = write(tmp_path, "[es]\npopulaton = 8\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert str(path) in message and "es.populaton" in message and "did you mean `population`" in message


def test_string_where_number_belongs(tmp_path):
    path = write(tmp_path, '[es]\nsigma = "small"\n')
    with pytest.raises(ConfigError, match=r"x\.toml: es\.sigma = \"small\": expected a number, got str"):
        load_config(path)


def test_negative_population_rejected(tmp_path):
    path = write(tmp_path, "[es]\npopulation = -4\n")
    with pytest.raises(ConfigError, match=r"x\.toml: es\.population = -4: must be >= 2"):
        load_config(path)


def test_odd_population_with_antithetic_explains_fix(tmp_path):
    path = write(tmp_path, "[es]\npopulation = 5\n")
    with pytest.raises(ConfigError, match="positive even integer.*antithetic"):
        load_config(path)
    cfg = load_config(path, ["es.antithetic=false"])
    assert cfg.es.population == 5


def test_unknown_section_and_bad_toml(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown section \[trainer\]"):
        load_config(write(tmp_path, "[trainer]\nx = 1\n"))
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "[es\n"))
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.toml")


def test_choices_and_bool_and_list_types(tmp_path):
    with pytest.raises(ConfigError, match="must be one of 'zscore', 'centered_rank'"):
        config_from_dict({"es": {"fitness_shaping": "rank"}})
    with pytest.raises(ConfigError, match="expected a boolean"):
        config_from_dict({"es": {"antithetic": 1}})
    with pytest.raises(ConfigError, match="expected a list of strings"):
        config_from_dict({"verify": {"repl_command": "lake env repl"}})
    with pytest.raises(ConfigError, match="expected an integer"):
        config_from_dict({"es": {"population": 8.0}})


def test_int_accepted_for_float_and_stored_as_float():
    cfg = config_from_dict({"es": {"sigma": 1}})
    assert isinstance(cfg.es.sigma, float) and cfg.es.sigma == 1.0


def test_eval_k_larger_than_n_rejected():
    with pytest.raises(ConfigError, match="k = 64 exceeds eval.n = 32"):
        config_from_dict({"eval": {"k": [1, 64]}})


def test_set_overrides_parse_toml_values(tmp_path):
    path = write(tmp_path, "[es]\npopulation = 8\n")
    cfg = load_config(path, ["es.population=12", "model.name=tiny", "verify.repl_command=[\"repl\"]",
                             "es.antithetic=false", "run.dir=out/run 1"])
    assert cfg.es.population == 12
    assert cfg.model.name == "tiny"
    assert cfg.verify.repl_command == ["repl"]
    assert cfg.es.antithetic is False
    assert cfg.run.dir == "out/run 1"


@pytest.mark.parametrize("bad", ["population=3", "es.=3", ".x=1", "es.population"])
def test_malformed_override(bad):
    with pytest.raises(ConfigError, match="expected section.key=value"):
        parse_override(bad)


def test_override_is_validated_too_and_blamed_on_the_set():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["es.sigma=-1.0"])
    assert str(err.value) == "--set es.sigma=-1.0: must be >= 1e-30"


def test_set_errors_name_the_set_even_with_a_config_file(tmp_path):
    path = write(tmp_path, "[es]\nsigma = 0.5\n")
    for override, expected in [("es.populaton=8", "--set es.populaton=8: unknown key; did you mean `population`?"),
                               ("trainer.x=1", "--set trainer.x=1: unknown section [trainer]"),
                               ("es.sigma=\"big\"", "--set es.sigma=\"big\": expected a number, got str")]:
        with pytest.raises(ConfigError) as err:
            load_config(path, [override])
        assert str(err.value).startswith(expected), str(err.value)
        assert "x.toml" not in str(err.value)


@pytest.mark.parametrize("key", ["es.learning_rate", "es.sigma", "generate.temperature", "verify.memory_limit_gb",
                                 "grpo.beta", "data.valid_fraction", "modal.gpu_price_per_hour"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "+nan"])
def test_non_finite_numbers_are_rejected_from_set_and_file(tmp_path, key, value):
    with pytest.raises(ConfigError, match=r"must be a finite number") as err:
        load_config(None, [f"{key}={value}"])
    assert str(err.value).startswith(f"--set {key}={value}:")
    section, name = key.split(".")
    path = write(tmp_path, f"[{section}]\n{name} = {value}\n")
    with pytest.raises(ConfigError, match=r"must be a finite number") as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}: {key} = ")


def test_every_float_key_rejects_nan():
    """No key may slip through: NaN fails every comparison, so a range check alone lets it pass."""
    from dataclasses import fields
    from typing import get_type_hints

    from prover_cli.config import SECTIONS

    checked = 0
    for section, cls in SECTIONS.items():
        for f in fields(cls):
            if get_type_hints(cls)[f.name] is float:
                with pytest.raises(ConfigError, match="finite"):
                    config_from_dict({section: {f.name: float("nan")}})
                checked += 1
    assert checked >= 10


def test_inf_only_where_a_key_documents_it():
    from prover_cli.config import _check_value

    meta = {"doc": "", "min": 0.0, "max": None, "min_exclusive": True, "choices": None, "allow_inf": True}
    assert _check_value("k", float("inf"), float, meta) == float("inf")
    with pytest.raises(ConfigError, match="nan is never accepted"):
        _check_value("k", float("nan"), float, meta)
    with pytest.raises(ConfigError, match="must be a finite number; use inf for no limit"):
        _check_value("k", float("-inf"), float, meta)


def test_cross_key_errors_say_where_each_value_came_from(tmp_path):
    path = write(tmp_path, "[eval]\nk = [1, 8]\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, ["eval.n=4"])
    assert str(err.value).startswith(f"{path}: eval.k = [1, 8]: k = 8 exceeds eval.n = 4 (from --set)")
    with pytest.raises(ConfigError) as err:
        load_config(None, ["es.population=5"])
    assert str(err.value).startswith("--set es.population=5: must be a positive even integer with "
                                     "es.antithetic = true (the default")


def test_toml_with_bom_loads_and_a_bad_byte_names_file_and_line(tmp_path):
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf[es]\npopulation = 8\n")
    assert load_config(path).es.population == 8
    path.write_bytes(b"[es]\npopulation = 8\n# caf\xe9\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}:3: not valid UTF-8 (byte 0xe9 at column 6)")
    path.write_bytes(b"[es]\npopulation = 8\nsigma = \n")
    with pytest.raises(ConfigError, match=rf"{path.name}:3: not valid TOML"):
        load_config(path)


def test_io_max_line_bytes_is_a_documented_key():
    assert load_config(None).io.max_line_bytes == 16 * 1024 * 1024
    assert "| `max_line_bytes` |" in config_reference()
    with pytest.raises(ConfigError, match=r"--set io.max_line_bytes=10: must be >= 1024"):
        load_config(None, ["io.max_line_bytes=10"])


def test_resolved_toml_roundtrips():
    cfg = load_config(REPO / "configs" / "demo.toml", ["es.sigma=0.5"])
    import tomllib

    again = config_from_dict(tomllib.loads(cfg.to_toml()))
    assert again.to_dict() == cfg.to_dict()


def test_reference_documents_every_key():
    from prover_cli.tasks import BUILTIN, task_options

    text = config_reference()
    for section, values in Config().to_dict().items():
        if section == "task":
            continue
        assert f"## [{section}]" in text
        for key in values:
            assert f"| `{key}` |" in text
    for task in BUILTIN:  # each task's own options, in a table of its own
        for key in task_options(task):
            assert f"### [task.{task}]" in text and f"| `{key}` |" in text.split(f"### [task.{task}]")[1]


def test_a_task_table_holds_the_options_its_task_declares():
    config = load_config(REPO / "configs" / "demo.toml", ["task.countdown.numbers=4"])
    assert config.task == {"countdown": {"problems": 1024, "numbers": 4, "max_number": 9, "prompt": "short"}}
    assert config.origins["task.countdown.numbers"] == "--set task.countdown.numbers=4"
    assert load_config(None).task == {}  # lean declares no options
    # switching data.task keeps another task's table, checked all the same
    toy = load_config(REPO / "tests" / "configs" / "tiny.toml", ["data.task=toy"])
    assert toy.task == {"countdown": {"problems": 64, "numbers": 3, "max_number": 20, "prompt": "tinyzero"}}


@pytest.mark.parametrize("sets, message", [
    (["task.countdown.numbers=9"], r"^--set task.countdown.numbers=9: must be <= 6$"),
    (["task.countdown.prompt=long"], r"^--set task.countdown.prompt=long: must be one of 'tinyzero', 'short'$"),
    (["task.countdown.problem=5"], r"^--set task.countdown.problem=5: unknown key; did you mean `problems`\? "
                                   r"\(allowed: problems, numbers, max_number, prompt\)$"),
    (["task.countdown.problems=many"], r"^--set task.countdown.problems=many: expected an integer, got str$"),
    (["task.problems=5"], r"^--set task.problems=5: \[task\] holds one table per task: \[task.countdown\]"),
    (["task.chess.depth=2"], r"^--set task.chess.depth=2: must be one of 'lean', 'countdown', 'toy'$"),
    (["data.preset=lean"], r"^--set data.preset=lean: must be one of 'auto', .*'problems', or a task that generates "
                           r"its problems \('countdown', 'toy'\)$"),
])
def test_a_bad_task_option_names_the_key_and_what_is_allowed(sets, message):
    with pytest.raises(ConfigError, match=message):
        load_config(REPO / "configs" / "demo.toml", sets)


def test_a_bad_task_option_in_a_file_names_the_file_and_key(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text('[data]\ntask = "countdown"\n\n[task.countdown]\nmax_number = 1\n')
    with pytest.raises(ConfigError, match=rf"^{path}: task.countdown.max_number = 1: must be >= 2$"):
        load_config(path)


@pytest.mark.parametrize("old, new, value", [("countdown_problems", "problems", "64"),
                                             ("countdown_numbers", "numbers", "4"),
                                             ("countdown_max_number", "max_number", "9"),
                                             ("countdown_prompt", "prompt", '"short"')])
def test_an_old_task_key_is_refused_naming_the_new_one(tmp_path, old, new, value):
    path = tmp_path / "old.toml"
    path.write_text(f'[data]\ntask = "countdown"\n{old} = {value}\n')
    with pytest.raises(ConfigError, match=rf"^{path}: data.{old} = {value}: data.{old} is now task.countdown.{new}, "
                                          rf"an option of the countdown task in its own table: "
                                          rf"\[task.countdown\] {new} = {value}"):
        load_config(path)
    with pytest.raises(ConfigError, match=rf"^--set data.{old}={value}: data.{old} is now task.countdown.{new}"):
        load_config(None, [f"data.{old}={value}"])  # whatever data.task is: never silently ignored


def test_the_config_and_prepare_data_agree_on_the_layouts():
    from prover_cli.config import DATA_LAYOUTS
    from prover_cli.tasks.datasets import PRESET_ALIASES, PRESETS

    assert set(DATA_LAYOUTS) == set(PRESETS) | set(PRESET_ALIASES)
