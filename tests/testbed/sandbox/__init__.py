"""Sandbox GPU nodes: Debian 12 hosts booted with systemd-nspawn, reachable over real SSH.

Each node is a full `systemd-nspawn -b` boot (systemd is PID 1 inside) of a Debian bookworm
root file system built once with debootstrap and cached outside the repository. A node gets its
own overlayfs writable layer, shares the host network and runs sshd only on its own loopback
address (node1 -> 127.0.0.11, node2 -> 127.0.0.12, ...). The admin user `ops` logs in with an
ed25519 key only and has passwordless sudo; host keys are generated per node and recorded in a
known_hosts file that the generated inventory uses with StrictHostKeyChecking=yes. The node has
no GPU: an nvidia-smi replay (tests/fixtures/nvidia-smi/) answers for 8 x RTX PRO 6000.

    python -m testbed.sandbox up --nodes 2      # exactly node1..node2 running
    python -m testbed.sandbox status [--json]
    python -m testbed.sandbox ssh node1 -- sudo -n true
    python -m testbed.sandbox scenario node1 seven_gpus
    python -m testbed.sandbox down              # stops everything, also stale leftovers
    python -m testbed.sandbox down --all        # every instance (test sessions too)

Nothing leaks: the overlay is mounted inside a private mount namespace that dies with the node,
every node runs in its own cgroup (killed as a whole by `down`), and `down` also cleans what a
crashed or interrupted run left behind. Several sandboxes can run side by side: instance k
(SPECDEPLOY_SANDBOX_INSTANCE=k, default 0) uses 127.0.k.1N, /run/specdeploy-sandbox-k and
inventory/sandbox-k/; instance 0 is the developer's (`make sandbox-up`, `make demo`), pytest
sessions pick a free instance from 1 on by themselves (session.Session), and `make demo` takes a
free one of its own (session.claim_instance).

Modules, one job each: config (instances, addresses, the node record), host (packages, locks,
cgroups, processes), rootfs (the cached Debian tree), files (a node's keys and files), nodes
(start, reach, stop), inventory (hosts.yml, known_hosts), commands (up, down, status),
session (test sessions, instance claims), cli.
Environment: SPECDEPLOY_CACHE (default ~/.cache/specdeploy), SPECDEPLOY_SANDBOX_INSTANCE,
SPECDEPLOY_SANDBOX_STATE (default /run/specdeploy-sandbox[-k]), SPECDEPLOY_SANDBOX_PORT
(default 22), SPECDEPLOY_SANDBOX_KEEP=1 (pytest leaves nodes up), SPECDEPLOY_DEBIAN_MIRROR
(default http://deb.debian.org/debian).
Exit codes: 0 ok, 1 a node failed to come up / check failed, 2 usage or environment error.
"""

from __future__ import annotations

from testbed.sandbox.cli import main
from testbed.sandbox.commands import down, find_node, instances_in_use, set_scenario, status, up
from testbed.sandbox.config import (
    ADMIN_USER,
    DEFAULT_SCENARIO,
    GROUP_VARS,
    HOST_PACKAGES,
    HW_TREE,
    MASKED_UNITS,
    MAX_INSTANCES,
    MAX_NODES,
    NVIDIA_SMI_FIXTURES,
    PACKAGES,
    PROVISION,
    REPO,
    SUITE,
    Node,
    SandboxError,
    as_instance,
    cache_dir,
    cgroup_name,
    host_key_name,
    instance,
    inventory_path,
    log,
    machine_name,
    node_address,
    process_starttime,
    ssh_port,
    state_dir,
    suffix,
)
from testbed.sandbox.files import (
    client_key,
    ensure_client_key,
    install_hw_tree,
    install_nvidia_smi,
    known_hosts,
    prepare_layer,
    put,
    ssh_dir,
    sshd_config,
    user_ids,
)
from testbed.sandbox.host import (
    cgroup_pids,
    cgroup_roots,
    ensure_host_packages,
    flocked,
    kill_cgroup,
    lock_dir,
    locked,
    mounts_under,
    node_cgroups,
    nspawn_processes,
    parent_pid,
    remove_cgroup,
)
from testbed.sandbox.inventory import write_inventory, write_known_hosts
from testbed.sandbox.nodes import (
    SUPERVISOR,
    banner,
    clean_nspawn_leftovers,
    diagnostics,
    known_nodes,
    port_blocked_by_wildcard,
    reap_children,
    reaped_by_init,
    running_nodes,
    ssh_command,
    start_node,
    stop_nodes,
    wait_ready,
)
from testbed.sandbox.rootfs import (
    build_rootfs,
    ensure_rootfs,
    prune_rootfs,
    rootfs_key,
    rootfs_path,
    switch_rootfs_link,
)
from testbed.sandbox.session import (
    FIRST_TEST_INSTANCE,
    Cluster,
    Session,
    claim_instance,
    claim_session,
    clean_crashed_session,
    crashed_session,
    free_instance,
    session_held_elsewhere,
    session_lock_path,
)

__all__ = [
    "ADMIN_USER",
    "DEFAULT_SCENARIO",
    "FIRST_TEST_INSTANCE",
    "GROUP_VARS",
    "HOST_PACKAGES",
    "HW_TREE",
    "MASKED_UNITS",
    "MAX_INSTANCES",
    "MAX_NODES",
    "NVIDIA_SMI_FIXTURES",
    "PACKAGES",
    "PROVISION",
    "REPO",
    "SUITE",
    "SUPERVISOR",
    "Cluster",
    "Node",
    "SandboxError",
    "Session",
    "as_instance",
    "banner",
    "build_rootfs",
    "cache_dir",
    "cgroup_name",
    "cgroup_pids",
    "cgroup_roots",
    "claim_instance",
    "claim_session",
    "clean_crashed_session",
    "clean_nspawn_leftovers",
    "client_key",
    "crashed_session",
    "diagnostics",
    "down",
    "ensure_client_key",
    "ensure_host_packages",
    "ensure_rootfs",
    "find_node",
    "flocked",
    "free_instance",
    "host_key_name",
    "install_hw_tree",
    "install_nvidia_smi",
    "instance",
    "instances_in_use",
    "inventory_path",
    "kill_cgroup",
    "known_hosts",
    "known_nodes",
    "lock_dir",
    "locked",
    "log",
    "machine_name",
    "main",
    "mounts_under",
    "node_address",
    "node_cgroups",
    "nspawn_processes",
    "parent_pid",
    "port_blocked_by_wildcard",
    "prepare_layer",
    "process_starttime",
    "prune_rootfs",
    "put",
    "reap_children",
    "reaped_by_init",
    "remove_cgroup",
    "rootfs_key",
    "rootfs_path",
    "running_nodes",
    "session_held_elsewhere",
    "session_lock_path",
    "set_scenario",
    "ssh_command",
    "ssh_dir",
    "ssh_port",
    "sshd_config",
    "start_node",
    "state_dir",
    "status",
    "stop_nodes",
    "suffix",
    "switch_rootfs_link",
    "up",
    "user_ids",
    "wait_ready",
    "write_inventory",
    "write_known_hosts",
]
