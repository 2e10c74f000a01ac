"""Baseline and previous-run inputs of the speed gates (specdeploy.node.validation.speed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdeploy.node.validation import speed


def write(tmp_path: Path, d: dict) -> Path:
    p = tmp_path / "f.json"
    p.write_text(json.dumps(d))
    return p


def test_throughput_document_round_trip(tmp_path):
    doc = speed.throughput_document(
        [{"concurrency": 1, "output_tps": 500.0}, {"concurrency": 8, "output_tps": 1900.0}],
        release="r1", speculative=False, model="m", endpoint="chat", node="n1",
        labels={"hardware": "NVIDIA H200"},
    )  # fmt: skip
    f = speed.read_levels_file(write(tmp_path, doc))
    assert (f.levels, f.release, f.speculative) == ({1: 500.0, 8: 1900.0}, "r1", False)
    assert f.at([1, 32]) == {1: 500.0}  # a level it did not measure has no baseline


def test_validation_result_with_speed_levels(tmp_path):
    res = {"schema": "specdeploy.validation/1", "release": "r2",
           "acceptance": {"status": "ok", "mode": "spec"},
           "speed": {"speculative": True,
                     "levels": [{"concurrency": 16, "output_tps": 4100.0}]}}  # fmt: skip
    f = speed.read_levels_file(write(tmp_path, res))
    assert (f.levels, f.release, f.speculative) == ({16: 4100.0}, "r2", True)


def test_older_result_stands_only_for_the_level_it_ran_at(tmp_path):
    # Issue 28: its c=1 figure was applied to every level, so a c=8 speculative run was
    # compared with a c=1 baseline (a false PASS). It is a baseline for c=1 only.
    res = {"acceptance": {"status": "ok", "mode": "no_spec_baseline",
                          "output_tokens_per_s": {"median": 61.5}}}  # fmt: skip
    f = speed.read_levels_file(write(tmp_path, res))
    assert f.at([1, 8]) == {1: 61.5} and f.speculative is False
    res["labels"] = {"concurrency": "8"}
    assert speed.read_levels_file(write(tmp_path, res)).at([1, 8]) == {8: 61.5}
    del res["labels"]
    res["acceptance"]["status"] = "error"
    with pytest.raises(speed.SpeedInputError, match="not 'ok'"):
        speed.read_levels_file(write(tmp_path, res))
    with pytest.raises(speed.SpeedInputError, match="neither"):
        speed.read_levels_file(write(tmp_path, {"x": 1}))


def test_baseline_tps_number_or_map():
    assert speed.parse_baseline_tps("500", [1, 8]) == {1: 500.0, 8: 500.0}
    assert speed.parse_baseline_tps("1=500,8=1900", [1, 8]) == {1: 500.0, 8: 1900.0}
    for bad in ("0", "1=0", "x=5", "fast", "nan", "inf", "1=nan", "8=inf", "-inf", "1e999"):
        with pytest.raises(speed.SpeedInputError):
            speed.parse_baseline_tps(bad, [1])


@pytest.mark.parametrize(
    "row, problem",
    [
        ('{"output_tps": NaN}', "NaN is not a number JSON allows"),
        ('{"output_tps": Infinity}', "Infinity is not a number JSON allows"),
        ('{"output_tps": 1e999}', "1e999 is too large"),
        ('{"output_tps": 0.0, "requests": 0}', "level c=8: measured with 0 requests"),
        ('{"output_tps": 350.0, "requests": 0}', "level c=8: measured with 0 requests"),
        ('{"output_tps": -5.0}', "level c=8: -5.0 is not > 0"),
        ('{"output_tps": "fast"}', "level c=8: 'fast' is not a number"),
    ],
)
def test_a_measured_row_that_is_no_measurement_is_refused(tmp_path, row, problem):
    """Issue 28: an infinite tok/s in a baseline passed every gate; a 0-request level is no
    figure. Both are one line naming the file, never a speed-up."""
    p = tmp_path / "b.json"
    p.write_text('{"schema": "specdeploy.throughput/1", "levels": {"8": ' + row + "}}")
    with pytest.raises(speed.SpeedInputError) as e:
        speed.read_levels_file(p)
    assert str(p) in str(e.value) and problem in str(e.value)
