#!/usr/bin/python
"""Ansible module: does the server run, and from which release? One read-only round trip.

Why a module: `systemctl is-active`, `systemctl show -p MainPID` and a slurp of the main
process's command line were three module runs on every activation (twice on a first deploy);
this reads the same in one.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: service_process
short_description: Whether a service runs, and from which release directory (read-only)
description:
  - Reports the service's active state and main process, and whether that process's command
    line names the given release directory - a run that stopped between switching C(current)
    and the restart leaves the unit on the new release while the server that runs is the old
    one.
  - Reads only, in every mode (check mode runs it as it is).
author: specdeploy maintainers (!UNKNOWN)
version_added: 0.1.0
options:
  service:
    description:
      - The unit, for example C(vllm.service).
      - A task may leave it out; the action plugin then passes the play's server,
        C(specdeploy_service_name) with C(.service).
    type: str
    required: true
  release_dir:
    description: >-
      The directory the main process should run from (its command line names a path under it).
    type: path
    required: true
  systemctl:
    description: The systemctl to ask (tests).
    type: path
    default: systemctl
  proc:
    description: Where /proc is (tests).
    type: path
    default: /proc
"""

EXAMPLES = r"""
- name: Probe the server
  specdeploy.toolkit.service_process:
    service: vllm.service
    release_dir: /opt/specdeploy/releases/0.16.0-abc
  become: true
  register: server
"""

RETURN = r"""
active:
  description: What C(systemctl is-active) says (active, inactive, failed, activating, unknown ...).
  type: str
  returned: always
main_pid:
  description: The service's main process (0 when none).
  type: int
  returned: always
runs_release_dir:
  description: >-
    Whether the running main process's command line names a path under O(release_dir); null
    when the service is not active or has no main process. A command line that cannot be read
    counts as not naming it.
  type: bool
  returned: always
command_line:
  description: The running main process's command line, arguments joined by spaces (or empty).
  type: str
  returned: always
"""

import os
import subprocess

from ansible.module_utils.basic import AnsibleModule


def systemctl(binary: str, *args: str) -> str:
    try:
        result = subprocess.run(
            [binary, *args], capture_output=True, text=True, check=False, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout.strip()


def main_pid(binary: str, service: str) -> int:
    value = systemctl(binary, "show", "-p", "MainPID", "--value", service)
    return int(value) if value.isdigit() else 0


def command_line(proc: str, pid: int) -> str:
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "service": {"type": "str", "required": True},
            "release_dir": {"type": "path", "required": True},
            "systemctl": {"type": "path", "default": "systemctl"},
            "proc": {"type": "path", "default": "/proc"},
        },
        supports_check_mode=True,
    )
    params = module.params
    active = systemctl(params["systemctl"], "is-active", params["service"]) or "unknown"
    pid = main_pid(params["systemctl"], params["service"]) if active == "active" else 0
    runs, argv = None, ""
    if pid > 0:
        argv = command_line(params["proc"], pid).strip()
        runs = params["release_dir"].rstrip("/") + "/" in argv
    module.exit_json(
        changed=False, active=active, main_pid=pid, runs_release_dir=runs, command_line=argv
    )


if __name__ == "__main__":
    main()
