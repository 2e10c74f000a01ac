"""specdeploy.node.release.steady and its module specdeploy.toolkit.steady: the no-op deploy's
one-run check.

A node root built the way a deploy leaves it (a finished, active release whose patched file the
manifest records, its rendered files, the caches' marker), a `systemctl` on PATH that answers
for the service, and a smoke command: steady. Then each thing the rollout's walk would repair
or refuse, one at a time, must show as a drift naming it (so a drifted node takes the normal
path), and the smoke check runs only when nothing else drifted.
"""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest
from module_runner import MODULE_UTILS, MODULES, REPO, run_module_file

from specdeploy.node.module_utils import deploy_lock, release, steady

MODULE = MODULES / "steady.py"
LOGIC = MODULE_UTILS / "steady.py"
RID = "0.16.0-abc"
USER = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(os.getgid()).gr_name


@pytest.fixture
def node(tmp_path, monkeypatch) -> dict:
    """A root serving RID as a deploy leaves it, and the check's parameters for it."""
    root = tmp_path / "root"
    site = tmp_path / "site"
    (site / "vllm").mkdir(parents=True)
    patched = site / "vllm" / "speculative.py"
    patched.write_text("patched = True\n")
    release.init_release(root, RID, {"id": RID})
    release.update_release(
        root,
        RID,
        {
            "patches": {
                "verified": True,
                "state": "applied",
                "site_packages": str(site),
                "files": [
                    {
                        "path": "vllm/speculative.py",
                        "expected_patched": hashlib.sha256(patched.read_bytes()).hexdigest(),
                    }
                ],
            }
        },
        "verified",
        "test",
    )
    release.activate(root, RID, "deploy")
    config = root / "releases" / RID / "config"
    config.mkdir()
    unit = config / "vllm.service"
    unit.write_text("[Service]\nExecStart=/bin/true\n")
    unit.chmod(0o644)
    marker = tmp_path / "cache" / "FINGERPRINT.json"
    marker.parent.mkdir()
    marker.write_text("{}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    systemctl = bin_dir / "systemctl"
    systemctl.write_text('#!/bin/sh\ncat "$(dirname "$0")/state"\n')
    systemctl.chmod(0o755)
    (bin_dir / "state").write_text("active\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    smoke = tmp_path / "smoke.py"
    smoke.write_text(
        "import json, pathlib, sys\n"
        "ok = pathlib.Path(sys.argv[1]).read_text().strip() == 'ok'\n"
        "print(json.dumps({'ok': ok, 'reasons': [] if ok else ['health: 503']}))\n"
        "sys.exit(0 if ok else 1)\n"
    )
    answer = tmp_path / "answer"
    answer.write_text("ok")
    return {
        "root": str(root),
        "release_id": RID,
        "service": "vllm",
        "files": [
            {
                "path": str(unit),
                "content": unit.read_text(),
                "mode": "0644",
                "owner": USER,
                "group": GROUP,
            }
        ],
        "present": [str(marker)],
        "keep_releases": 3,
        "smoke_argv": [sys.executable, str(smoke), str(answer)],
        "_paths": {"unit": unit, "patched": patched, "marker": marker, "bin": bin_dir},
        "_answer": answer,
    }


def spec_of(node: dict) -> dict:
    return {k: v for k, v in node.items() if not k.startswith("_")}


def test_a_node_as_the_deploy_leaves_it_is_steady_and_its_smoke_passed(node):
    result = steady.check(spec_of(node))
    assert result == {"steady": True, "drifts": [], "smoke": {"ok": True, "message": "passed"},
                      "left_drained": False}  # fmt: skip


def test_a_drain_that_a_stopped_run_left_is_reported(node):
    """drain.yml's note under the root: a steady node still is steady, and says it was left
    out of rotation (the deploy then puts it back)."""
    (Path(spec_of(node)["root"]) / steady.OUT_OF_ROTATION).write_text("{}\n")
    result = steady.check(spec_of(node))
    assert result["steady"] is True and result["left_drained"] is True


def _edit_unit(node):
    node["_paths"]["unit"].write_text("[Service]\nExecStart=/bin/false\n")


def _chmod_unit(node):
    node["_paths"]["unit"].chmod(0o666)


def _patched_file_edited(node):
    node["_paths"]["patched"].write_text("patched = True  # hotfix\n")


def _other_current(node):
    root = Path(node["root"])
    release.init_release(root, "other", {"id": "other"})
    release.update_release(root, "other", {}, "verified", "test")
    release.activate(root, "other", "deploy")


def _lock_held(node):
    owner = {"token": "t1", "controller": "ctl", "pid": 1, "user": "ops", "purpose": "rollback"}
    assert deploy_lock.acquire(Path(node["root"]), owner, 3600)["acquired"]


def _marker_missing(node):
    node["_paths"]["marker"].unlink()


def _service_failed(node):
    (node["_paths"]["bin"] / "state").write_text("failed\n")


def _smoke_fails(node):
    node["_answer"].write_text("503")


def _old_releases(node):
    root = Path(node["root"])
    for rid in ("old1", "old2", "old3"):
        release.init_release(root, rid, {"id": rid})
        release.update_release(root, rid, {}, "inactive", "test")


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (_edit_unit, "vllm.service: content differs"),
        (_chmod_unit, "vllm.service: mode 0666"),
        (_patched_file_edited, "speculative.py: sha256 "),
        (_other_current, f"current is other, not {RID}"),
        (_lock_held, "the deploy lock is held: a rollback by ops@ctl"),
        (_marker_missing, "FINGERPRINT.json: absent"),
        (_service_failed, "vllm.service is failed, not active"),
        (_smoke_fails, "readiness smoke check failed: health: 503"),
        (_old_releases, "old releases to prune: "),
    ],
)
def test_each_difference_the_walk_would_repair_is_a_drift_naming_it(node, change, says):
    change(node)
    try:
        result = steady.check(spec_of(node))
    finally:
        deploy_lock.release(Path(node["root"]), "t1")
    assert not result["steady"], result
    assert any(says in drift for drift in result["drifts"]), result["drifts"]
    # The smoke check runs only on an otherwise steady node (a drifted one gets the walk's).
    assert (result["smoke"] is not None) == (change is _smoke_fails)


