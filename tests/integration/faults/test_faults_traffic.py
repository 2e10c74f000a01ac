"""Fault group `traffic` (issue 28 item 4): faults on a fleet of two nodes behind the sandbox's
HAProxy, with client traffic through the balancer during each fault.

Both nodes serve the group's base release A (port 8000, the balancer's backend port); two client
threads (tests/integration/livetraffic.py) stream chat requests through the balancer before,
during and after each fault, and the row records what they saw (sent / completed / failed / cut,
p99 before / during / after) next to what the operator sees (exit code, message) and what the
suite then finds on the nodes (which release each serves, in rotation or drained, nothing
lost). The faults share releases: B is deployed once (under the second operator's attempt) and
serves for the faults after it; C is the release the compile-cache and controller faults try.
See faultlib for the harness.
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.request

import livetraffic
import pytest
from faultlib import (
    CACHE,
    LOCKS,
    REPO,
    ROOT,
    SERVICE,
    Player,
    first_release_of,
    init_started,
    profile,
    record,
    wait_until,
)
from test_live_traffic import rotation, wait_in_rotation
from testbed.processes import left_running
from testbed.sandbox import balancer
from testbed.sandbox.config import instance

from specdeploy.controller import drain

GROUP = "traffic"
NODES = 2
PORT = balancer.API_PORT  # the balancer's backend port
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(2400)]

B = {"specdeploy_standin_profile": profile("pass", max_request_s=9.6)}
# C changes the speculative config (4 tokens, not 3): a new code fingerprint, so a new compile
# cache directory to prepare (A and B share one).
C = {
    "specdeploy_standin_profile": profile("pass", max_request_s=9.4),
    "specdeploy_speculative_config": {"method": "eagle3", "num_speculative_tokens": 4},
}
# E: a release the disk error stops while it is written (a new stand-in profile: a new id)
E = {"specdeploy_standin_profile": profile("pass", max_request_s=9.3)}
# F: the release whose rollout a network cut of the canary stops (a new id: a build to cut into)
F = {"specdeploy_standin_profile": profile("pass", max_request_s=9.2)}
QUIET_S = 4  # traffic before and after each fault: the baseline p99 and the recovery
WORKERS = 2  # client threads (livetraffic.Traffic's default)


@pytest.fixture(scope="module")
def hosts(node) -> list[str]:
    return [n.hostname for n in node.cluster.nodes]


def under_traffic(operation, model: str):
    """Run the operation with traffic through the balancer before, during and after it."""
    traffic = livetraffic.Traffic(balancer.frontend_url(), model, workers=WORKERS).start()
    time.sleep(QUIET_S)
    began = time.monotonic()
    try:
        result = operation()
    finally:
        ended = time.monotonic()
        time.sleep(QUIET_S)
        traffic.stop()
    return result, livetraffic.summarize(traffic.outcomes, began, ended)


def fleet(node: Player, hosts: list[str], ids: dict) -> str:
    """Each node: the release `current` names (by role where known), in rotation or not."""
    names = {v: k for k, v in ids.items() if k != "model"}
    states = rotation(hosts)
    out = []
    for i, host in enumerate(hosts):
        current = node.on(i).current()
        role = f"{names[current]}=" if current in names else ""
        out.append(f"{host}: {role}{current}, {states.get(host, '?')}")
    return "; ".join(out)


def no_request_lost(summary: dict) -> None:
    assert summary["sent_during"] >= 5, summary
    assert summary["failed"] == 0 and summary["cut"] == 0, summary["problems"]
    assert summary["completed"] == summary["sent"], summary


def wait_while_deploying(proc, ready, ended: str, timed_out: str, timeout_s: float = 600):
    """Poll ``ready()`` until it answers something true, and return that, while the deploy
    ``proc`` still runs (``ended`` if it stopped first) and within ``timeout_s`` (``timed_out``):
    the moment a fault is injected mid-deploy."""
    deadline = time.monotonic() + timeout_s
    while not (answer := ready()):
        assert proc.poll() is None, ended
        assert time.monotonic() < deadline, timed_out
        time.sleep(0.2)
    return answer


def new_release_dirs(canary, releases: str, known: list[str]):
    """A poll for ``wait_while_deploying``: the release directories ``known`` did not have."""
    return lambda: [n for n in canary.sh(f"ls {releases}").split() if n not in known]


def test_base_release_serves_on_both_nodes(node, ids, hosts):
    run = node()
    assert run.rc == 0, run.message
    ids["A"] = first_release_of(run)
    for i in range(NODES):
        node.on(i).serves(ids["A"])
    assert wait_in_rotation(hosts) == dict.fromkeys(hosts, "in rotation")
    with urllib.request.urlopen(f"{balancer.frontend_url()}/v1/models", timeout=30) as r:
        ids["model"] = json.loads(r.read())["data"][0]["id"]


def test_balancer_runtime_api_unreachable_is_refused_by_the_preflight(node, ids, hosts):
    """HAProxy serves on, but its runtime API socket is not where the inventory says (moved
    away, as a restart with another `stats socket` path or a removed file leaves it)."""
    sock = balancer.socket_path()
    away = sock.with_name(sock.name + ".away")
    before = [node.on(i).snapshot() for i in range(NODES)]

    def deploy_without_the_api():
        os.rename(sock, away)
        try:
            return node(extra=B)
        finally:
            os.rename(away, sock)

    run, summary = under_traffic(deploy_without_the_api, ids["model"])
    state = fleet(node, hosts, ids)
    assert run.rc == 2, run.message
    assert str(sock) in run.message, run.message
    assert "Nothing changed" in run.message, run.message
    assert not run.ran("deploy lock")  # stopped in the first play, before any lock
    lost = []
    for i in range(NODES):
        assert node.on(i).snapshot()["releases"] == before[i]["releases"]
        node.on(i).serves(ids["A"])
        lost.append(node.on(i).nothing_lost(before[i]))
    assert rotation(hosts) == dict.fromkeys(hosts, "in rotation")
    no_request_lost(summary)
    record(
        "balancer-api-unreachable",
        run,
        state,
        f"on each node: {lost[0]}",
        traffic=summary,
    )


CAP_SYS_TIME = 25


def test_the_clock_of_a_node_cannot_be_set_off_in_the_sandbox(node, hosts):
    """Not injected: say why, from the nodes themselves. A sandbox node is a systemd-nspawn
    container on the controller's kernel: CLOCK_REALTIME is one per kernel (Linux time
    namespaces offset CLOCK_MONOTONIC and CLOCK_BOOTTIME only), the container may not set it
    (no CAP_SYS_TIME), and setting it from the host would move every node's and the
    controller's clock together. libfaketime is not installed, and would only fake the
    processes it is preloaded into, not file mtimes (the bytecode staleness check) nor systemd.
    This case checks those premises, so the row turns into a failure the day they change."""
    skews = []
    for i in range(NODES):
        out = node.on(i).sh("date +%s.%N; grep CapBnd /proc/1/status").split()
        skews.append(abs(float(out[0]) - time.time()))
        bounding = int(out[-1], 16)
        assert not bounding & (1 << CAP_SYS_TIME), f"{hosts[i]} may set the clock: {out}"
    assert max(skews) < 2.0, skews
    # the deploy lock's age: taken_at_epoch and `now` both from the clock where it runs (the node)
    lock = (REPO / "plugins/module_utils/deploy_lock.py").read_text()
    assert '"taken_at_epoch": now' in lock and "now = time.time() if now is None" in lock
    record(
        "clock-off",
        None,
        "**NOT INJECTED**: the nodes are systemd-nspawn containers on the controller's kernel, "
        f"one CLOCK_REALTIME for all (measured node-controller skew <= {max(skews) * 1000:.0f} "
        "ms); their PID 1 lacks CAP_SYS_TIME; time namespaces cannot offset the real-time "
        "clock; libfaketime is not installed and would not move file mtimes nor systemd",
        "what the toolkit reads of a node's clock: the deploy lock's age (written and read on "
        "the node's own clock, so a node-controller skew does not change it) and the pyc "
        "headers against source mtimes (both the node's clock); needs a VM or a real node",
    )


def test_a_second_operator_is_refused_while_a_deploy_runs(node, ids, hosts):
    before = [node.on(i).snapshot() for i in range(NODES)]
    canary = node.on(0)

    def two_operators():
        first = node.start(extra=B)
        second = None
        try:
            deadline = time.monotonic() + 600
            while not canary.sh(f"test -e {LOCKS}/.deploy.lock && echo held || true").strip():
                if first.poll() is not None:
                    break
                assert time.monotonic() < deadline, "the first deploy never took the lock"
                time.sleep(0.5)
            else:
                second = node(extra=B)
        finally:  # the first run always ends here
            run = node.finish(first)
        assert second is not None, f"the first deploy ended before it took the lock: {run.message}"
        return first.pid, second, run

    (pid, second, run), summary = under_traffic(two_operators, ids["model"])
    assert second.rc == 2, second.message
    assert "REFUSED: another run holds the deploy lock" in second.message, second.message
    assert f"ansible-playbook pid {pid}" in second.message
    assert not second.ran("Build the release")
    assert all(f"{h}: out of rotation" not in second.stdout for h in hosts)
    assert run.rc == 0, run.message
    ids["B"] = first_release_of(run)
    assert ids["B"] != ids["A"]
    state = fleet(node, hosts, ids)
    for i, host in enumerate(hosts):
        node.on(i).serves(ids["B"])
        assert f"{host}: out of rotation (HAProxy vllm/{host} state drain" in run.stdout
        assert f"{host}: back in rotation (HAProxy vllm/{host} state ready)" in run.stdout
    assert wait_in_rotation(hosts, 10) == dict.fromkeys(hosts, "in rotation")
    lost = [node.on(i).nothing_lost(before[i], run) for i in range(NODES)]
    no_request_lost(summary)
    record(
        "second-operator",
        second,
        f"the first deploy (pid {pid}) went on: exit {run.rc} after {run.seconds:.0f} s, "
        f"canary then the other node, each drained and back; {state}",
        f"on each node: {lost[0]}",
        traffic=summary,
    )


def test_the_server_oom_killed_after_readiness(node, ids, hosts):
    """The second node's server, serving B in rotation, gets what the kernel's OOM killer sends:
    SIGKILL to its main process. (A real OOM kill cannot be provoked on a sandbox node: its
    cgroup hierarchy is v1 and read-only, so no MemoryMax can be set below the server's use;
    systemd would say Result=oom-kill on a real node, here Result=signal.)"""
    victim = node.on(1)
    before = victim.snapshot()
    show = (
        "systemctl show -p MainPID,Result,NRestarts,ActiveState,ExecMainCode,ExecMainStatus "
        f"{SERVICE}.service"
    )

    def props() -> dict:
        return dict(line.split("=", 1) for line in victim.sh(show).split())

    first = props()
    assert first["ActiveState"] == "active" and first["MainPID"] != "0", first
    seen: dict = {}

    def oom_kill():
        killed_at = time.monotonic()
        victim.sh(f"sudo -n kill -KILL {first['MainPID']}")
        wait_until(
            lambda: rotation(hosts)[hosts[1]] == "down", 15, "the health check to take it out"
        )
        seen["out_after_s"] = time.monotonic() - killed_at
        seen["killed"] = props()
        wait_until(
            lambda: props()["ActiveState"] == "active" and props()["MainPID"] != first["MainPID"],
            120,
            "systemd's restart",
        )
        seen["restarted_after_s"] = time.monotonic() - killed_at
        seen["restarted"] = props()
        return wait_in_rotation(hosts, 90)

    states, summary = under_traffic(oom_kill, ids["model"])
    state = fleet(node, hosts, ids)
    killed = seen["killed"]
    # killed by SIGKILL (ExecMainCode 2: killed by a signal), systemd restarts it on its own
    assert killed["Result"] == "signal", seen
    assert (killed["ExecMainCode"], killed["ExecMainStatus"]) == ("2", "9"), seen
    assert int(seen["restarted"]["NRestarts"]) == int(first["NRestarts"]) + 1, seen
    assert states == dict.fromkeys(hosts, "in rotation"), states
    for i in range(NODES):
        node.on(i).serves(ids["B"])
    lost = victim.nothing_lost(before)
    # HAProxy redispatches a refused connect to the other node. A request the killed process
    # already held cannot be saved by anyone: a stream it was answering is cut, one it had
    # accepted but not answered comes back as HAProxy's 502 (no L7 retry is configured; seen
    # once in four runs at load 6): at most one of either per client thread.
    refused = [problem for problem in summary["problems"] if problem.startswith("failed:")]
    assert all(problem == "failed: HTTP 502" for problem in refused), summary["problems"]
    assert summary["failed"] + summary["cut"] <= WORKERS, summary["problems"]
    assert summary["completed"] + summary["failed"] + summary["cut"] == summary["sent"], summary
    record(
        "oom-killed",
        None,
        f"systemd: Result=signal (SIGKILL), restarted by itself after "
        f"{seen['restarted_after_s']:.0f} s (RestartSec=30; NRestarts {first['NRestarts']} -> "
        f"{seen['restarted']['NRestarts']}); HAProxy's health check had {hosts[1]} down "
        f"{seen['out_after_s']:.1f} s after the kill; after: {state}",
        f"{hosts[1]}: {lost}",
        cut=(
            f"{summary['cut']} stream(s) cut (running on the killed process)"
            if summary["cut"]
            else "no stream was running on the killed process"
        ),
        traffic=summary,
    )


def test_the_compile_cache_filesystem_full(node, ids, hosts):
    """A full tmpfs at the canary's <cache>/compile (the serving caches copied into it first):
    the new fingerprint's cache cannot be prepared."""
    canary = node.on(0)
    before = [node.on(i).snapshot() for i in range(NODES)]
    compile_dir = f"{CACHE}/compile"
    keep = "/var/tmp/faults-compile-copy"
    canary.sh(
        f"set -e; sudo -n rm -rf {keep}; sudo -n cp -a {compile_dir} {keep}; "
        f"mode=$(sudo -n stat -c %a {compile_dir}); owner=$(sudo -n stat -c %u {compile_dir}); "
        f"group=$(sudo -n stat -c %g {compile_dir}); "
        f"sudo -n mount -t tmpfs -o size=1m,mode=$mode,uid=$owner,gid=$group "
        f"specdeploy-cache-full {compile_dir}; "
        f"sudo -n cp -a {keep}/. {compile_dir}/; "
        f"sudo -n dd if=/dev/zero of={compile_dir}/.fill bs=4k 2>/dev/null || true; "
        f"test $(sudo -n df --output=avail -k {compile_dir} | tail -1) -eq 0"
    )
    try:
        run, summary = under_traffic(lambda: node(extra=C), ids["model"])
    finally:
        canary.sh(f"sudo -n umount {compile_dir}; sudo -n rm -rf {keep}", check=False)
    ids["C"] = first_release_of(run)
    state = fleet(node, hosts, ids)
    assert run.rc == 2, run.message
    assert "No space left on device" in run.message, run.message
    assert "FAILED before the switch" in run.message, run.message
    assert f"release {ids['B']} still serves" in run.message
    assert all(f"{h}: out of rotation" not in run.stdout for h in hosts)  # nothing restarted
    assert canary.manifest(ids["C"])["status"] == "failed"
    assert ids["C"] not in node.on(1).snapshot()["releases"]  # the rollout stopped
    lost = []
    for i in range(NODES):
        node.on(i).serves(ids["B"])
        lost.append(node.on(i).nothing_lost(before[i]))
    assert rotation(hosts) == dict.fromkeys(hosts, "in rotation")
    no_request_lost(summary)
    record(
        "compile-cache-full",
        run,
        f"{state}; release C={ids['C']} failed on {hosts[0]}, never built on {hosts[1]}",
        f"on each node: {lost[0]}",
        traffic=summary,
    )


