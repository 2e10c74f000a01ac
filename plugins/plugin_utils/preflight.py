"""The deploy's input checks, as pure functions (the action plugins preflight_inputs and
preflight_node run them; tests/unit/test_preflight_rules.py tests them).

Every check of the plan play that needs no node: the knobs' ranges, the characters a unit's
command line cannot carry, the API key rule, the wheelhouse knobs, and the command lines of the
checks that need the toolkit's Python (the inputs against the patch manifest, unknown knobs,
the gates, the baseline knob, the engine, the balancer) with how to read their answers; then,
from the node's read-only probe, the models, the drafter check's command line, the free space,
the port and the serving release. Each refusal is one line naming the knob, the value and what
is allowed, as the assert tasks these replace said it. ``knobs`` is a mapping of the resolved
variables (the action resolves the names in ``INPUT_KNOBS`` / ``NODE_KNOBS``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean


def flag(value: Any) -> bool:
    """A knob as Ansible's bool filter reads it (\"false\" from -e is False)."""
    return boolean(value, strict=False)


# The variables the input checks read (resolved by the action; an undefined one is absent).
INPUT_KNOBS = (
    "ansible_playbook_python",
    "ansible_play_hosts_all",
    "ansible_inventory_sources",
    "specdeploy_toolkit_dir",
    "specdeploy_patch_manifest",
    "specdeploy_vllm_version",
    "specdeploy_engine",
    "specdeploy_sglang_version",
    "specdeploy_speculative_enabled",
    "specdeploy_speculative_config",
    "specdeploy_speculative_schedule",
    "specdeploy_drafter_path",
    "specdeploy_model_path",
    "specdeploy_served_model_name",
    "specdeploy_attention_backend",
    "specdeploy_target_routed_experts",
    "specdeploy_target_experts_per_token",
    "specdeploy_tensor_parallel_size",
    "specdeploy_pipeline_parallel_size",
    "specdeploy_keep_releases",
    "specdeploy_port",
    "specdeploy_host",
    "specdeploy_gpu_memory_utilization",
    "specdeploy_extra_args",
    "specdeploy_api_key",
    "specdeploy_controller_wheelhouse",
    "specdeploy_vllm_wheelhouse",
    "specdeploy_node_wheelhouse_copy",
    "specdeploy_shutdown_timeout_s",
    "specdeploy_stop_timeout_s",
    "specdeploy_drain_timeout_s",
    "specdeploy_drain_keep_in_rotation",
    "specdeploy_release_gates",
    "specdeploy_speed_up_waiver",
    "validation_concurrency",
    "validation_baseline_tps",
    "validation_prompts_file",
    "validation_history_db",
    "validation_report_root",
    "preflight_unsafe_arg_pattern",
)
NODE_KNOBS = (
    "ansible_playbook_python",
    "specdeploy_toolkit_dir",
    "specdeploy_vllm_version",
    "specdeploy_engine",
    "specdeploy_speculative_enabled",
    "specdeploy_model_path",
    "specdeploy_drafter_path",
    "specdeploy_drafter_require_provenance",
    "specdeploy_controller_wheelhouse",
    "specdeploy_python",
    "specdeploy_root",
    "specdeploy_min_free_disk_gb",
    "specdeploy_host",
    "specdeploy_port",
    "specdeploy_service_name",
    "validation_endpoint",
)
# The groups of input checks; a caller may run some (rollback: the balancer only).
GROUPS = ("inputs", "balancer", "knobs", "validation", "engine")
LOOPBACK = re.compile(r"^(127\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}|::1|\[::1\]|localhost)$")
# Manifest entries that finish a release (a failed or half-built one is not "serving").
FINISHED = ("active", "inactive", "verified")


@dataclass(frozen=True)
class Command:
    """A controller-side check: a Python module's command line (run once per distinct input)."""

    name: str
    argv: list[str]
    stdin: str | None = None


