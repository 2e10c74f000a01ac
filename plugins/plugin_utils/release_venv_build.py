"""The steps that build a release's venv, as pure functions of the node's knobs (issue 25: no
programs in Jinja).

The action ``specdeploy.toolkit.release_venv_build`` runs them in order: link the venv from an
earlier release of the same vLLM (``specdeploy.toolkit.release_venv``); where none was linked,
install the toolkit's node-side needs and the pinned engine with uv, or pip where uv is not to
hand (``specdeploy.toolkit.release_venv_install``, offline from the node's wheelhouse where there
is one) and record which wheel the venv came from; last,
compile the venv's bytecode (``specdeploy.toolkit.release_bytecode``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The knobs the steps read (the action resolves them, templated).
KNOBS = (
    "specdeploy_root",
    "specdeploy_release",
    "specdeploy_python",
    "specdeploy_node_wheelhouse",
    "specdeploy_vllm_install_dependencies",
    "specdeploy_venv_installer",
)


def is_vllm(release: Mapping[str, Any]) -> bool:
    """An SGLang release's venv holds SGLang, not vLLM: no vLLM release is its donor, and it
    records no vLLM wheel."""
    return release.get("engine", "vllm") == "vllm"


def requirements_path(release: Mapping[str, Any]) -> str:
    return f"{release['toolkit_dir']}/requirements-node.txt"


def venv_args(knobs: Mapping[str, Any], state: str) -> dict[str, Any]:
    """specdeploy.toolkit.release_venv's arguments: ``linked`` or ``recorded``."""
    release = knobs["specdeploy_release"]
    return {
        "root": knobs["specdeploy_root"],
        "release_id": release["id"],
        "vllm_version": release["vllm_version"],
        "python": knobs["specdeploy_python"],
        "requirements": requirements_path(release),
        "wheelhouse": knobs["specdeploy_node_wheelhouse"],
        "state": state,
    }


def install_args(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """specdeploy.toolkit.release_venv_install's arguments: the toolkit's node-side needs, then
    the release's engine package (vllm==V, or sglang==V), without its dependencies where
    specdeploy_vllm_install_dependencies is false (the sandbox: the stand-in reads the engine's
    source, it does not import it); offline from the node's wheelhouse where there is one."""
    release = knobs["specdeploy_release"]
    return {
        "venv": release["venv_dir"],
        "python": knobs["specdeploy_python"],
        "requirements": requirements_path(release),
        "package": release["package"],
        "no_deps": not knobs["specdeploy_vllm_install_dependencies"],
        "wheelhouse": knobs["specdeploy_node_wheelhouse"] or "",
        "installer": knobs["specdeploy_venv_installer"],
        "tools_dir": f"{knobs['specdeploy_root']}/tools",
    }


def bytecode_args(knobs: Mapping[str, Any]) -> dict[str, Any]:
    return {"venv": knobs["specdeploy_release"]["venv_dir"]}
