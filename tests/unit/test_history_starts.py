"""The deploy's and rollback's starts in the controller history: downtime window, its parts,
and the validation's throughput and speed-up (history.record_starts, CLI downtime/starts), and
the lines a deploy ends with."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specdeploy.controller import history

WINDOW = {"from": "stop", "window_s": 7.5, "parts": {"stop": 1.0, "weights": 4.0, "compile": 2.5}}


def _start(node: str, at: str, **extra: object) -> dict[str, object]:
    return {"node": node, "release": "r1", "action": "deploy", "at": at, "restarted": True,
            "window": WINDOW, **extra}  # fmt: skip


def test_starts_keep_the_window_its_parts_and_the_validation_figures(tmp_path):
    conn = history.connect(tmp_path / "h.sqlite")
    stored = history.record_starts(
        conn,
        [
            _start("n1", "2026-12-03T10:00:00Z", output_tps="41.5", speed_up=1.8),
            _start("n2", "2026-12-03T10:00:01Z", restarted="False", window=None),
        ],
    )
    assert stored == 2
    n1, n2 = history.starts(conn)
    assert (n1["window_s"], n1["parts"], n1["output_tps"], n1["speed_up"]) == (
        7.5, WINDOW["parts"], 41.5, 1.8,
    )  # fmt: skip
    assert n2["restarted"] is False and n2["window_s"] is None and n2["parts"] == {}


def test_latest_gives_each_nodes_newest_start(tmp_path):
    conn = history.connect(tmp_path / "h.sqlite")
    history.record_starts(conn, [_start("n1", "2026-12-03T10:00:00Z")])
    history.record_starts(
        conn,
        [
            _start("n1", "2026-12-03T11:00:00Z", action="rollback"),
            _start("n2", "2026-12-03T11:00:00Z"),
        ],
    )
    latest = history.starts(conn, latest=True)
    assert [(s["node"], s["action"]) for s in latest] == [("n1", "rollback"), ("n2", "deploy")]
    assert [s["action"] for s in history.starts(conn, "n1", latest=True)] == ["rollback"]


def test_a_bad_entry_stores_nothing_and_names_what_is_missing(tmp_path, capsys):
    db = tmp_path / "h.sqlite"
    good = _start("n1", "2026-12-03T10:00:00Z")
    bad = {"node": "n2", "action": "deploy", "at": "2026-12-03T10:00:00Z"}
    assert history.main(["downtime", "--db", str(db), "--json", json.dumps([good, bad])]) == 2
    assert "a start needs release" in capsys.readouterr().err
    assert not db.exists()
    assert history.main(["downtime", "--db", str(db), "--json", "{"]) == 2
    assert "--json: Expecting" in capsys.readouterr().err


def test_cli_records_and_lists_starts(tmp_path, capsys):
    db = str(tmp_path / "h.sqlite")
    entries = [_start("n1", "t1"), _start("n2", "t1", restarted=False, window=None)]
    assert history.main(["downtime", "--db", db, "--json", json.dumps(entries)]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["recorded"] == 1  # only the start that restarted a server had downtime
    assert history.main(["starts", "--db", db, "--latest"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["node"] == "n1" and row["window_s"] == pytest.approx(7.5)


def test_the_lines_a_deploy_ends_with(capsys):
    """One line per node: the window and its parts with the validated figures; a node that
    did not restart; a start whose engine log never said ready. Without --db nothing is
    recorded (check mode)."""
    entries = [
        _start("n1", "t", output_tps=41.5, speed_up=1.8),
        _start("n2", "t", action="rollback"),
        _start("n3", "t", restarted="false", window=None),
        _start("n4", "t", window=None),
    ]
    assert history.main(["downtime", "--json", json.dumps(entries)]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["recorded"] == 0
    assert said["lines"] == [
        "n1: downtime window 7.5 s (deploy of r1; stop 1.0 s, weights 4.0 s, compile 2.5 s);"
        " validated: 41.5 tok/s, speed-up 1.80x",
        "n2: downtime window 7.5 s (rollback of r1; stop 1.0 s, weights 4.0 s, compile 2.5 s)",
        "n3: no restart, no downtime (release r1)",
        "n4: restarted (deploy of r1); the engine log did not say ready",
    ]


def test_the_module_runs_as_the_playbook_calls_it(tmp_path):
    """playbooks/downtime.yml runs `python -m specdeploy.controller.history downtime`."""
    db = tmp_path / "h.sqlite"
    run = subprocess.run(
        [sys.executable, "-m", "specdeploy.controller.history", "downtime", "--db", str(db),
         "--json", json.dumps([_start("n1", "t")])],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["recorded"] == 1 and db.exists()


BASELINE_DOC = {
    "schema": "specdeploy.throughput/1", "node": "n1", "release": "r2", "speculative": False,
    "measured_at": "2026-12-03T10:00:00Z", "model": "tiny-dsv3", "endpoint": "chat",
    "labels": {"model": "tiny-dsv3", "parallel": "tp=8,pp=1", "hardware": "NVIDIA H200"},
    "levels": {
        "1": {"concurrency": 1, "requests": 12, "output_tps": 61.04321, "spread": 0.04},
        "8": {"concurrency": 8, "requests": 40, "output_tps": 402.98765, "spread": 0.05},
    },
}  # fmt: skip


def run_history(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specdeploy.controller.history", *args],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_a_baseline_start_is_kept_in_the_history_for_the_next_release(tmp_path):
    """Issue 28: the baseline start's measurement never reached the history, so every new
    release took another baseline start (two server starts; on the real model two ~25-minute
    loads) and `make advise` found no baseline. The validation role records it right after
    measuring (spec-history baseline-record); the next release's plan takes it from there."""
    from specdeploy.controller import baseline_plan

    db = tmp_path / "h.sqlite"
    for expected in (True, False):  # a re-run records the same measurement once
        run = run_history("baseline-record", "--db", str(db), "--json", json.dumps(BASELINE_DOC))
        assert run.returncode == 0, run.stderr
        assert json.loads(run.stdout)["recorded"] is expected
    conn = history.connect(db)
    assert len(history.runs(conn)) == 1
    found = history.baseline_levels(conn, "n1", "tiny-dsv3", "tp=8,pp=1", "NVIDIA H200")
    assert found == {1: 61.04321, 8: 402.98765}
    plan = baseline_plan.decide([1, 8], None, found, "speculative", True)
    assert plan.source == "history" and not plan.extra_start