@dataclass
class Verdict:
    errors: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)

    def extend(self, other: Verdict) -> None:
        self.errors.extend(other.errors)
        self.facts.update(other.facts)
        self.messages.extend(other.messages)


def to_json(value: Any) -> str:
    """Ansible's to_json (json.dumps' default separators), for the same messages as before."""
    return json.dumps(value)


def _number(knobs: Mapping[str, Any], name: str) -> float | None:
    """The knob as a finite number, or None (the range checks then refuse it)."""
    try:
        value = float(knobs.get(name))
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _api_key_set(knobs: Mapping[str, Any], environ: Mapping[str, str]) -> bool:
    key = knobs.get("specdeploy_api_key")
    if key is None:
        key = environ.get("SPECDEPLOY_API_KEY", "")
    return len(str(key)) > 0


# ---- checks that need nothing but the knobs ------------------------------------------------


def shutdown_errors(knobs: Mapping[str, Any]) -> list[str]:
    shutdown = _number(knobs, "specdeploy_shutdown_timeout_s")
    stop = _number(knobs, "specdeploy_stop_timeout_s")
    if shutdown is not None and stop is not None and 0 <= int(shutdown) < int(stop):
        return []
    return [
        f"specdeploy_shutdown_timeout_s={knobs.get('specdeploy_shutdown_timeout_s')}: must be at "
        f"least 0 and below specdeploy_stop_timeout_s={knobs.get('specdeploy_stop_timeout_s')} "
        "(systemd kills the server at TimeoutStopSec)."
    ]


def _whole_number_errors(knobs: Mapping[str, Any], name: str, meaning: str) -> list[str]:
    value = knobs.get(name)
    if re.match(r"^[0-9]+$", str(value)):
        return []
    return [f"{name}={value}: must be a whole number {meaning}. Nothing changed."]


def drain_timeout_errors(knobs: Mapping[str, Any]) -> list[str]:
    return _whole_number_errors(
        knobs,
        "specdeploy_drain_timeout_s",
        "of seconds >= 0 (the longest wait for the requests in flight after the drain)",
    )


def drain_guard_errors(knobs: Mapping[str, Any]) -> list[str]:
    return _whole_number_errors(
        knobs,
        "specdeploy_drain_keep_in_rotation",
        ">= 0 (how many of the balancer's other servers must stay in rotation during a drain; "
        "0: no guard)",
    )


