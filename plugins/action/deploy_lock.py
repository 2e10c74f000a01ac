"""Runs specdeploy.toolkit.deploy_lock on the node with ``root`` defaulting to the play's
``specdeploy_root`` (plugins/plugin_utils/release_root.py)."""

from __future__ import annotations

from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.release_root import (
    RootDefaultAction,
)


class ActionModule(RootDefaultAction):
    pass
