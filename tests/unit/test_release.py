"""plugins/module_utils/release.py (specdeploy.node.module_utils.release): ledger order,
rollback targets, activation records, rebuilds."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specdeploy.node.module_utils import release

REPO = Path(__file__).resolve().parents[2]


def make(root: Path, rid: str, status: str = "verified") -> None:
    release.init_release(root, rid, {"id": rid})
    if status != "building":
        release.update_release(root, rid, {}, status, "test")


def run_cli(root: Path, *args: str) -> tuple[int, dict]:
    # Its command line (specdeploy.node.release.ledger): stdlib only, one JSON object on stdout.
    proc = subprocess.run(
        [sys.executable, "-m", "specdeploy.node.release.ledger", "--root", str(root), *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    return proc.returncode, json.loads(proc.stdout)


def test_previous_follows_the_ledger_and_a_rollback_of_a_rollback_rolls_forward(tmp_path):
    for rid in ("a", "b"):
        make(tmp_path, rid)
    release.activate(tmp_path, "a", "deploy")
    release.activate(tmp_path, "b", "deploy")
    # mtimes must not matter: make the older release look newer
    (tmp_path / "releases" / "a" / "manifest.json").touch()
    assert release.rollback_target(tmp_path, "")["target"] == "a"
    release.activate(tmp_path, "a", "rollback")
    assert release.rollback_target(tmp_path, "")["target"] == "b"  # forward again
    release.activate(tmp_path, "b", "rollback")
    assert release.current_release(tmp_path) == "b"
    actions = [(e["action"], e["release"], e["previous"]) for e in release.read_ledger(tmp_path)]
    assert actions == [
        ("deploy", "a", None),
        ("deploy", "b", "a"),
        ("rollback", "a", "b"),
        ("rollback", "b", "a"),
    ]


def test_activation_is_recorded_in_both_manifests(tmp_path):
    make(tmp_path, "a")
    make(tmp_path, "b")
    release.activate(tmp_path, "a", "deploy")
    release.activate(tmp_path, "b", "deploy")
    release.activate(tmp_path, "a", "rollback")
    a = release.read_manifest(tmp_path, "a")
    b = release.read_manifest(tmp_path, "b")
    assert a["status"] == "active" and b["status"] == "inactive"
    assert a["last_activation"]["action"] == "rollback"
    assert a["last_activation"]["previous"] == "b"
    assert [h.get("reason") for h in b["history"]][-1] == "replaced by a"


def test_no_earlier_release_is_refused_with_a_reason_and_nothing_changes(tmp_path):
    make(tmp_path, "a")
    release.activate(tmp_path, "a", "deploy")
    before = (tmp_path / "ledger.jsonl").read_text()
    rc, out = run_cli(tmp_path, "target")
    assert rc == 1
    assert "no earlier release" in out["error"] and "current` is a" in out["error"]
    assert (tmp_path / "ledger.jsonl").read_text() == before
    assert release.current_release(tmp_path) == "a"


def test_failed_and_pruned_releases_are_no_rollback_target(tmp_path):
    for rid in ("a", "b", "c"):
        make(tmp_path, rid)
        release.activate(tmp_path, rid, "deploy")
    release.update_release(tmp_path, "b", {}, "failed", "gate: acceptance 1.2 < 1.5")
    assert release.rollback_target(tmp_path, "")["target"] == "a"
    with pytest.raises(release.ReleaseError, match=r"failed.*acceptance 1\.2"):
        release.rollback_target(tmp_path, "b")
    with pytest.raises(release.ReleaseError, match=r"does not exist.*known: a, b, c"):
        release.rollback_target(tmp_path, "zzz")
    with pytest.raises(release.ReleaseError, match="already current"):
        release.rollback_target(tmp_path, "c")


def test_a_failed_release_is_never_activated(tmp_path):
    make(tmp_path, "a", status="failed")
    with pytest.raises(release.ReleaseError, match="only a finished release"):
        release.activate(tmp_path, "a", "deploy")
    make(tmp_path, "half", status="building")
    with pytest.raises(release.ReleaseError):
        release.activate(tmp_path, "half", "deploy")
    assert release.current_release(tmp_path) is None


def test_a_half_built_release_is_rebuilt_from_scratch(tmp_path):
    make(tmp_path, "x", status="building")
    venv = tmp_path / "releases" / "x" / "venv"
    venv.mkdir()
    (venv / "half-written").write_text("pip was killed here")
    result = release.init_release(tmp_path, "x", {"id": "x"}, busy_timeout=1)
    assert result == {"changed": True, "status": "building", "rebuilt": True}
    assert not venv.exists()
    history = release.read_manifest(tmp_path, "x")["history"]
    assert history[-1]["previous_status"] == "building"


def test_a_rebuild_waits_for_a_process_left_in_the_release(tmp_path):
    make(tmp_path, "x", status="building")
    rdir = tmp_path / "releases" / "x"
    (rdir / "venv").mkdir()
    # an orphan of an interrupted deploy (as pip would be): its cwd is inside the release
    orphan = subprocess.Popen(["sleep", "30"], cwd=rdir / "venv")
    try:
        started = time.monotonic()
        with pytest.raises(release.ReleaseError, match=rf"in use by process\(es\) {orphan.pid}"):
            release.init_release(tmp_path, "x", {"id": "x"}, busy_timeout=1.5)
        assert time.monotonic() - started >= 1.4
        assert (rdir / "venv").is_dir()  # nothing wiped under a live process
    finally:
        orphan.kill()
        orphan.wait()
    assert release.init_release(tmp_path, "x", {"id": "x"}, busy_timeout=1)["rebuilt"]


def test_the_current_release_is_never_wiped(tmp_path):
    make(tmp_path, "a")
    release.activate(tmp_path, "a", "deploy")
    release.update_release(tmp_path, "a", {}, "failed", "gate")
    with pytest.raises(release.ReleaseError, match="is what `current` points at"):
        release.init_release(tmp_path, "a", {"id": "other inputs"})
    assert (tmp_path / "releases" / "a" / "manifest.json").is_file()


def test_deactivate_then_target_is_the_last_good_release(tmp_path):
    make(tmp_path, "a")
    release.activate(tmp_path, "a", "deploy")
    make(tmp_path, "b")
    release.activate(tmp_path, "b", "deploy")
    release.update_release(tmp_path, "b", {}, "failed", "never healthy")
    release.deactivate(tmp_path, "failed-first-deploy")
    assert release.current_release(tmp_path) is None
    out = release.rollback_target(tmp_path, "")
    assert out["target"] == "a" and out["current"] is None


def test_prune_keeps_current_and_previous(tmp_path):
    for rid in ("a", "b", "c", "d"):
        make(tmp_path, rid)
        release.activate(tmp_path, rid, "deploy")
    release.activate(tmp_path, "a", "rollback")  # current a, previous d
    out = release.prune(tmp_path, keep=2)
    assert sorted(out["kept"]) == ["a", "d"]
    assert sorted(p.name for p in (tmp_path / "releases").iterdir()) == ["a", "d"]


def test_cli_target_prints_json(tmp_path):
    make(tmp_path, "a")
    make(tmp_path, "b")
    release.activate(tmp_path, "a", "deploy")
    release.activate(tmp_path, "b", "deploy")
    rc, out = run_cli(tmp_path, "target", "--to", "")
    assert rc == 0 and out["target"] == "a" and out["current"] == "b"
    rc, out = run_cli(tmp_path, "target", "--to", "nope")
    assert rc == 1 and "does not exist" in out["error"]


def test_a_release_that_failed_while_serving_is_retried_as_it_is(tmp_path):
    make(tmp_path, "a")
    (tmp_path / "releases" / "a" / "venv").mkdir()
    release.update_release(tmp_path, "a", {}, "failed", "gate: speed-up 0.4", None, "serve")
    out = release.init_release(tmp_path, "a", {"id": "a"})
    assert out["retry"] and out["status"] == "verified" and not out["rebuilt"]
    assert (tmp_path / "releases" / "a" / "venv").is_dir()
    # other inputs under the same id, or a build failure: rebuilt from scratch
    release.update_release(tmp_path, "a", {}, "failed", "build: disk full", None, "build")
    assert release.init_release(tmp_path, "a", {"id": "a"})["rebuilt"]
    assert not (tmp_path / "releases" / "a" / "venv").exists()


def test_status_carries_the_serving_releases_manifest_and_none_before_a_deploy(tmp_path):
    assert release.status(tmp_path)["current_manifest"] == {}
    make(tmp_path, "a")
    release.update_release(tmp_path, "a", {"inputs": {"speculative_config": {"k": 3}}}, None, "t")
    release.activate(tmp_path, "a", "deploy")
    shown = release.status(tmp_path)
    assert shown["current"] == "a"
    assert shown["current_manifest"]["inputs"]["speculative_config"] == {"k": 3}
