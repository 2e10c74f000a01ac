"""Gate thresholds and evaluation."""

from __future__ import annotations

import json

import pytest

from specdeploy.node.validation import gate, metrics
from specdeploy.node.validation.acceptance import AcceptanceResult, RepeatResult


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


def test_no_baseline_is_unmeasured_never_a_silent_pass():
    g = gate.evaluate(measured(), gate.Thresholds())
    assert g.exit_code == 2
    assert {c.name: c.status for c in g.checks} == {
        "speculation_on": "pass",
        "speed_up": "unmeasured",
    }
    assert "no no-speculation baseline" in g.reasons[0]
    assert g.speed["status"] == "unmeasured"


def test_waived_speed_gate_shows_waived_not_pass():
    t = gate.thresholds_from_mapping({"speed_up_waiver": "ticket OPS-12: latency tier"})
    for res in (measured(), measured(tps=(30.0, 31.0, 29.0), baseline=100.0)):
        g = gate.evaluate(res, t)
        assert g.exit_code == 0 and g.waived
        sp = next(c for c in g.checks if c.name == "speed_up")
        assert sp.status == "waived" and "WAIVED (ticket OPS-12" in sp.message
        assert g.speed["status"] == "waived" and g.to_dict()["waived"] is True


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
    assert gate.evaluate(measured(baseline=50.0), t).exit_code == 1
    t.rel_tolerance = 0.1
    assert gate.evaluate(measured(baseline=50.0), t).exit_code == 0


def test_spec_off_fails_and_unmeasured_is_2():
    off = AcceptanceResult("spec_off", "speculation is off: no drafts", True)
    assert gate.evaluate(off, gate.Thresholds()).exit_code == 1
    for st in ("error", "counter_reset"):
        g = gate.evaluate(AcceptanceResult(st, "x", True), gate.Thresholds())
        assert g.exit_code == 2


def test_require_baseline_true_is_accepted_false_is_refused():
    t = gate.thresholds_from_mapping({"require_baseline": True})
    assert gate.evaluate(measured(), t).exit_code == 2
    with pytest.raises(gate.GateConfigError, match="speed_up_waiver"):
        gate.thresholds_from_mapping({"require_baseline": False})


def level(c: int, tps: float, spread: float = 0.05) -> dict:
    return {"concurrency": c, "output_tps": tps, "spread": spread, "ttft_p50_s": 0.1}


def test_speed_gate_per_level_names_the_failing_level():
    # Faster at c=1, slower at c=16 (the shape of a k too large for the load).
    t = gate.thresholds_from_mapping({"min_speed_up": 1.0})
    speed = gate.evaluate_speed(
        [level(1, 620.0), level(16, 2200.0)], {1: 500.0, 16: 3350.0}, "serving-release", t
    )
    assert speed["status"] == "fail" and speed["failed_levels"] == [16]
    assert speed["message"] == (
        "speed-up 0.66x < 1.00 at c=16 (spread 5%) (baseline: serving-release)"
    )
    rows = {r["concurrency"]: r for r in speed["levels"]}
    assert rows[1]["status"] == "pass" and rows[1]["speed_up"] == pytest.approx(1.24)
    assert rows[1]["verdict_holds"] is True
    # A 1.03x speed-up with a 20% spread between repeats: the pass is reported as not firm.
    close = gate.evaluate_speed([level(1, 515.0, spread=0.2)], {1: 500.0}, "k", t)
    assert close["status"] == "unsure" and close["levels"][0]["verdict_holds"] is False
    assert rows[1]["ttft_p50_s"] == 0.1
    g = gate.evaluate(measured(baseline=100.0), t, speed)
    assert g.exit_code == 1
    st = {c.name: c.status for c in g.checks}
    assert st["speed_up.c1"] == "pass" and st["speed_up.c16"] == "fail"
    assert any("at c=16" in r for r in g.reasons)


def test_speed_gate_map_by_level():
    t = gate.thresholds_from_mapping({"min_speed_up": {1: 0.8, "32": 1.2}})
    assert (t.min_speed_up_at(1), t.min_speed_up_at(8), t.min_speed_up_at(32)) == (0.8, 1.0, 1.2)
    base = {1: 500.0, 8: 1900.0, 32: 5300.0}
    rows = [level(1, 450.0), level(8, 2000.0), level(32, 6500.0, spread=0.01)]
    ok = gate.evaluate_speed(rows, base, "k", t)  # 1.23x at c=32: clear of a 1% spread
    assert ok["status"] == "pass"
    bad = gate.evaluate_speed([level(1, 450.0), level(8, 2000.0), level(32, 6000.0)], base, "k", t)
    assert bad["status"] == "fail" and bad["failed_levels"] == [32]


