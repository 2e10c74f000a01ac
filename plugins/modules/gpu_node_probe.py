#!/usr/bin/python
"""Ansible module: what the provisioning needs to know of a node, in one read-only round trip.

Why a module: the container check, the package install, the group and the user were four
module runs (about 3 s of a no-op deploy on a loaded node) although on a provisioned node
nothing is to be done. This reads the same facts once; the role then runs apt, group and user
only where something is missing or different (they stay the tools that change things).
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_node_probe
short_description: Container type, installed packages, service user and group (read-only)
description:
  - Reports the container type, the installed state of the given Debian packages, and the
    service user and group, in one read-only module run.
author: specdeploy maintainers (!UNKNOWN)
version_added: 0.1.0
options:
  packages:
    description: Debian packages whose installed state is reported.
    type: list
    elements: str
    required: true
  host_packages:
    description: Debian packages a host needs and a container does not (reported only outside one).
    type: list
    elements: str
    default: []
  user:
    description: The service user to look up.
    type: str
    required: true
  group:
    description: The service group to look up.
    type: str
    required: true
  shell:
    description: The service user's login shell, as the role wants it.
    type: str
    required: true
  home:
    description: The service user's home, as the role wants it.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: What the provisioning finds on the node
  specdeploy.toolkit.gpu_node_probe:
    packages: [python3-venv, systemd]
    user: vllm
    group: vllm
    shell: /usr/sbin/nologin
    home: /var/cache/specdeploy
  register: found
"""

RETURN = r"""
container:
  description: systemd-detect-virt --container (C(none) on a host or VM).
  type: str
  returned: always
missing_packages:
  description: >-
    The packages (of those asked; host packages only outside a container) that are not
    installed.
  type: list
  returned: always
user:
  description: C(exists), and when it does C(home), C(shell), C(gid).
  type: dict
  returned: always
group:
  description: C(exists), and when it does C(gid).
  type: dict
  returned: always
accounts_ok:
  description: The group and the user exist, the user in that group with that shell and home.
  type: bool
  returned: always
ansible_facts:
  description: C(gpu_node_container) (the container type) and C(gpu_node_in_container).
  type: dict
  returned: always
"""

import grp
import pwd
import subprocess

from ansible.module_utils.basic import AnsibleModule


def container_type() -> str:
    try:
        result = subprocess.run(
            ["systemd-detect-virt", "--container"],
            capture_output=True,
            text=True,
            check=False,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "none"
    return result.stdout.strip() or "none"


def missing_packages(packages: list[str]) -> list[str]:
    if not packages:
        return []
    result = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package} ${Status}\\n", *packages],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    installed = {
        line.split()[0].split(":")[0]
        for line in result.stdout.splitlines()
        if line.endswith(" install ok installed")
    }
    return [name for name in packages if name not in installed]


def user_entry(name: str) -> dict:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return {"exists": False}
    return {"exists": True, "home": entry.pw_dir, "shell": entry.pw_shell, "gid": entry.pw_gid}


def group_entry(name: str) -> dict:
    try:
        return {"exists": True, "gid": grp.getgrnam(name).gr_gid}
    except KeyError:
        return {"exists": False}


# Read-only: check mode runs it as it is.
ARGUMENT_SPEC = {
    "packages": {"type": "list", "elements": "str", "required": True},
    "host_packages": {"type": "list", "elements": "str", "default": []},
    "user": {"type": "str", "required": True},
    "group": {"type": "str", "required": True},
    "shell": {"type": "str", "required": True},
    "home": {"type": "str", "required": True},
}


def accounts_ok(user: dict, group: dict, shell: str, home: str) -> bool:
    """Whether the group and user tasks would change nothing (so the role skips them)."""
    return bool(
        user["exists"]
        and group["exists"]
        and user["shell"] == shell
        and user["home"] == home
        and user["gid"] == group["gid"]
    )


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    container = container_type()
    user, group = user_entry(params["user"]), group_entry(params["group"])
    module.exit_json(
        changed=False,
        container=container,
        missing_packages=missing_packages(
            params["packages"] + ([] if container != "none" else params["host_packages"])
        ),
        user=user,
        group=group,
        accounts_ok=accounts_ok(user, group, params["shell"], params["home"]),
        # Facts straight from the module: a set_fact after it was one more task per node.
        ansible_facts={
            "gpu_node_container": container,
            "gpu_node_in_container": container != "none",
        },
    )


if __name__ == "__main__":
    main()