def test_the_final_lines_say_every_window_of_a_deploy_per_level(tmp_path):
    """Issue 28: the final lines said only the last window, with raw floats."""
    levels = [
        {"concurrency": 1, "output_tps": 112.04, "speed_up": 1.8354},
        {"concurrency": 8, "output_tps": 610.0, "speed_up": 1.5137},
    ]
    entries = [
        {**_start("n1", "t1", action="baseline-start", release="r2"), "baseline": BASELINE_DOC},
        {**_start("n1", "t2", release="r2", output_tps=112.04, speed_up=1.83), "levels": levels},
    ]
    run = run_history("downtime", "--json", json.dumps(entries))
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["lines"] == [
        "n1: downtime window 7.5 s (baseline-start of r2; stop 1.0 s, weights 4.0 s, compile 2.5 s)"
        "; measured without speculation: c=1 61.0 tok/s, c=8 403.0 tok/s",
        "n1: downtime window 7.5 s (deploy of r2; stop 1.0 s, weights 4.0 s, compile 2.5 s)"
        "; validated: c=1 112.0 tok/s 1.84x, c=8 610.0 tok/s 1.51x",
    ]


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"speculative": True}, "not measured without speculation"),
        ({"levels": {"8": {"output_tps": 400.0, "requests": 0}}}, "measured with 0 requests"),
        ({"levels": {"8": {"output_tps": 1e308 * 10}}}, "not a finite number"),
        ({"schema": "x"}, "not a specdeploy.throughput/1 document"),
    ],
)
def test_a_baseline_that_is_no_measurement_is_refused_and_nothing_is_written(
    tmp_path, change, problem
):
    db = tmp_path / "h.sqlite"
    doc = {**BASELINE_DOC, **change}
    text = json.dumps(doc)  # Infinity, as Python writes it
    run = run_history("baseline-record", "--db", str(db), "--json", text)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert problem in run.stderr or "Infinity" in run.stderr, run.stderr
    assert not db.exists()
