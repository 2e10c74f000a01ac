"""Prometheus scrape targets and alert rules for the serving nodes (controller side).

The targets come from the inventory (the `monitoring` role passes each node's address, port,
whether it speculates); the acceptance floors come from the SAME gates mapping the deploy
renders into each release's gates.json (``specdeploy_gates``), read by the same parser
(``specdeploy.node.validation.gate.thresholds_from_mapping``): one source of truth for "acceptable".

Usage (the role runs it; read-only, prints the files' contents)::

    python -m specdeploy.controller.monitoring SPEC.json|- [--json]

SPEC.json: ``{"gates": {...}, "settings": {...}, "vllm_targets": [{"node", "address",
"speculative", "model"}], "node_exporter_targets": [{"node", "address"}],
"validation_exporters": ["host:port"], "targets_dir": "/etc/prometheus/specdeploy"}``.
Prints ``{"files": {name: content}}`` (``--json``) or the files one after another.
Exit 0, or 2 with one line naming what is wrong in SPEC.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from specdeploy.node import cli, jsontext
from specdeploy.node.validation import gate

VLLM_JOB = "specdeploy-vllm"  # vLLM's own /metrics on each serving node
NODE_JOB = "specdeploy-node"  # node_exporter on each serving node (systemd collector)
VALIDATION_JOB = "specdeploy-validation"  # node_exporter with the validation textfile
RULES_FILE = "specdeploy-rules.yml"
SCRAPE_FILE = "specdeploy-scrape.yml"
DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
ADDRESS = re.compile(r"^[A-Za-z0-9_.:\[\]-]+:[0-9]{1,5}$")


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the alert expressions) as literal blocks, readable in the file."""


_Dumper.add_representer(
    str,
    lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style="|" if "\n" in v else None),
)


def dump_yaml(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=1000)


class SpecError(ValueError):
    """SPEC is wrong: the message names the key."""


