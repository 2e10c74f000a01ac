"""The Prometheus textfile of validation results (node_exporter's textfile collector).

Node-side (stdlib only): the validation role writes it on the node from the release's own
toolkit; the controller's reports (specdeploy.controller.report --prom) write the same format.
One sample per label set: the newest result per (node, release, model), and per node its newest
result of all, so node_exporter never sees a series twice.

    python -m specdeploy.node.validation.textfile RESULT.json... --out FILE    # exit 0, or 2: bad
    input
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from specdeploy.node import cli
from specdeploy.node.module_utils.specdeploy_fsio import atomic_write
from specdeploy.node.validation.result import read_result


def _acc(r: dict[str, Any]) -> dict[str, Any]:
    a = r.get("acceptance")
    return a if isinstance(a, dict) else {}


def _med(d: Any) -> float | None:
    return float(d["median"]) if isinstance(d, dict) and d.get("median") is not None else None


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _when(r: dict[str, Any]) -> str:
    """Sort key of a result in time: when it finished (else started); ISO strings sort."""
    return str(r.get("finished_at") or r.get("started_at") or "")


def _epoch(r: dict[str, Any]) -> float | None:
    import datetime as _dt

    try:
        ts = _dt.datetime.fromisoformat(_when(r).replace("Z", "+00:00"))
    except ValueError:
        return None
    return ts.timestamp() if ts.tzinfo else None


# A validation that passed: "waived" (exit 0) is one too, the operator's waiver standing; it
# has its own gauge, so the failing-validation alert stays quiet while the waiver stands.
PASSED = ("pass", "waived")

# How a validation ended: (name suffix, help for the per-release series, help for the node's
# newest result, the value). The same three gauges exist as specdeploy_validation_* (one per
# node, release and model) and as specdeploy_last_validation_* (one per node).
_OUTCOME_GAUGES: tuple[tuple[str, str, str, Callable[[dict[str, Any]], float | None]], ...] = (
    (
        "passed",
        "1 if the validation passed (a waived speed-up gate counts: see _waived), else 0",
        "1 if the node's newest validation passed (waived included), else 0",
        lambda r: 1.0 if r.get("status") in PASSED else 0.0,
    ),
    (
        "waived",
        "1 if the validation passed only because its speed-up gate is waived, else 0",
        "1 if the node's newest validation passed with the speed-up gate waived, else 0",
        lambda r: 1.0 if r.get("status") == "waived" else 0.0,
    ),
    (
        "exit_code",
        "Exit code of the validation (0/1/2)",
        "Exit code of the node's newest validation (0 pass, 1 failed, 2 not measured)",
        lambda r: float(r.get("exit_code", 2)),
    ),
    (
        "timestamp_seconds",
        "When the validation finished",
        "When the node's newest validation finished",
        _epoch,
    ),
)

# Gauges of a result's acceptance block: (name, help, the value from the block).
_ACCEPTANCE_GAUGES: tuple[tuple[str, str, Callable[[dict[str, Any]], Any]], ...] = (
    (
        "specdeploy_mean_acceptance_length",
        "1 + accepted / drafts over the run",
        lambda a: a.get("mean_acceptance_length"),
    ),
    (
        "specdeploy_draft_acceptance_rate",
        "accepted / draft tokens over the run",
        lambda a: a.get("draft_acceptance_rate"),
    ),
    (
        "specdeploy_output_tokens_per_second",
        "Median output tokens/s of the workload",
        lambda a: _med(a.get("output_tokens_per_s")),
    ),
    (
        "specdeploy_accepted_tokens_per_second",
        "Median accepted draft tokens/s",
        lambda a: _med(a.get("accepted_tokens_per_s")),
    ),
    (
        "specdeploy_speed_up",
        "Median output tokens/s over the no-speculation baseline",
        lambda a: _med(a.get("speed_up")),
    ),
)

# Gauges per concurrency level of the speed results: (name, help, key in the level).
_LEVEL_GAUGES: tuple[tuple[str, str, str], ...] = (
    (
        "specdeploy_level_output_tokens_per_second",
        "Output tokens/s at a concurrency level",
        "output_tps",
    ),
    (
        "specdeploy_level_baseline_tokens_per_second",
        "No-speculation output tokens/s at a concurrency level",
        "baseline_tps",
    ),
    (
        "specdeploy_level_speed_up",
        "Output tokens/s over the no-speculation baseline at a concurrency level",
        "speed_up",
    ),
)


def latest_per_series(results: list[dict[str, Any]]) -> list[int]:
    """Indexes of the newest result per (node, release, model): a textfile holds one sample
    per label set, so older runs of the same release on the same node are left out (node_exporter
    rejects the whole file otherwise: "collected before with the same name and label values")."""
    newest: dict[tuple[str, str, str], int] = {}
    for i, r in enumerate(results):
        key = (
            str(r.get("node")),
            str(r.get("release") or "unknown"),
            str(r.get("served_model_name") or ""),
        )
        if key not in newest or _when(results[newest[key]]) <= _when(r):
            newest[key] = i
    return sorted(newest.values())


class _Textfile:
    """Gauges by name; refuses a second sample with the same name and labels."""

    def __init__(self) -> None:
        self.metrics: dict[str, tuple[str, dict[str, str]]] = {}

    def add(self, name: str, help_: str, labels: dict[str, str], value: float | None) -> None:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return
        lab = ",".join(f'{k}="{_esc(str(v))}"' for k, v in sorted(labels.items()))
        samples = self.metrics.setdefault(name, (help_, {}))[1]
        if lab in samples:
            raise ValueError(f"textfile: two samples of {name}{{{lab}}}")
        samples[lab] = f"{name}{{{lab}}} {float(value)!r}"

    def text(self) -> str:
        lines = []
        for name in sorted(self.metrics):
            help_, samples = self.metrics[name]
            lines += [f"# HELP {name} {help_}", f"# TYPE {name} gauge", *samples.values()]
        return "\n".join(lines) + "\n"


def prom_textfile(
    results: list[dict[str, Any]], regress: Mapping[int, Sequence[object]] | None = None
) -> str:
    """node_exporter textfile: the newest result per (node, release, model) with those labels
    (``specdeploy_validation_*``, acceptance, speed per concurrency level), and per node the
    newest result of all (``specdeploy_last_validation_*``, labelled with its release) for
    alerts that ask "is this node's latest validation passing and fresh"."""
    tf = _Textfile()
    for i in latest_per_series(results):
        r = results[i]
        base = {
            "node": str(r.get("node")),
            "release": str(r.get("release") or "unknown"),
            "model": str(r.get("served_model_name") or ""),
        }
        for suffix, help_, _, value_of in _OUTCOME_GAUGES:
            tf.add(f"specdeploy_validation_{suffix}", help_, base, value_of(r))
        sm = r.get("smoke")
        if isinstance(sm, dict):
            for s in sm.get("stages", []):
                tf.add(
                    "specdeploy_smoke_stage_ok",
                    "1 if the smoke stage passed",
                    base | {"stage": s["name"]},
                    1.0 if s.get("ok") else 0.0,
                )
        a = _acc(r)
        for name, help_, acc_value in _ACCEPTANCE_GAUGES:
            tf.add(name, help_, base, acc_value(a))
        for pos, v in enumerate(a.get("per_position_acceptance") or []):
            tf.add(
                "specdeploy_position_acceptance_rate",
                "accepted at position / drafts",
                base | {"position": str(pos)},
                v,
            )
        for lvl in _speed_levels(r):
            at = base | {"concurrency": str(lvl["concurrency"])}
            for name, help_, key in _LEVEL_GAUGES:
                tf.add(name, help_, at, _num(lvl.get(key)))
        if regress is not None:
            tf.add(
                "specdeploy_regression",
                "1 if below the release's first validated run",
                base,
                1.0 if regress.get(i) else 0.0,
            )
    last: dict[str, dict[str, Any]] = {}
    for r in results:
        node = str(r.get("node"))
        if node not in last or _when(last[node]) <= _when(r):
            last[node] = r
    for node, r in sorted(last.items()):
        lab = {"node": node, "release": str(r.get("release") or "unknown")}
        for suffix, _, last_help, value_of in _OUTCOME_GAUGES:
            tf.add(f"specdeploy_last_validation_{suffix}", last_help, lab, value_of(r))
    return tf.text()


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _speed_levels(r: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-concurrency speed results (speed-contract "speed" key), when present."""
    sp = r.get("speed")
    levels = sp.get("levels") if isinstance(sp, dict) else None
    return [
        lv for lv in levels or [] if isinstance(lv, dict) and isinstance(lv.get("concurrency"), int)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="spec-textfile", description=__doc__.split("\n")[0])
    parser.add_argument("results", nargs="+", help="result JSON files (specdeploy.validation/1)")
    parser.add_argument("--out", required=True, help="the textfile to write (atomically)")
    args = parser.parse_args(argv)
    results = []
    for name in args.results:
        try:
            results.append(read_result(name))
        except OSError as exc:
            print(f"spec-textfile: error: RESULT {name}: {cli.reason(exc)}", file=sys.stderr)
            return 2
        except ValueError as exc:  # names the file: not UTF-8, not JSON, not a result
            print(f"spec-textfile: error: RESULT {exc}", file=sys.stderr)
            return 2
    try:
        atomic_write(args.out, prom_textfile(results))
    except (OSError, ValueError) as exc:
        print(f"spec-textfile: error: --out {args.out}: {cli.reason(exc)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
