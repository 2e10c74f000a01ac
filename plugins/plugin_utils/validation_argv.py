"""The validation's command lines, computed from the role's variables (roles/validation).

Three of them, each asked by name:

- ``all``: the release's own checker (specdeploy.node.validation.check) on the node, with the
  release's gates (or the what-if ones), the workload, the labels the history keys by and the
  chosen baseline's arguments;
- ``baseline``: the same checker measuring a server without gates (the serving release before
  the switch, the baseline start), for a named release into a named file;
- ``baseline-plan``: the arguments of the controller's baseline plan
  (specdeploy.controller.baseline_plan).

They were Jinja lists in roles/validation/vars/main.yml, templated again for every node and
task; here each is one function over the values (issue 25: no programs in Jinja). The casts are
the ones the Jinja made: ``-e`` gives strings.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import jinja_int

MODES = ("all", "baseline", "baseline-plan")

# The variables the command lines read (templated by the caller, as a task's Jinja would).
KNOBS = (
    "inventory_hostname",
    "specdeploy_local_url",
    "specdeploy_served_model_name",
    "specdeploy_tensor_parallel_size",
    "specdeploy_pipeline_parallel_size",
    "validation_release_dir",
    "validation_release_id",
    "validation_release_speculative",
    "validation_release_schedule",
    "validation_gates",
    "validation_gates_file",
    "validation_gates_override_path",
    "validation_baseline",
    "validation_out",
    "validation_concurrency",
    "validation_acceptance_concurrency",
    "validation_max_requests",
    "validation_time_budget_s",
    "validation_repeats",
    "validation_min_window_s",
    "validation_endpoint",
    "validation_temperature",
    "validation_top_p",
    "validation_prompts_file",
    "validation_prompts_on_node",
    "validation_hardware",
    "validation_api_key_file",
    "validation_baseline_tps",
    "validation_baseline_from_history",
    "validation_history_db",
)


def levels(values: Mapping[str, Any]) -> str:
    return ",".join(str(level) for level in values["validation_concurrency"])


def checker(values: Mapping[str, Any]) -> list[str]:
    """The release's own checker, in its venv, on the node."""
    release_dir = values["validation_release_dir"]
    return [f"{release_dir}/venv/bin/python", "-m", "specdeploy.node.validation.check"]


def workload(values: Mapping[str, Any]) -> dict[str, Any]:
    """The speed measurement's workload, keyed by the checker's Workload fields
    (specdeploy/node/validation/workload.py owns the flags, the limits and the defaults)."""
    prompts = values["validation_prompts_file"]
    return {
        "levels": levels(values),
        "concurrency": jinja_int(values["validation_acceptance_concurrency"]),
        "max_requests": jinja_int(values["validation_max_requests"]),
        "time_budget_s": float(values["validation_time_budget_s"]),
        "repeats": jinja_int(values["validation_repeats"]),
        "min_window_s": float(values["validation_min_window_s"]),
        "endpoint": values["validation_endpoint"],
        "temperature": float(values["validation_temperature"]),
        "top_p": float(values["validation_top_p"]),
        "prompts": values["validation_prompts_on_node"] if prompts else None,
    }


def labels(values: Mapping[str, Any]) -> list[str]:
    """What the history keys a result by (issue 19: node, model, parallel sizes, hardware)."""
    parallel = (
        f"tp={values['specdeploy_tensor_parallel_size']},"
        f"pp={values['specdeploy_pipeline_parallel_size']}"
    )
    argv = [
        "--node", str(values["inventory_hostname"]),
        "--label", f"model={values['specdeploy_served_model_name']}",
        "--label", f"parallel={parallel}",
    ]  # fmt: skip
    if values["validation_hardware"]:
        argv += ["--label", f"hardware={values['validation_hardware']}"]
    if values["validation_api_key_file"]:
        argv += ["--api-key-file", str(values["validation_api_key_file"])]
    return argv


def measured_tail(values: Mapping[str, Any]) -> list[str]:
    """The workload and the labels: the same for every measurement of a deploy, so they compare."""
    return ["--workload-json", json.dumps(workload(values)), *labels(values)]


def check_all(values: Mapping[str, Any]) -> list[str]:
    """The smoke and acceptance checks with the release's gates (or the what-if ones)."""
    gates = (
        values["validation_gates_override_path"]
        if "validation_gates" in values  # defined, as the what-if's `is defined`
        else values["validation_gates_file"]
    )
    speculative = str(boolean(values["validation_release_speculative"], strict=False)).lower()
    baseline = values["validation_baseline"]
    schedule = values["validation_release_schedule"]
    argv = [
        *checker(values),
        "all",
        "--base-url", values["specdeploy_local_url"],
        "--served-model-name", values["specdeploy_served_model_name"],
        "--gates", gates,
        "--release", values["validation_release_id"],
        "--label", f"speculative={speculative}",
        "--label", f"baseline={baseline['source']}",
        "--out", values["validation_out"],
    ]  # fmt: skip
    if schedule:
        argv += ["--label", "k_schedule=" + json.dumps(schedule)]
    return (
        argv
        + measured_tail(values)
        + list(baseline.get("argv", []))
        + list(baseline.get("previous_argv", []))
    )


def check_baseline(values: Mapping[str, Any], release: str, out: str) -> list[str]:
    """A measurement without gates (throughput/1 JSON) of the server that runs now."""
    return [
        *checker(values),
        "baseline",
        "--base-url", values["specdeploy_local_url"],
        "--served-model-name", values["specdeploy_served_model_name"],
        "--json",
        "--release", release,
        "--out", out,
        *measured_tail(values),
    ]  # fmt: skip


def baseline_plan(values: Mapping[str, Any]) -> list[str]:
    """The controller's baseline plan question (the deploy's plan adds what serves)."""
    from_history = boolean(values["validation_baseline_from_history"], strict=False)
    return [
        "--levels", levels(values),
        "--knob", json.dumps(values["validation_baseline_tps"]),
        "--history", values["validation_history_db"] if from_history else "",
        "--node", str(values["inventory_hostname"]),
        "--model", values["specdeploy_served_model_name"],
        "--tensor-parallel-size", str(values["specdeploy_tensor_parallel_size"]),
        "--pipeline-parallel-size", str(values["specdeploy_pipeline_parallel_size"]),
        "--hardware", values["validation_hardware"],
        "--json",
    ]  # fmt: skip


def argv(mode: str, values: Mapping[str, Any], **options: str) -> list[str]:
    if mode == "all":
        return [str(a) for a in check_all(values)]
    if mode == "baseline":
        missing = [name for name in ("release", "out") if not options.get(name)]
        if missing:
            raise ValueError(f"baseline needs {' and '.join(missing)}")
        return [str(a) for a in check_baseline(values, options["release"], options["out"])]
    if mode == "baseline-plan":
        return [str(a) for a in baseline_plan(values)]
    raise ValueError(f"unknown command line {mode!r}; known: {', '.join(MODES)}")