def knob_errors(knobs: Mapping[str, Any], environ: Mapping[str, str]) -> list[str]:
    """The ranges, the command line's characters, the API key rule and the wheelhouse knobs."""
    errors: list[str] = []
    tp = _number(knobs, "specdeploy_tensor_parallel_size")
    spec = knobs.get("specdeploy_speculative_config") or {}
    if flag(knobs.get("specdeploy_speculative_enabled")) and isinstance(spec, Mapping):
        draft_tp = spec.get("draft_tensor_parallel_size")
        if draft_tp is not None and _number({"v": draft_tp}, "v") not in (1, tp):
            errors.append(
                f"specdeploy_speculative_config={to_json(spec)} is invalid: "
                "draft_tensor_parallel_size, when given, must be 1 or the target's tensor "
                f"parallel size ({knobs.get('specdeploy_tensor_parallel_size')})."
            )
    pp = _number(knobs, "specdeploy_pipeline_parallel_size")
    keep = _number(knobs, "specdeploy_keep_releases")
    port = _number(knobs, "specdeploy_port")
    gmu = _number(knobs, "specdeploy_gpu_memory_utilization")
    if not (
        tp is not None
        and tp >= 1
        and pp is not None
        and pp >= 1
        and keep is not None
        and keep >= 2
        and port is not None
        and 0 < port < 65536
        and gmu is not None
        and 0.0 < gmu <= 1.0
    ):
        errors.append(
            f"tensor/pipeline parallel sizes ({knobs.get('specdeploy_tensor_parallel_size')}/"
            f"{knobs.get('specdeploy_pipeline_parallel_size')}) must be >= 1, "
            f"specdeploy_keep_releases ({knobs.get('specdeploy_keep_releases')}) >= 2 (a rollback "
            f"needs the previous release), specdeploy_port ({knobs.get('specdeploy_port')}) in "
            "1..65535 and specdeploy_gpu_memory_utilization "
            f"({knobs.get('specdeploy_gpu_memory_utilization')}) in (0, 1]."
        )
    values = [
        knobs.get("specdeploy_model_path"),
        knobs.get("specdeploy_served_model_name"),
        knobs.get("specdeploy_drafter_path"),
        knobs.get("specdeploy_host"),
        knobs.get("specdeploy_attention_backend"),
        to_json(spec),
        *(knobs.get("specdeploy_extra_args") or []),
    ]
    unsafe = re.compile(str(knobs.get("preflight_unsafe_arg_pattern") or r"['\\\n\r`]"))
    bad = [str(v) for v in values if unsafe.search(str(v if v is not None else ""))]
    if bad:
        errors.append(
            "these server arguments contain single quotes, backslashes, backticks or line "
            f"breaks, which the toolkit does not put on a systemd command line: {to_json(bad)}"
        )
    host = str(knobs.get("specdeploy_host"))
    if not LOOPBACK.match(host) and not _api_key_set(knobs, environ):
        errors.append(
            f"specdeploy_host={host} is not a loopback address (127.0.0.0/8, ::1, localhost): "
            "the API would be open to the network without a key. Set specdeploy_api_key (from "
            "Ansible Vault) or SPECDEPLOY_API_KEY in the controller's environment, or set "
            "specdeploy_host to 127.0.0.1."
        )
    controller = str(knobs.get("specdeploy_controller_wheelhouse") or "")
    node = str(knobs.get("specdeploy_vllm_wheelhouse") or "")
    if (controller and node) or (controller and not controller.startswith("/")):
        errors.append(
            f"specdeploy_controller_wheelhouse={to_json(controller)} and "
            f"specdeploy_vllm_wheelhouse={to_json(node)}: set at most one of them (the "
            "controller's wheelhouse is copied to "
            f"{knobs.get('specdeploy_node_wheelhouse_copy')} on each node and installed from "
            "there), and the controller's as an absolute path."
        )
    return errors


def validation_file_errors(knobs: Mapping[str, Any], is_file) -> list[str]:
    prompts = str(knobs.get("validation_prompts_file") or "")
    if prompts == "" or is_file(prompts):
        return []
    return [
        f"validation_prompts_file={prompts}: no such file on the controller (want JSONL, one "
        '{"kind": ..., "messages": [...]} a line). Nothing changed.'
    ]


def waiver_messages(knobs: Mapping[str, Any], host: str) -> list[str]:
    waiver = str(knobs.get("specdeploy_speed_up_waiver") or "")
    if not (flag(knobs.get("specdeploy_speculative_enabled")) and waiver):
        return []
    return [
        f"speed-up gate WAIVED on {host} by specdeploy_speed_up_waiver: "
        f'"{waiver}" (still measured and reported, never counted as PASS)'
    ]


# ---- command lines of the checks that need the toolkit's Python ------------------------------


def _levels(knobs: Mapping[str, Any]) -> str:
    return ",".join(str(level) for level in knobs.get("validation_concurrency") or [])


def knobs_command(knobs: Mapping[str, Any]) -> Command:
    sources = knobs.get("ansible_inventory_sources") or []
    return Command(
        "knobs",
        [
            str(knobs["ansible_playbook_python"]),
            "-m",
            "specdeploy.controller.knobs_check",
            "--hosts",
            ",".join(knobs.get("ansible_play_hosts_all") or []),
        ]
        + [f"--inventory={source}" for source in sources],
    )


