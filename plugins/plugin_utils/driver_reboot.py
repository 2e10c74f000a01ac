"""Whether a node needs a reboot into the pinned NVIDIA driver, and what to say about it, as pure
functions (issue 25: no programs in Jinja). The action specdeploy.toolkit.driver_reboot_plan
reads the node's running kernel module and machine id and sets the facts from these."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.specdeploy.toolkit.plugins.filter.gpu_node import reboot_plan_note

# Names that always mean the machine Ansible runs on.
LOCAL_NAMES = ("localhost", "localhost.localdomain", "127.0.0.1", "::1")


def is_controller(
    host: str, address: str, connection: str, own_machine_id: str, controller_machine_id: str
) -> bool:
    """The node is the machine Ansible runs on: a local name or connection, or the same machine
    id (an empty id matches nothing)."""
    return (
        host in LOCAL_NAMES
        or address in LOCAL_NAMES
        or connection == "local"
        or (own_machine_id != "" and own_machine_id == controller_machine_id)
    )


def changed(result: Any) -> bool:
    """Ansible's ``is changed`` of a registered result (a loop's: any item changed)."""
    if not isinstance(result, Mapping):
        return False
    if isinstance(result.get("results"), list):
        return any(changed(item) for item in result["results"]) or bool(result.get("changed"))
    return bool(result.get("changed", False))


def reboot_facts(
    *, version: str, loaded: str, install_changed: bool, controller: bool
) -> dict[str, Any]:
    """The role's facts: a reboot is needed when the driver changed in this run or the running
    kernel module ("" when none is loaded) is not the pinned version."""
    return {
        "gpu_node_driver_loaded_version": loaded,
        "gpu_node_driver_changed": install_changed,
        "gpu_node_reboot_needed": install_changed or loaded != version,
        "gpu_node_is_controller": controller,
    }


def check_note(facts: Mapping[str, Any], *, version: str, packages: list[str], allowed: Any) -> str:
    """What a real run would do, said in check mode."""
    installed = "would be installed" if facts["gpu_node_driver_changed"] else "is installed"
    note = reboot_plan_note(
        facts["gpu_node_reboot_needed"],
        allowed=allowed,
        is_controller=facts["gpu_node_is_controller"],
    )
    return (
        f"check mode: driver {version} ({', '.join(packages)}) {installed}; running module: "
        f"{facts['gpu_node_driver_loaded_version'] or 'none'}. {note}"
    )


def stop_message(facts: Mapping[str, Any], *, host: str, version: str) -> str:
    """Why the run stops (a reboot is needed and not allowed, or the node is the controller)."""
    if facts["gpu_node_is_controller"]:
        how = f"Refusing to reboot {host}: it is the machine Ansible runs on. Reboot it by hand."
    else:
        how = "Reboot it (or rerun with gpu_node_reboot_allowed=true), then run the deploy again."
    when = "changed in this run" if facts["gpu_node_driver_changed"] else "already"
    loaded = facts["gpu_node_driver_loaded_version"] or "not loaded"
    return (
        f"{host}: NVIDIA driver {version} is installed ({when}) but the running kernel module "
        f"is {loaded}: a reboot is needed. {how}"
    )
