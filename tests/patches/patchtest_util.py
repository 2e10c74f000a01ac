"""Helpers shared by the patch tests (a module with a unique name, not conftest)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "patches" / "vllm" / "manifest.yml"
PATCH_VERSIONS = ["0.15.1", "0.16.0", "0.17.0", "0.17.1"]
NATIVE_VERSIONS = ["0.18.1", "0.20.2"]  # plus the newest on PyPI (fixture newest_vllm)


def run_cli(
    *args: str, module: str = "specdeploy.node.patching.patches"
) -> subprocess.CompletedProcess[str]:
    """Run a specdeploy CLI the way the node does: python -m specdeploy.<module>."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )


def snapshot(sp: Path, rels: list[str]) -> dict[str, bytes]:
    return {r: (sp / r).read_bytes() for r in rels}
