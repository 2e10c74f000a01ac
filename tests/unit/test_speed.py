"""Baseline and previous-run inputs of the speed gates (specdeploy.node.validation.speed)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from specdeploy.node.validation import speed  # noqa: E402


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


def test_older_result_stands_for_every_level(tmp_path):
    res = {"acceptance": {"status": "ok", "mode": "no_spec_baseline",
                          "output_tokens_per_s": {"median": 61.5}}}  # fmt: skip
    f = speed.read_levels_file(write(tmp_path, res))
    assert f.all_levels and f.at([1, 8]) == {1: 61.5, 8: 61.5} and f.speculative is False
    res["acceptance"]["status"] = "error"
    with pytest.raises(speed.SpeedInputError, match="not 'ok'"):
        speed.read_levels_file(write(tmp_path, res))
    with pytest.raises(speed.SpeedInputError, match="neither"):
        speed.read_levels_file(write(tmp_path, {"x": 1}))


def test_baseline_tps_number_or_map():
    assert speed.parse_baseline_tps("500", [1, 8]) == {1: 500.0, 8: 500.0}
    assert speed.parse_baseline_tps("1=500,8=1900", [1, 8]) == {1: 500.0, 8: 1900.0}
    for bad in ("0", "1=0", "x=5", "fast"):
        with pytest.raises(speed.SpeedInputError):
            speed.parse_baseline_tps(bad, [1])
