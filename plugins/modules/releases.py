#!/usr/bin/python
"""Ansible module: the node's releases, `current` and the activation ledger.

The logic is the collection's module_utils release (plugins/module_utils/release.py, stdlib
only; the node package imports the same file as specdeploy.node.module_utils.release). As a module
it runs in check mode (it says what it would change and changes nothing) and shows a diff,
which `ansible.builtin.script` could not: the deploy's check mode no longer skips it.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: releases
short_description: Create, update, activate and prune specdeploy releases on a node
description:
  - Manages the node's releases, the C(current) link and the activation ledger (the logic is the
    collection's module_utils C(release)).
  - Check mode says what would change and changes nothing; diff mode shows the change.
author: specdeploy maintainers (!UNKNOWN)
version_added: 0.1.0
options:
  root:
    description:
      - The release root (releases/, current, ledger.jsonl).
      - A task may leave it out; the action plugin then passes the play's C(specdeploy_root).
    type: path
    required: true
  command:
    description: What to do.
    type: str
    required: true
    choices: [init, update, record_start, activate, deactivate, target, prune, status]
  release_id: {description: "The release (init, update, record_start, activate).", type: str}
  inputs: {description: "What defines the release (init).", type: dict}
  fields: {description: "Fields merged into the manifest (update).", type: dict, default: {}}
  status:
    description: The new status (update).
    type: str
    choices: [building, verified, active, inactive, failed]
  from_status:
    description: Change the status only from this one (update).
    type: str
    choices: [building, verified, active, inactive, failed]
  reason: {description: "Why (update).", type: str}
  failure_stage: {description: "With status failed (update).", type: str, choices: [build, serve]}
  start: {description: "One start record (record_start).", type: dict}
  action: {description: "The ledger's action name.", type: str, default: deploy}
  to: {description: "The rollback target; empty: the previous one.", type: str, default: ""}
  keep: {description: "Releases to keep (prune).", type: int}
  busy_timeout:
    description: Seconds to wait for an interrupted run's processes (init).
    type: float
    default: 300
"""

EXAMPLES = r"""
- name: Start a release
  specdeploy.toolkit.releases:
    root: /opt/specdeploy
    command: init
    release_id: 0.16.0-abc123
    inputs: {vllm_version: 0.16.0}

- name: Point current at it
  specdeploy.toolkit.releases:
    root: /opt/specdeploy
    command: activate
    release_id: 0.16.0-abc123
"""

RETURN = r"""
changed:
  description: Whether the releases changed (or would, in check mode).
  type: bool
  returned: always
current:
  description: The release `current` points at (activate, deactivate, target, status).
  type: str
  returned: when known
current_manifest:
  description: The manifest of the release `current` points at; empty when there is none (status).
  type: dict
  returned: status
target: {description: "The release a rollback activates (target).", type: str, returned: found}
error:
  description: Why there is no rollback target (target; an answer, not a module failure).
  type: str
  returned: when refused
"""

import json
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specdeploy.toolkit.plugins.module_utils.release import (
    STATUSES,
    ReleaseError,
    activate,
    current_release,
    deactivate,
    init_release,
    prune,
    record_start,
    rollback_target,
    status,
    update_release,
)

REQUIRED = {
    "init": ["release_id", "inputs"],
    "update": ["release_id"],
    "record_start": ["release_id", "start"],
    "activate": ["release_id"],
    "prune": ["keep"],
}


def _text(value: object) -> str:
    return json.dumps(value, indent=2, sort_keys=True) + "\n"


def run(module: AnsibleModule) -> dict:
    p = module.params
    root, rid, check = Path(p["root"]), p["release_id"], module.check_mode
    command = p["command"]
    if command == "init":
        return init_release(root, rid, p["inputs"], p["busy_timeout"], check=check)
    if command == "update":
        result = update_release(
            root,
            rid,
            p["fields"],
            p["status"],
            p["reason"],
            p["from_status"],
            p["failure_stage"],
            check=check,
        )
        before, after = result.pop("before", None), result.pop("after", None)
        if result["changed"] and module._diff:
            result["diff"] = {
                "before": _text(before),
                "after": _text(after),
                "before_header": f"releases/{rid}/manifest.json",
                "after_header": f"releases/{rid}/manifest.json",
            }
        return result
    if command == "record_start":
        return record_start(root, rid, p["start"], check=check)
    if command in ("activate", "deactivate"):
        before = current_release(root)
        if command == "activate":
            result = activate(root, rid, p["action"], check=check)
        else:
            result = deactivate(root, p["action"], check=check)
        if result["changed"] and module._diff:
            link = "current -> releases/{}\n"
            result["diff"] = {
                "before": link.format(before) if before else "",
                "after": link.format(result["current"]) if result["current"] else "",
            }
        return result
    if command == "target":
        try:
            return rollback_target(root, p["to"])
        except ReleaseError as refusal:
            # A refusal is an answer (the caller says it to the operator), not a failure.
            return {"changed": False, "target": "", "error": str(refusal)}
    if command == "prune":
        return prune(root, p["keep"], check=check)
    return status(root)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "command": {
                "type": "str",
                "required": True,
                "choices": [
                    "init",
                    "update",
                    "record_start",
                    "activate",
                    "deactivate",
                    "target",
                    "prune",
                    "status",
                ],
            },
            "release_id": {"type": "str"},
            "inputs": {"type": "dict"},
            "fields": {"type": "dict", "default": {}},
            "status": {"type": "str", "choices": list(STATUSES)},
            "from_status": {"type": "str", "choices": list(STATUSES)},
            "reason": {"type": "str"},
            "failure_stage": {"type": "str", "choices": ["build", "serve"]},
            "start": {"type": "dict"},
            "action": {"type": "str", "default": "deploy"},
            "to": {"type": "str", "default": ""},
            "keep": {"type": "int"},
            "busy_timeout": {"type": "float", "default": 300.0},
        },
        required_if=[("command", c, args) for c, args in REQUIRED.items()],
        supports_check_mode=True,
    )
    try:
        module.exit_json(**run(module))
    except ReleaseError as error:
        module.fail_json(msg=str(error))
    except (OSError, ValueError) as error:
        module.fail_json(msg=f"{type(error).__name__}: {error}")


if __name__ == "__main__":
    main()
