"""Fault group `build`: build faults (a drifted patch target, a full disk), input faults the
preflight refuses, an SSH connection dropped mid-deploy, and rollbacks along the ledger
(forward again, refusals). See faultlib for the harness."""

from __future__ import annotations

import os
import shlex
import signal
import time

import pytest
from faultlib import (
    C_PROFILE,
    DRIFT_PROFILE,
    LOCKS,
    REPO,
    ROOT,
    assert_is_release,
    deploy_base,
    first_release_of,
    record,
)
from testbed.processes import left_running

GROUP = "build"
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(2400)]


def test_base_release_deploys_and_serves(node, ids):
    deploy_base(node, ids)


def test_patch_target_drifted_is_refused_before_the_switch(node, ids):
    """A vLLM build whose patched file was hand-edited (a local hotfix) is in the wheelhouse."""
    drift = "/srv/wheelhouse-drift"
    node.sh(
        f"sudo -n mkdir -p {drift} && cd {drift} && "
        "for w in /srv/wheelhouse/*.whl; do case $w in */vllm-*) ;; "
        "*) sudo -n ln -sf $w . ;; esac; done && sudo -n cp /srv/wheelhouse/vllm-0.16.0-*.whl . && "
        "sudo -n python3 - <<'EOF'\n"
        # A rebuilt wheel, not a second zip entry of the same name: which of two entries lands
        # is the installer's choice (pip took the later one, uv's parallel unpack either).
        # RECORD names the new hash; the entries are stored, not compressed again (seconds).
        "import base64, glob, hashlib, os, zipfile\n"
        "wheel = glob.glob('vllm-0.16.0-*.whl')[0]\n"
        "target = 'vllm/config/speculative.py'\n"
        "src = zipfile.ZipFile(wheel)\n"
        "text = src.read(target) + b'\\n# local hotfix by hand\\n'\n"
        "digest = base64.urlsafe_b64encode(hashlib.sha256(text).digest()).rstrip(b'=').decode()\n"
        "with zipfile.ZipFile(wheel + '.new', 'w', zipfile.ZIP_STORED) as out:\n"
        "    for info in src.infolist():\n"
        "        data = src.read(info)\n"
        "        if info.filename == target:\n"
        "            data = text\n"
        "        elif info.filename.endswith('.dist-info/RECORD'):\n"
        "            rows = data.decode().splitlines()\n"
        "            new_row = f'{target},sha256={digest},{len(text)}'\n"
        "            rows = [new_row if r.startswith(target + ',') else r for r in rows]\n"
        "            data = ('\\n'.join(rows) + '\\n').encode()\n"
        "        info.compress_type = zipfile.ZIP_STORED\n"
        "        out.writestr(info, data)\n"
        "os.replace(wheel + '.new', wheel)\n"
        "EOF",
        timeout=300,
    )
    before = node.snapshot()
    run = node(
        extra={"specdeploy_standin_profile": DRIFT_PROFILE, "specdeploy_vllm_wheelhouse": drift}
    )
    ids["DRIFT"] = first_release_of(run)
    assert run.rc == 2, run.message
    assert "FAILED before the switch" in run.message
    assert "drift" in run.message.lower() and "config/speculative.py" in run.message
    assert f"release {ids['A']} still serves and answered its smoke check" in run.message
    assert not run.ran("Activate the release and wait")
    node.serves(ids["A"])
    manifest = node.manifest(ids["DRIFT"])
    assert manifest["status"] == "failed" and manifest["failure_stage"] == "build"
    record(
        "patch-drift",
        run,
        "release A serves and answers",
        node.nothing_lost(before),
    )


def test_disk_full_on_the_release_root(node, ids):
    """An 8 MB tmpfs where the release is built: the vLLM install runs out of space (the
    sandbox's vLLM wheel unpacks to 21 MB without its kernels: testbed.sandbox.node_wheelhouse)."""
    target = f"{ROOT}/releases/{ids['DRIFT']}"
    node.sh(f"sudo -n mount -t tmpfs -o size=8m specdeploy-full {target}")
    try:
        before = node.snapshot()
        run = node(extra={"specdeploy_standin_profile": DRIFT_PROFILE})
        assert first_release_of(run) == ids["DRIFT"]
        assert run.rc == 2, run.message
        assert "No space left on device" in run.message, run.message
        assert "FAILED before the switch" in run.message
        assert f"release {ids['A']} still serves and answered its smoke check" in run.message
        node.serves(ids["A"])
        record(
            "disk-full",
            run,
            "release A serves and answers",
            node.nothing_lost(before),
        )
    finally:
        node.sh(f"sudo -n umount {target}", check=False)


