"""specdeploy.controller.drain: the running-requests read, the wait cap, the hooks."""

import os
from pathlib import Path

import pytest

from specdeploy.controller import drain

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
"""


def test_running_requests_reads_the_gauge() -> None:
    assert drain.running_requests(METRICS) == 3.0
    with pytest.raises(drain.InflightError, match="not in the server"):
        drain.running_requests("vllm:num_requests_waiting 1\n")
    # an SGLang release serving (its recorded /metrics): its own gauge, found without being told
    sglang = (FIXTURES / "sglang-0.5.15-h200" / "metrics-spec.txt").read_text()
    assert drain.running_requests(sglang) == drain.running_requests(sglang, engine="sglang")
    running = 'sglang:num_running_reqs{engine_type="unified",model_name="m",tp_rank="0"} 2.0\n'
    assert drain.running_requests(running) == 2.0
    with pytest.raises(drain.InflightError, match="vllm:num_requests_running not in"):
        drain.running_requests(running, engine="vllm")
    with pytest.raises(drain.InflightError, match="engine 'x'"):
        drain.running_requests(METRICS, engine="x")


def test_wait_stops_at_zero_or_at_the_cap() -> None:
    now = [0.0]
    seq = iter([2, 1, 0])
    res = drain.wait_until_idle(
        lambda: next(seq),
        30,
        poll_s=1,
        clock=lambda: now[0],
        sleep=lambda s: now.__setitem__(0, now[0] + s),
    )
    assert res.drained and res.waited_s == 2
    now[0] = 0.0
    res = drain.wait_until_idle(
        lambda: 5, 3, poll_s=1, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s)
    )
    assert not res.drained and res.running == 5 and res.waited_s == 3


def test_hook_failure_names_the_command(tmp_path) -> None:
    out = tmp_path / "n"
    drain.run_hook(f'echo "$SPECDEPLOY_NODE" > {out}', "node-1")
    assert out.read_text().strip() == "node-1"
    with pytest.raises(drain.DrainError, match="exited 3: exit 3"):
        drain.run_hook("exit 3", "node-1")
    # A hook that reads its input gets /dev/null, never the controller's terminal or the
    # Ansible worker it runs in (controller_check runs the drain there): it ends at once.
    # Here the process's own input is a pipe nobody writes to; inheriting it would hang.
    read_end, write_end = os.pipe()
    saved = os.dup(0)
    try:
        os.dup2(read_end, 0)
        drain.run_hook(f"cat > {out}", "node-1", timeout_s=10)
    finally:
        os.dup2(saved, 0)
        for fd in (saved, read_end, write_end):
            os.close(fd)
    assert out.read_text() == ""


def test_runtime_api_unreachable_and_off_loopback(tmp_path) -> None:
    with pytest.raises(drain.DrainError, match="unreachable"):
        drain.haproxy_command(str(tmp_path / "none.sock"), "show stat")
    with pytest.raises(drain.DrainError, match="not on loopback"):
        drain.haproxy_command("192.0.2.1:9999", "show stat")


@pytest.fixture
def haproxy(tmp_path):
    """A real HAProxy (Debian's package) with a two-server backend and a runtime-API socket."""
    import shutil
    import subprocess
    import time

    exe = shutil.which("haproxy") or "/usr/sbin/haproxy"
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sock = tmp_path / "admin.sock"
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(
        f"global\n  stats socket {sock} mode 600 level admin\n"
        "defaults\n  mode http\n  timeout connect 1s\n  timeout client 5s\n  timeout server 5s\n"
        f"frontend fe\n  bind 127.0.0.1:{port}\n  default_backend vllm\n"
        "backend vllm\n  server node-1 127.0.0.1:9 \n  server node-2 127.0.0.1:10\n"
    )
    proc = subprocess.Popen([exe, "-f", str(cfg)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for _ in range(100):
        if sock.exists():
            break
        assert proc.poll() is None, proc.stdout.read().decode()
        time.sleep(0.05)
    yield str(sock)
    proc.terminate()
    proc.wait(timeout=10)


def test_real_haproxy_drain_and_ready(haproxy) -> None:
    """What the operator would check: show servers state has node-1 draining, then ready."""
    drain.haproxy_set_state(haproxy, "vllm", "node-1", "drain")
    state = drain.haproxy_command(haproxy, "show servers state vllm")
    row = next(line.split() for line in state.splitlines() if " node-1 " in line)
    # srv_admin_state (column 7) has the DRAIN bit (0x08) set.
    assert int(row[6]) & 0x08
    assert drain.haproxy_sessions(haproxy, "vllm", "node-1") == 0
    drain.haproxy_set_state(haproxy, "vllm", "node-1", "ready")
    state = drain.haproxy_command(haproxy, "show servers state vllm")
    row = next(line.split() for line in state.splitlines() if " node-1 " in line)
    assert int(row[6]) & 0x08 == 0
    with pytest.raises(drain.DrainError, match=r"refused|no server"):
        drain.haproxy_set_state(haproxy, "vllm", "node-9", "drain")


def test_cli_drains_and_puts_back_through_the_runtime_api(haproxy, capsys) -> None:
    args = ["--node", "node-1", "--haproxy", haproxy, "--backend", "vllm", "--server", "node-1"]
    assert drain.main(["check", *args]) == 0
    assert "HAProxy vllm/node-1 found" in capsys.readouterr().out
    assert drain.main(["drain", *args, "--wait-s", "5"]) == 0
    assert "out of rotation" in capsys.readouterr().out
    assert drain.main(["drain", *args, "--wait-s", "inf"]) == 2
    state = drain.haproxy_command(haproxy, "show servers state vllm")
    row = next(line.split() for line in state.splitlines() if " node-1 " in line)
    assert int(row[6]) & 0x08
    assert drain.main(["undrain", *args]) == 0
    state = drain.haproxy_command(haproxy, "show servers state vllm")
    row = next(line.split() for line in state.splitlines() if " node-1 " in line)
    assert int(row[6]) & 0x08 == 0
    # a server the balancer does not know: exit 1, one line naming it
    assert drain.main(["check", *args[:-1], "node-9"]) == 1
    assert "no server vllm/node-9" in capsys.readouterr().err


def test_no_balancer_is_a_one_line_skip(capsys) -> None:
    assert drain.main(["drain", "--node", "n1"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.count("\n") == 0 and "drain skipped" in out


@pytest.mark.parametrize(
    ("extra", "knob"),
    [
        (["--haproxy", "/x.sock"], "specdeploy_haproxy_backend is empty"),
        (["--haproxy", "192.0.2.1:9999", "--backend", "b", "--server", "s"], "not on loopback"),
        (["--haproxy", "nonsense", "--backend", "b", "--server", "s"], "a socket path"),
        (["--drain-command", "true"], "go together"),
        (
            [
                *("--haproxy", "/x.sock", "--backend", "b", "--server", "s"),
                *("--drain-command", "true", "--undrain-command", "true"),
            ],
            "choose one balancer",
        ),
    ],
)
def test_bad_knobs_are_a_usage_error_naming_the_knob(extra, knob, capsys) -> None:
    assert drain.main(["drain", "--node", "n1", *extra]) == 2
    err = capsys.readouterr().err
    assert knob in err and err.count("\n") == 1


def test_inflight_cli_returns_at_once_for_a_server_that_is_down(capsys) -> None:
    from specdeploy.node.service import inflight

    assert inflight.main(["--url", "http://127.0.0.1:9/metrics", "--max-wait-s", "5"]) == 0
    assert "no request in flight" in capsys.readouterr().out
    assert inflight.main(["--url", "http://127.0.0.1:9/metrics", "--max-wait-s", "nan"]) == 2


def test_the_drain_never_leaves_the_backend_without_a_server_in_rotation(haproxy, capsys) -> None:
    """Issue 28 (found by review): the drain took a node out whatever the others' state, so a
    canary drained while the only other node was down left nothing in rotation. It now refuses
    before touching the node, except where that is the operator's choice: a one-server backend,
    or a stage that restarts every other server too."""
    args = ["--node", "node-1", "--haproxy", haproxy, "--backend", "vllm", "--server", "node-1"]
    drain.haproxy_set_state(haproxy, "vllm", "node-2", "maint")  # the other node is away
    assert drain.main(["drain", *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith("node-1: drain failed: taking vllm/node-1 out would leave 0 other ")
    assert "(node-2 maintenance; none of them in this stage)" in err
    assert drain.haproxy_rotation(haproxy, "vllm")["node-1"] == "in rotation"  # not touched
    # the same stage restarts node-2 as well (every node at once): the operator's choice
    assert drain.main(["drain", *args, "--stage-servers", "node-1,node-2"]) == 0
    assert drain.haproxy_rotation(haproxy, "vllm")["node-1"] == "drained"
    drain.haproxy_set_state(haproxy, "vllm", "node-1", "ready")
    # no guard asked for
    assert drain.main(["drain", *args, "--keep-in-rotation", "0"]) == 0
    drain.haproxy_set_state(haproxy, "vllm", "node-1", "ready")
    # the other node back in rotation: the drain goes ahead
    drain.haproxy_set_state(haproxy, "vllm", "node-2", "ready")
    capsys.readouterr()
    assert drain.main(["drain", *args]) == 0
    assert drain.haproxy_rotation(haproxy, "vllm") == {"node-1": "drained", "node-2": "in rotation"}
    assert drain.main(["drain", *args, "--keep-in-rotation", "-1"]) == 2
    assert "specdeploy_drain_keep_in_rotation=-1" in capsys.readouterr().err


@pytest.mark.parametrize(
    "states, stage, keep, refused",
    [
        ({"a": "in rotation"}, set(), 1, False),  # a one-server backend
        ({"a": "in rotation", "b": "down"}, set(), 1, True),
        ({"a": "in rotation", "b": "down"}, {"b"}, 1, False),  # b restarts in this stage
        ({"a": "in rotation", "b": "drained", "c": "in rotation"}, set(), 1, False),
        ({"a": "in rotation", "b": "drained", "c": "in rotation"}, set(), 2, True),
        ({"a": "in rotation", "b": "down", "c": "down"}, {"b"}, 1, True),
        ({"a": "in rotation", "b": "down"}, set(), 0, False),
        ({"a": "down", "b": "down"}, set(), 1, False),  # a first rollout: nothing serves yet
        ({"a": "drained", "b": "down"}, set(), 1, False),  # already out (a re-run)
    ],
)
def test_rotation_guard(states, stage, keep, refused) -> None:
    assert (drain.rotation_guard(states, "a", stage, keep, "vllm") is not None) is refused
