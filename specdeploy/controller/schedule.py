"""A speculation schedule by batch size: k per range of running requests (vLLM's
``num_speculative_tokens_per_batch_size``), derived from the advisor's model, validated and
rendered.

vLLM (>= the manifest's first version with the key) takes a list of INCLUSIVE ranges
``[[range_start, range_end, k], ...]``, k >= 0 (0: no drafting at that batch size), the first
range starting at 1, sorted and non-overlapping; a gap carries the previous k forward, the last
k holds up to ``max_num_seqs`` (vllm/v1/spec_decode/dynamic/utils.py). ``num_speculative_tokens``
must be the largest k of the schedule.

derive() picks k at the measured levels only: the advisor's best k there (Advice.speed_up_at)
where it beats speculation off by ``margin``, else 0. Between two measured levels it switches
once, from the lower level's k to the upper one's, at the first batch size where the model
prefers the upper one; a third k is never put between them (the model's curves between levels
are not measurements: on the 256-expert H200 sweep, choosing among every k at every batch size
gave k=1 at 39-63 where k=3 measured best at both 32 and 64). Below the smallest measured level
the schedule keeps that level's k, beyond the largest too (the model is not extrapolated).

    python -m specdeploy.controller.schedule --per-position 0.84,0.66,0.50 \\
        --spec-tps 1=362,4=1184,16=4234,64=9732 --baseline-tps 1=551,4=1387,16=3176,64=8845 \\
        --experts 64 --top-k 8 --k-max 5 --max-num-seqs 256 [--json]

takes every input of ``python -m specdeploy.controller.advisor`` and prints the schedule (the
JSON list vLLM takes on one line, then a line per range). Exit codes: 0, 2 bad input.
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from specdeploy.controller import advisor

SCHEMA = "specdeploy.schedule/1"
# A k must beat speculation off by this much to be scheduled at a batch size: below it the
# prediction is inside the model's noise (docs/advisor.md), and off costs nothing.
MARGIN = 0.02

Schedule = list[tuple[int, int, int]]


class ScheduleError(ValueError):
    pass


@dataclass(frozen=True)
class Derived:
    schedule: Schedule
    predicted: dict[int, float]  # best predicted speed-up per batch size (1.0 where off)

    @property
    def k_max(self) -> int:
        return max_k(self.schedule)


def derive(
    adv: advisor.Advice, max_num_seqs: int, *, k_max: int | None = None, margin: float = MARGIN
) -> Derived:
    """k per batch size 1..max_num_seqs, compressed into ranges (see the module's doc)."""
    if max_num_seqs < 1:
        raise ScheduleError(f"max_num_seqs {max_num_seqs}: want >= 1")
    ks = range(1, (k_max or len(adv.all_rates)) + 1)

    def value(k: int, c: int) -> float:
        # off is worth 1.0, and a k must beat it by the margin to be worth drafting
        return 1.0 + margin if k == 0 else adv.speed_up_at(c, k)

    def best_at(level: int) -> int:
        k = max(ks, key=lambda kk: adv.speed_up_at(level, kk))
        return k if adv.speed_up_at(level, k) >= 1.0 + margin else 0

    levels = sorted(adv.levels)
    chosen = {level: best_at(level) for level in levels}
    per_c: list[int] = []
    for c in range(1, max_num_seqs + 1):
        below = [lv for lv in levels if lv <= c]
        above = [lv for lv in levels if lv > c]
        if not below or not above:  # outside the measured levels: the nearest one's k
            per_c.append(chosen[below[-1] if below else above[0]])
            continue
        low, high = chosen[below[-1]], chosen[above[0]]
        switched = bool(per_c) and per_c[-1] == high and c > below[-1]
        per_c.append(high if switched or value(high, c) > value(low, c) else low)
    predicted = {c: (1.0 if k == 0 else adv.speed_up_at(c, k)) for c, k in enumerate(per_c, 1)}
    return Derived(compress(per_c), predicted)


def compress(per_c: list[int]) -> Schedule:
    """[k at batch 1, k at batch 2, ...] -> inclusive ranges."""
    out: Schedule = []
    for c, k in enumerate(per_c, start=1):
        if out and out[-1][2] == k:
            out[-1] = (out[-1][0], c, k)
        else:
            out.append((c, c, k))
    return out


def validate(value: object, what: str = "schedule") -> Schedule:
    """vLLM's own rules, as one-line errors: a non-empty list of [start, end, k] integers,
    start >= 1, start <= end, k >= 0, sorted, non-overlapping, the first starting at 1, and at
    least one k > 0 (an all-zero schedule is speculation off: say off)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ScheduleError(
                f"{what} {value!r}: want off, auto or a list of [start, end, k]"
            ) from None
    if not isinstance(value, list) or not value:
        raise ScheduleError(f"{what} {value!r}: want a non-empty list of [start, end, k]")
    out: Schedule = []
    for entry in value:
        if (
            not isinstance(entry, list | tuple)
            or len(entry) != 3
            or any(isinstance(x, bool) or not isinstance(x, int) for x in entry)
        ):
            raise ScheduleError(f"{what}: entry {entry!r} is not [start, end, k] (integers)")
        start, end, k = entry
        if start < 1 or end < start:
            raise ScheduleError(f"{what}: range {start}-{end} must have 1 <= start <= end")
        if k < 0:
            raise ScheduleError(f"{what}: k {k} for {start}-{end} must be >= 0")
        out.append((start, end, k))
    if out != sorted(out):
        raise ScheduleError(f"{what}: ranges must be sorted by start")
    for (_, end, _), (start, _, _) in itertools.pairwise(out):
        if start <= end:
            raise ScheduleError(f"{what}: ranges overlap at {start}")
    if out[0][0] != 1:
        raise ScheduleError(f"{what}: the first range must start at 1, not {out[0][0]}")
    if max_k(out) == 0:
        raise ScheduleError(f"{what}: every k is 0; that is speculation off (say off)")
    return out


def max_k(schedule: Schedule) -> int:
    return max(k for _, _, k in schedule)


def k_at(schedule: Schedule, batch: int) -> int:
    """The k vLLM uses at this running batch size (gaps carry the previous k, the last range's
    k holds beyond it)."""
    k = schedule[0][2]
    for start, end, kk in schedule:
        if start > batch:
            break
        k = kk
        if batch <= end:
            break
    return k


def acceptance_concurrency(schedule: Schedule) -> int:
    """The concurrency at which the acceptance check measures a schedule: the smallest batch
    size drafting the largest k (at c=1 a schedule that is off there drafts nothing, and the
    per-position floors need every position drafted)."""
    top = max_k(schedule)
    return next(start for start, _, k in schedule if k == top)


def speculative_config(base: dict[str, object], schedule: Schedule) -> dict[str, object]:
    """--speculative-config with the schedule: num_speculative_tokens = the largest k."""
    out = dict(base)
    out["num_speculative_tokens"] = max_k(schedule)
    out["num_speculative_tokens_per_batch_size"] = [list(r) for r in schedule]
    return out


def describe(schedule: Schedule) -> str:
    """One line: 'batch 1-4 off, 5-12 k=2, 13-256 k=5'."""
    parts = []
    for start, end, k in schedule:
        rng = str(start) if start == end else f"{start}-{end}"
        parts.append(f"{rng} {'off' if k == 0 else f'k={k}'}")
    return "batch " + ", ".join(parts)


def to_dict(d: Derived, adv: advisor.Advice) -> dict[str, object]:
    return {
        "schema": SCHEMA,
        "num_speculative_tokens": d.k_max,
        "num_speculative_tokens_per_batch_size": [list(r) for r in d.schedule],
        "describe": describe(d.schedule),
        "measured_levels": sorted(adv.levels),
        "predicted_speed_up": {
            str(c): round(d.predicted[c], 4)
            for c in sorted(set(adv.levels) | {s for s, _, _ in d.schedule})
            if c in d.predicted
        },
        "deployed_k": adv.deployed_k,
    }


KEY = "num_speculative_tokens_per_batch_size"


def first_dynamic_version(manifest_versions: dict[str, dict[str, object]]) -> str | None:
    """The oldest version in the manifest whose SpeculativeConfig has the schedule key."""
    from specdeploy.node.module_utils.versions import version_key

    found = [
        v
        for v, e in manifest_versions.items()
        if KEY in (e.get("speculative_config_keys") or [])  # type: ignore[operator]
    ]
    return min(found, key=version_key) if found else None


def parse_knob(value: object) -> str | Schedule:
    """specdeploy_speculative_schedule: 'off' (or empty/None/false), 'auto', or a schedule (a
    list, or its JSON text)."""
    if value is None or value is False or value == "" or value == "off":
        return "off"
    if value == "auto":
        return "auto"
    return validate(value, "specdeploy_speculative_schedule")


def latest_sweep(
    db: str, node: str, model: str
) -> tuple[dict[str, object], list[float], dict[int, float], dict[int, float]] | None:
    """The newest recorded run of this node and model that measured speed levels WITH
    speculation, each with its no-speculation baseline, and the per-position acceptance: (run,
    rates, spec tps, baseline tps). Its gate verdict does not matter (a failed gate is a
    measurement too); a run with a schedule in force (label k_schedule) is not one k's sweep
    and is skipped, so a second deploy with auto derives the same schedule."""
    from specdeploy.controller import history

    conn = history.connect(db)
    try:
        for r in reversed(history.runs(conn, node, with_result=True)):
            res = r["result"]
            if r.get("model") != model or not isinstance(res, dict):
                continue
            if (res.get("labels") or {}).get("k_schedule"):
                continue  # measured with a schedule in force: not one k's sweep
            speed = res.get("speed") if isinstance(res.get("speed"), dict) else {}
            if speed.get("speculative") is False:
                continue
            rates = (res.get("acceptance") or {}).get("per_position_acceptance")
            spec, base = {}, {}
            for lv in speed.get("levels") or []:
                c, tps, b = lv.get("concurrency"), lv.get("output_tps"), lv.get("baseline_tps")
                if isinstance(c, int) and _positive(tps) and _positive(b):
                    spec[c], base[c] = float(tps), float(b)
            if rates and spec:
                return r, [float(x) for x in rates], spec, base
    finally:
        conn.close()
    return None


def _positive(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def resolve(
    value: object,
    *,
    version: str,
    entry: dict[str, object],
    manifest_versions: dict[str, dict[str, object]],
    history_db: str = "",
    node: str = "",
    model: str = "",
    max_num_seqs: int = 256,
    experts: int = 0,
    top_k: int = 0,
    data_parallel_size: int = 1,
) -> dict[str, object]:
    """What the preflight needs: {"mode": off|auto|explicit, "schedule", "describe",
    "speculative_config" (the keys to merge into --speculative-config), "source"}. Raises
    ScheduleError with a one-line message naming the knob."""
    knob = parse_knob(value)
    if knob == "off":
        return {
            "mode": "off",
            "schedule": None,
            "describe": "off",
            "speculative_config": {},
            "message": "off (one k at every load)",
        }
    if KEY not in (entry.get("speculative_config_keys") or []):  # type: ignore[operator]
        first = first_dynamic_version(manifest_versions)
        raise ScheduleError(
            f"specdeploy_speculative_schedule needs vLLM's {KEY} (k by batch size), which vLLM "
            f"{version} does not have; the first version with it is {first or 'none known'}"
        )
    dyn = entry.get("dynamic_k") or {}
    if data_parallel_size > 1 and isinstance(dyn, dict):
        if str(dyn.get("data_parallel", "")).startswith("no guard"):
            raise ScheduleError(
                f"specdeploy_speculative_schedule with data parallel size {data_parallel_size}: "
                f"vLLM {version} does not guard it (ranks may pick different k and hang); "
                f"use one data-parallel rank or a version that falls back to static k (0.26.0)"
            )
        raise ScheduleError(
            f"specdeploy_speculative_schedule with data parallel size {data_parallel_size}: "
            f"vLLM {version} ignores the schedule with data parallelism (static max k); "
            f"set specdeploy_speculative_schedule=off and choose one k"
        )
    source: dict[str, object] = {}
    if knob == "auto":
        if not history_db or not Path(history_db).is_file():
            raise ScheduleError(
                f"specdeploy_speculative_schedule=auto: no history at {history_db or '(none)'}"
                f" to derive it from; deploy a static k first (its validation measures every "
                f"level) or give the schedule as a list"
            )
        found = latest_sweep(history_db, node, model)
        if found is None:
            raise ScheduleError(
                f"specdeploy_speculative_schedule=auto: no measured sweep with speculation of "
                f"{node} ({model}) in {history_db}; deploy a static k first (its validation "
                f"measures every level) or give the schedule as a list"
            )
        run, rates, spec, base = found
        try:
            adv = advisor.advise(rates, spec, base, n_experts=experts, top_k=top_k)
        except advisor.AdviceInputError as e:
            raise ScheduleError(f"specdeploy_speculative_schedule=auto: {e}") from None
        d = derive(adv, max_num_seqs)
        if max_k(d.schedule) == 0:
            raise ScheduleError(
                f"specdeploy_speculative_schedule=auto: the sweep of {node} "
                f"(run {run['run_id']}, {run['started_at']}) predicts no k beating "
                f"speculation off at any batch size; deploy with speculation off"
            )
        sched = d.schedule
        labels = (run["result"].get("labels") or {}) if isinstance(run["result"], dict) else {}
        source = {
            "run_id": run["run_id"],
            "started_at": run["started_at"],
            "release": run["release"],
            "deployed_k": adv.deployed_k,
            "levels": sorted(adv.levels),
            "labels": labels,
            "predicted_speed_up": {
                str(c): round(d.predicted[c], 3) for c in sorted(adv.levels) if c in d.predicted
            },
        }
    else:
        sched = knob  # type: ignore[assignment]
        labels = {}
    if knob == "auto":
        message = (
            f"auto: {describe(sched)} (from run {str(source['run_id'])[:12]} of "
            f"{source['started_at']}, k={source['deployed_k']} measured at c="
            f"{','.join(str(c) for c in source['levels'])}"  # type: ignore[union-attr]
            + (f", {labels.get('hardware')}" if labels.get("hardware") else "")
            + (f", {labels.get('parallel')}" if labels.get("parallel") else "")
            + ")"
        )
    else:
        message = f"explicit: {describe(sched)}"
    return {
        "mode": "auto" if knob == "auto" else "explicit",
        "schedule": [list(r) for r in sched],
        "describe": describe(sched),
        "message": message,
        "acceptance_concurrency": acceptance_concurrency(sched),
        "speculative_config": {
            "num_speculative_tokens": max_k(sched),
            KEY: [list(r) for r in sched],
        },
        "source": source,
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["acceptance-concurrency"]:
        # python -m specdeploy.controller.schedule acceptance-concurrency SCHEDULE_JSON ('' = 1)
        try:
            text = args[1] if len(args) > 1 else ""
            print(acceptance_concurrency(validate(text)) if text.strip() not in ("", '""') else 1)
        except ScheduleError as e:
            print(f"schedule: {e}", file=sys.stderr)
            return 2
        return 0
    p = advisor.build_parser()
    p.prog = "python -m specdeploy.controller.schedule"
    p.description = __doc__.split("\n")[0]
    p.add_argument("--max-num-seqs", type=int, default=256, help="vLLM's --max-num-seqs")
    p.add_argument("--margin", type=float, default=MARGIN)
    a = p.parse_args(args)
    try:
        adv = advisor.advice_from_args(a)
        if not math.isfinite(a.margin) or a.margin < 0:
            raise ScheduleError(f"--margin {a.margin}: want a finite number >= 0")
        d = derive(adv, a.max_num_seqs, k_max=a.k_max, margin=a.margin)
    except (advisor.AdviceInputError, ScheduleError) as e:
        print(f"schedule: {e}", file=sys.stderr)
        return 2
    if max_k(d.schedule) == 0:
        # no k pays at any batch size: the schedule is speculation off
        if a.json:
            print(json.dumps({"schema": SCHEMA, "off": True, "describe": "off"}))
        else:
            print("off (no k beats speculation off at any batch size)")
        return 0
    if a.json:
        print(json.dumps(to_dict(d, adv), indent=1))
    else:
        print(json.dumps([list(r) for r in d.schedule]))
        print(f"num_speculative_tokens={d.k_max}; {describe(d.schedule)}")
        for c in sorted(adv.levels):
            k = k_at(d.schedule, c)
            print(f"  measured level c={c}: k={k}, predicted {d.predicted.get(c, 1.0):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
