"""The play's one message about container nodes (plugins/filter/container_note.py), word for word
what roles/gpu_node/tasks/main.yml said in Jinja."""

from __future__ import annotations

from ansible_collections.specdeploy.toolkit.plugins.filter.container_note import (
    FilterModule,
    container_note,
)

HOSTVARS = {
    "n1": {"gpu_node_in_container": True, "gpu_node_container": "systemd-nspawn"},
    "n2": {"gpu_node_in_container": False, "gpu_node_container": "none"},
    "n3": {"gpu_node_in_container": True, "gpu_node_container": "docker"},
    "n4": {"gpu_node_in_container": True, "gpu_node_container": "systemd-nspawn"},
    "n5": {},  # not probed (its play failed earlier)
}


def test_every_container_node_and_kind_is_named_once() -> None:
    note = container_note(
        ["n1", "n2", "n3", "n4", "n5"], HOSTVARS, "/etc/sysctl.d/90-x.conf", "chrony"
    )
    assert note == (
        "n1, n3, n4 run in a container (systemd-nspawn, docker): the kernel settings are written "
        "to /etc/sysctl.d/90-x.conf but not applied (/proc/sys is the host's), /dev/shm is not "
        "resized, and nvidia-persistenced and chrony are the host's business. On a physical node "
        "all of them are applied."
    )


def test_nothing_is_said_without_a_container_node() -> None:
    assert container_note(["n2", "n5"], HOSTVARS, "/etc/sysctl.d/90-x.conf", "chrony") == ""
    assert FilterModule().filters()["container_note"] is container_note
