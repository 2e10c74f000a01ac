"""The alert rules, run by the real `promtool test rules` (Debian's prometheus package, installed
by `make setup`) against series built from the RECORDED real vLLM 0.20.2 /metrics texts
(tests/fixtures/vllm-0.20.2): each counter grows from 0 to its recorded value over an hour, so
rate() ratios are the recording's own ratios (bigram drafter: mean acceptance length
1 + 344/172 = 3.00; random drafter: 1.00). The validation series come from the textfile that
spec-report writes for a fleet history (tests/unit/fleet_history.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from fleet_history import NEW, fleet, result

from specdeploy.controller import monitoring, report
from specdeploy.node.validation import metrics

pytestmark = pytest.mark.timeout(120)
RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-0.20.2"
MINUTES = 60  # each recorded counter grows over this many one-minute steps
GATES = {"min_mean_acceptance_length": 1.5, "per_position_floors": [0.5, 0.3, 0.2]}
VLLM = {"job": monitoring.VLLM_JOB, "instance": "gpu-01:8000", "node": "gpu-01"}


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool not installed (Debian package prometheus: make setup)")
    return found


def _selector(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def recorded_series(
    recording: str, labels: dict[str, str], *, flat: tuple[str, ...] = ()
) -> list[dict[str, str]]:
    """promtool input series from a recorded exposition: counters (and histogram buckets,
    sums, counts) rise linearly from 0 to the recorded value over MINUTES; gauges stay at
    their value; names in ``flat`` keep their recorded value (a counter that stopped)."""
    text = (RECORDED / recording).read_text()
    types = {ln.split()[2]: ln.split()[3] for ln in text.splitlines() if ln.startswith("# TYPE ")}
    out = []
    for s in metrics.parse_exposition(text):
        family = next((f for f in types if s.name == f or s.name.startswith(f + "_")), s.name)
        kind = types.get(family, "untyped")
        if s.name.endswith("_created"):
            continue
        if kind in ("counter", "histogram") and s.name not in flat:
            values = f"0+{s.value / MINUTES!r}x{MINUTES}"
        else:
            values = f"{s.value!r}x{MINUTES}"
        out.append({"series": _selector(s.name, s.labels | labels), "values": values})
    return out


def textfile_series(shift_to_s: float, steps: int, interval_s: int) -> list[dict[str, str]]:
    """The fleet's textfile as scraped from the controller's node_exporter; timestamps moved
    so the newest validation is at ``shift_to_s`` on promtool's clock (which starts at 0)."""
    samples = metrics.parse_exposition(report.prom_textfile(fleet()))
    newest = max(s.value for s in samples if s.name.endswith("_timestamp_seconds"))
    target = {"job": monitoring.VALIDATION_JOB, "instance": "controller:9100"}
    out = []
    for s in samples:
        v = s.value - newest + shift_to_s if s.name.endswith("_timestamp_seconds") else s.value
        out.append({"series": _selector(s.name, s.labels | target), "values": f"{v!r}x{steps}"})
    return out


def alert(name: str, labels: dict[str, str], summary: str) -> dict[str, Any]:
    return {"exp_labels": labels, "exp_annotations": {"summary": summary}}


