"""playbooks/render-unit.yml plans the release through the same manifest lookup as the deploy's
input checks (specdeploy.controller.inputs): a vLLM version with a local label (0.16.0+cu129, as
vLLM's wheel index names CUDA builds) is the release 0.16.0, with its patch series."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from test_on_failure_unit import ROOT, render_unit

pytestmark = pytest.mark.timeout(600)


def render(tmp_path: Path, version: str) -> dict:
    out = tmp_path / version
    out.mkdir()
    run = render_unit(tmp_path, out, "-e", f"specdeploy_vllm_version={version}")
    assert run.returncode == 0, run.stdout[-3000:]
    assert (out / "vllm.service").is_file() and (out / "vllm.env").is_file()
    return json.loads((out / "release.json").read_text())


def test_a_local_version_label_plans_the_same_patch_series(tmp_path):
    manifest = yaml.safe_load((ROOT / "patches" / "vllm" / "manifest.yml").read_text())
    series = manifest["versions"]["0.16.0"]["series_sha256"]
    plain = render(tmp_path, "0.16.0")
    labelled = render(tmp_path, "0.16.0+cu129")
    assert plain["series_sha256"] == labelled["series_sha256"] == series
    assert plain["native"] is labelled["native"] is False
    assert labelled["vllm_version"] == "0.16.0+cu129"


def test_a_version_the_manifest_does_not_know_is_refused_naming_the_knob(tmp_path):
    run = render_unit(tmp_path, tmp_path, "-e", "specdeploy_vllm_version=0.1.0")
    assert run.returncode != 0
    assert "specdeploy_vllm_version=0.1.0 is not supported" in run.stdout
    assert not (tmp_path / "vllm.service").exists()


def _exec_start(out: Path) -> tuple[str, int]:
    unit = (out / "vllm.service").read_text()
    exec_start = next(x for x in unit.splitlines() if x.startswith("ExecStart="))
    stop = int(next(x for x in unit.splitlines() if x.startswith("TimeoutStopSec=")).split("=")[1])
    return exec_start, stop


def test_the_unit_drains_on_stop_where_the_version_has_shutdown_timeout(tmp_path):
    """0.18 on: --shutdown-timeout <knob>, below TimeoutStopSec; 0.16 has no such flag (vLLM
    would refuse to start), so its unit passes none (issue 28 item 2)."""
    manifest = yaml.safe_load((ROOT / "patches" / "vllm" / "manifest.yml").read_text())
    assert manifest["versions"]["0.20.2"]["serve_shutdown_timeout"] is True
    assert manifest["versions"]["0.16.0"]["serve_shutdown_timeout"] is False
    render(tmp_path, "0.20.2")
    argv, stop = _exec_start(tmp_path / "0.20.2")
    assert " --shutdown-timeout 30 " in argv + " "
    assert stop > 30
    render(tmp_path, "0.16.0")
    argv, _ = _exec_start(tmp_path / "0.16.0")
    assert "--shutdown-timeout" not in argv


@pytest.mark.parametrize("value", ["-1", "120", "nan"])
def test_a_bad_shutdown_timeout_is_refused_naming_the_knob(tmp_path, value):
    run = render_unit(
        tmp_path, tmp_path, "-e", "specdeploy_vllm_version=0.20.2",
        "-e", f"specdeploy_shutdown_timeout_s={value}",
    )  # fmt: skip
    assert run.returncode != 0
    assert "specdeploy_shutdown_timeout_s" in run.stdout
    assert not (tmp_path / "vllm.service").exists()
