"""SQLite validation history: recording, first validated run, regression check."""

from __future__ import annotations

from pathlib import Path

from fleet_history import one_result

from specdeploy.controller import history


def test_history_regression_against_first_validated_run(tmp_path):
    conn = history.connect(tmp_path / "h.sqlite")
    first = one_result("n1", "r1", "2026-12-01T00:00:00Z", 3.0, 100.0)
    failed_earlier = one_result("n1", "r1", "2026-11-30T00:00:00Z", 1.2, 10.0, status="fail")
    assert history.record(conn, failed_earlier) is not None
    assert history.record(conn, first) is not None
    assert history.record(conn, first) is None  # same run twice: one row
    ref = history.first_validated(conn, "n1", "r1")
    assert ref is not None and ref["started_at"] == first["started_at"]
    assert history.regressions(conn, first) == []  # the reference itself
    ok = one_result("n1", "r1", "2026-12-02T00:00:00Z", 2.9, 96.0)
    assert history.regressions(conn, ok, tolerance=0.1) == []
    worse = one_result("n1", "r1", "2026-12-03T00:00:00Z", 2.4, 70.0)
    regs = history.regressions(conn, worse, tolerance=0.1)
    assert {r.metric for r in regs} == {"mean_acceptance_length", "output_tokens_per_s"}
    assert "20.0% below" in next(r for r in regs if r.metric.startswith("mean")).message()
    # Another release has its own first run, but is compared with the release it replaced
    # (the latest validated run of r1 on n1 recorded: 100 tok/s); another node has neither.
    regs = history.regressions(conn, one_result("n1", "r2", "2026-12-03T01:00:00Z", 1.5, 10))
    assert [(r.metric, r.reference) for r in regs] == [("output_tokens_per_s at c=1", 100.0)]
    assert "below the previous release r1" in regs[0].message()
    assert history.regressions(conn, one_result("n1", "r2", "2026-12-03T01:00:00Z", 1.5, 95)) == []
    assert history.regressions(conn, one_result("n2", "r1", "2026-12-03T01:00:00Z", 1.5, 10)) == []
    assert [r["release"] for r in history.runs(conn, node="n1")] == ["r1", "r1"]


def test_runs_in_the_same_second_are_kept_apart_by_run_id(tmp_path):
    conn = history.connect(tmp_path / "h.sqlite")
    a = one_result("n1", "r1", "2026-12-01T00:00:00Z", 3.0, 100.0) | {"run_id": "a"}
    b = one_result("n1", "r1", "2026-12-01T00:00:00Z", 2.9, 99.0) | {"run_id": "b"}
    assert history.record(conn, a) is not None and history.record(conn, b) is not None
    assert [r["run_id"] for r in history.runs(conn)] == ["a", "b"]
    assert history.first_validated(conn, "n1", "r1")["run_id"] == "a"


def _record_one(db: str, node: str) -> str:
    try:
        conn = history.connect(db)
        history.record(conn, one_result(node, "r1", "2026-12-04T00:00:00Z", 2.0, 100.0))
        conn.close()
    except history.HistoryError as exc:
        return str(exc)
    return ""


def test_nodes_recording_at_once_into_a_new_history_all_land(tmp_path):
    """CI stop 32: two nodes of a rollout recorded at once; one saw the other's database
    file while it was still empty and refused it as 'empty file, not a history database'."""
    from concurrent.futures import ProcessPoolExecutor

    for attempt in range(5):
        db = str(tmp_path / f"h{attempt}" / "history.sqlite")
        nodes = [f"node{i}" for i in range(8)]
        with ProcessPoolExecutor(max_workers=8) as pool:
            errors = [e for e in pool.map(_record_one, [db] * 8, nodes) if e]
        assert errors == []
        assert sorted(r["node"] for r in history.runs(history.connect(db))) == nodes
        assert [p.name for p in Path(db).parent.iterdir() if p.name.endswith(".new")] == []
