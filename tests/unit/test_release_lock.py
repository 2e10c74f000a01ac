"""plugins/module_utils/deploy_lock.py (specdeploy.node.module_utils.deploy_lock): one deploy
at a time per node; stale locks do not block forever."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from specdeploy.node.module_utils import deploy_lock

REPO = Path(__file__).resolve().parents[2]
LOCK_CLI = f"{sys.executable} -m specdeploy.node.release.deploy_lock"


def owner(token: str, pid: int | None = None, controller: str | None = None) -> dict:
    pid = os.getpid() if pid is None else pid
    return {
        "token": token,
        "controller": controller or socket.gethostname(),
        "pid": pid,
        "pid_starttime": deploy_lock.process_starttime(pid),
        "user": "ops",
        "purpose": "deploy",
    }


def cli(*args: str) -> tuple[int, dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "specdeploy.node.release.deploy_lock", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    return proc.returncode, json.loads(proc.stdout)


def test_second_acquire_is_refused_with_who_holds_it(tmp_path):
    rc, first = cli("acquire", "--root", str(tmp_path), "--owner-json", json.dumps(owner("t1")))
    assert rc == 0 and first["acquired"] and first["changed"]
    rc, second = cli("acquire", "--root", str(tmp_path), "--owner-json", json.dumps(owner("t2")))
    assert rc == 1 and not second["acquired"]
    assert second["owner"]["token"] == "t1"
    assert f"ansible-playbook pid {os.getpid()}" in second["message"]
    assert "ops@" in second["message"]


def test_release_only_by_its_owner(tmp_path):
    deploy_lock.acquire(tmp_path, owner("t1"), 3600)
    rc, out = cli("release", "--root", str(tmp_path), "--token", "t2")
    assert rc == 1 and not out["released"]
    assert deploy_lock.lock_path(tmp_path).exists()
    rc, out = cli("release", "--root", str(tmp_path), "--token", "t1")
    assert rc == 0 and out["released"]
    assert not deploy_lock.lock_path(tmp_path).exists()


def test_a_lock_of_a_killed_run_is_detected_and_broken(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = owner("old", pid=dead.pid)
    stale["pid_starttime"] = "1"  # whatever runs under that pid now, it is not the owner
    deploy_lock.acquire(tmp_path, stale, 3600)
    assert deploy_lock.alive(stale) is False
    assert deploy_lock.alive(owner("live")) is True
    refused = deploy_lock.acquire(tmp_path, owner("new"), 3600)
    assert not refused["acquired"]  # the node alone does not break it...
    taken = deploy_lock.acquire(tmp_path, owner("new"), 3600, break_token="old")
    assert taken["acquired"] and taken["broken"]["token"] == "old"  # ...the controller says so
    assert deploy_lock.read_owner(tmp_path)["token"] == "new"
    assert not list(tmp_path.glob(".deploy.lock.*"))


def test_break_token_of_another_lock_breaks_nothing(tmp_path):
    deploy_lock.acquire(tmp_path, owner("live"), 3600)
    out = deploy_lock.acquire(tmp_path, owner("new"), 3600, break_token="someone-else")
    assert not out["acquired"]
    assert deploy_lock.read_owner(tmp_path)["token"] == "live"


def test_a_foreign_lock_expires(tmp_path):
    foreign = owner("far", controller="other-controller")
    deploy_lock.acquire(tmp_path, foreign, 3600, now=1000.0)
    assert deploy_lock.alive(foreign) is None  # cannot be asked from here
    assert not deploy_lock.acquire(tmp_path, owner("new"), 3600, now=2000.0)["acquired"]
    out = deploy_lock.acquire(tmp_path, owner("new"), 3600, now=5000.0)
    assert out["acquired"] and out["broken"]["reason"] == "expired"


def test_a_corrupt_lock_is_stale(tmp_path):
    deploy_lock.lock_path(tmp_path).write_text("{half")
    assert deploy_lock.acquire(tmp_path, owner("new"), 3600)["acquired"]


def test_whoami_finds_the_outermost_ansible_playbook(tmp_path):
    # A fake ansible-playbook that runs whoami through a shell, as Ansible's workers do.
    fake = tmp_path / "ansible-playbook"
    fake.write_text(f"#!/bin/sh\n/bin/sh -c '{LOCK_CLI} whoami --purpose rollback'\n")
    fake.chmod(0o755)
    proc = subprocess.Popen([str(fake)], stdout=subprocess.PIPE, text=True, cwd=REPO)
    out = json.loads(proc.communicate()[0])
    assert out["pid"] == proc.pid
    assert out["purpose"] == "rollback" and len(out["token"]) == 32
