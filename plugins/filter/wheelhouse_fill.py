"""The command line of the controller's wheelhouse fill, as a filter (roles/vllm_release
fill_wheelhouse.yml runs it with specdeploy.toolkit.controller_check).

``platform | specdeploy.toolkit.wheelhouse_fill_args(wheelhouse, vllm_version, dependencies)``:
the arguments of ``python -m specdeploy.controller.controller_wheelhouse`` that download the
pinned vLLM for the nodes' platform (``specdeploy_release.python_platform``: its ``python``,
``machine`` and ``glibc``) into the controller's wheelhouse; ``--no-deps`` where the
dependencies are not installed (``specdeploy_vllm_install_dependencies`` false). Pure function.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def wheelhouse_fill_args(
    platform: Mapping[str, Any], wheelhouse: str, vllm_version: str, dependencies: Any
) -> list[str]:
    args = ["--dir", wheelhouse, "--vllm", vllm_version]
    args += ["--python-version", platform["python"], "--machine", platform["machine"]]
    args += ["--glibc", platform["glibc"]]
    return [str(arg) for arg in args] + ([] if dependencies else ["--no-deps"])


class FilterModule:
    def filters(self):
        return {"wheelhouse_fill_args": wheelhouse_fill_args}