def inputs_command(knobs: Mapping[str, Any], host: str) -> Command:
    argv = [
        str(knobs["ansible_playbook_python"]),
        "-m",
        "specdeploy.controller.inputs",
        "--vllm-version",
        str(knobs.get("specdeploy_vllm_version")),
        "--manifest",
        str(knobs.get("specdeploy_patch_manifest")),
        "--speculative-config-json",
        to_json(knobs.get("specdeploy_speculative_config")),
        "--drafter-path",
        str(knobs.get("specdeploy_drafter_path")),
        "--attention-backend",
        str(knobs.get("specdeploy_attention_backend") or ""),
        "--speculative-schedule-json",
        to_json(knobs.get("specdeploy_speculative_schedule")),
        "--experts",
        str(knobs.get("specdeploy_target_routed_experts")),
        "--top-k",
        str(knobs.get("specdeploy_target_experts_per_token")),
        "--json",
    ]
    if not flag(knobs.get("specdeploy_speculative_enabled")):
        argv.append("--no-speculation")
    # The history's node and model only where they are read (a schedule of auto: this node's
    # latest sweep), so a fleet with the same inputs shares one run.
    if knobs.get("specdeploy_speculative_schedule") == "auto":
        history = knobs.get("validation_history_db") or (
            str(knobs.get("validation_report_root") or f"{knobs['specdeploy_toolkit_dir']}/reports")
            + "/history.sqlite"
        )
        argv += [
            "--history",
            str(history),
            "--node",
            host,
            "--model",
            str(knobs.get("specdeploy_served_model_name")),
        ]
    return Command("inputs", argv)