def test_a_level_without_baseline_is_unmeasured():
    t = gate.Thresholds()
    speed = gate.evaluate_speed([level(1, 600.0), level(8, 2400.0)], {1: 500.0}, "history", t)
    assert speed["status"] == "unmeasured" and "c=8" in speed["message"]
    assert gate.evaluate(measured(), t, speed).exit_code == 2


def test_no_speculation_release_has_no_speed_gate():
    speed = gate.evaluate_speed([level(1, 500.0)], None, None, gate.Thresholds(), speculative=False)
    assert speed["status"] == "not_applicable"
    base = AcceptanceResult("ok", "measured", False)
    base.repeats = [RepeatResult(0, 4, 1000, 2.0, "count")]
    assert gate.evaluate(base, gate.Thresholds(), speed).exit_code == 0


def test_regression_vs_previous_release():
    prev = {1: 600.0, 8: 2500.0}
    cmp = gate.evaluate_previous([level(1, 590.0), level(8, 2000.0)], prev, "r-old", 0.05)
    assert cmp["status"] == "fail"
    assert cmp["message"].startswith("throughput -20% vs previous release r-old at c=8")
    assert cmp["message"].endswith("(2000.0 vs 2500.0 tok/s; max regression 5%)")
    rows = {r["concurrency"]: r for r in cmp["levels"]}
    assert rows[1]["status"] == "pass" and rows[1]["change"] == pytest.approx(-0.0167, abs=1e-3)
    t = gate.Thresholds()
    speed = gate.evaluate_speed([level(1, 590.0), level(8, 2000.0)], {1: 500, 8: 1900}, "k", t)
    g = gate.evaluate(measured(), t, speed, cmp)
    assert g.exit_code == 1
    assert {c.name: c.status for c in g.checks}["vs_previous.c8"] == "fail"
    assert any("throughput -20% vs previous release r-old at c=8" in r for r in g.reasons)
    ok = gate.evaluate_previous([level(1, 590.0), level(8, 2450.0)], prev, "r-old", 0.05)
    assert ok["status"] == "pass"
    none = gate.evaluate_previous([level(32, 5000.0)], prev, "r-old", 0.05)
    assert none["status"] == "unmeasured"


def test_per_position_gate_without_per_position_counters():
    r = measured()
    r.total = metrics.SpecDelta(172, 516, 344, (), 10.0)
    t = gate.thresholds_from_mapping({"per_position_floors": [0.5]})
    g = gate.evaluate(r, t, gate.evaluate_speed([level(1, 200.0)], {1: 100.0}, "k", t))
    assert g.exit_code == 2
    pos = next(c for c in g.checks if c.name == "position_0_acceptance")
    assert pos.status == "unmeasured"
    assert pos.message.startswith("per-position acceptance unavailable")
    assert "tokens per step" not in pos.message
    assert r.to_dict()["per_position_note"].startswith("per-position acceptance unavailable")
    assert r.to_dict()["per_position_acceptance"] is None


@pytest.mark.parametrize(
    "gates, k, levels, message",
    [
        ({"per_position_floors": [0.6, 0.4, 0.3, 0.2]}, 3, "1,8", "per_position_floors: a floor "
         "for position 3 but num_speculative_tokens is 3"),
        ({"min_speed_up": {16: 1.1}}, 3, "1,8,32", "min_speed_up: level 16 is not one of"),
        ({"max_regression_vs_previous": 1.5}, 3, "1", "max_regression_vs_previous"),
        ({"min_speed_up": {"x": 1.0}}, 3, "1", "level 'x' is not a concurrency level"),
        ({}, 3, "1,0", "level '0' is not a concurrency level"),
        ({"min_sped_up": 1.0}, 3, "1", "unknown gate keys ['min_sped_up']"),
    ],
)  # fmt: skip
def test_validate_cli_refuses_with_one_line(tmp_path, capsys, gates, k, levels, message):
    f = tmp_path / "gates.json"
    f.write_text(json.dumps(gates))
    rc = gate.main(["--validate", str(f), "--num-speculative-tokens", str(k), "--levels", levels])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1


def test_validate_cli_accepts_and_summarises(tmp_path, capsys):
    f = tmp_path / "gates.yml"
    f.write_text("min_speed_up: {1: 0.8, 32: 1.2}\nper_position_floors: [0.6, 0.4, 0.3]\n")
    argv = ["--validate", str(f), "--num-speculative-tokens", "3", "--levels", "1,8,32"]
    assert gate.main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["min_speed_up"] == {"1": 0.8, "8": 1.0, "32": 1.2}
    assert gate.main([*argv, "--waiver", "latency tier"]) == 0
    assert "speed-up WAIVED (latency tier)" in capsys.readouterr().out


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


