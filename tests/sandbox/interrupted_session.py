"""Run by tests/integration/test_sandbox.py in a child pytest that is then interrupted
(SIGINT / SIGTERM) while the nodes are up; not collected on its own (no test_ prefix)."""

import time


def test_hangs_with_nodes_up(sandbox):
    sandbox(2)
    print("NODES-UP", flush=True)
    time.sleep(300)
