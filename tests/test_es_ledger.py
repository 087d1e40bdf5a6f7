"""es/ledger.py: compact exact records, strict reading with file and iteration, versions 1 and 2."""

import json
import random
from pathlib import Path

import pytest

from prover_cli.config import config_from_dict
from prover_cli.errors import ConfigError, InputError
from prover_cli.es.ledger import (bytes_per_iteration, decode_rewards, encode_rewards, header_differences,
                                  make_header, make_record, read_ledger, record_rewards, reward_numerator,
                                  reward_text, write_ledger)

FIXTURES = Path(__file__).parent / "fixtures"


def header(**es):
    config = config_from_dict({"model": {"name": "tiny"}, "data": {"task": "toy"}, "es": es})
    return make_header(config.es, model=config.model, generate=config.generate, run_seed=config.run.seed,
                       task=config.data.task, base_sha256="ab" * 32, dtype="bfloat16", problems_sha256="cd" * 32)


@pytest.mark.parametrize("reward, text", [(0.25, ".25"), (1.0, "1"), (0.0, "0"), (-0.0, "0"), (0.1236, ".124"),
                                          (-0.5, "-.5"), (12.0, "12"), (100.5, "100.5"), (0.0004, "0")])
def test_reward_text_is_short_and_reads_back_as_the_rounded_value(reward, text):
    assert reward_text(reward) == text
    assert float(text) == round(reward, 3) + 0.0


def test_numerators_are_exactly_the_rounded_rewards_training_uses():
    rng = random.Random(0)
    values = [rng.random() * rng.choice([1, 0.3, 5]) * rng.choice([1, -1]) for _ in range(20_000)]
    values += [k / 8 for k in range(9)] + [0.0625, 0.0005, 0.0015, 0.1235]  # ties: half to even
    for value in values:
        numerator = reward_numerator(value)
        assert numerator == reward_numerator(reward_text(value))
        assert numerator / 1000 == float(reward_text(value))  # bit for bit the float training used


@pytest.mark.parametrize("numerators, text", [([0, 1000, 125, 999], "0003e807d3e7"), ([5, 0], "50"),
                                              ([0, 0], "00"), ([-500, 250, 0], "-500 250 0")])
def test_rewards_encode_as_fixed_width_hex_or_signed_decimals_and_decode_back(numerators, text):
    assert encode_rewards(numerators) == text
    assert decode_rewards(text, len(numerators)) == numerators


@pytest.mark.parametrize("text, population, message", [("0003e8", 4, "not 4 fixed-width"), ("00x1", 2, "hex"),
                                                       ("1 2 3", 2, "3 rewards for a population of 2"),
                                                       ("", 2, "not 2"), ("0A0B", 2, "hex")])
def test_bad_reward_strings_are_refused(text, population, message):
    with pytest.raises(ValueError, match=message):
        decode_rewards(text, population)


def test_write_then_read_round_trips_with_one_array_per_line(tmp_path):
    path = tmp_path / "ledger.json"
    records = [make_record(1, [".5", "0"], "f" * 64, skipped=False),
               make_record(2, ["1", "1"], "e" * 64, skipped=True, snapshot="9" * 64)]
    write_ledger(path, header(population=2), records)
    stored, read = read_ledger(path)
    assert stored == header(population=2) and read == records
    assert stored["version"] == 2 and stored["master_dtype"] == "float32" and stored["reward_denominator"] == 1000
    assert read[0] == {"i": 1, "fp": "f" * 16, "rewards": [0.5, 0.0], "numerators": [500, 0]}
    assert read[1]["skip"] == 1 and read[1]["snap"] == "9" * 64
    assert record_rewards(read[0]) == [0.5, 0.0]
    lines = path.read_text().splitlines()
    assert lines[-4:-2] == ['["ffffffffffffffff","1f4000"],', '["eeeeeeeeeeeeeeee","3e83e8","' + "9" * 64 + '"]']
    assert not (tmp_path / "ledger.json.tmp").exists()


def test_population_30_costs_at_most_128_bytes_per_iteration():
    rng = random.Random(0)
    lean = [make_record(i, [reward_text(rng.choice(range(9)) / 8) for _ in range(30)], "%064x" % i, False)
            for i in range(1, 101)]
    graded = [make_record(i, [reward_text(rng.random()) for _ in range(30)], "%064x" % i, False)
              for i in range(1, 101)]
    for records in (lean, graded):  # Lean: 8 samples of 0/1 per member; graded: 3 decimals each
        assert bytes_per_iteration(header(population=30), records) <= 128
    assert bytes_per_iteration(header(population=30), graded) == len('["%016x","' % 1 + "0" * 90 + '"],\n')