def test_a_pass_within_the_spread_says_unsure_never_pass():
    """Issue 28: the check printed PASS while the table noted the gate lies within the
    spread. It says UNSURE; the gate lets it through (exit 0, the median is above the floor)
    and lists why under gates.unsure; a median under the floor fails whatever the spread."""
    t = gate.thresholds_from_mapping({"min_speed_up": 1.0})
    speed = gate.evaluate_speed([level(1, 515.0, spread=0.2)], {1: 500.0}, "knob", t)
    g = gate.evaluate(measured(baseline=500.0), t, speed)
    st = {c.name: c.status for c in g.checks}
    assert st["speed_up.c1"] == "unsure" and g.exit_code == 0
    assert len(g.unsure) == 1 and g.unsure[0].startswith("UNSURE: speed-up 1.03x >= 1.00 at c=1")
    assert g.to_dict()["unsure"] == g.unsure
    firm = gate.evaluate_speed([level(1, 700.0, spread=0.2)], {1: 500.0}, "knob", t)
    assert firm["status"] == "pass" and gate.evaluate(measured(), t, firm).unsure == []
    under = gate.evaluate_speed([level(1, 490.0, spread=0.2)], {1: 500.0}, "knob", t)
    assert under["status"] == "fail"


@pytest.mark.parametrize(
    "row",
    [
        {"concurrency": 8, "output_tps": float("inf"), "spread": 0.0},
        {"concurrency": 8, "output_tps": float("nan"), "spread": 0.0},
        {"concurrency": 8, "output_tps": 0.0, "requests": 0, "spread": 0.0},
        {"concurrency": 8, "output_tps": 900.0, "requests": 0, "spread": 0.0},
    ],
)
def test_a_measured_row_without_a_real_figure_is_unmeasured(row):
    """Issue 28: an infinite tok/s passed the speed-up gate; a level with 0 requests is no
    measurement. Both are 'not measured' (exit 2), never PASS or FAIL."""
    t = gate.thresholds_from_mapping({"min_speed_up": 1.0})
    speed = gate.evaluate_speed([row], {8: 500.0}, "knob", t)
    assert speed["status"] == "unmeasured" and speed["levels"][0]["speed_up"] is None
    g = gate.evaluate(measured(), t, speed)
    assert g.exit_code == 2
    assert any("no throughput figure" in r for r in g.reasons), g.reasons


@pytest.mark.parametrize("base", [float("inf"), float("nan"), 0.0, -1.0])
def test_a_baseline_that_is_no_figure_gives_no_speed_up(base):
    t = gate.thresholds_from_mapping({"min_speed_up": 1.0})
    speed = gate.evaluate_speed([level(8, 900.0)], {8: base}, "history", t)
    assert speed["status"] == "unmeasured"


@pytest.mark.parametrize(
    "text",
    [
        "min_speed_up: .nan",
        "min_speed_up: .inf",
        "min_speed_up: {8: .nan}",
        "min_mean_acceptance_length: .nan",
        "min_draft_acceptance_rate: .nan",
        "rel_tolerance: .nan",
        "expected_mean_acceptance_length: .inf",
    ],
)
def test_a_non_finite_gate_floor_is_refused(tmp_path, text):
    """Issue 28: a NaN floor compares false both ways (never fails, or never passes)."""
    p = tmp_path / "gates.yml"
    p.write_text(text + "\n")
    with pytest.raises(gate.GateConfigError, match="not a finite number"):
        gate.load_thresholds(p)


def test_a_non_finite_gate_floor_in_json_is_refused(tmp_path):
    p = tmp_path / "gates.json"
    p.write_text('{"min_speed_up": NaN}')
    with pytest.raises(ValueError, match="NaN is not a number JSON allows"):
        gate.load_thresholds(p)


def test_a_malformed_yaml_gates_file_is_a_gate_config_error(tmp_path):
    """Issue 28: a YAML error (a key YAML cannot hash, a syntax error) was a traceback."""
    for text in ("min_speed_up: {[1]: 2}\n", "min_speed_up: [\n"):
        p = tmp_path / "gates.yml"
        p.write_text(text)
        with pytest.raises(gate.GateConfigError, match="not valid YAML"):
            gate.load_thresholds(p)


def test_a_gate_for_a_level_not_measured_is_refused():
    """Issue 28: min_speed_up {64: 1.2} with levels 1,8 was dropped silently."""
    t = gate.thresholds_from_mapping({"min_speed_up": {"1": 1.0, "64": 1.2}})
    with pytest.raises(gate.GateConfigError, match=r"level 64 .* \(--levels\)"):
        gate.validate(t, 0, [1, 8], flag="--levels")
