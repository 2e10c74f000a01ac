"""The no-speculation baseline in the history: which run counts, and the CLI the playbook uses."""

from __future__ import annotations

import json

from specdeploy.controller import history


def _head(node: str, release: str, started: str, status: str) -> dict:
    """What every result says of itself: schema, run, node, release, when, how it ended."""
    return {
        "schema": "specdeploy.validation/1",
        "run_id": f"{node}-{release}-{started}",
        "node": node,
        "release": release,
        "started_at": started,
        "status": status,
        "served_model_name": "m",
    }


def _run(node: str, release: str, started: str, tps: float, mode: str, status: str = "pass"):
    return _head(node, release, started, status) | {
        "exit_code": 0 if status == "pass" else 1,
        "mode": "all",
        "acceptance": {
            "status": "ok",
            "mode": mode,
            "mean_acceptance_length": None if mode != "spec" else 2.5,
            "output_tokens_per_s": {"median": tps, "min": tps, "max": tps, "n": 3},
        },
    }


def test_latest_passed_no_spec_run_of_the_node_and_model_is_the_baseline(tmp_path, capsys):
    db = tmp_path / "h.sqlite"
    conn = history.connect(db)
    history.record(conn, _run("n1", "nospec-a", "2026-12-01T00:00:00Z", 400.0, "no_spec_baseline"))
    history.record(conn, _run("n1", "nospec-b", "2026-12-02T00:00:00Z", 410.0, "no_spec_baseline"))
    # Newer, but a speculative run, a failed run and another node: none of them is a baseline.
    history.record(conn, _run("n1", "spec", "2026-12-03T00:00:00Z", 900.0, "spec"))
    history.record(
        conn, _run("n1", "nospec-c", "2026-12-04T00:00:00Z", 10.0, "no_spec_baseline", "fail")
    )
    history.record(conn, _run("n2", "nospec-a", "2026-12-05T00:00:00Z", 300.0, "no_spec_baseline"))
    conn.close()

    assert history.main(["baseline", "--db", str(db), "--node", "n1", "--model", "m"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert (found["found"], found["release"], found["output_tps"]) == (True, "nospec-b", 410.0)

    assert history.main(["baseline", "--db", str(db), "--node", "n3", "--model", "m"]) == 1
    assert json.loads(capsys.readouterr().out)["found"] is False
    assert history.main(["baseline", "--db", str(db), "--node", "n1", "--model", "other"]) == 1
    capsys.readouterr()
    missing = tmp_path / "none.sqlite"
    assert history.main(["baseline", "--db", str(missing), "--node", "n1", "--model", "m"]) == 1
    assert not missing.exists()  # a lookup never creates a history


def _levels_run(node, release, started, levels, *, speculative=False, status="pass", **labels):
    return _head(node, release, started, status) | {
        "labels": labels,
        "acceptance": {"status": "ok", "mode": "spec" if speculative else "no_spec_baseline"},
        "speed": {
            "speculative": speculative,
            "levels": [{"concurrency": c, "output_tps": t} for c, t in levels.items()],
        },
    }


def test_baseline_levels_match_node_model_parallel_and_hardware(tmp_path, capsys):
    db = tmp_path / "h.sqlite"
    conn = history.connect(db)
    h200 = {"parallel": "tp=8,pp=1", "hardware": "NVIDIA H200"}
    for run in (
        _levels_run("n1", "a", "2026-12-01T00:00:00Z", {1: 500.0, 8: 1900.0, 32: 5200.0}, **h200),
        _levels_run("n1", "b", "2026-12-02T00:00:00Z", {1: 520.0, 8: 1950.0}, **h200),
        # Not a baseline: speculative, failed, other parallel sizes, other hardware.
        _levels_run("n1", "s", "2026-12-03T00:00:00Z", {1: 900.0}, speculative=True, **h200),
        _levels_run("n1", "f", "2026-12-04T00:00:00Z", {1: 9.0}, status="fail", **h200),
        _levels_run("n1", "tp4", "2026-12-05T00:00:00Z", {1: 300.0},
                    parallel="tp=4,pp=2", hardware="NVIDIA H200"),
        _levels_run("n1", "h100", "2026-12-05T00:00:00Z", {1: 310.0},
                    parallel="tp=8,pp=1", hardware="NVIDIA H100"),
    ):  # fmt: skip
        history.record(conn, run)
    # The newest run that measured a level gives it: c=32 only the older run measured.
    levels = history.baseline_levels(conn, "n1", "m", "tp=8,pp=1", "NVIDIA H200")
    assert levels == {1: 520.0, 8: 1950.0, 32: 5200.0}
    assert history.baseline_levels(db, "n1", "m", "tp=4,pp=2", "NVIDIA H200") == {1: 300.0}
    assert history.baseline_levels(db, "n2", "m", "tp=8,pp=1", "NVIDIA H200") == {}
    conn.close()
    argv = ["baseline-levels", "--db", str(db), "--node", "n1", "--model", "m"]
    assert history.main([*argv, "--parallel", "tp=8,pp=1", "--hardware", "NVIDIA H200"]) == 0
    assert json.loads(capsys.readouterr().out)["levels"] == {"1": 520.0, "8": 1950.0, "32": 5200.0}
    assert history.main([*argv, "--hardware", "AMD MI300X"]) == 1
    assert "no no-spec run" in json.loads(capsys.readouterr().out)["reason"]


def test_a_baseline_that_mixes_gpus_layouts_or_months_says_so(tmp_path):
    """Issue 26, item 8: `make advise` must not take another GPU's or parallel layout's
    no-speculation history, nor runs measured months apart, without saying so."""
    db = tmp_path / "h.sqlite"
    conn = history.connect(db)
    for run in (
        _levels_run("n1", "old", "2026-09-01T00:00:00Z", {1: 500.0, 32: 5200.0},
                    parallel="tp=8,pp=1", hardware="NVIDIA H100"),
        _levels_run("n1", "new", "2026-12-02T00:00:00Z", {1: 520.0},
                    parallel="tp=4,pp=2", hardware="NVIDIA H200"),
    ):  # fmt: skip
        history.record(conn, run)
    levels, sources = history.baseline_levels_with_sources(conn, "n1", "m", None, None)
    assert levels == {1: 520.0, 32: 5200.0}
    notes = history.mixing_notes(sources)
    assert any("mixes GPUs: NVIDIA H100, NVIDIA H200" in n for n in notes)
    assert any("mixes parallel layouts: tp=4,pp=2, tp=8,pp=1" in n for n in notes)
    assert any("92 days apart" in n for n in notes)
    # one run: nothing to say
    levels, sources = history.baseline_levels_with_sources(conn, "n1", "m", "tp=4,pp=2", None)
    assert levels == {1: 520.0} and history.mixing_notes(sources) == []
    conn.close()


def test_record_takes_the_deploys_result_on_stdin_once(tmp_path, capsys, monkeypatch):
    import io

    db = tmp_path / "h.sqlite"
    run = _levels_run("n1", "r1", "2026-12-02T00:00:00Z", {1: 520.0})
    for want in (1, 0):  # the same run again (make validate's report records it too): once
        monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(run)))
        assert history.main(["record", "--db", str(db)]) == 0
        assert json.loads(capsys.readouterr().out) == {"recorded": want}
    assert [r["run_id"] for r in history.runs(history.connect(db))] == [run["run_id"]]
    monkeypatch.setattr("sys.stdin", io.StringIO("[]"))
    assert history.main(["record", "--db", str(db)]) == 2
    assert "the result on stdin" in capsys.readouterr().err
