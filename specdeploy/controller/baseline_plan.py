"""Decide where a deploy's no-speculation baseline comes from, before anything changes.

The speed-up gate needs the output tokens/s of the same workload WITHOUT speculation, per
concurrency level. In this order (issue 19), the first that gives every level wins:

1. ``knob``: the operator's ``validation_baseline_tps`` (a number for all levels, or a map);
2. ``history``: this node's recorded baseline runs on the controller (same node, served model,
   tensor/pipeline sizes, GPU name), ``history.baseline_levels``;
3. ``serving-release``: the release serving now runs WITHOUT speculation: it is measured
   before the switch anyway (the canary comparison), so it costs nothing extra;
4. ``baseline-start``: the new release is first started with speculation off (same venv, same
   caches), measured, then restarted with speculation on: it costs one extra start.

A release without speculation needs no baseline (source ``none``).

    python -m specdeploy.controller.baseline_plan --levels 1,8,32 [--knob JSON]
        [--history DB --node N --model M --tensor-parallel-size 8 --pipeline-parallel-size 1
         --hardware NAME] --serving none|speculative|plain [--no-speculation] [--json]

Prints the plan (JSON with ``--json``: source, levels, extra_start, message). Exit 0, or 2 on
bad input (one line naming the knob).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from specdeploy.node.validation import workload

SOURCES = ("knob", "history", "serving-release", "baseline-start", "none")
SERVING_STATES = ("none", "speculative", "plain")


class PlanInputError(ValueError):
    """Bad input: the message names the knob and what is wrong."""


@dataclass(frozen=True)
class BaselinePlan:
    source: str
    levels: dict[int, float] | None  # known now (knob, history); None: measured in the deploy
    extra_start: bool
    message: str

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["levels"] = None if self.levels is None else {str(k): v for k, v in self.levels.items()}
        return d


def parse_levels(text: str) -> list[int]:
    """``validation_concurrency`` as the role joins it (``1,8,32``), by the Workload's one
    parser of levels; a bad value is a one-line :class:`PlanInputError` naming the knob."""
    try:
        return list(workload.parse_levels(text, "validation_concurrency"))
    except workload.WorkloadError as e:
        raise PlanInputError(str(e)) from None


def knob_levels(knob: object, levels: list[int]) -> dict[int, float] | None:
    """validation_baseline_tps as {level: tps}; None when it is 0 (not given)."""
    if isinstance(knob, bool):
        raise PlanInputError(f"validation_baseline_tps={knob!r}: want 0, a number or a map")
    if isinstance(knob, (int, float)):
        if not math.isfinite(knob):  # NaN compared as "not > 0", i.e. "not given"
            raise PlanInputError(f"validation_baseline_tps={knob!r}: not a finite number")
        if knob < 0:
            raise PlanInputError(f"validation_baseline_tps={knob!r}: must not be negative")
        return {c: float(knob) for c in levels} if knob > 0 else None
    if isinstance(knob, dict):
        out: dict[int, float] = {}
        for k, v in knob.items():
            try:
                level = int(k)
            except (TypeError, ValueError):
                raise PlanInputError(
                    f"validation_baseline_tps: key {k!r} is not a concurrency level"
                ) from None
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf:
                raise PlanInputError(f"validation_baseline_tps[{k}]={v!r}: want a number > 0")
            out[level] = float(v)
        extra = sorted(set(out) - set(levels))
        missing = sorted(set(levels) - set(out))
        if extra or missing:
            raise PlanInputError(
                f"validation_baseline_tps gives levels {sorted(out)} but validation_concurrency "
                f"is {levels}" + (f": no baseline for c={missing}" if missing else "")
            )
        return out
    raise PlanInputError(f"validation_baseline_tps={knob!r}: want 0, a number or a map")


def decide(
    levels: list[int],
    knob: dict[int, float] | None,
    history: dict[int, float],
    serving: str,
    speculative: bool,
) -> BaselinePlan:
    """The first source that gives every level (see the module docstring)."""
    if serving not in SERVING_STATES:
        raise PlanInputError(f"serving={serving!r}: want one of {SERVING_STATES}")
    if not speculative:
        return BaselinePlan(
            "none",
            None,
            False,
            "speculation off: no speed-up gate; this release's throughput is the baseline",
        )
    if knob is not None:
        return BaselinePlan("knob", knob, False, "validation_baseline_tps (operator's knob)")
    if history and set(levels) <= set(history):
        picked = {c: history[c] for c in levels}
        return BaselinePlan("history", picked, False, "this node's history (no extra start)")
    gap = f"history has c={sorted(history)} only; " if history else "no baseline in the history; "
    if serving == "plain":
        return BaselinePlan(
            "serving-release",
            None,
            False,
            gap + "the serving release runs without speculation: measured before the switch "
            "(no extra start)",
        )
    return BaselinePlan(
        "baseline-start",
        None,
        True,
        gap + "baseline start: the new release first starts with speculation off, is measured, "
        "then restarts with speculation on (costs one extra start)",
    )


def history_levels(
    db: str, node: str, model: str, parallel: str, hardware: str
) -> dict[int, float]:
    """This node's recorded no-speculation throughput per level; {} without a history file.

    ``parallel`` as the results label it (``tp=8,pp=1``); ``hardware`` the GPU name ('': any).
    """
    if not Path(db).exists():
        return {}
    from specdeploy.controller import history

    try:
        found = history.baseline_levels(db, node, model, parallel, hardware or None)
    except history.HistoryError as e:  # a corrupt or non-SQLite file: the operator's to fix
        raise PlanInputError(f"validation_history_db {e}") from None
    return {int(k): float(v) for k, v in found.items()}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="spec-baseline-plan", description=__doc__.split("\n")[0])
    p.add_argument("--levels", required=True, help="validation_concurrency, e.g. 1,8,32")
    p.add_argument("--knob", default="0", help="validation_baseline_tps as JSON (0: none)")
    p.add_argument("--history", help="the controller's history.sqlite")
    p.add_argument("--node", default="")
    p.add_argument("--model", default="")
    p.add_argument("--tensor-parallel-size", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", type=int, default=1)
    p.add_argument("--hardware", default="", help="GPU name ('' = not restricted)")
    p.add_argument("--serving", choices=SERVING_STATES, default="none")
    p.add_argument("--no-speculation", action="store_true", help="the new release")
    p.add_argument("--json", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        levels = parse_levels(args.levels)
        try:
            knob_value = json.loads(args.knob)  # NaN/Infinity parse; knob_levels refuses them
        except ValueError:
            raise PlanInputError(f"validation_baseline_tps={args.knob!r}: not JSON") from None
        knob = knob_levels(knob_value, levels)
        hist: dict[int, float] = {}
        if args.history and knob is None and not args.no_speculation:
            parallel = f"tp={args.tensor_parallel_size},pp={args.pipeline_parallel_size}"
            hist = history_levels(args.history, args.node, args.model, parallel, args.hardware)
        plan = decide(levels, knob, hist, args.serving, not args.no_speculation)
    except PlanInputError as e:
        print(f"spec-baseline-plan: error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(plan.to_dict(), sort_keys=True))
    else:
        print(f"baseline: {plan.source}: {plan.message}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
