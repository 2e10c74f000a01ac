"""The validation role's choices and words (roles/validation), as filters.

``baseline_choice``: where the no-speculation baseline of a check comes from (the operator's knob
or the history, the baseline start, the serving release when it ran without speculation, else
none) and the checker's arguments that say so. ``measured``: a checker's JSON answer, or {}.
``check_summary``: the lines that show a check's result. ``serving_measured_message``: what the
serving release measured before the switch. ``baseline_plan_message``: the deploy's plan for
the speed-up baseline, said before anything changes. ``level_figures``: a checker's levels as
"c=1 123.4 tok/s, c=8 ..." (the baseline start's line). ``last_validation``: what the release
manifest keeps of a check (its ``last_validation``, which the steady check and `make status` read).
Pure functions: the tasks run the checker and read its files, these decide and say.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from ansible_collections.specdeploy.toolkit.plugins.module_utils.wording import dictsort, truncate

KNOB_SOURCES = ("knob", "history")
NO_BASELINE = "none: no baseline (the check cannot gate the speed-up: could not measure)"
MEASURES_BASELINE = "none: this release runs without speculation (its throughput is the baseline)"
ANSIBLE_TIME = "%Y-%m-%d %H:%M:%S.%f"


def slurped_json(result: Mapping[str, Any] | None) -> dict:
    """A slurp result's JSON document, {} when the file was not read."""
    if not isinstance(result, Mapping) or "content" not in result:
        return {}
    return json.loads(base64.b64decode(result["content"]))


def measured(run: Mapping[str, Any] | None) -> dict:
    """A checker's JSON answer on stdout, {} when it failed or said no JSON."""
    run = run or {}
    stdout = str(run.get("stdout") or "")
    if run.get("rc", 2) != 0 or not re.match(r"^\s*\{", stdout):
        return {}
    return json.loads(stdout)


def _levels_arg(levels: Mapping[str, Any] | None, sep: str) -> str:
    return sep.join(f"{level}={tps}" for level, tps in dictsort(levels))


def baseline_choice(
    measure_baseline: bool,
    *,
    planned: Mapping[str, Any] | None,
    slurped: Iterable[Mapping[str, Any]],
    start_out: str,
    previous_out: str,
) -> dict[str, Any]:
    """``planned``: the baseline plan's answer ({} when not asked); ``slurped``: the slurp results
    of the baseline start's and the replaced release's measurements, in that order. Returns the
    ``source`` (the label), ``argv`` (the checker's baseline arguments) and ``previous_argv``."""
    planned = planned or {}
    started, replaced = (slurped_json(result) for result in slurped)
    previous_argv = ["--previous-file", previous_out] if replaced else []
    if measure_baseline:
        argv = ["--no-spec-baseline"]
        return {"source": MEASURES_BASELINE, "argv": argv, "previous_argv": previous_argv}
    source = planned.get("source", "")
    if source in KNOB_SOURCES:
        levels = _levels_arg(planned.get("levels"), ",")
        argv = ["--baseline-tps", levels, "--baseline-source", source]
    elif started:
        source = "baseline-start"
        argv = ["--baseline-file", start_out, "--baseline-source", "baseline-start"]
    elif replaced and not replaced.get("speculative", True):
        source = "serving-release"
        argv = ["--baseline-file", previous_out, "--baseline-source", "serving-release"]
    else:
        source, argv = NO_BASELINE, []
    return {"source": source, "argv": argv, "previous_argv": previous_argv}


def _at(stamp: str) -> datetime:
    """A task result's start or end."""
    return datetime.strptime(stamp, ANSIBLE_TIME)


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def check_summary(
    result: Mapping[str, Any],
    *,
    run: Mapping[str, Any] | None,
    baseline_source: str,
    result_written: bool,
) -> list[str]:
    """The checker's own lines, the baseline, the speed-up and the canary comparison; the
    checker's stderr when it wrote no result."""
    run = run or {}
    lines = [*list(run.get("stdout_lines") or []), f"baseline: {baseline_source}"]
    speed = result.get("speed")
    if isinstance(speed, Mapping):
        lines.append(f"speed-up: {str(speed.get('status')).upper()}: {speed.get('message', '')}")
    previous = result.get("previous")
    if isinstance(previous, Mapping):
        levels = previous.get("levels", [])
        changes = ", ".join(str(round(_float(level.get("change")), 3)) for level in levels)
        lines.append(
            f"vs the release it replaced ({previous.get('release', '?')}):"
            f" {str(previous.get('status')).upper()} {changes} (change per level; max regression"
            f" {previous.get('max_regression', '?')})"
        )
    if not result_written:
        lines += list(run.get("stderr_lines") or [])
    return lines


