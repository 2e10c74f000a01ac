"""Shared pytest fixtures.

`sandbox`: session-scoped factory of sandbox GPU nodes (tests/testbed/sandbox/). In a test:

    def test_x(sandbox):
        cluster = sandbox(2)                # node1, node2 running (others may run too)
        cluster.inventory                   # inventory/sandbox/hosts.yml (all running nodes)
        cluster.ssh("node1", "sudo -n true")  # CompletedProcess, as ops over real SSH
        cluster.set_scenario("node1", "seven_gpus")   # nvidia-smi replay, live

Nodes are shared by the whole session and stopped at its end (also on Ctrl-C / SIGTERM);
SPECDEPLOY_SANDBOX_KEEP=1 leaves them running. Needs root; skipped otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# The tests' import paths (the checkout, tests/, ...) are pytest's `pythonpath` (pyproject.toml).
# The test tooling (tests/testbed: sandbox, bench, demo) is a package of its own, outside the
# product: subprocesses that run `python -m testbed.sandbox` find it through PYTHONPATH too.
_TESTS = str(REPO / "tests")
if _TESTS not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (_TESTS, os.environ.get("PYTHONPATH")) if p
    )


@pytest.fixture(scope="session")
def sandbox(request: pytest.FixtureRequest):
    if os.geteuid() != 0:
        pytest.skip("sandbox nodes need root (systemd-nspawn, overlayfs, cgroups)")
    from testbed.sandbox import Session

    session = Session()
    request.addfinalizer(session.close)
    return session