def test_the_controller_killed_mid_stage_then_the_deploy_rerun(node, ids, hosts):
    """ansible-playbook is killed (SIGKILL, with its SSH connections) while the second stage's
    node is out of rotation for its restart; the operator runs the same deploy again."""
    before = [node.on(i).snapshot() for i in range(NODES)]
    seen: dict = {}

    def kill_then_rerun():
        proc = node.start(extra=C)
        wait_while_deploying(
            proc,
            lambda: rotation(hosts).get(hosts[1]) == "drained",
            "the deploy ended before the second stage's drain",
            "the second stage never drained its node",
            timeout_s=900,
        )
        os.killpg(proc.pid, signal.SIGKILL)  # the whole run and its SSH connections, by its id
        seen["killed"] = node.finish(proc)
        seen["left"] = left_running(proc.args)  # no worker or multiplexer of the killed run
        time.sleep(2)
        seen["rotation"] = rotation(hosts)
        seen["current"] = [node.on(i).current() for i in range(NODES)]
        seen["lock"] = node.on(1).sh(f"test -e {LOCKS}/.deploy.lock && echo held || true")
        return node(extra=C)

    run, summary = under_traffic(kill_then_rerun, ids["model"])
    state = fleet(node, hosts, ids)
    assert seen["killed"].rc == -signal.SIGKILL
    assert not seen["left"], f"processes of the killed run left: {seen['left']}"
    assert seen["rotation"] == {hosts[0]: "in rotation", hosts[1]: "drained"}, seen
    assert seen["lock"].strip() == "held"  # stale now
    assert run.rc == 0, run.message
    assert "broke a stale deploy lock" in run.stdout
    assert first_release_of(run) == ids["C"]
    for i in range(NODES):
        node.on(i).serves(ids["C"])
    assert wait_in_rotation(hosts, 10) == dict.fromkeys(hosts, "in rotation")
    lost = [node.on(i).nothing_lost(before[i], run) for i in range(NODES)]
    no_request_lost(summary)
    record(
        "controller-killed",
        run,
        f"after the kill: {hosts[0]} served C={seen['current'][0]}, {seen['rotation'][hosts[0]]};"
        f" {hosts[1]} `current` {seen['current'][1]}, {seen['rotation'][hosts[1]]}, its lock "
        f"left stale; after the re-run: {state}",
        f"on each node: {lost[0]}",
        killed=f"first run killed (SIGKILL) after {seen['killed'].seconds:.0f} s, "
        f"{hosts[1]} out of rotation for its restart",
        traffic=summary,
    )


