"""Run one of the toolkit's node-side tools (``python -m specdeploy.node...``) with a release's
own Python and toolkit on the node, as ansible.builtin.command runs a command.

The release's venv Python and its toolkit directory on PYTHONPATH come from the release's id
(the one layout, module_utils/release.py ``release_paths``): the tasks no longer spell both
paths out each (issue 25). ``release`` defaults to the release the play deploys
(``specdeploy_release.id``).
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.specdeploy.toolkit.plugins.module_utils.release import release_paths
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.node_command import run_command
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import (
    UNSET,
    resolve,
    task_args,
)

OPTIONS = {"tool", "args", "release"}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        task_args(args, "release_tool", OPTIONS)
        tool, rest = args.get("tool"), args.get("args", [])
        if not isinstance(tool, str) or not tool.startswith("specdeploy.node."):
            raise AnsibleActionFail(f"release_tool: not a node tool of the toolkit: {tool!r}")
        if not isinstance(rest, list):
            raise AnsibleActionFail("release_tool: args must be a list")
        release = args.get("release") or self._deployed_release()
        root = resolve(self._templar, "specdeploy_root")
        if root is UNSET or not root:
            raise AnsibleActionFail("release_tool: specdeploy_root is unset")
        paths = release_paths(str(root), str(release))
        argv = [paths["python"], "-m", tool, *(str(a) for a in rest)]
        result.update(run_command(self, argv, {"PYTHONPATH": paths["toolkit_dir"]}, task_vars))
        return result

    def _deployed_release(self) -> str:
        release = resolve(self._templar, "specdeploy_release")
        if release is UNSET or not isinstance(release, dict) or not release.get("id"):
            raise AnsibleActionFail("release_tool: no release given and no specdeploy_release.id")
        return str(release["id"])