def v1_rows(path):
    return json.loads(path.read_text())["iterations"]


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(format="other"), "not a prover ES ledger"),
    (lambda d: d.update(version=99), "ledger version 99"),
    (lambda d: d["noise"].update(version=0), "noise"),
    (lambda d: d.pop("run_seed"), "lacks `run_seed`"),
    (lambda d: d.pop("master_dtype"), "lacks `master_dtype`"),
    (lambda d: d.update(reward_denominator=0), "`reward_denominator` = 0: must be a positive integer"),
    (lambda d: d["iterations"][1].pop(), "iteration 2: expected \\[fingerprint, rewards\\]"),
    (lambda d: d["iterations"][1].__setitem__(1, "1f4"), "iteration 2: rewards '1f4': 3 characters"),
    (lambda d: d["iterations"][0].__setitem__(1, "1f4 x"), "iteration 1: rewards"),
    (lambda d: d["iterations"][0].__setitem__(0, "F" * 16), "iteration 1: fingerprint"),
    (lambda d: d.update(iterations={}), "`iterations` must be a list"),
])
def test_a_malformed_ledger_is_an_input_error_naming_file_and_iteration(tmp_path, mutate, message):
    path = tmp_path / "ledger.json"
    write_ledger(path, header(population=2), [make_record(i, [".5", "0"], "f" * 16, False) for i in (1, 2)])
    data = json.loads(path.read_text())
    mutate(data)
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=message) as error:
        read_ledger(path)
    assert str(path) in str(error.value)


def test_torn_or_missing_ledgers_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="not found"):
        read_ledger(tmp_path / "nope.json")
    (tmp_path / "torn.json").write_text('{"format": "prover-es-ledger", "iter')
    with pytest.raises(InputError, match="not valid JSON"):
        read_ledger(tmp_path / "torn.json")


def test_resume_may_extend_iterations_but_not_change_what_shapes_the_weights():
    stored = header(iterations=10)
    assert header_differences(stored, header(iterations=20)) == []
    differences = header_differences(stored, header(iterations=10, sigma=0.002))
    assert differences == ["es.sigma: ledger 0.001 != now 0.002"]


# -- version 1 -------------------------------------------------------------------------------

def test_version_1_ledgers_read_into_the_same_records(tmp_path):
    stored, records = read_ledger(FIXTURES / "es_ledger_v1_bf16.json")
    assert stored["version"] == 1 and "master_dtype" not in stored and stored["dtype"] == "bfloat16"
    rows = v1_rows(FIXTURES / "es_ledger_v1_bf16.json")
    assert [r["i"] for r in records] == [1, 2, 3] and [r["fp"] for r in records] == [row["fp"] for row in rows]
    assert records[0]["rewards"] == [float(t) for t in rows[0]["r"].split()]
    # a version-1 ledger is not resumed by this prover (its master rule differs): said plainly
    [message] = header_differences(stored, header())
    assert "replays it" in message and "version: ledger 1" in message
    for mutate, error in [(lambda row: row.update(i=5), "iteration 2: expected a record"),
                          (lambda row: row.update(r=".5"), "iteration 2: 1 rewards for a population of 6"),
                          (lambda row: row.pop("fp"), "iteration 2: missing fingerprint")]:
        data = json.loads((FIXTURES / "es_ledger_v1_bf16.json").read_text())
        mutate(data["iterations"][1])
        (tmp_path / "v1.json").write_text(json.dumps(data))
        with pytest.raises(InputError, match=error):
            read_ledger(tmp_path / "v1.json")
    with pytest.raises(ValueError, match="writes ledger version 2 only"):
        write_ledger(tmp_path / "x.json", stored, records)


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["es_ledger_v1_bf16.json", "es_ledger_v1_fp32.json"])
def test_version_1_ledgers_still_replay_bit_for_bit(fixture, tmp_path, tmp_path_factory):
    """Written by the prover before version 2: bf16 kept its master in bf16 then; every
    iteration's fingerprint is checked against the record, the last one is the run's final/."""
    from prover_cli.es.replay import replay_seeds

    config = config_from_dict({"model": {"cache_dir": str(tmp_path_factory.getbasetemp() / "tiny-model-cache")}})
    result = replay_seeds(config, ledger_path=FIXTURES / fixture, out_dir=tmp_path / "out")
    rows = v1_rows(FIXTURES / fixture)
    assert result["iterations"] == 3 and result["fingerprint"] == rows[-1]["fp"]
    stored = json.loads((FIXTURES / fixture).read_text())
    assert result["master_dtype"] == stored["dtype"]
    assert json.loads((tmp_path / "out" / "config.json").read_text())["dtype"] == stored["dtype"]


def test_a_version_1_ledger_is_not_resumed(tmp_path):
    from prover_cli.es.train import _resume

    with pytest.raises(ConfigError, match="version: ledger 1"):
        _resume(FIXTURES / "es_ledger_v1_bf16.json", header(population=6), weights=None, reporter=None)