def run_promtool(tmp_path: Path, tests: list[dict[str, Any]], **settings: Any) -> str:
    rules = monitoring.alert_rules(GATES, monitoring.Settings.from_mapping(settings))
    (tmp_path / "rules.yml").write_text(monitoring.dump_yaml(rules))
    (tmp_path / "tests.yml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": tests})
    )
    proc = subprocess.run(
        [promtool(), "test", "rules", "tests.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_rules_are_valid(tmp_path):
    rules = monitoring.alert_rules(GATES, monitoring.Settings())
    (tmp_path / "rules.yml").write_text(monitoring.dump_yaml(rules))
    out = subprocess.run(
        [promtool(), "check", "rules", "rules.yml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert out.returncode == 0 and "SUCCESS: 13 rules found" in out.stdout, out


def test_acceptance_rules_on_the_recordings(tmp_path):
    spec = {"speculative": "true"}
    random_node = VLLM | {"node": "gpu-02", "instance": "gpu-02:8000"}
    tests = [
        {  # the bigram drafter: 3.00 tokens per step, positions 0.80/0.65/0.55: no alert
            "interval": "1m",
            "input_series": recorded_series("metrics-spec.txt", VLLM | spec),
            "alert_rule_test": [
                {"eval_time": "50m", "alertname": a, "exp_alerts": []}
                for a in (
                    "SpecdeployAcceptanceLengthLow",
                    "SpecdeployPositionAcceptanceLow",
                    "SpecdeploySpeculationOff",
                    "SpecdeployTimeToFirstTokenSlow",
                    "SpecdeployInterTokenLatencySlow",
                )
            ],
        },
        {  # the random drafter: drafts 504, accepted 0 -> 1.00 and every position at 0
            "interval": "1m",
            "input_series": recorded_series("metrics-spec-random-drafter.txt", random_node | spec),
            "alert_rule_test": [
                {"eval_time": "10m", "alertname": "SpecdeployAcceptanceLengthLow",
                 "exp_alerts": []},
                {
                    "eval_time": "50m",
                    "alertname": "SpecdeployAcceptanceLengthLow",
                    "exp_alerts": [
                        alert(
                            "SpecdeployAcceptanceLengthLow",
                            {"severity": "warning",
                             "node": "gpu-02", "model_name": "tiny-dsv3"},
                            "gpu-02: mean acceptance length 1.00 over 15m is below the "
                            "gate's 1.5",
                        )
                    ],
                },
                {
                    "eval_time": "50m",
                    "alertname": "SpecdeployPositionAcceptanceLow",
                    "exp_alerts": [
                        alert(
                            "SpecdeployPositionAcceptanceLow",
                            {"severity": "warning", "node": "gpu-02", "model_name": "tiny-dsv3",
                             "position": str(p)},
                            f"gpu-02: acceptance at draft position {p} 0.00 over 15m is below "
                            f"the gate's floor {f:g}",
                        )
                        for p, f in enumerate(GATES["per_position_floors"])
                    ],
                },
                # Drafts are made: speculation is on, only useless.
                {"eval_time": "50m", "alertname": "SpecdeploySpeculationOff", "exp_alerts": []},
            ],
        },
    ]  # fmt: skip
    run_promtool(tmp_path, tests)


def test_speculation_silently_off(tmp_path):
    """The no-speculation recording on a node deployed WITH speculation alerts; the same on
    a node deployed without it does not; a drafter whose counter stopped while generation
    goes on alerts too."""
    on = VLLM | {"speculative": "true"}
    off = VLLM | {"node": "gpu-02", "instance": "gpu-02:8000", "speculative": "false"}
    stalled = VLLM | {"node": "gpu-03", "instance": "gpu-03:8000", "speculative": "true"}
    series = (
        recorded_series("metrics-nospec.txt", on)
        + recorded_series("metrics-nospec.txt", off)
        + recorded_series(
            "metrics-spec.txt",
            stalled,
            flat=(
                "vllm:spec_decode_num_drafts_total",
                "vllm:spec_decode_num_draft_tokens_total",
                "vllm:spec_decode_num_accepted_tokens_total",
                "vllm:spec_decode_num_accepted_tokens_per_pos_total",
            ),
        )
    )
    summary = (
        "{node} generates tokens but drafts none: speculation is off on a node deployed with it "
        "(drafter not loaded, or the config lost it)"
    )
    tests = [
        {
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [
                {"eval_time": "5m", "alertname": "SpecdeploySpeculationOff", "exp_alerts": []},
                {
                    "eval_time": "40m",
                    "alertname": "SpecdeploySpeculationOff",
                    "exp_alerts": [
                        alert(
                            "SpecdeploySpeculationOff",
                            {"severity": "critical", "node": n, "model_name": "tiny-dsv3"},
                            summary.format(node=n),
                        )
                        for n in ("gpu-01", "gpu-03")
                    ],
                },
                # A stopped drafter makes no acceptance ratio (0/0): no false acceptance alert.
                {"eval_time": "40m", "alertname": "SpecdeployAcceptanceLengthLow",
                 "exp_alerts": []},
            ],
        }
    ]  # fmt: skip
    run_promtool(tmp_path, tests)


def test_slow_answers_from_the_recorded_histograms(tmp_path):
    """Recorded TTFT: 8 requests, 6 by 2.5 s, 8 by 5 s -> p95 4.5 s (interpolated in the
    bucket); recorded inter-token latency p95 0.025 s. A 4 s TTFT limit fires, 0.5 s ITL not."""
    tests = [
        {
            "interval": "1m",
            "input_series": recorded_series("metrics-spec.txt", VLLM | {"speculative": "true"}),
            "alert_rule_test": [
                {
                    "eval_time": "40m",
                    "alertname": "SpecdeployTimeToFirstTokenSlow",
                    "exp_alerts": [
                        alert(
                            "SpecdeployTimeToFirstTokenSlow",
                            {"severity": "warning", "node": "gpu-01", "model_name": "tiny-dsv3"},
                            "gpu-01: p95 of vllm:time_to_first_token_seconds is 4.5s over 15m "
                            "(limit 4s)",
                        )
                    ],
                },
                {"eval_time": "40m", "alertname": "SpecdeployInterTokenLatencySlow",
                 "exp_alerts": []},
            ],
        }
    ]  # fmt: skip
    run_promtool(tmp_path, tests, ttft_p95_max_s=4.0)


def test_unit_down_failed_and_restarting(tmp_path):
    node = {"job": monitoring.NODE_JOB, "instance": "gpu-01:9100", "node": "gpu-01"}
    unit = {"name": "vllm.service"}
    series = [
        # /metrics answers 10 minutes, then not: down once longer than a start (45 min) may take.
        {"series": _selector("up", VLLM), "values": "1x10 0x70"},
        # The process started three times (two restarts) inside the window.
        {"series": _selector("process_start_time_seconds", VLLM),
         "values": "1000x20 2200x20 3400x20"},
        {"series": _selector("node_systemd_unit_state", node | unit | {"state": "failed"}),
         "values": "0x30 1x30"},
    ]  # fmt: skip
    tests = [
        {
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [
                {"eval_time": "50m", "alertname": "SpecdeployServerDown", "exp_alerts": []},
                {
                    "eval_time": "58m",
                    "alertname": "SpecdeployServerDown",
                    "exp_alerts": [
                        alert(
                            "SpecdeployServerDown",
                            VLLM | {"severity": "critical"},
                            "gpu-01: vLLM's /metrics has not answered for longer than a start "
                            "may take (2700s)",
                        )
                    ],
                },
                {"eval_time": "25m", "alertname": "SpecdeployUnitRestarting", "exp_alerts": []},
                {
                    "eval_time": "45m",
                    "alertname": "SpecdeployUnitRestarting",
                    "exp_alerts": [
                        alert(
                            "SpecdeployUnitRestarting",
                            VLLM | {"severity": "warning"},
                            "gpu-01: vllm.service restarted 2 times in 3h",
                        )
                    ],
                },
                {
                    "eval_time": "35m",
                    "alertname": "SpecdeployUnitFailed",
                    "exp_alerts": [
                        alert(
                            "SpecdeployUnitFailed",
                            node | unit | {"state": "failed", "severity": "critical"},
                            "gpu-01: vllm.service is failed (systemd gave up restarting it)",
                        )
                    ],
                },
            ],
        }
    ]
    run_promtool(tmp_path, tests)


def test_validation_failing_stale_and_missing(tmp_path):
    """From spec-report's textfile of the fleet history: gpu-02's newest validation failed
    (speed-up below 1.0 at c=32); gpu-01's newest passed 21 h 45 min before gpu-02's. Two days
    later both are stale. With no textfile at all, the validation is missing."""
    hour = 3600
    series = textfile_series(shift_to_s=hour, steps=60, interval_s=hour)
    target = {"job": monitoring.VALIDATION_JOB, "instance": "controller:9100"}
    tests = [
        {
            "interval": "1h",
            "input_series": series,
            "alert_rule_test": [
                {
                    "eval_time": "1h",
                    "alertname": "SpecdeployValidationFailing",
                    "exp_alerts": [
                        alert(
                            "SpecdeployValidationFailing",
                            target | {"node": "gpu-02", "release": NEW, "severity": "warning"},
                            f"gpu-02: the newest validation of release {NEW} did not pass "
                            "(see reports/latest/report.html)",
                        )
                    ],
                },
                {"eval_time": "1h", "alertname": "SpecdeployValidationStale", "exp_alerts": []},
                {
                    "eval_time": "50h",
                    "alertname": "SpecdeployValidationStale",
                    "exp_alerts": [
                        alert(
                            "SpecdeployValidationStale",
                            target | {"node": n, "release": NEW, "severity": "warning"},
                            f"{n}: no validation for {age} (make schedule runs one daily)",
                        )
                        for n, age in (("gpu-01", "2d 22h 45m 0s"), ("gpu-02", "2d 1h 0m 0s"))
                    ],
                },
                {"eval_time": "1h", "alertname": "SpecdeployValidationMissing", "exp_alerts": []},
            ],
        },
        {
            "interval": "1h",
            "input_series": [{"series": _selector("up", target), "values": "1x5"}],
            "alert_rule_test": [
                {
                    "eval_time": "2h",
                    "alertname": "SpecdeployValidationMissing",
                    "exp_alerts": [
                        alert(
                            "SpecdeployValidationMissing",
                            {"job": monitoring.VALIDATION_JOB, "severity": "warning"},
                            "no specdeploy validation results are exported (is the textfile in "
                            "node_exporter's textfile directory?)",
                        )
                    ],
                }
            ],
        },
    ]
    run_promtool(tmp_path, tests)


def test_rules_follow_the_deploy_gates(tmp_path):
    """One source of truth: other gates give other floors; a bad gate is refused the way the
    deploy refuses it."""
    rules = monitoring.alert_rules(
        {"min_mean_acceptance_length": 2.2, "per_position_floors": {"1": 0.4}},
        monitoring.Settings(),
    )["groups"][0]["rules"]
    exprs = {(r["alert"], r["labels"].get("position")): r["expr"] for r in rules}
    assert exprs[("SpecdeployAcceptanceLengthLow", None)].endswith("< 2.2")
    assert [k for k in exprs if k[0] == "SpecdeployPositionAcceptanceLow"] == [
        ("SpecdeployPositionAcceptanceLow", "1")
    ]
    assert exprs[("SpecdeployPositionAcceptanceLow", "1")].endswith("< 0.4")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"gates": {"min_mean_acceptanse": 2}, "targets_dir": "/x"}))
    proc = subprocess.run(
        ["python3", "-m", "specdeploy.controller.monitoring", str(spec)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("spec-monitoring: error: gates: unknown gate keys")
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"targets_dir": "relative"}, "targets_dir: 'relative' is not an absolute path"),
        ({"targets_dir": "/t", "settings": {"rate_window": "15 minutes"}},
         "settings.rate_window: '15 minutes' is not a Prometheus duration"),
        ({"targets_dir": "/t", "settings": {"rate_windw": "5m"}},
         "settings: unknown keys ['rate_windw']"),
        ({"targets_dir": "/t", "settings": {"ttft_p95_max_s": 0}},
         "settings.ttft_p95_max_s: 0 is not a positive number"),
        ({"targets_dir": "/t", "vllm_targets": [{"node": "n", "address": "n", "speculative": True,
                                                  "model": "m"}]},
         "vllm_targets[0].address: 'n' is not host:port"),
        ({"targets_dir": "/t", "node_exporter_targets": [{"address": "n:9100"}]},
         "node_exporter_targets[0]: want a mapping with ['node', 'address']"),
    ],
)  # fmt: skip
def test_bad_spec_is_one_line_naming_the_key(spec, message):
    with pytest.raises(monitoring.SpecError) as err:
        monitoring.render(spec)
    assert str(err.value).startswith(message)