SLOW_BOOT = "/etc/systemd/system/ssh.service.d/specdeploy-faults-slow-boot.conf"


def test_a_node_rebooted_mid_deploy_then_the_deploy_rerun(node, ids, hosts):
    """B again (built on both nodes before: no build) while C serves: the canary reboots while
    its new server is up but the node is still out of rotation (readiness and the gates).
    sshd is held back 40 s at boot (as in the gates group), so the node is away as long as a
    real one would be for the run's SSH connections."""
    canary = node.on(0)
    before = [node.on(i).snapshot() for i in range(NODES)]
    first_boot = init_started(canary)
    assert first_boot
    canary.sh(
        f"sudo -n mkdir -p {SLOW_BOOT.rsplit('/', 1)[0]} && printf '[Service]\\n"
        f"ExecStartPre=/bin/sleep 40\\n' | sudo -n tee {SLOW_BOOT} >/dev/null"
    )
    seen: dict = {}

    def reboot_then_rerun():
        try:
            proc = node.start(extra=B)
            wait_while_deploying(
                proc,
                lambda: (
                    rotation(hosts).get(hosts[0]) == "drained"
                    and canary.serving_process_release() == ids["B"]
                ),
                "the deploy ended before the canary's new server ran",
                "the canary's new server never ran",
            )
            canary.sh("sudo -n systemctl reboot", check=False, timeout=30)
            seen["run"] = node.finish(proc)
            seen["rotation"] = rotation(hosts)
            seen["other"] = node.on(1).current()
            wait_until(lambda: init_started(canary) not in ("", first_boot), 240, "the boot")
        finally:
            wait_until(lambda: init_started(canary) != "", 240, "SSH to the node")
            canary.sh(f"sudo -n rm -f {SLOW_BOOT} && sudo -n systemctl daemon-reload")
        wait_until(lambda: canary.service_state() == "active", 90, "the unit after the boot")
        seen["booted"] = (canary.current(), rotation(hosts))
        return node(extra=B)

    rerun, summary = under_traffic(reboot_then_rerun, ids["model"])
    state = fleet(node, hosts, ids)
    run = seen["run"]
    assert run.rc in (2, 4), run.message  # the canary went away under the run
    assert run.stats().get("unreachable") == 1, run.stats()
    # the rollout stopped at the canary: the other node still served C, in rotation
    assert seen["other"] == ids["C"]
    assert f"{hosts[1]}: out of rotation" not in run.stdout
    assert seen["rotation"][hosts[1]] == "in rotation", seen
    # after the boot: the installed unit (B's) serves, and the canary stays out of rotation
    # (HAProxy keeps the drain): it never served unvalidated
    assert seen["booted"][0] == ids["B"], seen
    assert seen["booted"][1][hosts[0]] == "drained", seen
    assert rerun.rc == 0, rerun.message
    for i in range(NODES):
        node.on(i).serves(ids["B"])
    assert wait_in_rotation(hosts, 10) == dict.fromkeys(hosts, "in rotation")
    lost = [node.on(i).nothing_lost(before[i], rerun) for i in range(NODES)]
    no_request_lost(summary)
    record(
        "node-rebooted",
        rerun,
        f"the first run: exit {run.rc} ({hosts[0]} unreachable; {hosts[1]} not touched, served "
        f"C, in rotation); after the boot {hosts[0]} served B, {seen['booted'][1][hosts[0]]}; "
        f"after the re-run: {state}",
        f"on each node: {lost[0]}",
        traffic=summary,
    )