def serving_measured_message(
    previous: Mapping[str, Any], *, serving: str, run: Mapping[str, Any]
) -> str:
    """``previous``: the serving release's measurement ({} when it failed); ``run``: its task's
    result (start, end, rc, stderr_lines)."""
    if not previous:
        last = "".join(list(run.get("stderr_lines") or [])[-1:])
        return (
            f"serving release {serving} could NOT be measured before the switch (exit"
            f" {run.get('rc', '?')}: {truncate(last, 300)}): the canary comparison is unmeasured"
        )
    took = _at(run["end"]) - _at(run["start"])
    speculation = "on" if previous.get("speculative", False) else "off"
    levels = dictsort(previous.get("levels"))
    figures = [f"c={level} {round(block['output_tps'], 1)}" for level, block in levels]
    return (
        f"serving release {serving} (speculation {speculation}), measured before the switch in"
        f" {round(took.total_seconds(), 1)} s: {' tok/s, '.join(figures)} tok/s"
    )


def baseline_plan_message(
    plan: Mapping[str, Any],
    *,
    release: str,
    host: str,
    concurrency: Iterable[Any],
    serving: str,
    speculative: bool,
    waiver: str = "",
) -> str:
    """``plan``: the baseline plan's answer (source, message, levels)."""
    said = f"speed-up baseline for release {release} on {host}: {plan['source']}: {plan['message']}"
    if plan.get("levels"):
        said += f" {_levels_arg(plan['levels'], ', ')} tok/s"
    said += f"; levels c={','.join(str(c) for c in concurrency)}"
    if serving not in ("", release):
        said += (
            f"; canary comparison against the serving release {serving}"
            " (measured before the switch)"
        )
    if speculative and waiver:
        said += f"; the speed-up gate is WAIVED: {waiver}"
    return said


def level_figures(levels: Mapping[str, Any]) -> str:
    """``{"1": {"output_tps": 123.45}, ...}`` -> ``c=1 123.4 tok/s, ...``, by concurrency."""

    def order(level: str) -> tuple[int, float | str]:
        try:
            return (0, float(level))
        except ValueError:
            return (1, level)

    return ", ".join(
        f"c={level} {round(float(levels[level]['output_tps']), 1)} tok/s"
        for level in sorted(levels, key=order)
    )


def _median(value: Any) -> Any:
    return value.get("median") if isinstance(value, Mapping) else None


def last_validation(result: Mapping[str, Any], hardware: str) -> dict[str, Any]:
    """The manifest's summary of a checker's result: verdict, when, the acceptance figures'
    medians, the first three reasons, the speed and canary verdicts, the hardware."""
    acceptance = result.get("acceptance") or {}
    speed = result.get("speed") or {}
    previous = result.get("previous") or {}
    return {
        "status": result["status"],
        "exit_code": result["exit_code"],
        "at": result["finished_at"],
        "run_id": result["run_id"],
        "mode": acceptance.get("mode"),
        "mean_acceptance_length": acceptance.get("mean_acceptance_length"),
        "speed_up": _median(acceptance.get("speed_up")),
        "output_tokens_per_s": _median(acceptance.get("output_tokens_per_s")),
        "reasons": list(result["reasons"])[:3],
        "speed_status": speed.get("status"),
        "baseline_source": speed.get("baseline_source"),
        "previous_status": previous.get("status"),
        "hardware": hardware,
    }


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "baseline_choice": baseline_choice,
            "measured": measured,
            "check_summary": check_summary,
            "serving_measured_message": serving_measured_message,
            "baseline_plan_message": baseline_plan_message,
            "level_figures": level_figures,
            "last_validation": last_validation,
        }
