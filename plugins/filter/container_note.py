"""What the provisioning leaves to the host on nodes that run in a container, said once for the
play (roles/gpu_node tasks/main.yml).

``ansible_play_hosts | specdeploy.toolkit.container_note(hostvars, sysctl_file, time_sync)``: one
message naming every container node (its ``gpu_node_in_container`` fact true, set by
specdeploy.toolkit.gpu_node_probe) and their container types (``gpu_node_container``), or ""
when none runs in a container. Pure function.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def container_note(
    hosts: Iterable[str],
    hostvars: Mapping[str, Mapping[str, Any]],
    sysctl_file: str,
    time_sync: str,
) -> str:
    nodes = [h for h in hosts if hostvars[h].get("gpu_node_in_container")]
    if not nodes:
        return ""
    kinds = list(dict.fromkeys(str(hostvars[h]["gpu_node_container"]) for h in nodes))
    return (
        f"{', '.join(nodes)} run in a container ({', '.join(kinds)}): the kernel settings are "
        f"written to {sysctl_file} but not applied (/proc/sys is the host's), /dev/shm is not "
        f"resized, and nvidia-persistenced and {time_sync} are the host's business. On a "
        "physical node all of them are applied."
    )


class FilterModule:
    def filters(self):
        return {"container_note": container_note}
