"""A node tool of several modules travels as one zipapp (ansible.builtin.script copies one file)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from specdeploy.controller import node_zipapp

REPO = Path(__file__).resolve().parents[2]


def test_the_doctor_runs_from_its_zipapp_alone(tmp_path: Path) -> None:
    out = tmp_path / "doctor.pyz"
    assert node_zipapp.main(["--module", "specdeploy.node.doctor", "--out", str(out)]) == 0
    elsewhere = tmp_path / "node"
    elsewhere.mkdir()
    # Run as the node runs it: its system Python, no toolkit on the path, from another dir.
    proc = subprocess.run(
        [sys.executable, "-I", str(out), "--root", "/nonexistent/root", "--json"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == "gpu-doctor: error: --root /nonexistent/root: not a directory"
    help_ = subprocess.run(
        [sys.executable, "-I", str(out), "--help"], capture_output=True, text=True, check=False
    )
    assert help_.returncode == 0 and "--expected-gpus" in help_.stdout


def test_the_zipapp_is_reproducible() -> None:
    assert node_zipapp.build("specdeploy.node.doctor") == node_zipapp.build(
        "specdeploy.node.doctor"
    )


def test_only_node_modules_with_a_main(tmp_path: Path, capsys) -> None:
    out = str(tmp_path / "x.pyz")
    assert node_zipapp.main(["--module", "specdeploy.controller.report", "--out", out]) == 2
    assert "--module specdeploy.controller.report" in capsys.readouterr().err
    assert node_zipapp.main(["--module", "specdeploy.node.nothing", "--out", out]) == 2