TARGET = "/srv/models/tiny-dsv3"  # the sandbox inventory's specdeploy_model_path
NEW_SHARD = f"{TARGET}/model.safetensors"


def test_model_files_changed_under_the_running_servers(node, ids, hosts):
    """An operator copies new weights into the model's directory (same path) on both nodes
    while they serve, then deploys the same inputs again. The servers hold the old weights in
    memory: without the model files in the release id this is the serving release again, a
    no-op that keeps serving the old weights. Last in the module (it changes the model); the
    shard is removed again when it ends."""
    serving = node.on(0).current()
    assert serving and node.on(1).current() == serving
    same_inputs = B if serving == ids.get("B") else {}
    # a valid safetensors file with no tensors: 8-byte header length, the header, 8-aligned
    header = b'{"__metadata__":{"revision":"2"}}'
    header += b" " * (-len(header) % 8)
    blob = base64.b64encode(len(header).to_bytes(8, "little") + header).decode()
    seen: dict = {}

    def change_then_deploy():
        for i in range(NODES):
            node.on(i).sh(
                f"echo {blob} | base64 -d | sudo -n tee {NEW_SHARD}.tmp >/dev/null && "
                f"sudo -n mv {NEW_SHARD}.tmp {NEW_SHARD}"
            )
        seen["before"] = [node.on(i).snapshot() for i in range(NODES)]
        seen["serving"] = [node.on(i).serves(serving) for i in range(NODES)]
        return node(extra=same_inputs)

    try:
        run, summary = under_traffic(change_then_deploy, ids["model"])
        ids["D"] = first_release_of(run)
        state = fleet(node, hosts, ids)
        assert run.rc == 0, run.message
        assert ids["D"] != serving, "changed model files planned the serving release again"
        for i, host in enumerate(hosts):
            node.on(i).serves(ids["D"])
            manifest = node.on(i).manifest(ids["D"])
            assert manifest["status"] == "active", manifest["status"]
            assert manifest["last_validation"]["status"] == "pass", manifest["last_validation"]
            assert TARGET in manifest["inputs"]["model_files"], manifest["inputs"]
            assert node.on(i).manifest(serving)["status"] != "failed"
            assert f"{host}: out of rotation (HAProxy vllm/{host} state drain" in run.stdout
            assert f"{host}: back in rotation (HAProxy vllm/{host} state ready)" in run.stdout
        assert wait_in_rotation(hosts, 10) == dict.fromkeys(hosts, "in rotation")
        lost = [node.on(i).nothing_lost(seen["before"][i], run) for i in range(NODES)]
        no_request_lost(summary)
        again = node(extra=same_inputs)  # the same files: the same release, nothing to do
        assert again.rc == 0, again.message
        assert first_release_of(again) == ids["D"]
        recaps = (again.report or {}).get("stats", {})
        assert recaps and all(r.get("changed") == 0 for r in recaps.values()), recaps
    finally:
        for i in range(NODES):
            node.on(i).sh(f"sudo -n rm -f {NEW_SHARD} {NEW_SHARD}.tmp", check=False)
    record(
        "model-files-changed",
        run,
        f"the release id moved from {serving} to D={ids['D']} (model_files in its inputs): "
        f"built, validated (gates pass) and switched node by node, each drained and back; "
        f"{state}; the deploy after it: exit {again.rc}, release D again, changed=0 on both",
        f"on each node: {lost[0]}; the old release {serving} kept",
        traffic=summary,
    )