@dataclass(frozen=True)
class Settings:
    """The alerting knobs (roles/monitoring/defaults/main.yml documents each)."""

    rate_window: str = "15m"  # rate() window of the acceptance and latency rules
    acceptance_for: str = "15m"
    speculation_off_for: str = "10m"
    # up == 0 for longer than a start may take (specdeploy_start_timeout_s): not loading, down.
    start_timeout_s: int = 2700
    restarts_window: str = "3h"
    restarts_max: int = 2  # this many process starts inside restarts_window alert
    validation_stale_s: int = 2 * 86400  # a daily timer missed twice
    ttft_p95_max_s: float = 10.0
    itl_p95_max_s: float = 0.5
    latency_for: str = "15m"
    service_name: str = "vllm"

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> Settings:
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(m) - set(fields))
        if unknown:
            raise SpecError(f"settings: unknown keys {unknown}; allowed: {sorted(fields)}")
        s = cls(**m)
        for name in ("rate_window", "acceptance_for", "speculation_off_for", "restarts_window"):
            v = getattr(s, name)
            if not isinstance(v, str) or not DURATION.match(v):
                raise SpecError(f"settings.{name}: {v!r} is not a Prometheus duration (e.g. 15m)")
        for name in ("start_timeout_s", "restarts_max", "validation_stale_s"):
            v = getattr(s, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise SpecError(f"settings.{name}: {v!r} is not a positive integer")
        for name in ("ttft_p95_max_s", "itl_p95_max_s"):
            v = getattr(s, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise SpecError(f"settings.{name}: {v!r} is not a positive number of seconds")
        return s


def _acc_ratio(numerator: str, denominator: str, window: str, by: str = "node, model_name") -> str:
    return (
        f'sum by ({by}) (rate({numerator}{{job="{VLLM_JOB}"}}[{window}]))\n'
        f"  / on ({by})\n"
        f'sum by ({by}) (rate({denominator}{{job="{VLLM_JOB}"}}[{window}]))'
    )


def alert_rules(gates: Mapping[str, Any], settings: Settings) -> dict[str, Any]:
    """Prometheus rule groups: acceptance below the gates' floors (from rate() of vLLM's
    spec-decode counters), speculation silently off, unit down or restarting, validation
    stale or failing, slow answers (vLLM's latency histograms)."""
    t = gate.thresholds_from_mapping(dict(gates))
    w = settings.rate_window
    drafts = "vllm:spec_decode_num_drafts_total"
    accepted = "vllm:spec_decode_num_accepted_tokens_total"
    rules: list[dict[str, Any]] = []

    def alert(name: str, expr: str, for_: str, severity: str, summary: str, **more: str) -> None:
        rules.append(
            {
                "alert": name,
                "expr": expr,
                "for": for_,
                "labels": {"severity": severity, **more},
                "annotations": {"summary": summary},
            }
        )

    if t.min_mean_acceptance_length is not None:
        alert(
            "SpecdeployAcceptanceLengthLow",
            f"1 + (\n{_acc_ratio(accepted, drafts, w)}\n) < {t.min_mean_acceptance_length:g}",
            settings.acceptance_for,
            "warning",
            '{{ $labels.node }}: mean acceptance length {{ $value | printf "%.2f" }} over '
            f"{w} is below the gate's {t.min_mean_acceptance_length:g}",
        )
    if t.min_draft_acceptance_rate is not None:
        alert(
            "SpecdeployDraftAcceptanceRateLow",
            f"(\n{_acc_ratio(accepted, 'vllm:spec_decode_num_draft_tokens_total', w)}\n)"
            f" < {t.min_draft_acceptance_rate:g}",
            settings.acceptance_for,
            "warning",
            '{{ $labels.node }}: draft acceptance rate {{ $value | printf "%.2f" }} over '
            f"{w} is below the gate's {t.min_draft_acceptance_rate:g}",
        )
    for pos, floor in sorted(t.per_position_floors.items()):
        per_pos = (
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{job="{VLLM_JOB}",'
            f'position="{pos}"}}'
        )
        expr = (
            f"sum by (node, model_name) (rate({per_pos}[{w}]))\n"
            f"  / on (node, model_name)\n"
            f'sum by (node, model_name) (rate({drafts}{{job="{VLLM_JOB}"}}[{w}]))'
            f"\n< {floor:g}"
        )
        alert(
            "SpecdeployPositionAcceptanceLow",
            expr,
            settings.acceptance_for,
            "warning",
            f"{{{{ $labels.node }}}}: acceptance at draft position {pos} "
            f'{{{{ $value | printf "%.2f" }}}} over {w} is below the gate\'s floor {floor:g}',
            position=str(pos),
        )
    alert(
        "SpecdeploySpeculationOff",
        f'sum by (node, model_name) (rate(vllm:generation_tokens_total{{job="{VLLM_JOB}",'
        f'speculative="true"}}[{w}])) > 0\n'
        f"unless on (node, model_name)\n"
        f'sum by (node, model_name) (rate({drafts}{{job="{VLLM_JOB}"}}[{w}])) > 0',
        settings.speculation_off_for,
        "critical",
        "{{ $labels.node }} generates tokens but drafts none: speculation is off on a node "
        "deployed with it (drafter not loaded, or the config lost it)",
    )
    alert(
        "SpecdeployServerDown",
        f'up{{job="{VLLM_JOB}"}} == 0',
        f"{settings.start_timeout_s}s",
        "critical",
        "{{ $labels.node }}: vLLM's /metrics has not answered for longer than a start may "
        f"take ({settings.start_timeout_s}s)",
    )
    unit = f"{settings.service_name}.service"
    alert(
        "SpecdeployUnitFailed",
        f'node_systemd_unit_state{{job="{NODE_JOB}",name="{unit}",state="failed"}} == 1',
        "1m",
        "critical",
        f"{{{{ $labels.node }}}}: {unit} is failed (systemd gave up restarting it)",
    )
    alert(
        "SpecdeployUnitRestarting",
        f'changes(process_start_time_seconds{{job="{VLLM_JOB}"}}[{settings.restarts_window}])'
        f" >= {settings.restarts_max}\n"
        f'or increase(node_systemd_service_restart_total{{job="{NODE_JOB}",name="{unit}"}}'
        f"[{settings.restarts_window}]) >= {settings.restarts_max}",
        "0m",
        "warning",
        f"{{{{ $labels.node }}}}: {unit} restarted {{{{ $value }}}} times in "
        f"{settings.restarts_window}",
    )
    alert(
        "SpecdeployValidationFailing",
        f'specdeploy_last_validation_passed{{job="{VALIDATION_JOB}"}} == 0',
        "0m",
        "warning",
        "{{ $labels.node }}: the newest validation of release {{ $labels.release }} did not "
        "pass (see reports/latest/report.html)",
    )
    alert(
        "SpecdeployValidationStale",
        f'time() - specdeploy_last_validation_timestamp_seconds{{job="{VALIDATION_JOB}"}}'
        f" > {settings.validation_stale_s}",
        "0m",
        "warning",
        "{{ $labels.node }}: no validation for {{ $value | humanizeDuration }} (make schedule "
        "runs one daily)",
    )
    alert(
        "SpecdeployValidationMissing",
        f'absent(specdeploy_last_validation_timestamp_seconds{{job="{VALIDATION_JOB}"}})',
        "1h",
        "warning",
        "no specdeploy validation results are exported (is the textfile in node_exporter's "
        "textfile directory?)",
    )
    for name, metric, limit in (
        ("SpecdeployTimeToFirstTokenSlow", "vllm:time_to_first_token_seconds", "ttft_p95_max_s"),
        ("SpecdeployInterTokenLatencySlow", "vllm:inter_token_latency_seconds", "itl_p95_max_s"),
    ):
        v = getattr(settings, limit)
        alert(
            name,
            f"histogram_quantile(0.95, sum by (node, model_name, le) "
            f'(rate({metric}_bucket{{job="{VLLM_JOB}"}}[{w}]))) > {v:g}',
            settings.latency_for,
            "warning",
            f"{{{{ $labels.node }}}}: p95 of {metric} is {{{{ $value | humanizeDuration }}}} "
            f"over {w} (limit {v:g}s)",
        )
    return {"groups": [{"name": "specdeploy", "rules": rules}]}


def _target(kind: str, i: int, t: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(t, dict) or any(k not in t for k in keys):
        raise SpecError(f"{kind}[{i}]: want a mapping with {list(keys)}, got {t!r}")
    if not ADDRESS.match(str(t["address"])):
        raise SpecError(f"{kind}[{i}].address: {t['address']!r} is not host:port")
    return t


def file_sd(spec: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """file_sd target lists by job: Prometheus re-reads them without a restart."""
    vllm = [
        _target("vllm_targets", i, t, ("node", "address", "speculative", "model"))
        for i, t in enumerate(spec.get("vllm_targets") or [])
    ]
    nodes = [
        _target("node_exporter_targets", i, t, ("node", "address"))
        for i, t in enumerate(spec.get("node_exporter_targets") or [])
    ]
    validation = [
        _target("validation_exporters", i, {"address": a}, ("address",))
        for i, a in enumerate(spec.get("validation_exporters") or [])
    ]
    return {
        VLLM_JOB: [
            {
                "targets": [t["address"]],
                "labels": {
                    "node": str(t["node"]),
                    "speculative": "true" if t["speculative"] else "false",
                    "served_model": str(t["model"]),
                },
            }
            for t in vllm
        ],
        NODE_JOB: [{"targets": [t["address"]], "labels": {"node": str(t["node"])}} for t in nodes],
        VALIDATION_JOB: [{"targets": [t["address"] for t in validation]}] if validation else [],
    }


def scrape_configs(targets_dir: str) -> list[dict[str, Any]]:
    """The scrape jobs (for prometheus.yml's scrape_configs); targets from the file_sd files.
    The validation textfile carries its own node label: honor_labels keeps it."""
    return [
        {
            "job_name": job,
            "file_sd_configs": [{"files": [f"{targets_dir}/{job}.json"]}],
            **({"honor_labels": True} if job == VALIDATION_JOB else {}),
        }
        for job in (VLLM_JOB, NODE_JOB, VALIDATION_JOB)
    ]


def render(spec: Mapping[str, Any]) -> dict[str, str]:
    """File name -> content: the rules, the scrape jobs, one file_sd list per job."""
    if not isinstance(spec, Mapping):
        raise SpecError("SPEC must be a JSON object")
    targets_dir = spec.get("targets_dir")
    if not isinstance(targets_dir, str) or not targets_dir.startswith("/"):
        raise SpecError(f"targets_dir: {targets_dir!r} is not an absolute path")
    settings = Settings.from_mapping(spec.get("settings") or {})
    try:
        rules = alert_rules(spec.get("gates") or {}, settings)
    except gate.GateConfigError as e:
        raise SpecError(f"gates: {e}") from None
    head = "# Generated by specdeploy.controller.monitoring (roles/monitoring): do not edit.\n"
    files = {
        RULES_FILE: head + dump_yaml(rules),
        SCRAPE_FILE: head + dump_yaml({"scrape_configs": scrape_configs(targets_dir)}),
    }
    for job, groups in file_sd(spec).items():
        files[f"{job}.json"] = json.dumps(groups, indent=2) + "\n"
    return files


def main(argv: list[str] | None = None) -> int:
    p = cli.parser("spec-monitoring", __doc__, json_help='print {"files": {name: content}}')
    p.add_argument("spec", help="JSON file (- reads stdin): gates, settings, targets (module doc)")
    args = p.parse_args(argv)
    try:
        text = sys.stdin.read() if args.spec == "-" else Path(args.spec).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        return cli.usage_error("spec-monitoring", f"SPEC {args.spec}: {cli.reason(e)}")
    try:
        files = render(jsontext.parse_object(text, f"SPEC {args.spec}"))
    except (ValueError, TypeError) as e:
        return cli.usage_error("spec-monitoring", e)
    if args.json:
        print(json.dumps({"files": files}))
    else:
        for name, content in files.items():
            print(f"--- {name}\n{content}", end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
