#!/usr/bin/python
"""Ansible module: every read-only fact the preflight needs from a node, in one round trip.

Why a module: the preflight used to run nine stat/slurp/command probes, each one SSH round trip
(~0.4 s). This reads the same facts in one module run and changes nothing (check mode safe).
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: node_probe
short_description: Read the facts the specdeploy preflight checks, without changing anything
author: specdeploy maintainers (!UNKNOWN)
description:
  - Reads the config.json of each model directory and a cheap fingerprint of its files (names,
    sizes, sampled content; never the whole weights), the free space where releases are built,
    who listens on the server port, the service's main PID, and the release that C(current)
    points at (read from the symlink itself) with its manifest.
version_added: 0.1.0
options:
  model_dirs:
    description: Directories that must hold a config.json (the target, the drafter).
    type: list
    elements: path
    required: true
  release_root:
    description: The release root (its nearest existing ancestor is measured when absent).
    type: path
    required: true
  port:
    description: The server's TCP port.
    type: int
    required: true
  service:
    description: The systemd service name (without .service).
    type: str
    required: true
  python:
    description: The Python the release venvs are built with; its platform is reported.
    type: path
    required: false
  drafter_dir:
    description: The EAGLE-3 drafter; the names and shapes of its d2t/t2d/fc tensors are read.
    type: path
    required: false
"""

EXAMPLES = r"""
- name: Read the facts the preflight checks
  specdeploy.toolkit.node_probe:
    model_dirs: [/models/target, /models/drafter]
    release_root: /opt/specdeploy
    port: 8000
    service: vllm
  register: probe
"""

RETURN = r"""
model_configs:
  description: >-
    One entry per model_dirs item, in order (path, exists, content, provenance: the
    directory's specdeploy-drafter.json text or null, and fingerprint: the model files'
    cheap content fingerprint, module_utils model_fingerprint, empty when no directory).
  type: list
  returned: always
free_kb:
  description: Free kilobytes on the file system that holds (or will hold) release_root.
  type: int
  returned: always
port_listeners:
  description: Lines of C(ss -Htlnp) for the port (empty when nobody listens).
  type: list
  returned: always
service_main_pid:
  description: The service's MainPID (0 when it does not run).
  type: int
  returned: always
current:
  description: >-
    C(islnk), C(target) (the release id), C(manifest) and C(gates) (its config/gates.json),
    each a dict, or null when unreadable.
  type: dict
  returned: always
drafter_weights:
  description: >-
    C(tensors) ({name: shape} of the drafter tensors the drafter check reads, from the
    safetensors headers, no weights loaded) and C(where); null without drafter_dir or weights.
  type: dict
  returned: always
python_platform:
  description: >-
    C(python) (major.minor), C(machine) and C(glibc) of the given Python, the tags its wheels
    must match; C(error) instead when it cannot run. Null when no python was given.
  type: dict
  returned: always
"""

import json
import os
import shutil
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specdeploy.toolkit.plugins.module_utils.model_fingerprint import (
    model_fingerprint,
)
from ansible_collections.specdeploy.toolkit.plugins.module_utils.specdeploy_weights import (
    drafter_tensors,
)

# Run by the node's own Python: what selects the wheels it can install.
PLATFORM_SCRIPT = (
    "import json, platform, sys; "
    "print(json.dumps({'python': '%d.%d' % sys.version_info[:2], "
    "'machine': platform.machine(), 'glibc': platform.libc_ver()[1]}))"
)


# Written next to a drafter's weights by the drafter pipeline (what it was trained on).
PROVENANCE_FILE = "specdeploy-drafter.json"


def read_text(path: str) -> str | None:
    """The file's text (bytes that are not UTF-8 read as U+FFFD: the checks on the controller
    name them), or None when there is no such file."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def read_config(directory: str) -> dict:
    content = read_text(os.path.join(directory, "config.json"))
    return {
        "path": directory,
        "exists": content is not None,
        "content": content or "",
        "provenance": read_text(os.path.join(directory, PROVENANCE_FILE)),
        "fingerprint": model_fingerprint(directory),
    }


def free_kb(root: str) -> int:
    existing = root
    while not os.path.exists(existing):
        existing = os.path.dirname(existing) or "/"
    return shutil.disk_usage(existing).free // 1024


def run_lines(argv: list[str]) -> list[str]:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line for line in result.stdout.splitlines() if line.strip()]


def current_release(root: str) -> dict:
    link = os.path.join(root, "current")
    if not os.path.islink(link):
        return {"islnk": False, "target": "", "manifest": None, "gates": None}
    target = os.readlink(link)
    return {
        "islnk": True,
        "target": os.path.basename(target.rstrip("/")),
        "manifest": read_json(os.path.join(link, "manifest.json")),
        "gates": read_json(os.path.join(link, "config", "gates.json")),
    }


def python_platform(python: str) -> dict:
    try:
        result = subprocess.run(
            [python, "-c", PLATFORM_SCRIPT], capture_output=True, text=True, check=False, timeout=20
        )
        if result.returncode == 0:
            return json.loads(result.stdout)
        return {"error": (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]}
    except (OSError, subprocess.TimeoutExpired, ValueError) as error:
        return {"error": str(error)}


def read_json(path: str) -> object:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "model_dirs": {"type": "list", "elements": "path", "required": True},
            "release_root": {"type": "path", "required": True},
            "port": {"type": "int", "required": True},
            "service": {"type": "str", "required": True},
            "python": {"type": "path", "required": False},
            "drafter_dir": {"type": "path", "required": False},
        },
        supports_check_mode=True,
    )
    params = module.params
    pid_lines = run_lines(
        ["systemctl", "show", "--property=MainPID", "--value", f"{params['service']}.service"]
    )
    module.exit_json(
        changed=False,
        model_configs=[read_config(d) for d in params["model_dirs"]],
        free_kb=free_kb(params["release_root"]),
        port_listeners=run_lines(["ss", "-Htlnp", f"sport = :{params['port']}"]),
        service_main_pid=int(pid_lines[0]) if pid_lines and pid_lines[0].isdigit() else 0,
        current=current_release(params["release_root"]),
        python_platform=python_platform(params["python"]) if params["python"] else None,
        drafter_weights=drafter_tensors(params["drafter_dir"]) if params["drafter_dir"] else None,
    )


if __name__ == "__main__":
    main()
