"""deploy.yml on a sandbox node (issue 4, Tests): one node and one deploy for the whole module.

The read-only assertions share the first deploy; then a second deploy (changed=0, no restart),
check mode on an unchanged and on a changed input, and every preflight refusal, each of which
must leave the node exactly as it was (listing of the release root, unit and secrets before and
after) and stop in the first play.
"""

from __future__ import annotations

import calendar
import json
import os
import re
import shlex
import signal
import subprocess
import time

import pytest
from test_deploy_support import (
    FIXTURES,
    REPO,
    ROOT,
    UNIT,
    assert_unchanged,
    copy_toolkit,
    exec_start_argv,
    flag_value,
    stage_models,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

# The operator's inventory mapping: the unit must carry exactly this as --speculative-config.
SPECULATIVE = {
    "method": "eagle3",
    "model": "/srv/models/tiny-dsv3-eagle3",
    "num_speculative_tokens": 3,
    "draft_tensor_parallel_size": 1,
}
INPUTS = {"specdeploy_speculative_config": SPECULATIVE}
BAD_DRAFTER = "/srv/models/test-drafter-wrong-hidden"
OTHER_TARGET_DRAFTER = "/srv/models/test-drafter-other-target"
FOREIGN_PORT = 8431


@pytest.fixture(scope="module")
def first(play, node):
    """The module's one deploy; everything read-only below looks at its result."""
    stage_models(play)
    run = play(extra=INPUTS)
    assert run.returncode == 0, run.tail()
    print(f"first deploy: {run.seconds:.0f} s, recap {run.recap(play.host)}")
    return run


def test_check_diff_runs_through_on_a_fresh_node(play, node):
    """Issue 28: `make deploy EXTRA='--check --diff'` on a fresh node, where the quick-start
    says to run it, failed with getpwnam(): name not found: 'vllm' (the service user is made
    by an earlier task of the same run, which check mode only reports). It runs through,
    shows what it would create, and creates nothing."""
    stage_models(play)
    assert node.run("getent passwd vllm").returncode != 0, "not a fresh node"
    listing = node.listing()
    run = play("deploy.yml", "--check", "--diff", extra=INPUTS)
    assert run.returncode == 0, run.failure_message() + run.tail()
    assert "getpwnam" not in run.stdout
    assert run.recap(play.host)["failed"] == 0 and run.recap(play.host)["changed"] > 0
    assert "/var/cache/specdeploy" in run.stdout  # the layout it would create, in the diff
    assert node.run("getent passwd vllm").returncode != 0
    assert_unchanged(listing, node.listing())


def test_unit_is_active_and_current_points_at_the_release(first, node):
    release = node.current_release()
    assert node.sh(f"readlink {ROOT}/current").strip() == f"releases/{release}"
    assert node.sh(f"test -d {ROOT}/releases/{release}/venv && echo yes").strip() == "yes"
    state = node.service("ActiveState", "SubState", "UnitFileState", "User", "FragmentPath")
    assert state["ActiveState"] == "active" and state["SubState"] == "running", state
    assert state["UnitFileState"] == "enabled" and state["FragmentPath"] == UNIT, state
    # The installed unit is the release's own rendered one.
    installed = node.sh(f"cat {UNIT}")
    assert installed == node.sh(f"cat {ROOT}/releases/{release}/config/vllm.service")
    assert f"{ROOT}/releases/{release}/" in installed


def test_manifest_records_the_release(first, node):
    release = node.current_release()
    manifest = node.manifest()
    assert manifest["release_id"] == release
    assert release.startswith("0.16.0-")
    assert manifest["vllm_version"] == "0.16.0"
    assert manifest["status"] == "active"
    patches = manifest["patches"]
    assert patches["state"] == "applied" and patches["verified"] is True, patches
    assert patches["series"] and all(f["state"] == "applied" for f in patches["files"])
    assert manifest["inputs"]["speculative_config"] == SPECULATIVE
    starts = manifest["starts"]
    assert starts, manifest
    last = starts[-1]
    assert isinstance(last["stop_to_ready_s"], (int, float)) and 0 < last["stop_to_ready_s"] < 120
    names = [b["name"] for b in last["backends"]]
    assert "TRITON_MLA" in names, last["backends"]
    # The target chose TRITON_MLA by itself: the unit forces no backend (the drafter is llama).
    assert all(not b["forced"] for b in last["backends"]), last["backends"]


def test_patch_status_on_the_installed_vllm_says_applied(first, node):
    release_dir = f"{ROOT}/releases/{node.current_release()}"
    out = node.sh(
        f"sudo -n env PYTHONDONTWRITEBYTECODE=1 PYTHONPATH={release_dir}/toolkit "
        f"{release_dir}/venv/bin/python -m specdeploy.node.patching.patches status --json"
    )
    status = json.loads(out)
    assert status["state"] == "applied", status
    assert status["version"] == "0.16.0"
    assert status["site_packages"].startswith(f"{release_dir}/venv/")


# The service user cannot write __pycache__ (ProtectSystem=strict): a source without current
# bytecode is compiled at every start (25-32 s of a warm vLLM start on an H200).
BYTECODE_CHECK = """
import importlib.util, json, os, sys
out = {}
for path in sys.argv[1:]:
    st = os.stat(path)
    try:
        head = open(importlib.util.cache_from_source(path), "rb").read(16)
    except OSError:
        out[path] = "no bytecode"
        continue
    ok = (head[:4] == importlib.util.MAGIC_NUMBER
          and int.from_bytes(head[8:12], "little") == int(st.st_mtime) & 0xFFFFFFFF
          and int.from_bytes(head[12:16], "little") == st.st_size & 0xFFFFFFFF)
    out[path] = "current" if ok else "stale"
print(json.dumps(out))
"""


def test_the_release_venv_has_current_bytecode_for_the_patched_and_plain_files(first, node):
    venv = f"{ROOT}/releases/{node.current_release()}/venv"
    site = node.sh(f"ls -d {venv}/lib/python3*/site-packages").strip()
    files = [
        f"{site}/vllm/model_executor/models/deepseek_v2.py",  # replaced by the patch step
        f"{site}/vllm/entrypoints/openai/api_server.py",
        f"{site}/yaml/__init__.py",  # the toolkit's own node needs
    ]
    out = node.sh(
        f"sudo -n -u vllm {venv}/bin/python -c {shlex.quote(BYTECODE_CHECK)} " + " ".join(files)
    )
    assert json.loads(out) == dict.fromkeys(files, "current"), out


def test_cache_directories_exist_and_belong_to_the_service_user(first, node):
    release_dir = f"{ROOT}/releases/{node.current_release()}"
    env = dict(
        line.split("=", 1)
        for line in node.sh(f"cat {release_dir}/config/vllm.env").splitlines()
        if "=" in line and not line.startswith("#")
    )
    names = [
        "VLLM_CACHE_ROOT",
        "TORCHINDUCTOR_CACHE_DIR",
        "TRITON_CACHE_DIR",
        "FLASHINFER_WORKSPACE_BASE",
        "DG_JIT_CACHE_DIR",
        "HOME",
    ]
    paths = [env[n] for n in names]
    assert all(p.startswith("/var/cache/specdeploy/compile/") for p in paths), env
    out = node.sh("sudo -n stat -c '%U %F %n' " + " ".join(shlex.quote(p) for p in paths))
    for line in out.splitlines():
        owner, kind = line.split(" ", 1)[0], line.split(" ", 1)[1]
        assert owner == "vllm" and kind.startswith("directory"), line


def test_exec_start_carries_the_inventory_speculative_config(first, node, play):
    release = node.current_release()
    argv = exec_start_argv(node.sh(f"cat {UNIT}"))
    assert argv[0] == f"{ROOT}/releases/{release}/venv/bin/python"
    assert "serve" in argv
    assert json.loads(flag_value(argv, "--speculative-config")) == SPECULATIVE
    assert flag_value(argv, "--served-model-name") == "tiny-dsv3"
    assert flag_value(argv, "--host") == play.address
    assert flag_value(argv, "--port") == "8000"
    assert flag_value(argv, "--tensor-parallel-size") == "8"
    assert "--attention-backend" not in argv
    # systemd parsed the same words (its own view of the unit).
    shown = node.service("ExecStart")["ExecStart"]
    assert f"path={argv[0]} ;" in shown
    assert "--speculative-config " + flag_value(argv, "--speculative-config") in shown


def test_systemd_analyze_verify_passes_on_the_rendered_unit(first, node):
    release = node.current_release()
    for path in (UNIT, f"{ROOT}/releases/{release}/config/vllm.service"):
        result = node.run(f"sudo -n systemd-analyze verify {path}")
        assert result.returncode == 0, result.stderr


def test_second_run_changes_nothing_and_restarts_nothing(first, play, node):
    before = node.service("MainPID", "ActiveEnterTimestamp", "ExecMainStartTimestamp")
    listing = node.listing()
    run = play(extra=INPUTS)
    assert run.returncode == 0, run.tail()
    recap = run.recap(play.host)
    assert recap["changed"] == 0 and recap["failed"] == 0, f"{recap}: {run.changed_tasks()}"
    after = node.service("MainPID", "ActiveEnterTimestamp", "ExecMainStartTimestamp")
    assert after == before
    assert int(after["MainPID"]) > 0
    assert_unchanged(listing, node.listing())
    print(f"no-op deploy: {run.seconds:.0f} s")


def test_check_diff_runs_through_on_an_unchanged_node(first, play, node):
    listing = node.listing()
    before = node.service("MainPID", "ActiveEnterTimestamp")
    run = play("deploy.yml", "--check", "--diff", extra=INPUTS)
    assert run.returncode == 0, run.tail()
    assert run.recap(play.host)["failed"] == 0
    assert_unchanged(listing, node.listing())
    assert node.service("MainPID", "ActiveEnterTimestamp") == before


def test_check_diff_shows_a_changed_input_and_changes_nothing(first, play, node):
    listing = node.listing()
    before = node.service("MainPID", "ActiveEnterTimestamp")
    changed = dict(SPECULATIVE, num_speculative_tokens=4)
    run = play("deploy.yml", "--check", "--diff", extra={"specdeploy_speculative_config": changed})
    assert run.returncode == 0, run.tail()
    recap = run.recap(play.host)
    assert recap["failed"] == 0 and recap["changed"] > 0, recap
    # The diff of the rendered unit shows the new speculative config on its ExecStart line.
    added = [line for line in run.stdout.splitlines() if line.startswith("+ExecStart=")]
    assert any('"num_speculative_tokens": 4' in line for line in added), run.tail()
    assert_unchanged(listing, node.listing())
    assert node.service("MainPID", "ActiveEnterTimestamp") == before


def test_a_hand_edited_unit_on_a_serving_node_is_put_back_and_restarted(first, play, node):
    """The steady-node check finds the drift and the node takes the normal path (issue 20)."""
    release = node.current_release()
    node.sh(
        f"echo '# hand edit' | sudo -n tee -a {UNIT} >/dev/null && sudo -n systemctl daemon-reload"
    )
    before = node.service("MainPID")
    listing = node.listing()
    check = play("deploy.yml", "--check", "--diff", extra=INPUTS)
    assert check.returncode == 0, check.tail()
    assert check.recap(play.host)["changed"] > 0 and check.recap(play.host)["failed"] == 0
    assert_unchanged(listing, node.listing())
    assert "# hand edit" in node.sh(f"cat {UNIT}") and node.service("MainPID") == before

    run = play(extra=INPUTS)
    assert run.returncode == 0, run.tail()
    assert f"{UNIT}: content differs from what the deploy renders now" in run.stdout
    assert "goes through the normal rollout" in run.stdout
    assert "# hand edit" not in node.sh(f"cat {UNIT}")
    assert node.sh(f"cat {UNIT}") == node.sh(f"cat {ROOT}/releases/{release}/config/vllm.service")
    assert node.service("MainPID") != before  # restarted with the unit the release carries
    assert node.current_release() == release
    again = play(extra=INPUTS)
    assert again.returncode == 0 and again.recap(play.host)["changed"] == 0, again.tail()
    assert "goes through the normal rollout" not in again.stdout


def plan_shown(run, host: str) -> list[str]:
    """The plan shown for a node (playbooks/plan.yml: `make plan` and the deploy's first play)."""
    task = run.stdout.index("TASK [Show the plan of every node]")
    start = run.stdout.index(f"(item={host}) => {{", task)
    body = run.stdout[start:].split(" => ", 1)[1]
    return json.loads(body[: body.index("\n}") + 2])["msg"]


def test_plan_says_what_a_deploy_would_do_and_changes_nothing(first, play, node):
    release = node.current_release()
    listing = node.listing()
    before = node.service("MainPID", "ActiveEnterTimestamp")
    run = play("playbooks/plan.yml", extra=INPUTS)
    assert run.returncode == 0, run.tail()
    assert run.recap(play.host)["changed"] == 0
    shown = plan_shown(run, play.host)
    print("plan of the serving release:", *shown, sep="\n  ")
    assert shown[0].startswith(f"release {release}: vLLM 0.16.0 (patch series ")
    # No specdeploy_speculative_schedule in the inputs: one k for every load.
    assert shown[1].startswith("k schedule by running requests: off")
    assert "serves it already, validated, same gates: only checked" in shown[2]
    assert shown[3].startswith("server restarts: no; expected downtime: none")
    assert shown[4].startswith("baseline for the speed-up gate: ")
    assert shown[5].startswith("gates: {")

    # A changed input: a new release, a restart, and the downtime this node's last start took.
    changed = dict(SPECULATIVE, num_speculative_tokens=4)
    run = play("playbooks/plan.yml", extra={"specdeploy_speculative_config": changed})
    assert run.returncode == 0, run.tail()
    shown = plan_shown(run, play.host)
    print("plan of a changed input:", *shown, sep="\n  ")
    planned = shown[0].split(":", 1)[0].removeprefix("release ")
    assert planned != release and planned.startswith("0.16.0-")
    assert f"would be built (serving now: {release})" in shown[2]
    recorded = node.manifest(release)["starts"][-1]["stop_to_ready_s"]
    # half up, as an operator reads "about N s" (Python's round() makes 4.5 s "about 4 s")
    assert shown[3] == (
        f"server restarts: yes; expected downtime: about {int(recorded + 0.5)} s "
        "(the last start of the serving release on this node)"
    )
    assert_unchanged(listing, node.listing())
    assert node.service("MainPID", "ActiveEnterTimestamp") == before


def test_an_edit_outside_the_node_code_keeps_the_release_and_changes_nothing(
    first, play, node, tmp_path
):
    """Tests, the bench, a stand-in profile and controller code are not part of a release."""
    copy = copy_toolkit(tmp_path / "toolkit")
    release = node.current_release()
    for relative in (
        "tests/testbed/bench.py",
        "tests/unit/test_bench.py",
        "specdeploy/controller/report.py",
    ):
        with (copy / relative).open("a") as handle:
            handle.write("\n# an edit that is not node code\n")
    profile = copy / "tests" / "standin" / "profiles" / "slow-spec.json"
    profile.write_text(profile.read_text().replace("{", '{"edited": true, ', 1))
    listing = node.listing()
    before = node.service("MainPID", "ActiveEnterTimestamp")
    run = play(extra=INPUTS, repo=copy)
    assert run.returncode == 0, run.tail()
    recap = run.recap(play.host)
    assert recap["changed"] == 0, f"{recap}: {run.changed_tasks()}"
    assert plan_shown(run, play.host)[0].startswith(f"release {release}: ")
    assert_unchanged(listing, node.listing())
    assert node.service("MainPID", "ActiveEnterTimestamp") == before

    # The same copy with node code edited plans a new release (so the check above can fail).
    with (copy / "specdeploy" / "node" / "gate.py").open("a") as handle:
        handle.write("\n# node code edited\n")
    run = play("playbooks/plan.yml", extra=INPUTS, repo=copy)
    assert run.returncode == 0, run.tail()
    shown = plan_shown(run, play.host)[0]
    assert shown.startswith("release 0.16.0-") and not shown.startswith(f"release {release}: ")


# ---------------------------------------------------------------- preflight refusals

REFUSALS = {
    "unsupported-version": (
        {"specdeploy_vllm_version": "0.14.0"},
        ["specdeploy_vllm_version", "0.14.0"],
    ),
    "unknown-speculative-key": (
        {"specdeploy_speculative_config": dict(SPECULATIVE, bogus_key=1)},
        ["specdeploy_speculative_config", "bogus_key"],
    ),
    "zero-speculative-tokens": (
        {"specdeploy_speculative_config": dict(SPECULATIVE, num_speculative_tokens=0)},
        ["specdeploy_speculative_config", "num_speculative_tokens"],
    ),
    "draft-tp-3-with-tp-8": (
        {"specdeploy_speculative_config": dict(SPECULATIVE, draft_tensor_parallel_size=3)},
        ["specdeploy_speculative_config", "draft_tensor_parallel_size"],
    ),
    "model-path-missing": (
        {"specdeploy_model_path": "/srv/models/not-there"},
        ["specdeploy_model_path", "/srv/models/not-there"],
    ),
    "drafter-incompatible": (
        {
            "specdeploy_drafter_path": BAD_DRAFTER,
            "specdeploy_speculative_config": dict(SPECULATIVE, model=BAD_DRAFTER),
        },
        ["specdeploy_drafter_path", BAD_DRAFTER],
    ),
    "drafter-provenance-other-target": (
        {
            "specdeploy_drafter_path": OTHER_TARGET_DRAFTER,
            "specdeploy_speculative_config": dict(SPECULATIVE, model=OTHER_TARGET_DRAFTER),
        },
        ["specdeploy_drafter_path", "provenance target_config_sha256", "another target"],
    ),
    "forced-mla-backend-with-speculation": (
        {"specdeploy_attention_backend": "TRITON_MLA"},
        ["specdeploy_attention_backend", "TRITON_MLA"],
    ),
    "port-taken-by-a-foreign-listener": (
        {"specdeploy_port": FOREIGN_PORT},
        ["specdeploy_port", str(FOREIGN_PORT)],
    ),
    "too-little-disk": ({"specdeploy_min_free_disk_gb": 1000000}, ["specdeploy_min_free_disk_gb"]),
}


@pytest.fixture(scope="module")
def bad_drafter(node):
    config = json.loads((FIXTURES / "models" / "tiny-dsv3-eagle3" / "config.json").read_text())
    config["target_hidden_size"] = config["hidden_size"] * 2  # the target's hidden size is 1024
    node.push(f"{BAD_DRAFTER}/config.json", json.dumps(config).encode())
    yield BAD_DRAFTER
    node.sh(f"sudo -n rm -rf {BAD_DRAFTER}", check=False)


@pytest.fixture(scope="module")
def other_target_drafter(node):
    """A drafter that fits the target's shape, with the provenance the drafter pipeline writes,
    trained for another target (the Kimi-K2.5 config)."""
    from specdeploy.controller import drafter_provenance as prov

    src = FIXTURES / "models" / "tiny-dsv3-eagle3" / "config.json"
    kimi = json.loads((FIXTURES / "drafters" / "kimi-k2.5" / "config.json").read_text())
    record = prov.Provenance(
        target_config_sha256=prov.target_config_sha256(kimi),
        aux_layer_ids=[1, 2, 3],
        aux_offset=prov.INPUT_OF_LAYER,
        vllm_version="0.16.0",
        trainer="specdeploy-torch",
    )
    node.push(f"{OTHER_TARGET_DRAFTER}/config.json", src.read_bytes())
    node.push(f"{OTHER_TARGET_DRAFTER}/{prov.FILE_NAME}", json.dumps(record.as_dict()).encode())
    yield OTHER_TARGET_DRAFTER
    node.sh(f"sudo -n rm -rf {OTHER_TARGET_DRAFTER}", check=False)


@pytest.fixture
def foreign_listener(node, play):
    out = node.sh(
        f"nohup setsid python3 -m http.server --bind {play.address} {FOREIGN_PORT} "
        ">/dev/null 2>&1 < /dev/null & echo $!"
    )
    pid = int(out.strip())
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if node.sh(f"ss -Htln 'sport = :{FOREIGN_PORT}'", check=False).strip():
            break
        time.sleep(0.2)
    else:
        pytest.fail("the foreign listener did not come up")
    yield pid
    node.sh(f"kill {pid}", check=False)


@pytest.mark.parametrize("case", list(REFUSALS), ids=list(REFUSALS))
def test_preflight_refuses_and_leaves_the_node_unchanged(case, first, play, node, request):
    extra, words = REFUSALS[case]
    if case == "drafter-incompatible":
        request.getfixturevalue("bad_drafter")
    if case == "drafter-provenance-other-target":
        request.getfixturevalue("other_target_drafter")
    if case == "port-taken-by-a-foreign-listener":
        request.getfixturevalue("foreign_listener")
    listing = node.listing()
    before = node.service("MainPID", "ActiveEnterTimestamp")
    run = play(extra={**INPUTS, **extra})
    assert run.returncode != 0, run.tail()
    message = run.failure_message()
    for word in words:
        assert word in message, (word, message)
    # It stopped in the first play (the preflight): no later stage ran.
    assert "TASK [preflight : " in run.stdout
    assert "TASK [vllm_release" not in run.stdout and "TASK [gpu_node" not in run.stdout, run.tail()
    assert_unchanged(listing, node.listing())
    assert node.service("MainPID", "ActiveEnterTimestamp") == before


def _progress_lines(run, host: str) -> list[str]:
    return [line for line in run.stdout.splitlines() if line.startswith(f"{host}: ")]


def test_a_start_shows_its_load_phases_and_the_deploy_ends_with_the_downtime(first, play):
    lines = _progress_lines(first, play.host)
    said = " | ".join(lines)
    order = ["loading weights", "torch.compile", "CUDA graph capture", "ready"]
    positions = [next(i for i, line in enumerate(lines) if phase in line) for phase in order]
    assert positions == sorted(positions), said
    assert "FAILED - RETRYING" not in first.stdout
    assert "no earlier start recorded on this node" in said  # the node's first start
    last_task = first.stdout.rsplit("TASK [", 1)[-1].split("PLAY RECAP", 1)[0]
    assert last_task.startswith("Say the measured downtime window per node]"), last_task
    assert f"{play.host}: downtime window " in last_task


def test_the_old_server_stops_only_after_the_new_release_is_built(first, play, node):
    """A new release: build, patch, verify, render and caches all happen while the old
    release still serves; the journal's stop of the old server comes after every file the
    deploy made for the new release. The start's window and parts are in its manifest."""
    before = node.current_release()
    run = play(
        extra={"specdeploy_speculative_config": {**SPECULATIVE, "num_speculative_tokens": 4}}
    )
    assert run.returncode == 0, run.tail()
    release = node.current_release()
    # same vLLM: the new release's venv is the earlier one's files, linked, not installed again
    # (its console script is its own: it names the new venv)
    links = node.sh(
        f"sudo -n stat -c %h {ROOT}/releases/{release}/venv/lib/python3*/site-packages/vllm/"
        "__init__.py"
    )
    assert int(links) >= 2, f"not linked from {before} or another release: {links} link(s)"
    script = node.sh(f"sudo -n head -1 {ROOT}/releases/{release}/venv/bin/vllm")
    assert script.startswith(f"#!{ROOT}/releases/{release}/venv/bin/python"), script
    stops = node.sh(
        "sudo -n journalctl -u vllm.service -o short-unix --no-pager -q | grep ' Stopping vllm'"
    ).splitlines()
    stopped_at = float(stops[-1].split()[0])
    newest = node.sh(
        f"sudo -n find {ROOT}/releases/{release} /var/cache/specdeploy/compile"
        " -path '*/__pycache__' -prune -o -type f ! -name manifest.json -printf '%T@ %p\\n'"
        " | sort -n | tail -1"
    ).split()
    assert float(newest[0]) < stopped_at, f"{newest[1]} was written after the stop"
    manifest = node.manifest(release)
    verified = next(h for h in manifest["history"] if h["status"] == "verified")
    assert calendar.timegm(time.strptime(verified["at"], "%Y-%m-%dT%H:%M:%SZ")) <= stopped_at
    window = manifest["starts"][-1]["window"]
    assert window["from"] == "stop"
    assert {"stop", "weights", "compile", "graphs"} <= set(window["parts"]), window
    assert window["window_s"] == pytest.approx(sum(window["parts"].values()), abs=0.1)
    said = " | ".join(_progress_lines(run, play.host))
    # the first deploy's start is on record (and the baseline start's, when the plan took one):
    # an ETA from it, or, on a loaded machine where this start ran longer, how far past it
    assert re.search(
        r"(ETA \d+ s from|s past the usual \d+ s of) [1-9]\d* earlier start\(s\)", said
    ), said
    assert f"ready after a downtime window of {window['window_s']} s" in said
    said_last = _last_task(run)
    assert (
        f"{play.host}: downtime window {window['window_s']} s (deploy of {release}; " in said_last
    )
    assert f"weights {window['parts']['weights']} s" in said_last, said_last
    # the page-cache read-ahead ran to its end (or said why not) before the old server stopped
    ahead = re.search(r"page cache read-ahead [^\n]*", run.stdout)
    assert ahead, "the deploy does not say what the read-ahead did"
    assert re.search(r": resident in [0-9.]+ s \([0-9.]+ GB/s\)", ahead.group(0)) or (
        "skipped:" in ahead.group(0)
    ), ahead.group(0)
    assert run.stdout.index(ahead.group(0)) < run.stdout.index("stopping the old server")


def _last_task(run) -> str:
    """The output's last task, as the operator reads it before the recap."""
    return run.stdout.rsplit("TASK [", 1)[-1].split("PLAY RECAP", 1)[0]


def test_a_rollback_ends_with_its_downtime_and_status_shows_it_from_the_history(
    first, play, node, tmp_path
):
    """`make rollback`: the output ends with the node's downtime window and its parts; the
    controller's history has the start, and `make status` shows it."""
    before = node.current_release()
    reports = {"validation_report_root": str(tmp_path)}
    run = play("playbooks/rollback.yml", extra=reports)
    assert run.returncode == 0, run.tail()
    back_to = node.current_release()
    assert back_to != before
    window = node.manifest(back_to)["starts"][-1]["window"]
    said_last = _last_task(run)
    assert said_last.startswith("Say the measured downtime window per node]"), said_last
    assert (
        f"{play.host}: downtime window {window['window_s']} s (rollback of {back_to}; " in said_last
    )
    for phase in ("weights", "compile", "graphs"):
        assert f"{phase} {window['parts'][phase]} s" in said_last, said_last
    status = play("playbooks/status.yml", extra=reports)
    assert status.returncode == 0, status.tail()
    row = next(line for line in status.stdout.splitlines() if f'"{play.host} ' in line)
    assert back_to in row and f"{window['window_s']} s (rollback)" in row, row


def test_ctrl_c_mid_deploy_ends_in_a_named_safe_state_shown_by_status(first, play, node, tmp_path):
    """Issue 28: Ctrl-C in the middle of a deploy left the node on the new, unvalidated release
    (with speculation off, when it was in its baseline start) and the dead run holding the
    deploy lock; the output said only "User interrupted execution" and `make status` flagged
    neither. Now `make deploy` ends it: the node is back on the release that served before,
    the lock is free, and `make status` names the state."""
    before = node.current_release()
    changed = {**SPECULATIVE, "num_speculative_tokens": 2}
    reports = {"validation_report_root": str(tmp_path)}
    extra = json.dumps({"specdeploy_speculative_config": changed, **reports})
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
           "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"}  # fmt: skip
    make = subprocess.Popen(
        ["make", "-s", "deploy", f"INVENTORY={play.inventory}", f"EXTRA=-e '{extra}'"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,  # Ctrl-C reaches the terminal's whole process group
    )  # fmt: skip
    seen: list[str] = []
    after_switch = (
        "TASK [Measure the new release without speculation",
        "TASK [Validate the release",
    )
    for line in make.stdout:  # type: ignore[union-attr]
        seen.append(line)
        if line.startswith(after_switch):
            time.sleep(2)
            os.killpg(make.pid, signal.SIGINT)
            break
    else:
        pytest.fail("the deploy ended before its validation:\n" + "".join(seen[-40:]))
    interrupted_at = node.current_release()
    rest = make.communicate(timeout=900)[0]
    out = "".join(seen) + rest
    assert interrupted_at != before  # the switch had happened: an unvalidated release served
    assert "User interrupted execution" in out
    assert "the run was interrupted; ending what it left on each node" in out
    cleanup = out[out.index("the run was interrupted") :]
    said = f"rolled-back: {play.host}: the interrupted deploy left release {interrupted_at}"
    assert said in cleanup, cleanup[-6000:]
    assert node.current_release() == before
    assert node.service("ActiveState")["ActiveState"] == "active"
    assert node.sh("sudo -n ls -A /run/lock/specdeploy/opt_specdeploy/ 2>/dev/null || true") == ""
    status = play("playbooks/status.yml", extra=reports)
    assert status.returncode == 0, status.tail()
    row = next(line for line in status.stdout.splitlines() if f'"{play.host} ' in line)
    assert "ROLLED-BACK at " in row and f"rolled back to {before}" in row, row
