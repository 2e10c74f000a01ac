"""What `make advise` (playbooks/advise.yml) hands the advisor on the controller, as Python.

The controller play wrote the node's /metrics and throughput next to each other, then ran
``specdeploy.controller.advisor`` with an argument list of fourteen templated values; both are
computed here from the host's variables (plugins/action/advise.py reads them), so the play
keeps only what an operator sees: the table, or why there is none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ADVISOR = "specdeploy.controller.advisor"
KNOBS = (
    "advise_out_dir",
    "advise_history_db",
    "advise_experts",
    "advise_top_k",
    "advise_k_max",
    "advise_inputs",
    "validation_load_profile",
    "specdeploy_served_model_name",
    "inventory_hostname",
    "playbook_dir",
)


def advice_dir(knobs: Mapping[str, Any]) -> str:
    """advise_out_dir, else reports/advice of the repository (next to playbooks/)."""
    if "advise_out_dir" in knobs:
        return str(knobs["advise_out_dir"])
    return f"{knobs['playbook_dir']}/../reports/advice"


def history_db(knobs: Mapping[str, Any]) -> str:
    """advise_history_db, else the controller's history in reports/."""
    if "advise_history_db" in knobs:
        return str(knobs["advise_history_db"])
    return f"{knobs['playbook_dir']}/../reports/history.sqlite"


def input_files(directory: str, host: str) -> dict[str, str]:
    """The node's inputs the advisor reads: the name of each file in the advice directory."""
    return {"metrics": f"{directory}/{host}.metrics.txt", "spec": f"{directory}/{host}.spec.json"}


def moe_shape(knobs: Mapping[str, Any]) -> tuple[Any, Any]:
    """(routed experts, experts per token): the knobs advise_experts / advise_top_k where given,
    else what the node read from the target's config.json (advise_inputs.shape)."""
    shape = knobs["advise_inputs"].get("shape") or {}
    experts = knobs["advise_experts"] if "advise_experts" in knobs else shape.get("experts", 0)
    top_k = knobs["advise_top_k"] if "advise_top_k" in knobs else shape.get("top_k", 0)
    return experts, top_k


def advisor_args(knobs: Mapping[str, Any], directory: str, load_profile_json: str) -> list[str]:
    """The advisor's command line after ``python -m specdeploy.controller.advisor``."""
    host = str(knobs["inventory_hostname"])
    files = input_files(directory, host)
    experts, top_k = moe_shape(knobs)
    return [
        "--metrics", files["metrics"],
        "--model", str(knobs["specdeploy_served_model_name"]),
        "--spec-file", files["spec"],
        "--history", history_db(knobs),
        "--node", host,
        "--experts", str(experts),
        "--top-k", str(top_k),
        "--k-max", str(knobs.get("advise_k_max", 6)),
        "--load-profile", load_profile_json,
        "--title", host,
    ]  # fmt: skip


# The node half: what playbooks/advise.yml's node play reads and runs on each node
# (plugins/action/advise_node.py).
NODE_KNOBS = (
    "inventory_hostname",
    "specdeploy_root",
    "specdeploy_model_path",
    "specdeploy_local_url",
    "specdeploy_config_dir",
    "specdeploy_service_name",
    "specdeploy_served_model_name",
    "advise_levels",
    "validation_concurrency",
    "advise_min_window_s",
    "advise_repeats",
    "advise_experts",
)


def release_dir(knobs: Mapping[str, Any]) -> str:
    """The serving release: the current symlink."""
    return f"{knobs['specdeploy_root']}/current"


def api_key_path(knobs: Mapping[str, Any]) -> str:
    return f"{knobs['specdeploy_config_dir']}/{knobs['specdeploy_service_name']}.api-key"


def served_speculation(manifest: Mapping[str, Any]) -> Any:
    """The serving release's speculative_config (its manifest's inputs), None without one."""
    inputs = manifest.get("inputs", {})
    return inputs.get("speculative_config") if isinstance(inputs, Mapping) else None


def not_deployed(host: str) -> str:
    return f"no release is deployed on {host} (no current symlink): run make deploy first"


def not_speculative(host: str) -> str:
    return (
        f"{host} serves without speculation: the advisor needs the per-position"
        " acceptance of a speculative release"
    )


def checker_argv(knobs: Mapping[str, Any], api_key_file: str | None) -> list[str]:
    """The release's own checker measuring the throughput per level (no gates, no restart):
    advise_levels, else validation_concurrency, else 1, 8 and 32."""
    levels = knobs.get("advise_levels", knobs.get("validation_concurrency", [1, 8, 32]))
    argv = [
        f"{release_dir(knobs)}/venv/bin/python", "-m", "specdeploy.node.validation.check",
        "baseline",
        "--base-url", str(knobs["specdeploy_local_url"]),
        "--served-model-name", str(knobs["specdeploy_served_model_name"]),
        "--levels", ",".join(str(level) for level in levels),
        "--min-window-s", str(knobs.get("advise_min_window_s", 5)),
        "--repeats", str(knobs.get("advise_repeats", 2)),
        "--node", str(knobs["inventory_hostname"]),
        "--json",
    ]  # fmt: skip
    if api_key_file is not None:
        argv += ["--api-key-file", api_key_file]
    return argv
