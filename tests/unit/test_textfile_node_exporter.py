"""The Prometheus textfile from spec-report, loaded by the real node_exporter (Debian's
prometheus-node-exporter, installed by `make setup`) through its textfile collector and scraped
over 127.0.0.1: a history where two results share a node and release must scrape without an
error, with one series per label set and the newest run's values."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from fleet_history import NEW, OLD, fleet, write

from specdeploy.controller import report
from specdeploy.node.validation import metrics, textfile

pytestmark = pytest.mark.timeout(120)
NODE_EXPORTER = "prometheus-node-exporter"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape_textfile(directory: Path) -> tuple[str, str]:
    """Runs node_exporter (textfile collector only) on a free loopback port, scrapes /metrics
    once it answers, stops it; returns (exposition, node_exporter's log). Bounded: 30 s."""
    binary = shutil.which(NODE_EXPORTER)
    if binary is None:
        pytest.fail(f"{NODE_EXPORTER} not installed (Debian package {NODE_EXPORTER}: make setup)")
    port = _free_port()
    log = directory.parent / "node_exporter.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [
                binary,
                f"--web.listen-address=127.0.0.1:{port}",
                "--collector.disable-defaults",
                "--collector.textfile",
                f"--collector.textfile.directory={directory}",
            ],
            stdout=err,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    url = f"http://127.0.0.1:{port}/metrics"
                    with urllib.request.urlopen(url, timeout=5) as resp:
                        body = resp.read().decode()
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise AssertionError(
                            f"node_exporter did not answer:\n{log.read_text()}"
                        ) from None
                    time.sleep(0.2)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    return body, log.read_text()


def test_node_exporter_scrapes_a_history_with_repeated_runs(tmp_path):
    results = fleet()
    shared = [(r["node"], r["release"]) for r in results]
    assert len(shared) > len(set(shared))  # two results share a node and release
    write(tmp_path / "results", results)
    textfile = tmp_path / "textfile"
    rc = report.main(
        [str(tmp_path / "results"), "--quiet", "--prom", str(textfile / "specdeploy.prom")]
    )
    assert rc == 1  # the history holds failed runs

    body, log = scrape_textfile(textfile)

    assert "collected before" not in body + log, log
    samples = metrics.parse_exposition(body)
    by = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in samples}
    errors = [v for (n, _), v in by.items() if n == "node_textfile_scrape_error"]
    assert errors == [0.0], log
    # One series per (node, release): gpu-01 ran OLD three times; the newest run (regressed,
    # 2.49) is the one exported.
    mal = {
        (dict(k)["node"], dict(k)["release"]): v
        for (n, k), v in by.items()
        if n == "specdeploy_mean_acceptance_length"
    }
    assert mal[("gpu-01", OLD)] == pytest.approx(2.49)
    assert mal[("gpu-01", NEW)] == pytest.approx(3.37)
    # The per-level speed results (speed contract) carry the concurrency label.
    level = {
        dict(k)["concurrency"]: v
        for (n, k), v in by.items()
        if n == "specdeploy_level_speed_up" and dict(k)["node"] == "gpu-02"
    }
    assert set(level) == {"1", "8", "32"} and level["32"] < 1.0
    # Per node, the newest validation of all: gpu-02's failed at c=32.
    last = {
        dict(k)["node"]: (dict(k)["release"], v)
        for (n, k), v in by.items()
        if n == "specdeploy_last_validation_passed"
    }
    assert last == {"gpu-01": (NEW, 1.0), "gpu-02": (NEW, 0.0)}


def test_node_exporter_reports_a_broken_textfile(tmp_path):
    """The check above can fail: two samples with the same labels make node_exporter flag the
    scrape (what the textfile looked like before it kept the newest run per label set)."""
    textfile = tmp_path / "textfile"
    textfile.mkdir()
    line = 'specdeploy_validation_passed{node="n",release="r"} 1\n'
    (textfile / "dup.prom").write_text(
        "# HELP specdeploy_validation_passed x\n# TYPE specdeploy_validation_passed gauge\n"
        + line * 2
    )
    body, log = scrape_textfile(textfile)
    assert "collected before with the same name and label values" in body + log


def test_textfile_writer_refuses_duplicate_series():
    r = fleet()[2]
    tf = textfile._Textfile()
    tf.add("x", "h", {"node": r["node"]}, 1.0)
    with pytest.raises(ValueError, match="two samples of x"):
        tf.add("x", "h", {"node": r["node"]}, 2.0)


def test_report_writes_the_textfile_to_each_prom_path(tmp_path):
    """validate.yml writes the report directory's copy and, with validation_textfile_dir,
    node_exporter's (an empty --prom, the knob unset, is skipped)."""
    write(tmp_path / "results", fleet())
    a, b = tmp_path / "report" / "v.prom", tmp_path / "textfile" / "v.prom"
    rc = report.main(
        [str(tmp_path / "results"), "--quiet", "--prom", str(a), "--prom", str(b), "--prom", ""]
    )
    assert rc == 1 and a.read_text() == b.read_text()
    assert "specdeploy_last_validation_passed" in a.read_text()