def test_a_waived_validation_does_not_fire_the_failing_alert(tmp_path):
    """Issue 28: a WAIVED validation (exit 0, the operator's speed-up waiver) was exported as
    passed=0, so SpecdeployValidationFailing fired for as long as the waiver stood. It is
    passed=1 with waived=1; a failed one beside it still fires."""
    waived = result("gpu-01", NEW, "2026-12-03T08:00:00Z", mal=3.3, tps=100.0)
    waived |= {"status": "waived", "exit_code": 0}
    failed = result("gpu-02", NEW, "2026-12-03T08:00:00Z", mal=1.2, tps=60.0, status="fail")
    samples = metrics.parse_exposition(report.prom_textfile([waived, failed]))
    last = {
        (s.name, s.labels["node"]): s.value
        for s in samples
        if s.name.startswith("specdeploy_last_validation_")
    }
    assert last[("specdeploy_last_validation_passed", "gpu-01")] == 1.0
    assert last[("specdeploy_last_validation_waived", "gpu-01")] == 1.0
    assert last[("specdeploy_last_validation_waived", "gpu-02")] == 0.0
    target = {"job": monitoring.VALIDATION_JOB, "instance": "controller:9100"}
    series = [
        {"series": _selector(s.name, s.labels | target), "values": f"{s.value!r}x5"}
        for s in samples
        if not s.name.endswith("_timestamp_seconds")
    ]
    tests = [
        {
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [
                {
                    "eval_time": "2m",
                    "alertname": "SpecdeployValidationFailing",
                    "exp_alerts": [
                        alert(
                            "SpecdeployValidationFailing",
                            target | {"node": "gpu-02", "release": NEW, "severity": "warning"},
                            f"gpu-02: the newest validation of release {NEW} did not pass "
                            "(see reports/latest/report.html)",
                        )
                    ],
                }
            ],
        }
    ]
    run_promtool(tmp_path, tests)
