"""es/ledger.py: compact records, strict reading with file and iteration, resume compatibility."""

import json
import random

import pytest

from prover_cli.config import config_from_dict
from prover_cli.errors import InputError
from prover_cli.es.ledger import (bytes_per_iteration, header_differences, make_header, make_record, read_ledger,
                                  record_rewards, reward_text, write_ledger)


def header(**es):
    config = config_from_dict({"model": {"name": "tiny"}, "data": {"task": "toy"}, "es": es})
    return make_header(config, base_sha256="ab" * 32, dtype="float32", problems_sha256="cd" * 32)


@pytest.mark.parametrize("reward, text", [(0.25, ".25"), (1.0, "1"), (0.0, "0"), (-0.0, "0"), (0.1236, ".124"),
                                          (-0.5, "-.5"), (12.0, "12"), (100.5, "100.5"), (0.0004, "0")])
def test_reward_text_is_short_and_reads_back_as_the_rounded_value(reward, text):
    assert reward_text(reward) == text
    assert float(text) == round(reward, 3) + 0.0


def test_write_then_read_round_trips_with_one_record_per_line(tmp_path):
    path = tmp_path / "ledger.json"
    records = [make_record(1, [".5", "0"], "f" * 64, skipped=False),
               make_record(2, ["1", "1"], "e" * 64, skipped=True, snapshot="9" * 64)]
    write_ledger(path, header(population=2), records)
    stored, read = read_ledger(path)
    assert stored == header(population=2) and read == records
    assert read[0] == {"i": 1, "r": ".5 0", "fp": "f" * 16} and read[1]["skip"] == 1
    assert record_rewards(read[0]) == [0.5, 0.0]
    lines = path.read_text().splitlines()
    assert lines[-4:-2] == [json.dumps(r, separators=(",", ":")) + "," * (r["i"] == 1) for r in records]
    assert not (tmp_path / "ledger.json.tmp").exists()


def test_population_30_costs_under_200_bytes_per_iteration():
    rng = random.Random(0)
    records = [make_record(i, [reward_text(rng.choice(range(9)) / 8) for _ in range(30)], "%064x" % i, False)
               for i in range(1, 101)]
    graded = [make_record(i, [reward_text(rng.random() * 0.3) for _ in range(30)], "%064x" % i, False)
              for i in range(1, 101)]
    assert bytes_per_iteration(header(), records) <= 200  # Lean: 8 samples of 0/1 per member
    assert bytes_per_iteration(header(), graded) <= 200  # graded rewards, 3 decimals each


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(format="other"), "not a prover ES ledger"),
    (lambda d: d.update(version=99), "ledger version 99"),
    (lambda d: d["noise"].update(version=0), "noise"),
    (lambda d: d.pop("run_seed"), "lacks `run_seed`"),
    (lambda d: d["iterations"][1].update(i=5), "iteration 2: expected a record"),
    (lambda d: d["iterations"][1].update(r=".5"), "iteration 2: 1 rewards for a population of 2"),
    (lambda d: d["iterations"][0].update(r=".5 x"), "iteration 1: `r` must be"),
    (lambda d: d["iterations"][0].pop("fp"), "iteration 1: missing fingerprint"),
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
