"""The no-speculation baseline in the history: which run counts, and the CLI the playbook uses."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from specdeploy.controller import history  # noqa: E402


def _run(node: str, release: str, started: str, tps: float, mode: str, status: str = "pass"):
    return {
        "schema": "specdeploy.validation/1",
        "run_id": f"{node}-{release}-{started}",
        "node": node,
        "release": release,
        "started_at": started,
        "status": status,
        "exit_code": 0 if status == "pass" else 1,
        "mode": "all",
        "served_model_name": "m",
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