def module(node: dict, tmp_path: Path, check: bool = False, **extra) -> dict:
    args_file = tmp_path / "args.json"
    args = {**spec_of(node), **extra, "_ansible_check_mode": check}
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    return run_module_file(MODULE, args_file)


def test_the_module_utils_file_is_the_node_code_itself():
    # One copy: the module imports the collection's module_utils file, and the node package's
    # specdeploy.node.module_utils.steady is that same file (no link, no second copy).
    assert "plugins.module_utils.steady import" in MODULE.read_text()
    assert not LOGIC.is_symlink()
    assert Path(steady.__file__).resolve() == LOGIC


def test_the_module_reports_steady_and_check_mode_leaves_the_smoke_out(node, tmp_path):
    out = module(node, tmp_path)
    assert out["steady"] and not out["changed"] and out["smoke"]["ok"], out
    _smoke_fails(node)
    checked = module(node, tmp_path, check=True)
    assert checked["steady"] and checked["smoke"] is None, checked


def test_a_drifted_secret_file_is_named_and_its_content_never_shown(node, tmp_path):
    secret = Path(node["root"]) / "vllm.secrets.env"
    secret.write_text("VLLM_API_KEY=old-key-7f3a\n")
    secret.chmod(0o600)
    wanted = {"path": str(secret), "mode": "0600", "owner": USER, "group": GROUP}
    new = {**wanted, "content": "VLLM_API_KEY=new-key-9c1e\n"}
    out = module(node, tmp_path, secret_files=[new])
    assert not out["steady"]
    assert out["drifts"] == [f"{secret}: content differs from what the deploy renders now"]
    assert "new-key-9c1e" not in json.dumps(out) and "old-key-7f3a" not in json.dumps(out)
    same = {**wanted, "content": secret.read_text()}
    assert module(node, tmp_path, secret_files=[same])["steady"]


def test_the_command_exits_0_steady_1_drift_2_bad_input(node, tmp_path):
    spec = tmp_path / "spec.json"

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "specdeploy.node.release.steady", *args],
            capture_output=True,
            text=True,
            check=False,
            cwd=REPO,
        )

    spec.write_text(json.dumps(spec_of(node)))
    ok = run("--spec", str(spec), "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["steady"], ok.stderr
    _edit_unit(node)
    drift = run("--spec", str(spec))
    assert drift.returncode == 1 and "vllm.service: content differs" in drift.stdout
    spec.write_text("{not json")
    bad = run("--spec", str(spec))
    assert bad.returncode == 2 and bad.stderr.startswith("steady: ")
    assert len(bad.stderr.splitlines()) == 1
