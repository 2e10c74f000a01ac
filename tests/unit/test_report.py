"""spec-report outputs (table, JUnit, Prometheus textfile, HTML) and the SQLite history, from
results produced by the real checker against the stand-in."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from fleet_history import one_result
from harness import Standin, free_port

from specdeploy.controller import history, report
from specdeploy.node.validation import check, metrics

pytestmark = pytest.mark.timeout(120)


def _check(out: Path, base: str, *extra: str, node: str = "node-a", release: str = "rel-1"):
    rc = check.main(
        [
            "all",
            "--base-url",
            base,
            "--served-model-name",
            "tiny-dsv3",
            "--out",
            str(out),
            "--node",
            node,
            "--release",
            release,
            "--max-requests",
            "6",
            "--max-tokens",
            "48",
            "--json",
            *extra,
        ]
    )
    return rc, json.loads(out.read_text())


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("results")
    gates = d / "gates.json"
    gates.write_text(
        json.dumps({"min_mean_acceptance_length": 1.5, "per_position_floors": [0.5, 0.3, 0.2]})
    )
    strict = d / "strict.json"
    strict.write_text(json.dumps({"min_mean_acceptance_length": 3.9}))
    with Standin() as s:
        rc_pass, ok = _check(
            d / "a.json", s.base_url, "--gates", str(gates), "--baseline-tps", "1000"
        )
        rc_fail, bad = _check(d / "b.json", s.base_url, "--gates", str(strict), node="node-b")
    rc_down, down = _check(d / "c.json", f"http://127.0.0.1:{free_port()}", node="node-c")
    assert (rc_pass, rc_fail, rc_down) == (0, 1, 2)  # down: could not measure
    return d, ok, bad, down


def test_table(results, capsys):
    d, *_ = results
    rc = report.main([str(d / "a.json"), str(d / "b.json"), str(d / "c.json")])
    out = capsys.readouterr().out
    assert rc == 2  # the worst: node-c could not be measured
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["NODE", "RELEASE", "STATUS", "MAL"]
    row = {ln.split()[0]: ln for ln in lines[1:]}
    assert "PASS" in row["node-a"] and "FAIL" in row["node-b"] and "ERROR" in row["node-c"]
    assert "connection refused" in row["node-c"]


def test_junit(results, tmp_path):
    d, _ok, _bad, _down = results
    j = tmp_path / "junit.xml"
    report.main([str(d), "--junit", str(j), "--quiet"])
    root = ET.parse(j).getroot()
    assert root.tag == "testsuites"
    suites = {s.get("name"): s for s in root}
    assert set(suites) == {"node-a.rel-1", "node-b.rel-1", "node-c.rel-1"}
    a = suites["node-a.rel-1"]
    names = [tc.get("name") for tc in a]
    assert "smoke.determinism" in names and "gate.position_2_acceptance" in names
    assert a.get("failures") == "0"
    b = suites["node-b.rel-1"]
    failed = [tc.get("name") for tc in b if tc.find("failure") is not None]
    assert failed == ["gate.mean_acceptance_length"]
    c = suites["node-c.rel-1"]
    assert c.find("testcase/failure") is not None and c.find("testcase/skipped") is not None
    assert int(root.get("tests")) == sum(int(s.get("tests")) for s in root)


def test_prometheus_textfile(results, tmp_path):
    d, ok, *_ = results
    p = tmp_path / "textfile" / "specdeploy.prom"
    report.main([str(d / "a.json"), str(d / "b.json"), "--prom", str(p), "--quiet"])
    text = p.read_text()
    samples = metrics.parse_exposition(text)  # valid exposition format
    by = {(s.name, s.labels.get("node"), s.labels.get("position")): s for s in samples}
    mal = by[("specdeploy_mean_acceptance_length", "node-a", None)]
    assert mal.labels == {"node": "node-a", "release": "rel-1", "model": "tiny-dsv3"}
    assert mal.value == pytest.approx(ok["acceptance"]["mean_acceptance_length"])
    assert by[("specdeploy_validation_passed", "node-a", None)].value == 1.0
    assert by[("specdeploy_validation_passed", "node-b", None)].value == 0.0
    assert by[("specdeploy_position_acceptance_rate", "node-a", "2")].value == pytest.approx(
        ok["acceptance"]["per_position_acceptance"][2]
    )
    assert by[("specdeploy_speed_up", "node-a", None)].value > 0
    assert re.search(r"^# TYPE specdeploy_speed_up gauge$", text, re.M)
    assert not list(p.parent.glob(".*tmp"))


def test_html_with_history(results, tmp_path):
    d, _ok, _bad, _ = results
    db = tmp_path / "h.sqlite"
    h = tmp_path / "report.html"
    rc = report.main(
        [str(d / "a.json"), "--history", str(db), "--record", "--html", str(h), "--quiet"]
    )
    assert rc == 0
    page = h.read_text()
    # bars: newest per node + this run; 3 history plots; the per-level speed of the run (check
    # results carry a "speed" section since issue 19)
    assert page.count("<svg") == 6 and "Speed per concurrency level" in page
    assert "Per-position acceptance rate" in page and "position 2" in page
    assert "Mean acceptance length per run" in page
    assert "SpecDecoding metrics: Mean acceptance length:" in page
    assert "<script" not in page
    assert "Restarts and downtime" not in page  # none recorded yet


def test_html_shows_the_recorded_restarts_and_their_downtime(results, tmp_path):
    """What a deploy recorded (playbooks/downtime.yml -> history downtime) is in the report:
    each restart's window, its parts and the validation's figures; a start without a restart
    (a no-op deploy) has no row."""
    d, *_ = results
    db = tmp_path / "h.sqlite"
    window = {"from": "stop", "window_s": 84.9, "parts": {"stop": 5.8, "weights": 8.0}}
    conn = history.connect(db)
    history.record_starts(
        conn,
        [
            {"node": "gpu-a", "release": "r1", "action": "deploy", "at": "2026-12-03T10:00:00Z",
             "window": window, "output_tps": 950.5, "speed_up": 1.42},
            {"node": "gpu-a", "release": "r0", "action": "rollback",
             "at": "2026-12-03T11:00:00Z", "window": {}},
            {"node": "gpu-b", "release": "r1", "action": "deploy", "at": "2026-12-03T12:00:00Z",
             "restarted": False},
        ],
    )  # fmt: skip
    conn.close()
    h = tmp_path / "report.html"
    assert report.main([str(d / "a.json"), "--history", str(db), "--html", str(h), "--quiet"]) == 0
    page = h.read_text()
    table = page.split('<table id="downtime">', 1)[1].split("</table>", 1)[0]
    rows = table.split("<tr>")[2:]
    assert len(rows) == 2 and "rollback" in rows[0] and "deploy" in rows[1]  # newest first
    assert "the engine log did not say ready" in rows[0]
    assert "84.9" in rows[1] and "stop 5.8, weights 8.0" in rows[1]
    assert "950.5" in rows[1] and "1.42" in rows[1]
    assert "gpu-b" not in table


def test_report_exit_code_on_regression(tmp_path, capsys):
    rdir = tmp_path / "r"
    rdir.mkdir()
    (rdir / "1.json").write_text(json.dumps(one_result("n1", "r1", "2026-12-01T00:00:00Z", 3, 100)))
    db = tmp_path / "h.sqlite"
    assert report.main([str(rdir), "--history", str(db), "--record", "--quiet"]) == 0
    (rdir / "2.json").write_text(json.dumps(one_result("n1", "r1", "2026-12-02T00:00:00Z", 2, 100)))
    assert report.main([str(rdir / "2.json"), "--history", str(db), "--record"]) == 1
    out = capsys.readouterr().out
    assert "REGRESS" in out and "first validated run" in out
    assert len(history.runs(history.connect(db))) == 2


def test_unreadable_input(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"not": "a result"}')
    assert report.main([str(bad)]) == 2


def test_html_shows_the_k_schedule_a_run_was_measured_with(results, tmp_path):
    """Issue 26: a run measured with a k schedule in force (label k_schedule, set by the
    deploy) shows the schedule and the k at each level in the report."""
    d, _ok, _bad, _ = results
    r = json.loads((d / "a.json").read_text())
    r["labels"] = {**(r.get("labels") or {}), "k_schedule": "[[1, 1, 0], [2, 256, 3]]"}
    (tmp_path / "s.json").write_text(json.dumps(r))
    h = tmp_path / "report.html"
    assert report.main([str(tmp_path / "s.json"), "--html", str(h), "--quiet"]) == 0
    page = h.read_text()
    assert "k schedule: batch 1 off, 2-256 k=3" in page
    levels = [lv["concurrency"] for lv in r["speed"]["levels"]]
    for c in levels:
        k = 0 if c == 1 else 3
        assert re.search(rf"<td>{c}</td><td>{k}</td>", page), (c, page[-3000:])
    # without the label: no schedule, no k column in the speed table
    assert report.main([str(d / "a.json"), "--html", str(h), "--quiet"]) == 0
    page = h.read_text()
    assert "k schedule:" not in page and not re.search(r"<td>1</td><td>0</td>", page)
