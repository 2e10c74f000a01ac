#!/usr/bin/python
"""Ansible module: a new release's venv linked from an earlier release of the same vLLM.

The logic is the collection's module_utils venv_clone (plugins/module_utils/venv_clone.py).
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: release_venv
short_description: Build a release's venv from an earlier release of the same vLLM, by hard links
description:
  - Finds the newest finished release (verified, active or inactive) with the same vLLM
    version, the same Python and the same node requirements, and hard-links its venv into the
    new release; only the files that name the venv's path are written anew.
  - The donor must have been installed from the same vLLM wheel(s) as the new release would
    be (the sha256 of the wheelhouse's matching wheels, recorded in the venv with
    I(state=recorded) after an install); a venv without that record is no donor.
  - Nothing is changed when the venv exists or no such release is there; the caller then
    installs the venv the usual way.
  - Check mode says which release the venv would come from.
author: specdeploy maintainers (!UNKNOWN)
version_added: 0.1.0
options:
  root:
    description: The release root (releases/ under it).
    type: path
    required: true
  release_id:
    description: The new release.
    type: str
    required: true
  vllm_version:
    description: The release's pinned vLLM version.
    type: str
    required: true
  python:
    description: The interpreter release venvs are made with (its version must match).
    type: path
    required: true
  requirements:
    description: The new release's requirements-node.txt (its content must match the donor's).
    type: path
    required: true
  wheelhouse:
    description: The directory vLLM is installed from (pip --find-links); empty for an index.
    type: str
    default: ""
  wheel:
    description:
      - With I(state=recorded), the digest to record, as the C(linked) step returned it in
        C(wheel) (that step has just read the same wheelhouse); empty to take it again.
    type: str
    default: ""
  state:
    description:
      - C(linked) links the venv from a donor when there is one.
      - C(recorded) writes which wheel the (freshly installed) venv came from.
    type: str
    choices: [linked, recorded]
    default: linked
"""

EXAMPLES = r"""
- name: Link the venv from an earlier release of this vLLM
  specdeploy.toolkit.release_venv:
    root: /opt/specdeploy
    release_id: 0.16.0-abc123
    vllm_version: 0.16.0
    python: /usr/bin/python3
    requirements: /opt/specdeploy/releases/0.16.0-abc123/toolkit/requirements-node.txt
    wheelhouse: /srv/wheelhouse

- name: Record which vLLM wheel the installed venv came from
  specdeploy.toolkit.release_venv:
    root: /opt/specdeploy
    release_id: 0.16.0-abc123
    vllm_version: 0.16.0
    python: /usr/bin/python3
    requirements: /opt/specdeploy/releases/0.16.0-abc123/toolkit/requirements-node.txt
    wheelhouse: /srv/wheelhouse
    state: recorded
"""

RETURN = r"""
changed:
  description: Whether the venv was linked (or would be, in check mode).
  type: bool
  returned: always
donor:
  description: The release the venv was linked from ("" when none).
  type: str
  returned: always
reason:
  description: Why nothing was linked.
  type: str
  returned: when nothing was linked
rewritten:
  description: Files written anew because they name the venv's path.
  type: int
  returned: when linked
wheel:
  description:
    - The digest of the wheel(s) the release installs (sha256 and name per line), when this
      step took it (a finished release of the same vLLM and Python was there to compare with).
  type: str
  returned: when taken
"""

from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specdeploy.toolkit.plugins.module_utils.venv_clone import (
    CloneError,
    clone_from_earlier_release,
    record_wheel,
    wheel_digest,
)

VERSION_CODE = "import sys; print('%d.%d.%d' % sys.version_info[:3])"


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "release_id": {"type": "str", "required": True},
            "vllm_version": {"type": "str", "required": True},
            "python": {"type": "path", "required": True},
            "requirements": {"type": "path", "required": True},
            "wheelhouse": {"type": "str", "default": ""},
            "wheel": {"type": "str", "default": ""},
            "state": {"type": "str", "choices": ["linked", "recorded"], "default": "linked"},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["state"] == "recorded":
        venv = Path(p["root"]) / "releases" / p["release_id"] / "venv"
        # the link step's digest of the same wheelhouse, a moment ago, when it took one
        digest = p["wheel"] or wheel_digest(p["wheelhouse"], p["vllm_version"])
        try:
            changed = record_wheel(venv, digest, check=module.check_mode)
        except OSError as exc:
            module.fail_json(msg=f"{venv}: cannot record the vLLM wheel: {exc}")
        module.exit_json(changed=changed, donor="", wheel=digest)
    rc, out, err = module.run_command([p["python"], "-c", VERSION_CODE])
    if rc != 0:
        module.fail_json(msg=f"python {p['python']} did not run: {err.strip() or out.strip()}")
    try:
        result = clone_from_earlier_release(
            Path(p["root"]) / "releases",
            p["release_id"],
            p["vllm_version"],
            out.strip(),
            Path(p["requirements"]),
            wheelhouse=p["wheelhouse"],
            check=module.check_mode,
        )
    except CloneError as exc:
        # not fatal: the venv is then installed the usual way
        result = {"changed": False, "donor": "", "reason": f"linking failed: {exc}"}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
