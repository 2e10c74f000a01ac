"""Pack a part of the toolkit for a release on the controller (roles/vllm_release), once per
fingerprint: ``python -m specdeploy.controller.toolkit_archive --part PART --out ARCHIVE`` in the
toolkit's directory, in the task's worker (as controller_check runs the toolkit's own tools),
unless the archive exists.

The archive is the one roles/vllm_release unpacks (``vllm_release_archive``,
``vllm_release_standin_archive``): ``<vllm_release_build_dir>/<toolkit|standin>-<fingerprint>.tar``
(plugins/filter/release_archive.py), from the planned release's fingerprints.
"""

from __future__ import annotations

import os
import sys

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.specdeploy.toolkit.plugins.filter.release_archive import release_archive
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.controller_checks import run_check
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import (
    require_all,
    task_args,
)

# The tool's part -> the release's fingerprint of it (release_archive's part).
PARTS = {"release": "toolkit", "standin": "standin"}
KNOBS = ("specdeploy_release", "specdeploy_toolkit_dir", "vllm_release_build_dir")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        part = task_args(args, "toolkit_archive", ("part",), {"part": PARTS})["part"]
        knobs = require_all(self._templar, KNOBS, "toolkit_archive")
        try:
            path = release_archive(
                knobs["specdeploy_release"], str(knobs["vllm_release_build_dir"]), PARTS[part]
            )
        except (KeyError, TypeError, ValueError) as error:
            raise AnsibleActionFail(f"toolkit_archive: {type(error).__name__}: {error}") from error
        result.update(path=path, changed=False)
        if os.path.exists(os.path.expanduser(path)):
            result["msg"] = f"{path} exists"
            return result
        if self._task.check_mode:  # it writes on the controller (the tasks turn check mode off)
            result.update(skipped=True, msg="it writes the archive: skipped in check mode")
            return result
        argv = [sys.executable, "-m", "specdeploy.controller.toolkit_archive"]
        argv += ["--part", part, "--out", path]
        try:
            answer = run_check(argv, None, os.path.realpath(str(knobs["specdeploy_toolkit_dir"])))
        except OSError as error:
            raise AnsibleActionFail(f"toolkit_archive: {error}") from error
        result.update(answer, cmd=argv, changed=answer["rc"] == 0)
        if answer["rc"] != 0:
            result.update(failed=True, msg=f"could not pack {path}: {answer['stderr'].strip()}")
        return result
