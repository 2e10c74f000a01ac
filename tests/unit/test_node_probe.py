"""The preflight's one-round-trip node probe (roles/preflight/library/specdeploy_node_probe.py).

Run as Ansible runs a module: a JSON args file, the module's stdout read back as JSON.
"""

from __future__ import annotations

import sys
from pathlib import Path

from module_runner import MODULES, run_module

MODULE = MODULES / "node_probe.py"


def probe(tmp_path: Path, **args) -> dict:
    return run_module(MODULE, tmp_path, args)


def test_reads_models_current_release_and_free_space_without_changing_anything(tmp_path):
    model = tmp_path / "models" / "target"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"model_type": "deepseek_v3"}')
    root = tmp_path / "opt" / "specdeploy"
    release = root / "releases" / "0.16.0-abc"
    (release / "config").mkdir(parents=True)
    (release / "manifest.json").write_text(
        '{"status": "active", "last_validation": {"status": "pass"}}'
    )
    (release / "config" / "gates.json").write_text('{"min_mean_acceptance_length": 1.5}')
    (root / "current").symlink_to("releases/0.16.0-abc")

    def listing() -> list[tuple[str, float]]:
        return sorted((str(p), p.lstat().st_mtime) for p in root.rglob("*"))

    before = listing()

    out = probe(
        tmp_path,
        model_dirs=[str(model), str(tmp_path / "models" / "missing")],
        release_root=str(root),
        port=18999,
        service="specdeploy-probe-test-absent",
    )

    assert out["changed"] is False
    fingerprint = out["model_configs"][0].pop("fingerprint")
    assert out["model_configs"][0] == {
        "path": str(model),
        "exists": True,
        "content": '{"model_type": "deepseek_v3"}',
        "provenance": None,
    }
    assert len(fingerprint) == 16
    assert out["model_configs"][1]["fingerprint"] == ""
    assert out["model_configs"][1]["exists"] is False
    assert out["current"]["islnk"] is True and out["current"]["target"] == "0.16.0-abc"
    assert out["current"]["manifest"]["last_validation"]["status"] == "pass"
    assert out["current"]["gates"] == {"min_mean_acceptance_length": 1.5}
    assert out["free_kb"] > 0
    assert out["service_main_pid"] == 0
    assert listing() == before  # read-only


def test_a_root_not_created_yet_is_measured_on_its_parent_and_nothing_serves(tmp_path):
    out = probe(
        tmp_path,
        model_dirs=[str(tmp_path)],
        release_root=str(tmp_path / "not" / "yet" / "there"),
        port=18999,
        service="specdeploy-probe-test-absent",
    )
    assert out["free_kb"] > 0
    assert out["current"] == {"islnk": False, "target": "", "manifest": None, "gates": None}
    assert not (tmp_path / "not").exists()


def test_a_broken_manifest_reads_as_none(tmp_path):
    root = tmp_path / "root"
    (root / "releases" / "r1").mkdir(parents=True)
    (root / "releases" / "r1" / "manifest.json").write_text("{not json")
    (root / "current").symlink_to("releases/r1")
    out = probe(tmp_path, model_dirs=[], release_root=str(root), port=18999, service="absent-unit")
    assert out["current"]["islnk"] is True and out["current"]["manifest"] is None


def test_reports_the_platform_of_the_nodes_python_and_an_error_for_a_missing_one(tmp_path):
    common = {"model_dirs": [], "release_root": str(tmp_path), "port": 18999, "service": "absent"}
    here = probe(tmp_path, python=sys.executable, **common)["python_platform"]
    assert here["python"] == f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert here["machine"] and here["glibc"].startswith("2.")
    missing = probe(tmp_path, python=str(tmp_path / "no-python"), **common)["python_platform"]
    assert "no-python" in missing["error"]
    assert probe(tmp_path, **common)["python_platform"] is None


def test_reads_the_drafter_tensors_from_the_safetensors_header(tmp_path):
    import json
    import struct

    drafter = tmp_path / "drafter"
    drafter.mkdir()
    (drafter / "config.json").write_text("{}")
    header = json.dumps(
        {"d2t": {"dtype": "I64", "shape": [24000], "data_offsets": [0, 0]}, "x": {"shape": [1]}}
    ).encode()
    (drafter / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    common = {"release_root": str(tmp_path), "port": 18999, "service": "absent"}
    result = probe(tmp_path, model_dirs=[str(drafter)], drafter_dir=str(drafter), **common)
    assert result["drafter_weights"] == {"tensors": {"d2t": [24000]}, "where": "model.safetensors"}
    bare = tmp_path / "bare"
    bare.mkdir()
    assert (
        probe(tmp_path, model_dirs=[], drafter_dir=str(bare), **common)["drafter_weights"] is None
    )
    assert probe(tmp_path, model_dirs=[], **common)["drafter_weights"] is None
