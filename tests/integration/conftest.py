"""Fixtures shared by the integration modules that deploy to sandbox nodes.

Each module runs in a pytest session of its own (scripts/run_tests.py), so each gets its own
sandbox instance; these are the per-module defaults (one node). A module that needs more
nodes defines its own `cluster`.
"""

from __future__ import annotations

import pytest
from test_deploy_support import Deploy, NodeState


@pytest.fixture(scope="module")
def cluster(sandbox):
    return sandbox(1)


@pytest.fixture(scope="module")
def play(cluster):
    """ansible-playbook against the cluster's inventory, as an operator runs it."""
    return Deploy(cluster)


@pytest.fixture(scope="module")
def node(cluster):
    """Read-only views of the first node over SSH."""
    return NodeState(cluster)