def test_a_disk_error_turns_the_releases_filesystem_read_only_mid_build(node, ids, hosts):
    """ext4 with errors=remount-ro turns a disk error into a read-only file system. Injected as
    a read-only bind mount over the canary's <root>/releases the moment the new release's
    directory appears there (the release is being written): every later write into it fails
    with EROFS, as after the kernel's remount (files already open keep writing, as there)."""
    canary = node.on(0)
    serving = canary.current()
    before = [node.on(i).snapshot() for i in range(NODES)]
    releases = f"{ROOT}/releases"
    seen: dict = {}

    def deploy_then_remount_read_only():
        proc = node.start(extra=E)
        new = wait_while_deploying(
            proc,
            new_release_dirs(canary, releases, before[0]["releases"]),
            "the deploy ended before it wrote a new release",
            "no new release directory appeared",
        )
        canary.sh(
            f"sudo -n mount --bind {releases} {releases} && "
            f"sudo -n mount -o remount,bind,ro {releases}"
        )
        seen["new"] = new[0]
        seen["listing"] = canary.sh(f"sudo -n ls -A {releases}/{new[0]}").split()
        return node.finish(proc)

    try:
        run, summary = under_traffic(deploy_then_remount_read_only, ids["model"])
        seen["ro"] = canary.sh(f"touch {releases}/x 2>&1 || true").strip()
    finally:
        canary.sh(f"sudo -n umount {releases}", check=False)
    ids["E"] = seen["new"]
    state = fleet(node, hosts, ids)
    assert "Read-only file system" in seen["ro"], seen
    assert run.rc == 2, run.message
    assert "\n" not in run.message.strip(), run.message
    assert "Read-only file system" in run.message, run.message
    assert f"{releases}/{ids['E']}" in run.message, run.message
    assert "FAILED before the switch" in run.message, run.message
    assert f"release {serving} still serves" in run.message, run.message
    assert all(f"{h}: out of rotation" not in run.stdout for h in hosts)  # nothing restarted
    assert ids["E"] not in node.on(1).snapshot()["releases"]  # the rollout stopped
    lost = []
    for i in range(NODES):
        node.on(i).serves(serving)
        lost.append(node.on(i).nothing_lost(before[i]))
    assert rotation(hosts) == dict.fromkeys(hosts, "in rotation")
    no_request_lost(summary)
    record(
        "releases-read-only",
        run,
        f"{state}; release E={ids['E']} stopped on {hosts[0]} (written so far: "
        f"{', '.join(seen['listing']) or 'nothing'}), never built on {hosts[1]}",
        f"on each node: {lost[0]}",
        traffic=summary,
    )


