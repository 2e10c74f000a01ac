#!/usr/bin/python
"""Ansible module: make several directories and small files exactly so, in one round trip.

Why a module: ansible.builtin.file, copy and template cost one SSH round trip and one module
start each (0.5-1 s on a loaded node), also when nothing changes; the provisioning layout and a
release's rendered config are a dozen such items, most of a no-op deploy's time. This does
what those modules do for a list of items (content compared byte for byte, written atomically,
owner, group and mode enforced) in one run, with check mode and --diff. Templates are rendered
on the controller (lookup('template')) and passed as content.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: files
short_description: Directories and small files with content, owner, group and mode, in one run
description:
  - Creates directories and writes small files with their content, owner, group and mode,
    all in one module run (one round trip), atomically (a reader sees the old or the new file).
  - Check mode says what would change; diff mode shows the content changes.
author: specdeploy maintainers (!UNKNOWN)
version_added: 0.1.0
options:
  items:
    description: In order (a directory before the files in it).
    type: list
    elements: dict
    required: true
    suboptions:
      path: {description: Absolute path., type: path, required: true}
      state: {description: file or directory., type: str, default: file, choices: [file, directory]}
      content: {description: The file's whole content (state=file)., type: str, default: ""}
      owner: {description: User name., type: str, default: root}
      group: {description: Group name., type: str, default: root}
      mode: {description: 'Octal mode as a string, for example "0644".', type: str, required: true}
"""

EXAMPLES = r"""
- name: Write the unit and its drop-in directory
  specdeploy.toolkit.files:
    items:
      - {path: /etc/systemd/system/vllm.service.d, state: directory, mode: "0755"}
      - path: /etc/systemd/system/vllm.service.d/override.conf
        content: "[Service]\n"
        mode: "0644"
"""

RETURN = r"""
changed_paths:
  description: The paths that were (or, in check mode, would be) created or changed.
  type: list
  returned: always
"""

import grp
import os
import pwd
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specdeploy.toolkit.plugins.module_utils.specdeploy_fsio import atomic_write


def wanted_ids(owner: str, group: str, check: bool) -> tuple[int | None, int | None]:
    """The uid and gid of the item's owner and group. A name the node does not know yet is None
    in check mode (on a fresh node the service user is created by an earlier task of the same
    run, which check mode only reports), and a one-line error otherwise."""
    ids: list[int | None] = []
    for kind, name, lookup in (("user", owner, pwd.getpwnam), ("group", group, grp.getgrnam)):
        try:
            entry = lookup(name)
        except KeyError:
            if not check:
                raise ValueError(f"{kind} {name!r} does not exist on the node") from None
            ids.append(None)
            continue
        ids.append(entry.pw_uid if kind == "user" else entry.gr_gid)  # type: ignore[union-attr]
    return ids[0], ids[1]


def metadata_changes(path: str, uid: int | None, gid: int | None, mode: int) -> list[str]:
    info = os.lstat(path)
    changes = []
    if stat.S_IMODE(info.st_mode) != mode:
        changes.append(f"mode {stat.S_IMODE(info.st_mode):04o} -> {mode:04o}")
    if uid is None or gid is None:  # check mode: owned by a user or group this run creates
        changes.append(f"owner {info.st_uid}:{info.st_gid} -> a user or group this run creates")
    elif (info.st_uid, info.st_gid) != (uid, gid):
        changes.append(f"owner {info.st_uid}:{info.st_gid} -> {uid}:{gid}")
    return changes


def correct_metadata(
    path: str, uid: int | None, gid: int | None, mode: int, check: bool
) -> dict | None:
    """Owner, group and mode of an existing item made so; the diff entry when they were not."""
    changes = metadata_changes(path, uid, gid, mode)
    if not changes:
        return None
    if not check:
        os.chown(path, uid, gid)
        os.chmod(path, mode)
    return {"before_header": path, "after_header": path, "prepared": "; ".join(changes)}


def read_text(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return None


def ensure(item: dict, check: bool) -> dict | None:
    """Make one item so; the diff entry when it changed (or would), else None."""
    path = item["path"]
    mode = int(item["mode"], 8)
    uid, gid = wanted_ids(item["owner"], item["group"], check)
    if item["state"] == "directory":
        if os.path.lexists(path) and not os.path.isdir(path):
            raise ValueError(f"{path} exists and is not a directory")
        if not os.path.isdir(path):
            if not check:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                os.mkdir(path)
                os.chown(path, uid, gid)
                os.chmod(path, mode)
            return {
                "before": {"path": path, "state": "absent"},
                "after": {"path": path, "state": "directory"},
            }
        return correct_metadata(path, uid, gid, mode, check)
    content = item["content"]
    before = read_text(path)
    if before is not None and not os.path.isfile(path):
        raise ValueError(f"{path} exists and is not a regular file")
    if before != content:
        if not check:
            atomic_write(path, content.encode("utf-8"), mode, (uid, gid))
        return {
            "before_header": path if before is not None else f"{path} (absent)",
            "after_header": path,
            "before": before or "",
            "after": content,
        }
    return correct_metadata(path, uid, gid, mode, check)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "items": {
                "type": "list",
                "elements": "dict",
                "required": True,
                "options": {
                    "path": {"type": "path", "required": True},
                    "state": {"type": "str", "default": "file", "choices": ["file", "directory"]},
                    "content": {"type": "str", "default": ""},
                    "owner": {"type": "str", "default": "root"},
                    "group": {"type": "str", "default": "root"},
                    "mode": {"type": "str", "required": True},
                },
            }
        },
        supports_check_mode=True,
    )
    changed_paths, diffs = [], []
    for item in module.params["items"]:
        if not os.path.isabs(item["path"]):
            module.fail_json(msg=f"{item['path']}: not an absolute path")
        try:
            diff = ensure(item, module.check_mode)
        except (OSError, KeyError, ValueError) as error:
            module.fail_json(msg=f"{item['path']}: {error}", changed_paths=changed_paths)
        if diff is not None:
            changed_paths.append(item["path"])
            diffs.append(diff)
    module.exit_json(changed=bool(changed_paths), changed_paths=changed_paths, diff=diffs)


if __name__ == "__main__":
    main()
