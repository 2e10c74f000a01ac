"""Gate thresholds and evaluation."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from specdeploy.node import gate, metrics  # noqa: E402
from specdeploy.node.acceptance import AcceptanceResult, RepeatResult  # noqa: E402


def measured(
    mal_accepted: float = 344,
    per_pos=(138, 112, 94),
    tps=(100.0, 110.0, 90.0),
    baseline: float | None = None,
) -> AcceptanceResult:
    r = AcceptanceResult("ok", "measured", True)
    r.total = metrics.SpecDelta(172, 516, mal_accepted, tuple(per_pos), 10.0)
    r.repeats = [RepeatResult(i, 4, int(t * 10), 10.0, "count") for i, t in enumerate(tps)]
    if baseline:
        r.set_baseline(baseline, "test")
    return r


def test_defaults_pass_without_baseline():
    g = gate.evaluate(measured(), gate.Thresholds())
    assert g.exit_code == 0
    assert {c.name: c.status for c in g.checks} == {"speculation_on": "pass", "speed_up": "skip"}


def test_each_gate_fails_with_a_reason():
    t = gate.thresholds_from_mapping(
        {
            "min_mean_acceptance_length": 3.5,
            "min_draft_acceptance_rate": 0.7,
            "per_position_floors": {"0": 0.9, "1": 0.5},
            "min_speed_up": 1.2,
        }
    )
    g = gate.evaluate(measured(baseline=100.0), t)
    assert g.exit_code == 1
    st = {c.name: c.status for c in g.checks}
    assert st == {
        "speculation_on": "pass",
        "mean_acceptance_length": "fail",
        "draft_acceptance_rate": "fail",
        "position_0_acceptance": "fail",
        "position_1_acceptance": "pass",
        "speed_up": "fail",
    }
    assert len(g.reasons) == 4
    assert any("speed-up 1.00x" in r for r in g.reasons)


def test_speed_up_default_one_means_not_slower():
    g = gate.evaluate(measured(tps=(59.0, 60.0, 58.0), baseline=61.0), gate.Thresholds())
    assert g.exit_code == 1 and "speed-up 0.97x" in g.reasons[0]
    g = gate.evaluate(measured(tps=(62.0, 61.5, 63.0), baseline=61.0), gate.Thresholds())
    assert g.exit_code == 0


def test_floor_for_a_position_the_server_does_not_draft():
    t = gate.thresholds_from_mapping({"per_position_floors": [0.1, 0.1, 0.1, 0.1]})
    g = gate.evaluate(measured(), t)
    assert g.exit_code == 1 and "no position 3" in g.reasons[0]


def test_expected_with_tolerance():
    t = gate.thresholds_from_mapping(
        {"expected_mean_acceptance_length": 3.2, "rel_tolerance": 0.05}
    )
    assert gate.evaluate(measured(), t).exit_code == 1
    t.rel_tolerance = 0.1
    assert gate.evaluate(measured(), t).exit_code == 0


def test_spec_off_fails_and_unmeasured_is_2():
    off = AcceptanceResult("spec_off", "speculation is off: no drafts", True)
    assert gate.evaluate(off, gate.Thresholds()).exit_code == 1
    for st in ("error", "counter_reset"):
        g = gate.evaluate(AcceptanceResult(st, "x", True), gate.Thresholds())
        assert g.exit_code == 2


def test_require_baseline():
    t = gate.thresholds_from_mapping({"require_baseline": True})
    assert gate.evaluate(measured(), t).exit_code == 2


@pytest.mark.parametrize(
    "bad",
    [
        {"min_mean_acceptance_lenght": 2},  # typo must not silently disable a gate
        {"min_speed_up": "fast"},
        {"per_position_floors": [1.5]},
        {"per_position_floors": "0.5"},
        {"require_baseline": "yes"},
        ["not", "a", "mapping"],
    ],
)
def test_bad_threshold_config(bad):
    with pytest.raises(gate.GateConfigError):
        gate.thresholds_from_mapping(bad)


def test_load_yaml_and_json(tmp_path):
    y = tmp_path / "g.yml"
    y.write_text("gates:\n  min_mean_acceptance_length: 1.8\n  per_position_floors: [0.6]\n")
    t = gate.load_thresholds(y)
    assert t.min_mean_acceptance_length == 1.8 and t.per_position_floors == {0: 0.6}
    j = tmp_path / "g.json"
    j.write_text('{"min_speed_up": 1.1}')
    assert gate.load_thresholds(j).min_speed_up == 1.1
