"""The could-not-measure result: the same builder as the checker's, called by the roles."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from specdeploy.node.validation import check
from specdeploy.node.validation.result import new_result, not_measured

REPO = Path(__file__).resolve().parents[2]


def test_the_checker_and_the_roles_build_the_same_shape() -> None:
    args = check.build_parser().parse_args(
        ["smoke", "--base-url", "http://127.0.0.1:9", "--served-model-name", "m", "--node", "n"]
    )
    assert set(new_result("smoke", "n", None, "u", "m")) == set(not_measured("n", "r"))
    measured = check.run(args)  # nothing listens on port 9: could not measure, exit 2
    assert set(measured) == set(not_measured("n", "r"))
    assert measured["exit_code"] == 2 and measured["status"] == "error"


def test_cli_writes_the_result_and_keeps_an_existing_one(tmp_path: Path) -> None:
    out = tmp_path / "results" / "node1.json"

    def cli(*extra: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "specdeploy.node.validation.result", "not-measured"]
        reason = ["--reason", "the node was unreachable"]
        return subprocess.run(
            [*command, "--node", "node1", *reason, "--out", str(out), *extra],
            capture_output=True,
            text=True,
            cwd=REPO,
            check=False,
        )

    first = cli()
    assert first.returncode == 0, first.stderr
    written = json.loads(out.read_text())
    assert written == json.loads(first.stdout)
    assert written["schema"] == "specdeploy.validation/1" and written["exit_code"] == 2
    assert written["reasons"] == ["could not measure: the node was unreachable"]
    assert written["release"] is None and written["node"] == "node1"
    out.write_text('{"kept": true}\n')
    assert cli("--keep").returncode == 0 and json.loads(out.read_text()) == {"kept": True}

    blocked = tmp_path / "file"
    blocked.write_text("")
    out = blocked / "node1.json"
    bad = cli()
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "--out" in bad.stderr and str(out) in bad.stderr and "Traceback" not in bad.stderr