@pytest.mark.parametrize(
    ("key", "extra", "message"),
    [
        ("unsupported-version", {"specdeploy_vllm_version": "0.14.0"}, "is not supported"),
        (
            "unknown-speculative-key",
            {
                "specdeploy_speculative_config": {
                    "method": "eagle3",
                    "model": "/srv/models/tiny-dsv3-eagle3",
                    "num_speculative_tokens": 3,
                    "draft_model_typo": 2,
                }
            },
            "does not accept: draft_model_typo",
        ),
        (
            "zero-speculative-tokens",
            {
                "specdeploy_speculative_config": {
                    "method": "eagle3",
                    "model": "/srv/models/tiny-dsv3-eagle3",
                    "num_speculative_tokens": 0,
                }
            },
            "an integer > 0",
        ),
        (
            "incompatible-drafter",
            {"specdeploy_drafter_path": "/srv/models/faults-wrong-drafter"},
            "does not fit the target",
        ),
    ],
)
def test_input_faults_are_refused_before_anything_changes(node, ids, key, extra, message):
    if "drafter_path" in str(extra):
        config = REPO / "tests/fixtures/drafters/eagle3-llama3.1-8b-yuhuili-like/config.json"
        node.sh(
            "sudo -n mkdir -p /srv/models/faults-wrong-drafter && "
            f"echo {shlex.quote(config.read_text())} | "
            "sudo -n tee /srv/models/faults-wrong-drafter/config.json >/dev/null"
        )
        extra = {
            **extra,
            "specdeploy_speculative_config": {
                "method": "eagle3",
                "model": "/srv/models/faults-wrong-drafter",
                "num_speculative_tokens": 3,
            },
        }
    before = node.snapshot()
    run = node(extra=extra)
    assert run.rc == 2
    assert message in run.message, run.message
    assert not run.ran("deploy lock")  # stopped in the first play, before the lock
    assert node.snapshot()["releases"] == before["releases"]
    node.serves(ids["A"])
    record(
        key,
        run,
        "release A serves and answers",
        node.nothing_lost(before),
    )


def test_ssh_dropped_mid_deploy_then_rerun_converges(node, ids):
    """ansible-playbook is killed during the vLLM install; the re-run converges."""
    before = node.snapshot()
    proc = node.start(extra={"specdeploy_standin_profile": C_PROFILE})
    deadline = time.monotonic() + 600
    probe = f"ls -d {ROOT}/releases/*/venv/lib/python3*/site-packages/vllm 2>/dev/null || true"
    known = set(node.sh(probe).split())
    while not (set(node.sh(probe).split()) - known):
        assert proc.poll() is None, "the deploy ended before the vLLM install"
        assert time.monotonic() < deadline
        time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole run and its SSH connections, by its id
    killed = node.finish(proc)
    assert killed.rc == -signal.SIGKILL
    assert not (left := left_running(proc.args)), f"processes of the killed run left: {left}"
    half = [r for r in node.sh(f"ls {ROOT}/releases").split() if r not in before["releases"]]
    assert len(half) == 1
    ids["C"] = half[0]
    assert node.manifest(ids["C"])["status"] == "building"  # never selectable
    assert node.sh(f"test -e {LOCKS}/.deploy.lock && echo held").strip() == "held"  # stale now
    node.serves(ids["A"])  # no half-built release selected

    run = node(extra={"specdeploy_standin_profile": C_PROFILE})
    assert run.rc == 0, run.message
    assert "broke a stale deploy lock" in run.stdout  # said to the operator
    planned = first_release_of(run)
    if planned == ids["C"]:
        history = node.manifest(ids["C"])["history"]
        assert history[0]["previous_status"] == "building"  # rebuilt from scratch
    else:  # the toolkit was edited meanwhile (a shared tree): another id, the half one unused
        assert node.manifest(ids["C"])["status"] == "building"
        ids["C"] = planned
    node.serves(ids["C"])
    assert_is_release(node, ids["C"])
    record(
        "ssh-dropped",
        run,
        f"during: A still served; after the re-run: release C={ids['C']} serves and answers",
        node.nothing_lost(before, run),
        killed="first run killed (SIGKILL) while pip installed vLLM; lock left stale",
    )


def test_rollback_and_roll_forward_follow_the_ledger(node, ids):
    before = node.snapshot()
    back = node.make("rollback")
    assert back.rc == 0, back.message
    node.serves(ids["A"])
    assert_is_release(node, ids["A"])
    forward = node.make("rollback")
    assert forward.rc == 0, forward.message
    node.serves(ids["C"])
    assert_is_release(node, ids["C"])
    tail = node.ledger()[-3:]
    assert [e["release"] for e in tail] == [ids["C"], ids["A"], ids["C"]]
    assert [e["action"] for e in tail[1:]] == ["rollback", "rollback"]
    record(
        "rollback-and-forward",
        forward,
        "A served after the first, C serves after the second and answers",
        node.nothing_lost(before, forward),
    )

    ledger = node.ledger()
    # a release that cannot be activated (failed, or half-built), still on the node
    unusable = node.sh(
        'sudo -n python3 -c "import glob, json\n'
        f"for p in sorted(glob.glob('{ROOT}/releases/*/manifest.json')):\n"
        "    m = json.load(open(p))\n"
        "    if m['status'] in ('failed', 'building'): print(m['release_id'], m['status'])\""
    ).split()
    assert unusable, "no failed or half-built release left on the node"
    bad, bad_status = unusable[:2]
    for target, words in ((bad, f"is '{bad_status}'"), ("0.16.0-000000000000", "does not exist")):
        refused = node.make("rollback", TO=target)
        assert refused.rc != 0 and words in refused.message, refused.message
        assert "Nothing was changed" in refused.message
        assert node.ledger() == ledger
    node.serves(ids["C"])
    record(
        "rollback-refused",
        refused,
        "release C serves and answers",
        "ledger unchanged",
    )
