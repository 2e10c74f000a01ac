"""testbed.sandbox.balancer: the HAProxy the sandbox runs in front of its nodes (real haproxy)."""

import socket

import pytest
from testbed.sandbox import balancer
from testbed.sandbox.config import Node, process_starttime

from specdeploy.controller import drain


@pytest.fixture
def instance_state(tmp_path, monkeypatch):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("SPECDEPLOY_SANDBOX_STATE", str(tmp_path))
    monkeypatch.setenv("SPECDEPLOY_SANDBOX_INSTANCE", "0")
    monkeypatch.setenv("SPECDEPLOY_SANDBOX_LB_PORT", str(port))
    yield tmp_path
    balancer.stop()


def test_up_starts_one_haproxy_for_the_nodes_and_down_stops_it(instance_state) -> None:
    nodes = [Node.for_index(1), Node.for_index(2)]
    balancer.start(nodes)
    pid = balancer.running_pid()
    assert pid and balancer.socket_path().exists()
    assert balancer.frontend_url().startswith("http://127.0.0.1:")
    # the runtime API knows both nodes' servers, named as the inventory names the hosts
    for node in nodes:
        assert drain.haproxy_sessions(str(balancer.socket_path()), "vllm", node.hostname) == 0
    balancer.start(nodes)  # same nodes: the same process
    assert balancer.running_pid() == pid
    balancer.start([*nodes, Node.for_index(3)])  # one more node: restarted with it
    assert drain.haproxy_sessions(str(balancer.socket_path()), "vllm", "sandbox-node3") == 0
    balancer.stop()
    assert not balancer.running_pid() and not balancer.socket_path().exists()
    assert not process_starttime(pid)  # gone (or a zombie of an init that reaps late)
