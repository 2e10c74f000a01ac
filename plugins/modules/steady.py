#!/usr/bin/python
"""Ansible module: check, read-only and in one round trip, that a node serves the planned
release exactly as a deploy would leave it (a no-op deploy's fast path).

The logic is the collection's module_utils steady (plugins/module_utils/steady.py, stdlib only;
the node package imports the same file as specdeploy.node.module_utils.steady). The files to
compare are rendered on the controller from the roles' own templates and passed as content;
the secrets files come in their own option, hidden from the output (no_log).
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: steady
short_description: Check that a node serves the planned release unchanged (read-only)
description:
  - One read-only pass over what the rollout's walk would check on a node that already serves
    the planned release - the deploy lock, the release and its patched files, the rendered files,
    the service, old releases to prune, a readiness smoke check - and a drift message for each
    difference.
  - Check mode leaves the smoke check out.
  - A task may leave options out; the action plugin (plugins/action/steady.py) then fills them
    from the play's variables as roles/vllm_service renders and checks them (the files of the
    lookup specdeploy.toolkit.service_files, C(vllm_service_secret_files), the smoke check of
    C(specdeploy_release.id), C(specdeploy_keep_releases), C(vllm_service_action)).
author: specdeploy maintainers (!UNKNOWN)
version_added: 0.1.0
options:
  root: {description: "The release root.", type: path, required: true}
  release_id: {description: "The planned release.", type: str, required: true}
  service: {description: "The systemd service's name, without .service.", type: str, required: true}
  files:
    description: The files the deploy renders, with the content it renders now.
    type: list
    elements: dict
    default: []
    suboptions:
      path: {description: Absolute path., type: path, required: true}
      content: {description: The file's whole content., type: str, required: true}
      owner: {description: User name., type: str, default: root}
      group: {description: Group name., type: str, default: root}
      mode: {description: 'Octal mode as a string, for example "0644".', type: str, required: true}
  secret_files:
    description: Like files, for files that hold secrets (their content is never shown).
    type: list
    elements: dict
    default: []
    suboptions:
      path: {description: Absolute path., type: path, required: true}
      content: {description: The file's whole content (no_log)., type: str, required: true}
      owner: {description: User name., type: str, default: root}
      group: {description: Group name., type: str, default: root}
      mode: {description: 'Octal mode as a string, for example "0600".', type: str, required: true}
  present: {description: "Paths that must exist.", type: list, elements: path, default: []}
  keep_releases:
    description: The prune's keep; a release it would remove is drift.
    type: int
    default: 3
  smoke_argv:
    description: The readiness smoke check's command line (none, not run).
    type: list
    elements: str
  smoke_environment: {description: "Its environment.", type: dict, default: {}}
  smoke_timeout_s: {description: "Its wall-time limit.", type: float, default: 60}
  downtime_action:
    description:
      - The ledger's action name for this run; a steady node's downtime window is then none
        (fact C(vllm_service_downtime)), outside check mode.
    type: str
"""

EXAMPLES = r"""
- name: Is the node already serving the planned release, unchanged?
  specdeploy.toolkit.steady:
    root: /opt/specdeploy
    release_id: 0.16.0-abc123
    service: vllm
    files:
      - {path: /etc/systemd/system/vllm.service, content: "{{ unit_text }}", mode: "0644"}
  register: steady
"""

RETURN = r"""
steady: {description: "The node serves the release unchanged.", type: bool, returned: always}
drifts: {description: "What differs (empty when steady).", type: list, returned: always}
smoke: {description: "The smoke check's result (null when not run).", type: dict, returned: always}
left_drained:
  description: "A run's drain left the node's out-of-rotation note (<root>/.out-of-rotation)."
  type: bool
  returned: always
ansible_facts:
  description: >-
    vllm_service_steady and vllm_service_steady_drifts (the result's steady and drifts); for a
    steady node outside check mode with downtime_action, vllm_service_downtime (no window: it did
    not restart). Set by the module so that the role needs no set_fact task per node.
  type: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specdeploy.toolkit.plugins.module_utils.steady import check

FILE_OPTIONS = {
    "path": {"type": "path", "required": True},
    "content": {"type": "str", "required": True},
    "owner": {"type": "str", "default": "root"},
    "group": {"type": "str", "default": "root"},
    "mode": {"type": "str", "required": True},
}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "release_id": {"type": "str", "required": True},
            "service": {"type": "str", "required": True},
            "files": {"type": "list", "elements": "dict", "default": [], "options": FILE_OPTIONS},
            "secret_files": {
                "type": "list",
                "no_log": False,  # the content suboption is no_log; paths name the drift
                "elements": "dict",
                "default": [],
                # Only the content is secret (the paths name the drift).
                "options": {**FILE_OPTIONS, "content": {**FILE_OPTIONS["content"], "no_log": True}},
            },
            "present": {"type": "list", "elements": "path", "default": []},
            "keep_releases": {"type": "int", "default": 3},
            "smoke_argv": {"type": "list", "elements": "str"},
            "smoke_environment": {"type": "dict", "default": {}},
            "smoke_timeout_s": {"type": "float", "default": 60.0},
            "downtime_action": {"type": "str"},
        },
        supports_check_mode=True,
    )
    spec = dict(module.params)
    action = spec.pop("downtime_action")
    spec["files"] = spec["files"] + spec.pop("secret_files")
    try:
        # Read-only in every mode; check mode only leaves the smoke check out, as the walk does.
        result = check(spec, run_smoke=not module.check_mode)
    except (OSError, ValueError, KeyError) as error:
        module.fail_json(msg=f"{type(error).__name__}: {error}")
    facts = {
        "vllm_service_steady": result["steady"],
        "vllm_service_steady_drifts": result["drifts"],
    }
    if result["steady"] and action and not module.check_mode:
        facts["vllm_service_downtime"] = {
            "release": spec["release_id"],
            "action": action,
            "restarted": False,
            "window": None,
        }
    module.exit_json(changed=False, ansible_facts=facts, **result)


if __name__ == "__main__":
    main()
