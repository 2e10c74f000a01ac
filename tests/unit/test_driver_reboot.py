"""Whether a node needs a reboot into the pinned driver and what the run says about it
(plugins/plugin_utils/driver_reboot.py, used by the action specdeploy.toolkit.driver_reboot_plan):
the facts and the words roles/gpu_node/tasks/driver.yml computed in Jinja."""

from __future__ import annotations

import pytest
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import driver_reboot

V = "580.95.05"


@pytest.mark.parametrize(
    ("host", "address", "connection", "own", "controller", "expected"),
    [
        ("gpu1", "10.0.0.5", "ssh", "aaa", "bbb", False),
        ("localhost", "10.0.0.5", "ssh", "aaa", "bbb", True),
        ("gpu1", "127.0.0.1", "ssh", "aaa", "bbb", True),
        ("gpu1", "::1", "ssh", "aaa", "bbb", True),
        ("gpu1", "10.0.0.5", "local", "aaa", "bbb", True),
        ("gpu1", "10.0.0.5", "ssh", "aaa", "aaa", True),  # the same machine under another name
        ("gpu1", "10.0.0.5", "ssh", "", "", False),  # no machine id: no match
    ],
)
def test_the_controller_is_recognised_by_name_connection_or_machine_id(
    host, address, connection, own, controller, expected
) -> None:
    assert driver_reboot.is_controller(host, address, connection, own, controller) is expected


def test_a_reboot_is_needed_when_the_driver_changed_or_another_module_runs() -> None:
    same = driver_reboot.reboot_facts(version=V, loaded=V, install_changed=False, controller=False)
    assert same == {
        "gpu_node_driver_loaded_version": V,
        "gpu_node_driver_changed": False,
        "gpu_node_reboot_needed": False,
        "gpu_node_is_controller": False,
    }
    assert driver_reboot.reboot_facts(version=V, loaded=V, install_changed=True, controller=False)[
        "gpu_node_reboot_needed"
    ]
    assert driver_reboot.reboot_facts(
        version=V, loaded="", install_changed=False, controller=False
    )["gpu_node_reboot_needed"]


def test_is_changed_reads_a_registered_result_as_ansible_does() -> None:
    assert driver_reboot.changed({"changed": True})
    assert not driver_reboot.changed({"changed": False})
    assert not driver_reboot.changed({})
    assert driver_reboot.changed({"results": [{"changed": False}, {"changed": True}]})


def test_the_check_mode_note_says_what_would_happen() -> None:
    facts = driver_reboot.reboot_facts(version=V, loaded="", install_changed=True, controller=False)
    note = driver_reboot.check_note(facts, version=V, packages=["nvidia-open"], allowed=False)
    assert note == (
        f"check mode: driver {V} (nvidia-open) would be installed; running module: none. "
        "A reboot would be needed: the run would stop and ask for one"
    )
    allowed = driver_reboot.check_note(facts, version=V, packages=["a", "b"], allowed=True)
    assert f"({'a, b'})" in allowed and allowed.endswith(
        "it would happen (gpu_node_reboot_allowed)"
    )


def test_the_stop_message_names_the_way_out() -> None:
    facts = driver_reboot.reboot_facts(
        version=V, loaded="550.1", install_changed=False, controller=False
    )
    assert driver_reboot.stop_message(facts, host="gpu1", version=V) == (
        f"gpu1: NVIDIA driver {V} is installed (already) but the running kernel module is "
        "550.1: a reboot is needed. Reboot it (or rerun with gpu_node_reboot_allowed=true), "
        "then run the deploy again."
    )
    facts = driver_reboot.reboot_facts(version=V, loaded="", install_changed=True, controller=True)
    said = driver_reboot.stop_message(facts, host="localhost", version=V)
    assert "(changed in this run)" in said and "kernel module is not loaded:" in said
    assert said.endswith(
        "Refusing to reboot localhost: it is the machine Ansible runs on. Reboot it by hand."
    )