def served_speculative_config(
    knobs: Mapping[str, Any], schedule: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The --speculative-config the server gets: the operator's specdeploy_speculative_config,
    the drafter from specdeploy_drafter_path only, and with a k schedule (``schedule``: the
    input check's resolution of specdeploy_speculative_schedule) its
    num_speculative_tokens_per_batch_size and num_speculative_tokens = its largest k."""
    served = dict(knobs.get("specdeploy_speculative_config") or {})
    served["model"] = knobs.get("specdeploy_drafter_path")
    served.update((schedule or {}).get("speculative_config") or {})
    return served


def gates_command(knobs: Mapping[str, Any], served: Mapping[str, Any]) -> Command:
    """The gates against num_speculative_tokens as the node serves it (k=0 without speculation:
    the floors are then not checked against k)."""
    speculative = flag(knobs.get("specdeploy_speculative_enabled"))
    k = served.get("num_speculative_tokens", 0) if speculative else 0
    return Command(
        "gates",
        [
            str(knobs["ansible_playbook_python"]),
            "-m",
            "specdeploy.node.validation.gate",
            "--validate",
            "/dev/stdin",
            "--levels",
            _levels(knobs),
            "--num-speculative-tokens",
            str(k),
        ],
        stdin=to_json(knobs.get("specdeploy_release_gates")),
    )


def baseline_command(knobs: Mapping[str, Any]) -> Command:
    return Command(
        "baseline",
        [
            str(knobs["ansible_playbook_python"]),
            "-m",
            "specdeploy.controller.baseline_plan",
            "--levels",
            _levels(knobs),
            "--knob",
            to_json(knobs.get("validation_baseline_tps")),
            "--json",
        ],
    )


def engine_command(knobs: Mapping[str, Any], environ: Mapping[str, str]) -> Command:
    return Command(
        "engine",
        [
            str(knobs["ansible_playbook_python"]),
            "-m",
            "specdeploy.controller.engines",
            "--engine",
            str(knobs.get("specdeploy_engine")),
            "--gates-json",
            to_json(knobs.get("specdeploy_release_gates")),
            "--sglang-version",
            str(knobs.get("specdeploy_sglang_version") or ""),
            "--api-key-set",
            "true" if _api_key_set(knobs, environ) else "false",
        ],
    )


# ---- reading the answers (an answer: {"rc", "stdout", "stderr"}) --------------------------


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _json(text: str) -> dict | None:
    if not re.match(r"^\s*\{", text or ""):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _every_error_line(answer: Mapping[str, Any], prog: str, what: str) -> Verdict:
    """A check that prints one `PROG: error: ...` line per refusal: all of them, one line."""
    if answer["rc"] == 0:
        return Verdict()
    text = (
        " | ".join(
            re.sub(rf"^{re.escape(prog)}: error: ", "", line) for line in _lines(answer["stderr"])
        )
        or f"{what}: exit {answer['rc']}"
    )
    return Verdict(errors=[f"{text}. Nothing changed."])


def knobs_verdict(answer: Mapping[str, Any]) -> Verdict:
    return _every_error_line(answer, "knobs-check", "knobs check")


def inputs_verdict(answer: Mapping[str, Any]) -> Verdict:
    result = _json(answer["stdout"]) if answer["rc"] in (0, 1) else None
    if result is None:
        last = (_lines(answer["stderr"]) or [f"exit {answer['rc']}"])[-1]
        return Verdict(errors=[f"the input check could not run: {last}"])
    if not result.get("ok"):
        return Verdict(errors=[" | ".join(e["message"] for e in result.get("errors", []))])
    vllm = result.get("vllm") or {}
    return Verdict(
        facts={
            "preflight_version_entry": vllm.get("entry"),
            "preflight_version_native": vllm.get("native"),
            # the resolved specdeploy_speculative_schedule (specdeploy.controller.schedule)
            "preflight_speculative_schedule": vllm.get("schedule"),
        }
    )


def gates_verdict(answer: Mapping[str, Any], host: str) -> Verdict:
    if answer["rc"] == 0:
        return Verdict()
    last = (_lines(answer["stderr"]) or [f"exit {answer['rc']}"])[-1]
    last = re.sub(r"^gates /dev/stdin: ", "", last)
    return Verdict(errors=[f"specdeploy_gates on {host}: {last}. Nothing changed."])


def baseline_verdict(answer: Mapping[str, Any]) -> Verdict:
    if answer["rc"] == 0:
        return Verdict()
    last = (_lines(answer["stderr"]) or [f"validation_baseline_tps: exit {answer['rc']}"])[-1]
    return Verdict(errors=[re.sub(r"^[a-z-]+: error: ", "", last) + ". Nothing changed."])


def engine_verdict(answer: Mapping[str, Any]) -> Verdict:
    return _every_error_line(answer, "engine-check", "engine check")


def balancer_verdict(answer: Mapping[str, Any]) -> Verdict:
    if answer["rc"] == 0:
        return Verdict()
    if answer["rc"] == 2:
        text = re.sub(r"^drain: error: ", "", answer["stderr"].strip())
    else:
        result = _json(answer["stdout"])
        text = str(result.get("message")) if result else answer["stderr"].strip()
    return Verdict(errors=[f"{text}. Nothing changed."])


# ---- the node's read-only probe ----------------------------------------------------------


def drafter_command(knobs: Mapping[str, Any], probe: Mapping[str, Any]) -> Command | None:
    """The drafter check's command line, or None without speculation or without both configs
    (a missing model is its own refusal)."""
    configs = probe.get("model_configs") or []
    if not flag(knobs.get("specdeploy_speculative_enabled")) or len(configs) < 2:
        return None
    if not (configs[0].get("exists") and configs[1].get("exists")):
        return None
    chat = (knobs.get("validation_endpoint") or "chat") != "completions"
    argv = [
        str(knobs["ansible_playbook_python"]),
        "-m",
        "specdeploy.controller.drafter",
        "--vllm-version",
        str(knobs.get("specdeploy_vllm_version")),
        "--target-config-json",
        str(configs[0].get("content")),
        "--drafter-config-json",
        str(configs[1].get("content")),
        "--drafter-weights-json",
        to_json(probe.get("drafter_weights")),
        "--require-provenance",
        "true" if flag(knobs.get("specdeploy_drafter_require_provenance")) else "false",
        # the served workload's prompt format (the validation measures what users send)
        "--served-prompt-format",
        "chat-template" if chat else "raw",
        "--engine",
        str(knobs.get("specdeploy_engine")),
        "--json",
    ]
    # --provenance-json only when the drafter has the file: an empty one is an error there
    if configs[1].get("provenance") is not None:
        argv += ["--provenance-json", str(configs[1]["provenance"])]
    return Command("drafter", argv)


def drafter_verdict(knobs: Mapping[str, Any], answer: Mapping[str, Any]) -> Verdict:
    result = _json(answer["stdout"])
    findings = (result or {}).get("findings") or []
    verdict = Verdict()
    warnings = [f["message"] for f in findings if f.get("level") == "warning"]
    if warnings:
        verdict.messages.append("drafter warnings: " + " | ".join(warnings))
    if answer["rc"] != 0:
        errors = [f["message"] for f in findings if f.get("level") == "error"]
        why = " | ".join(errors) if result is not None else answer["stderr"].strip()
        verdict.errors.append(
            f"the drafter at specdeploy_drafter_path={knobs.get('specdeploy_drafter_path')} does "
            f"not fit the target for vLLM {knobs.get('specdeploy_vllm_version')}: {why}"
        )
    return verdict


def port_conflicts(
    knobs: Mapping[str, Any], probe: Mapping[str, Any]
) -> tuple[list[str], list[str]]:
    """(foreign, all): the listeners on our port that are not our service, and all on it (only
    our address or a wildcard conflict: sandbox nodes share one network)."""
    ours = re.compile(
        r"\s("
        + re.escape(str(knobs.get("specdeploy_host")))
        + r"|0\.0\.0\.0|\*|\[::\]):"
        + str(knobs.get("specdeploy_port"))
        + r"\s"
    )
    listeners = [line for line in probe.get("port_listeners") or [] if ours.search(line)]
    own = f"pid={probe.get('service_main_pid')},"
    return [line for line in listeners if own not in line], listeners


def node_verdict(knobs: Mapping[str, Any], probe: Mapping[str, Any], host: str) -> Verdict:
    """The probe's findings that refuse the node, and the serving release (the automatic
    rollback returns to it; a failed or half-built one is none)."""
    verdict = Verdict()
    if knobs.get("specdeploy_controller_wheelhouse") and (probe.get("python_platform") or {}).get(
        "error"
    ):
        verdict.errors.append(
            f"specdeploy_python={knobs.get('specdeploy_python')} does not run on {host}: "
            f"{probe['python_platform']['error']}"
        )
    for config in probe.get("model_configs") or []:
        if not config.get("exists"):
            knob = (
                "specdeploy_model_path"
                if config.get("path") == knobs.get("specdeploy_model_path")
                else "specdeploy_drafter_path"
            )
            verdict.errors.append(
                f"{knob}={config.get('path')}: no config.json there on {host}. "
                "Copy the model first."
            )
    free_kb = _number(probe, "free_kb") or 0
    min_gb = _number(knobs, "specdeploy_min_free_disk_gb") or 0
    if free_kb < min_gb * 1024 * 1024:
        verdict.errors.append(
            f"only {round(free_kb / 1048576, 1)} GB free under {knobs.get('specdeploy_root')} on "
            f"{host}; a release needs specdeploy_min_free_disk_gb="
            f"{knobs.get('specdeploy_min_free_disk_gb')} GB. Free space or prune releases."
        )
    foreign, listeners = port_conflicts(knobs, probe)
    if foreign:
        verdict.errors.append(
            f"specdeploy_port={knobs.get('specdeploy_port')} is taken on {host} by another "
            f"program ({'; '.join(listeners)}), not by "
            f"{knobs.get('specdeploy_service_name')}.service; choose another port or stop that "
            "program."
        )
    current = probe.get("current") or {}
    manifest = current.get("manifest") or {}
    serving = (
        current.get("target", "")
        if current.get("islnk") and manifest and manifest.get("status", "") in FINISHED
        else ""
    )
    verdict.facts.update(preflight_inputs_checked=True, preflight_serving_release=serving)
    return verdict
