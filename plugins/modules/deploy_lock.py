#!/usr/bin/python
"""Ansible module: the node's deploy lock (one deploy or rollback at a time per node).

The logic is the collection's module_utils deploy_lock (plugins/module_utils/deploy_lock.py,
stdlib only; the node package imports the same file as specdeploy.node.module_utils). As a
module it answers as data (acquired, owner, message) instead of an exit code to parse, runs in
check mode (says whether it would take or give back the lock, changes nothing) and shows the
lock file's owner record as a diff.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: deploy_lock
short_description: Take or give back a node's specdeploy deploy lock
description:
  - Takes (state=locked) or gives back (state=unlocked) the node's deploy lock, so one deploy or
    rollback runs at a time per node; a stale lock of a run that is gone can be broken.
  - Answers as data (acquired, owner, message); check mode says what it would do; diff mode
    shows the lock's owner record.
author: specdeploy maintainers (!UNKNOWN)
version_added: 0.1.0
options:
  root:
    description:
      - The release root the lock guards.
      - A task may leave it out; the action plugin then passes the play's C(specdeploy_root).
    type: path
    required: true
  state:
    description: >-
      locked takes the lock for owner; unlocked gives back the lock with token; shown only
      reads who holds it (make status, the clean-up after an interrupted run).
    type: str
    required: true
    choices: [locked, unlocked, shown]
  owner: {description: "This run's owner record (deploy_lock.py whoami; locked).", type: dict}
  stale_after:
    description: Seconds after which another controller's lock counts as stale (locked).
    type: float
    default: 14400
  break_token:
    description: Break a lock with this token, its run being gone (locked).
    type: str
  token: {description: "This run's token; another run's lock is left alone (unlocked).", type: str}
"""

EXAMPLES = r"""
- name: Take the deploy lock
  specdeploy.toolkit.deploy_lock:
    root: /opt/specdeploy
    state: locked
    owner: "{{ whoami.stdout | from_json }}"
  register: lock

- name: Give it back
  specdeploy.toolkit.deploy_lock:
    root: /opt/specdeploy
    state: unlocked
    token: "{{ lock.owner.token }}"
"""

RETURN = r"""
changed: {description: "Taken or given back (or would be).", type: bool, returned: always}
acquired: {description: "This run holds the lock (locked).", type: bool, returned: locked}
released: {description: "Given back (unlocked).", type: bool, returned: unlocked}
owner: {description: "Who holds (or held) the lock; null: free.", type: dict, returned: when held}
broken: {description: "The stale lock that was broken.", type: dict, returned: locked}
message: {description: "Who holds the lock, for the operator.", type: str, returned: when refused}
"""

import json
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specdeploy.toolkit.plugins.module_utils.deploy_lock import (
    acquire,
    lock_path,
    read_owner,
    release,
)


def _text(owner: object) -> str:
    return json.dumps(owner, indent=2, sort_keys=True) + "\n" if owner else ""


def run(module: AnsibleModule) -> dict:
    p = module.params
    root, check = Path(p["root"]), module.check_mode
    before = read_owner(root)
    if p["state"] == "shown":
        return {"changed": False, "owner": before}
    if p["state"] == "locked":
        result = acquire(root, p["owner"], p["stale_after"], p["break_token"], check=check)
        after = result["owner"] if result["acquired"] else before
    else:
        result = release(root, p["token"], check=check)
        after = None if result["released"] else before
    if result["changed"] and module._diff:
        where = str(lock_path(root, create=False))
        result["diff"] = {
            "before": _text(before),
            "after": _text(after),
            "before_header": where,
            "after_header": where,
        }
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "state": {
                "type": "str",
                "required": True,
                "choices": ["locked", "unlocked", "shown"],
            },
            "owner": {"type": "dict"},
            "stale_after": {"type": "float", "default": 4 * 3600.0},
            "break_token": {"type": "str", "no_log": False},  # names a lock, grants nothing
            "token": {"type": "str", "no_log": False},
        },
        required_if=[("state", "locked", ["owner"]), ("state", "unlocked", ["token"])],
        supports_check_mode=True,
    )
    try:
        module.exit_json(**run(module))
    except (OSError, ValueError) as error:
        module.fail_json(msg=f"{type(error).__name__}: {error}")


if __name__ == "__main__":
    main()
