"""The steps that build a release's venv, as pure functions of the node's knobs (issue 25: no
programs in Jinja).

The action ``specdeploy.toolkit.release_venv_build`` runs them in order: link the venv from an
earlier release of the same vLLM (``specdeploy.toolkit.release_venv``); where none was linked,
install the toolkit's node-side needs and the pinned engine with ``ansible.builtin.pip`` (offline
from the node's wheelhouse where there is one) and record which wheel the venv came from; last,
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
)

# --no-compile: pip compiles on one core; release_bytecode (the last step) on all of them.
PIP_OPTIONS = ["--disable-pip-version-check", "--no-compile"]


def is_vllm(release: Mapping[str, Any]) -> bool:
    """An SGLang release's venv holds SGLang, not vLLM: no vLLM release is its donor, and it
    records no vLLM wheel."""
    return release.get("engine", "vllm") == "vllm"


def offline_options(wheelhouse: Any) -> list[str]:
    """pip's options for the node's wheelhouse: offline from it, or the index where none."""
    return ["--no-index", "--find-links", str(wheelhouse)] if wheelhouse else []


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


def needs_pip_args(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """ansible.builtin.pip's arguments for the toolkit's node-side needs (it makes the venv)."""
    release = knobs["specdeploy_release"]
    options = [*PIP_OPTIONS, "--no-deps", *offline_options(knobs["specdeploy_node_wheelhouse"])]
    return {
        "requirements": requirements_path(release),
        "virtualenv": release["venv_dir"],
        "virtualenv_command": f"{knobs['specdeploy_python']} -m venv",
        "extra_args": " ".join(options),
    }


def engine_pip_args(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """ansible.builtin.pip's arguments for the release's engine package (vllm==V, or sglang==V).
    Without its dependencies where specdeploy_vllm_install_dependencies is false (the sandbox:
    the stand-in reads the engine's source, it does not import it)."""
    release = knobs["specdeploy_release"]
    no_deps = [] if knobs["specdeploy_vllm_install_dependencies"] else ["--no-deps"]
    options = [*PIP_OPTIONS, *no_deps, *offline_options(knobs["specdeploy_node_wheelhouse"])]
    return {
        "name": release["package"],
        "virtualenv": release["venv_dir"],
        "extra_args": " ".join(options),
    }


def bytecode_args(knobs: Mapping[str, Any]) -> dict[str, Any]:
    return {"venv": knobs["specdeploy_release"]["venv_dir"]}
