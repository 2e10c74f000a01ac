"""The gpu_node role's layout and reboot note (plugins/filter/gpu_node.py) and the monitoring
role's scrape targets (plugins/filter/monitoring.py)."""

from __future__ import annotations

from ansible_collections.specdeploy.toolkit.plugins.filter import gpu_node, monitoring

DIRS = {
    "releases_dir": "/opt/sd/releases",
    "model_path": "/models/target",
    "drafter_path": "/models/drafter",
    "config_dir": "/etc/sd",
    "cache_dir": "/var/cache/sd",
    "log_dir": "/var/log/sd",
    "user": "specdeploy",
    "group": "specdeploy",
}


def test_the_layout_gives_each_directory_its_owner_and_mode() -> None:
    items = gpu_node.node_layout("/opt/sd", **DIRS)
    modes = {item["path"]: item["mode"] for item in items}
    assert modes == {
        "/opt/sd": "0755",
        "/opt/sd/releases": "0755",
        "/models": "0755",  # the model's and the drafter's parent, once
        "/etc/sd": "0700",
        "/var/cache/sd": "0750",
        "/var/cache/sd/compile": "0750",
        "/var/log/sd": "0750",
    }
    assert len(items) == len(modes)
    assert all(item["state"] == "directory" for item in items)
    owned = [item for item in items if "owner" in item]
    assert [item["path"] for item in owned] == [
        "/var/cache/sd",
        "/var/cache/sd/compile",
        "/var/log/sd",
    ]
    assert all(item["group"] == "specdeploy" for item in owned)


def test_the_weights_directories_are_both_laid_out_when_they_differ() -> None:
    items = gpu_node.node_layout("/opt/sd", **{**DIRS, "drafter_path": "/drafters/d"})
    assert [item["path"] for item in items][2:4] == ["/models", "/drafters"]


def test_the_settings_files_render_the_knobs_whole_and_in_a_stable_order() -> None:
    limits = gpu_node.limits_conf(
        [{"item": "memlock", "value": "unlimited"}, {"item": "nofile", "value": "1048576"}], "vllm"
    )
    assert limits.splitlines()[1:] == ["vllm - memlock unlimited", "vllm - nofile 1048576"]
    assert limits.startswith("# Managed by specdeploy (gpu_node_limits)") and limits.endswith("\n")
    # sorted by key whatever the knob's order: the same knobs never rewrite the file
    one = gpu_node.sysctl_conf({"vm.swappiness": "10", "kernel.numa_balancing": "0"})
    two = gpu_node.sysctl_conf({"kernel.numa_balancing": "0", "vm.swappiness": "10"})
    assert one == two
    assert one.splitlines()[1:] == ["kernel.numa_balancing=0", "vm.swappiness=10"]
    assert gpu_node.sysctl_conf({}).count("\n") == 1  # the header alone


def test_the_reboot_note_in_check_mode() -> None:
    assert (
        gpu_node.reboot_plan_note(False, allowed=True, is_controller=False) == "No reboot needed."
    )
    assert gpu_node.reboot_plan_note(True, allowed=True, is_controller=False).endswith(
        "it would happen (gpu_node_reboot_allowed)"
    )
    for allowed, controller in [(False, False), (True, True)]:
        assert gpu_node.reboot_plan_note(True, allowed=allowed, is_controller=controller).endswith(
            "the run would stop and ask for one"
        )


HOSTVARS = {
    "n1": {
        "ansible_host": "10.0.0.1",
        "specdeploy_port": 9000,
        "specdeploy_speculative_enabled": "false",
    },
    "n2": {
        "monitoring_scrape_host": "scrape2",
        "ansible_host": "10.0.0.2",
        "specdeploy_served_model_name": "m2",
    },
    "n3": {},
}


def test_the_vllm_targets_take_each_nodes_own_knobs_else_the_plays() -> None:
    targets = monitoring.vllm_scrape_targets(
        ["n1", "n2", "n3"], HOSTVARS, port=8000, speculative=True, model="m"
    )
    assert targets == [
        {"node": "n1", "address": "10.0.0.1:9000", "speculative": False, "model": "m"},
        {"node": "n2", "address": "scrape2:8000", "speculative": True, "model": "m2"},
        {"node": "n3", "address": "n3:8000", "speculative": True, "model": "m"},
    ]


def test_the_node_exporter_targets_are_none_without_a_port() -> None:
    assert monitoring.node_exporter_targets(["n1", "n3"], HOSTVARS, 9100) == [
        {"node": "n1", "address": "10.0.0.1:9100"},
        {"node": "n3", "address": "n3:9100"},
    ]
    assert monitoring.node_exporter_targets(["n1"], HOSTVARS, 0) == []