class NetworkCut:
    """One sandbox node cut off the network: an nftables table of this sandbox instance's own,
    whose input chain drops every packet to the node's address from anywhere else and every
    packet from it to anywhere else (the nodes share the host's network namespace, so that is
    SSH from the controller, HAProxy's checks and requests, the node's answers; the node still
    reaches itself). `lift` deletes the table; so does the case's `finally`."""

    def __init__(self, address: str) -> None:
        assert address.startswith("127."), address  # loopback only, ever
        self.address = address
        self.table = f"specdeploy_fault_{instance()}"

    def nft(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(
            ["nft", *args], capture_output=True, text=True, timeout=30, check=False
        )
        if check and result.returncode != 0:
            raise AssertionError(f"nft {' '.join(args)}: {result.stderr.strip()}")
        return result

    def prepare(self) -> None:
        """The table and its chain, no rule yet; a visible skip where nftables cannot be used
        (no nft, or no CAP_NET_ADMIN), never a failure of the environment."""
        if shutil.which("nft") is None:
            pytest.skip("nft is not installed (Debian package nftables; `make setup`)")
        self.lift()  # a table an interrupted run left
        made = self.nft("add", "table", "inet", self.table, check=False)
        if made.returncode != 0:
            pytest.skip(f"nft cannot create a table here (CAP_NET_ADMIN?): {made.stderr.strip()}")
        self.nft(
            "add", "chain", "inet", self.table, "input",
            "{ type filter hook input priority 0; policy accept; }",
        )  # fmt: skip

    def cut(self) -> None:
        node = self.address
        for rule in (f"ip daddr {node} ip saddr != {node}", f"ip saddr {node} ip daddr != {node}"):
            self.nft("add", "rule", "inet", self.table, "input", *rule.split(), "drop")

    def lift(self) -> None:
        if self.nft("list", "table", "inet", self.table, check=False).returncode == 0:
            self.nft("delete", "table", "inet", self.table)


def unreachable_hosts(run) -> dict[str, str]:
    """host -> the message of its (last) unreachable result, from the run's JSON report."""
    found = {}
    for play in (run.report or {}).get("plays", []):
        for task in play["tasks"]:
            for host, result in task["hosts"].items():
                if result.get("unreachable"):
                    # a loop task's own msg is "All items completed": the cause is its item's
                    items = [i for i in result.get("results") or [] if i.get("unreachable")]
                    found[host] = str((items[-1] if items else result).get("msg", ""))
    return found


CUT_HELD_S = 75  # longer than the client's read timeout (60 s): what was in flight on it is cut


def test_a_node_cut_off_the_network_mid_stage_then_the_deploy_rerun(node, ids, hosts):
    """The canary is cut off the network (nftables drops everything to and from its address)
    while its stage builds the new release and it still serves in rotation: the moment the new
    release's directory appears there. The cut is held until the run has ended and at least
    CUT_HELD_S, then lifted; the operator runs the same deploy again."""
    canary, other = node.on(0), node.on(1)
    address = node.cluster.nodes[0].address
    cut = NetworkCut(address)
    cut.prepare()
    serving = canary.current()
    assert serving and other.current() == serving
    before = [node.on(i).snapshot() for i in range(NODES)]
    releases = f"{ROOT}/releases"
    seen: dict = {}

    def cut_then_rerun():
        proc = node.start(extra=F)
        new = wait_while_deploying(
            proc,
            new_release_dirs(canary, releases, before[0]["releases"]),
            "the deploy ended before it wrote a new release",
            "no new release directory appeared",
        )
        cut.cut()
        cut_at = time.monotonic()
        seen["new"] = new[0]
        seen["rotation_at_cut"] = rotation(hosts)
        wait_until(lambda: rotation(hosts)[hosts[0]] == "down", 15, "the health check")
        seen["out_after_s"] = time.monotonic() - cut_at
        seen["run"] = node.finish(proc)
        seen["exit_after_s"] = time.monotonic() - cut_at
        seen["rotation"] = rotation(hosts)
        seen["other"] = other.current()
        seen["other_releases"] = other.snapshot()["releases"]
        time.sleep(max(0.0, CUT_HELD_S - (time.monotonic() - cut_at)))
        cut.lift()
        seen["held_s"] = time.monotonic() - cut_at
        seen["back"] = wait_in_rotation(hosts, 30)
        seen["canary"] = (canary.current(), canary.serving_process_release())
        return node(extra=F)

    try:
        rerun, summary = under_traffic(cut_then_rerun, ids["model"])
    finally:
        cut.lift()
    ids["F"] = seen["new"]
    state = fleet(node, hosts, ids)
    run = seen["run"]
    # the canary was serving, in rotation, when it was cut; HAProxy's checks took it out
    assert seen["rotation_at_cut"] == dict.fromkeys(hosts, "in rotation"), seen
    assert seen["out_after_s"] < 10, seen
    # the run stops, in bounded time (SSH: ServerAliveInterval 15 x ServerAliveCountMax 3 on
    # the open connection, ConnectTimeout 10 on a new one), naming the node it lost
    assert run.rc in (2, 4), run.message
    assert seen["exit_after_s"] < 180, seen
    lost_hosts = unreachable_hosts(run)
    # (the cause Ansible gives depends on the step the cut lands in: data not sent to the
    # address, a become prompt timed out, ...; the host is what the operator reads)
    assert list(lost_hosts) == [hosts[0]], lost_hosts
    # ... and the toolkit says what that leaves, after the recap (plugins/callback/unreachable)
    lost_said = run.stdout[run.stdout.find(f"specdeploy: {hosts[0]} became UNREACHABLE") :]
    assert lost_said.startswith(f"specdeploy: {hosts[0]} became UNREACHABLE"), run.stdout[-3000:]
    assert "the rollout stopped at this node's stage" in lost_said, lost_said
    recap = (run.report or {}).get("stats", {})
    assert recap[hosts[1]]["unreachable"] == 0 and recap[hosts[1]]["failures"] == 0, recap
    # the rollout stopped: the other node was not touched, served the old release, in rotation
    assert f"{hosts[1]}: out of rotation" not in run.stdout
    assert f"{hosts[0]}: out of rotation" not in run.stdout  # cut before any drain
    assert seen["other"] == serving, seen
    assert ids["F"] not in seen["other_releases"], seen
    assert seen["rotation"] == {hosts[0]: "down", hosts[1]: "in rotation"}, seen
    # the cut lifted: the canary's server (never stopped) is back in rotation on the old release
    assert seen["back"] == dict.fromkeys(hosts, "in rotation"), seen
    assert seen["canary"] == (serving, serving), seen
    # the re-run completes the rollout
    assert rerun.rc == 0, rerun.message
    assert first_release_of(rerun) == ids["F"]
    for i in range(NODES):
        node.on(i).serves(ids["F"])
    assert wait_in_rotation(hosts, 10) == dict.fromkeys(hosts, "in rotation")
    lost = [node.on(i).nothing_lost(before[i], rerun) for i in range(NODES)]
    # The fleet kept serving: a request HAProxy sent to the cut node before its checks took it
    # out is refused at connect time and redispatched. A request the cut node already held
    # cannot be saved by anyone (no L7 retry): it ends at the client's read timeout (60 s),
    # as `failed` if no byte of the answer had come, `cut` if the stream had begun; at most one
    # per client thread.
    assert summary["sent_during"] >= 5, summary
    assert all("timed out" in problem for problem in summary["problems"]), summary["problems"]
    assert summary["failed"] + summary["cut"] <= WORKERS, summary["problems"]
    assert summary["completed"] + summary["failed"] + summary["cut"] == summary["sent"], summary
    stale = "broke a stale deploy lock" in rerun.stdout
    record(
        "network-cut",
        rerun,
        f"the first run: exit {run.rc} {seen['exit_after_s']:.0f} s after the cut "
        f"({hosts[0]} unreachable: “{lost_hosts[hosts[0]][:160]}”; {hosts[1]} not touched, "
        f"served {serving}, in rotation); HAProxy's checks had {hosts[0]} down "
        f"{seen['out_after_s']:.1f} s after the cut; the cut lifted after "
        f"{seen['held_s']:.0f} s: {hosts[0]} back in rotation on {serving} (its server never "
        f"stopped); the re-run{' broke the stale deploy lock and' if stale else ''} completed "
        f"the rollout: {state}",
        f"on each node: {lost[0]}",
        cut=(
            f"{summary['failed'] + summary['cut']} request(s) in flight on {hosts[0]} at the "
            "cut ended at the client's 60 s read timeout"
            if summary["failed"] + summary["cut"]
            else f"no request was in flight on {hosts[0]} at the cut"
        ),
        traffic=summary,
    )


LONG_TOKENS = 14000  # one streamed request of about 15 s on the stand-in


def test_ctrl_c_mid_stage_leaves_every_node_serving_in_rotation(node, ids, hosts):
    """The operator presses Ctrl-C (SIGINT to `make rollback`'s process group) while the second
    stage's node is out of rotation for its restart: drained, its server still running, a long
    request still in flight on it (sent to the node directly, back to back, so the drain waits).
    `make` then runs playbooks/interrupted.yml with the run's own EXTRA: before, it ran without
    it, read the default release root instead of the run's, found nothing and left the second
    node drained, `current` switched to a release its server was not running."""
    first, second = node.on(0), node.on(1)
    serving = first.current()
    assert serving and second.current() == serving
    before = [node.on(i).snapshot() for i in range(NODES)]
    address = node.cluster.nodes[1].address
    long_requests: list[tuple[str, str]] = []
    pinning = threading.Event()
    seen: dict = {}

    def pin() -> None:  # long requests on the second node, bypassing the balancer
        while pinning.is_set():
            long_requests.append(
                livetraffic.one_request(
                    f"http://{address}:{PORT}", ids["model"], max_tokens=LONG_TOKENS
                )
            )

    def interrupt():
        pinning.set()
        pinner = threading.Thread(target=pin, daemon=True)
        pinner.start()
        proc = node.start_make("rollback")
        try:
            wait_while_deploying(
                proc,
                lambda: rotation(hosts).get(hosts[1]) == "drained",
                "the rollback ended before the second stage's drain",
                "the second stage never drained its node",
            )
            seen["first"] = first.current()
            time.sleep(1)  # inside the drain's wait for the long request
            seen["second"] = second.current()
            os.killpg(proc.pid, signal.SIGINT)
        finally:
            pinning.clear()
        run = node.finish(proc)
        pinner.join(timeout=60)
        return run

    run, summary = under_traffic(interrupt, ids["model"])
    state = fleet(node, hosts, ids)
    out = run.stdout
    assert run.rc != 0
    assert "User interrupted execution" in out, out[-3000:]
    assert "the run was interrupted; ending what it left on each node" in out, out[-3000:]
    cleanup = out[out.index("the run was interrupted") :]
    # the first stage had rolled back and was back in rotation
    back_to = seen["first"]
    assert back_to != serving, seen
    assert first.current() == back_to
    first.serves(back_to)
    # the second: its server was never stopped; the clean-up named its state and left it on
    # the release that server runs (`current` had been switched before the restart it never
    # got: rolled back to it; or kept, when the switch had not come yet)
    said = [m for m in (f"rolled-back: {hosts[1]}:", f"kept: {hosts[1]}:") if m in cleanup]
    assert said, cleanup[-4000:]
    assert second.current() == serving, (seen, cleanup[-4000:])
    second.serves(serving)
    assert wait_in_rotation(hosts, 10) == dict.fromkeys(hosts, "in rotation"), cleanup[-4000:]
    assert second.sh(f"test -e {ROOT}/.out-of-rotation && echo left || true").strip() == ""
    for i in range(NODES):
        assert node.on(i).sh(f"ls -A {LOCKS} 2>/dev/null || true").strip() == ""
    # the long requests on the drained node were never cut: its server was not stopped
    assert long_requests and all(kind == "completed" for kind, _ in long_requests), long_requests
    lost = [node.on(i).nothing_lost(before[i], None) for i in range(NODES)]
    no_request_lost(summary)
    record(
        "ctrl-c-mid-stage",
        None,
        f"exit {run.rc} after {run.seconds:.0f} s, Ctrl-C while {hosts[1]} was drained and "
        f"waiting for its long request (`current` then {seen['second']}); `make` ended the run: "
        f"{hosts[0]} serves {back_to} (its stage had completed), {hosts[1]} "
        f"{said[0].split(':')[0]} on {serving}, the release its server never stopped running, "
        f"back in rotation; {len(long_requests)} long request(s) on {hosts[1]} all completed; "
        f"{state}",
        f"on each node: {lost[0]}",
        traffic=summary,
    )


def test_a_validated_node_an_interrupted_run_left_drained_goes_back_in_rotation(node, hosts):
    """An interrupted run that had taken the second node out of rotation after its release was
    validated (the last steps of a stage: the record, then the undrain): the node keeps its
    release, and playbooks/interrupted.yml puts it back once it answers its smoke check.
    Played without a run to interrupt: HAProxy's drain, drain.yml's note and the lock of a
    run that is gone, as the dead run leaves them."""
    second = node.on(1)
    serving = second.current()
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid no run has any more
    owner = {
        "token": "0" * 32,
        "controller": socket.gethostname(),
        "pid": dead.pid,
        "pid_starttime": 1,
        "user": "root",
        "purpose": "deploy",
    }
    second.sh(
        f"sudo -n mkdir -p {LOCKS} && echo {shlex.quote(json.dumps(owner))} "
        f"| sudo -n tee {LOCKS}/.deploy.lock >/dev/null && echo '{{}}' "
        f"| sudo -n tee {ROOT}/.out-of-rotation >/dev/null"
    )
    drain.haproxy_command(str(balancer.socket_path()), f"set server vllm/{hosts[1]} state drain")
    assert rotation(hosts)[hosts[1]] == "drained"
    run = node("playbooks/interrupted.yml")
    assert run.rc == 0, run.message
    assert f"kept: {hosts[1]}: the interrupted deploy left release {serving} current" in run.stdout
    assert wait_in_rotation(hosts, 10) == dict.fromkeys(hosts, "in rotation"), run.stdout[-3000:]
    assert second.sh(f"test -e {ROOT}/.out-of-rotation && echo left || true").strip() == ""
    assert second.sh(f"ls -A {LOCKS} 2>/dev/null || true").strip() == ""
    assert second.current() == serving
