"""The release's paths on a node, as a filter: ``specdeploy_root |
specdeploy.toolkit.release_paths(release_id)`` gives dir, toolkit_dir, venv_dir, python,
config_dir and manifest (the layout of the collection's module_utils ``release``, the same code
the releases module runs on the node)."""

from __future__ import annotations

from ansible_collections.specdeploy.toolkit.plugins.module_utils.release import release_paths


class FilterModule:
    def filters(self):
        return {"release_paths": release_paths}
