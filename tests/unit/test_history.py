"""SQLite validation history: recording, first validated run, regression check."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from specdeploy.controller import history  # noqa: E402


def _result(
    node: str, release: str, started: str, mal: float, tps: float, status: str = "pass"
) -> dict:
    return {
        "schema": "specdeploy.validation/1",
        "node": node,
        "release": release,
        "started_at": started,
        "finished_at": started,
        "status": status,
        "exit_code": 0 if status == "pass" else 1,
        "mode": "all",
        "reasons": [],
        "served_model_name": "m",
        "acceptance": {
            "status": "ok",
            "mean_acceptance_length": mal,
            "draft_acceptance_rate": (mal - 1) / 3,
            "per_position_acceptance": [0.8, 0.6, 0.4],
            "output_tokens_per_s": {"median": tps, "min": tps, "max": tps},
            "accepted_tokens_per_s": None,
            "speed_up": None,
        },
    }


def test_history_regression_against_first_validated_run(tmp_path):
    conn = history.connect(tmp_path / "h.sqlite")
    first = _result("n1", "r1", "2026-12-01T00:00:00Z", 3.0, 100.0)
    failed_earlier = _result("n1", "r1", "2026-11-30T00:00:00Z", 1.2, 10.0, status="fail")
    assert history.record(conn, failed_earlier) is not None
    assert history.record(conn, first) is not None
    assert history.record(conn, first) is None  # same run twice: one row
    ref = history.first_validated(conn, "n1", "r1")
    assert ref is not None and ref["started_at"] == first["started_at"]
    assert history.regressions(conn, first) == []  # the reference itself
    ok = _result("n1", "r1", "2026-12-02T00:00:00Z", 2.9, 96.0)
    assert history.regressions(conn, ok, tolerance=0.1) == []
    worse = _result("n1", "r1", "2026-12-03T00:00:00Z", 2.4, 70.0)
    regs = history.regressions(conn, worse, tolerance=0.1)
    assert {r.metric for r in regs} == {"mean_acceptance_length", "output_tokens_per_s"}
    assert "20.0% below" in next(r for r in regs if r.metric.startswith("mean")).message()
    # Another release has its own first run, but is compared with the release it replaced
    # (the latest validated run of r1 on n1 recorded: 100 tok/s); another node has neither.
    regs = history.regressions(conn, _result("n1", "r2", "2026-12-03T01:00:00Z", 1.5, 10))
    assert [(r.metric, r.reference) for r in regs] == [("output_tokens_per_s at c=1", 100.0)]
    assert "below the previous release r1" in regs[0].message()
    assert history.regressions(conn, _result("n1", "r2", "2026-12-03T01:00:00Z", 1.5, 95)) == []
    assert history.regressions(conn, _result("n2", "r1", "2026-12-03T01:00:00Z", 1.5, 10)) == []
    assert [r["release"] for r in history.runs(conn, node="n1")] == ["r1", "r1"]


def test_runs_in_the_same_second_are_kept_apart_by_run_id(tmp_path):
    conn = history.connect(tmp_path / "h.sqlite")
    a = _result("n1", "r1", "2026-12-01T00:00:00Z", 3.0, 100.0) | {"run_id": "a"}
    b = _result("n1", "r1", "2026-12-01T00:00:00Z", 2.9, 99.0) | {"run_id": "b"}
    assert history.record(conn, a) is not None and history.record(conn, b) is not None
    assert [r["run_id"] for r in history.runs(conn)] == ["a", "b"]
    assert history.first_validated(conn, "n1", "r1")["run_id"] == "a"
