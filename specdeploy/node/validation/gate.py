"""Pass/fail gates over a validation run (node-side and controller preflight; stdlib + PyYAML).

Thresholds come from a JSON or YAML mapping (inventory ``specdeploy_gates``: per model and
drafter)::

    min_mean_acceptance_length: 1.8     # 1 + accepted/drafts must be >= this
    min_draft_acceptance_rate: 0.3      # accepted/draft_tokens, optional
    per_position_floors: [0.6, 0.4, 0.25]   # or {0: 0.6, 2: 0.25}; accepted_i/drafts >= floor
    min_speed_up: 1.0                   # or a map by concurrency level {1: 0.8, 8: 1.0, 32: 1.2}
    max_regression_vs_previous: 0.05    # output tok/s may drop at most 5% vs the replaced release
    speed_up_waiver: ""                 # a reason: the speed-up gate shows WAIVED, never PASS
    expected_mean_acceptance_length: 3.0  # optional, with rel_tolerance (upstream's test style)
    rel_tolerance: 0.1
    require_baseline: true              # accepted for old gate files; no effect (see below)

A top-level ``gates:`` key around the mapping is accepted. Unknown keys are an error (a typo
must not silently disable a gate). Levels missing from a ``min_speed_up`` map are gated at 1.0.

UNSURE: a speed-up whose median clears the floor by less than half the repeats' spread passes
(exit 0: the best estimate is above the floor, and failing it would roll back releases on
noise), but its check and the result line say UNSURE, never PASS, and the result lists it under
``gates.unsure``; a median below the floor fails whatever the spread. Gating more strictly is the
operator's: raise the floor, or more repeats narrow the spread.

No silent skip: a speculative run whose speed-up could not be measured (no no-speculation
baseline for a level) is ``unmeasured`` (exit 2), never PASS; only an explicit waiver lets it
through, and then it shows as WAIVED. A server whose ``/metrics`` lacks the per-position
counters gets "per-position acceptance unavailable" from a per-position gate (exit 2).

Exit codes: 0 pass (or waived), 1 a gate failed, 2 could not measure.

Preflight (runs on the controller before anything changes)::

    python -m specdeploy.node.validation.gate --validate GATES_FILE --num-speculative-tokens K \
        --levels 1,8,32 [--waiver REASON] [--json]

exits 0, or 2 with one line naming the key and the problem.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from specdeploy.node import cli, jsontext
from specdeploy.node.validation.acceptance import AcceptanceResult
from specdeploy.node.validation.workload import WorkloadError, parse_levels

EXIT_PASS = 0
EXIT_FAIL = 1
EXIT_UNMEASURED = 2

DEFAULT_MIN_SPEED_UP = 1.0
DEFAULT_MAX_REGRESSION = 0.05
PER_POSITION_UNAVAILABLE = "per-position acceptance unavailable"

KNOWN_KEYS = {
    "min_mean_acceptance_length",
    "min_draft_acceptance_rate",
    "per_position_floors",
    "min_speed_up",
    "max_regression_vs_previous",
    "speed_up_waiver",
    "require_baseline",
    "expected_mean_acceptance_length",
    "rel_tolerance",
}


class GateConfigError(ValueError):
    pass


@dataclass
class Thresholds:
    min_mean_acceptance_length: float | None = None
    min_draft_acceptance_rate: float | None = None
    per_position_floors: dict[int, float] = field(default_factory=dict)
    min_speed_up: float = DEFAULT_MIN_SPEED_UP
    min_speed_up_by_level: dict[int, float] = field(default_factory=dict)
    max_regression_vs_previous: float = DEFAULT_MAX_REGRESSION
    speed_up_waiver: str = ""
    require_baseline: bool = True
    expected_mean_acceptance_length: float | None = None
    rel_tolerance: float = 0.1

    def min_speed_up_at(self, level: int) -> float:
        return self.min_speed_up_by_level.get(level, self.min_speed_up)

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["per_position_floors"] = {str(k): v for k, v in sorted(self.per_position_floors.items())}
        d["min_speed_up_by_level"] = {
            str(k): v for k, v in sorted(self.min_speed_up_by_level.items())
        }
        return d


def _num(key: str, v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise GateConfigError(f"gate {key!r}: expected a number, got {v!r}")
    if not math.isfinite(v):  # a NaN floor fails or passes everything; inf never passes
        raise GateConfigError(f"gate {key!r}: {v!r} is not a finite number")
    return float(v)


def _level(key: str, k: object) -> int:
    text = str(k).strip()
    if isinstance(k, bool) or not text.isdigit() or int(text) < 1:
        raise GateConfigError(f"gate {key!r}: level {k!r} is not a concurrency level (int >= 1)")
    return int(text)


def _speed_up_map(v: object) -> tuple[float, dict[int, float]]:
    """``min_speed_up``: a number for every level, or a map by level (others: 1.0)."""
    if isinstance(v, dict):
        if not v:
            raise GateConfigError("gate 'min_speed_up': an empty map gates nothing")
        by_level = {_level("min_speed_up", k): _num(f"min_speed_up[{k}]", x) for k, x in v.items()}
        for lvl, x in by_level.items():
            if x <= 0:
                raise GateConfigError(f"gate 'min_speed_up[{lvl}]': {x:g} is not > 0")
        return DEFAULT_MIN_SPEED_UP, by_level
    x = _num("min_speed_up", v)
    if x <= 0:
        raise GateConfigError(f"gate 'min_speed_up': {x:g} is not > 0")
    return x, {}


def thresholds_from_mapping(m: object) -> Thresholds:
    if m is None:
        return Thresholds()
    if not isinstance(m, dict):
        raise GateConfigError(f"gates must be a mapping, got {type(m).__name__}")
    if set(m) == {"gates"}:
        m = m["gates"] or {}
        if not isinstance(m, dict):
            raise GateConfigError("'gates' must be a mapping")
    unknown = sorted(str(k) for k in m if k not in KNOWN_KEYS)
    if unknown:
        raise GateConfigError(f"unknown gate keys {unknown}; allowed: {sorted(KNOWN_KEYS)}")
    t = Thresholds()
    for key in (
        "min_mean_acceptance_length",
        "min_draft_acceptance_rate",
        "expected_mean_acceptance_length",
    ):
        if m.get(key) is not None:
            setattr(t, key, _num(key, m[key]))
    if m.get("min_speed_up") is not None:
        t.min_speed_up, t.min_speed_up_by_level = _speed_up_map(m["min_speed_up"])
    if m.get("max_regression_vs_previous") is not None:
        t.max_regression_vs_previous = _num(
            "max_regression_vs_previous", m["max_regression_vs_previous"]
        )
        if not 0 <= t.max_regression_vs_previous < 1:
            raise GateConfigError(
                "gate 'max_regression_vs_previous': want a fraction in [0, 1), got "
                f"{t.max_regression_vs_previous:g}"
            )
    waiver = m.get("speed_up_waiver")
    if waiver is not None:
        if not isinstance(waiver, str):
            raise GateConfigError("gate 'speed_up_waiver' must be a reason (a string) or empty")
        t.speed_up_waiver = waiver.strip()
    if m.get("rel_tolerance") is not None:
        t.rel_tolerance = _num("rel_tolerance", m["rel_tolerance"])
    if "require_baseline" in m:
        if not isinstance(m["require_baseline"], bool):
            raise GateConfigError("gate 'require_baseline' must be true or false")
        if m["require_baseline"] is False:
            raise GateConfigError(
                "gate 'require_baseline: false' would let a speculative release pass without a "
                "measured speed-up; waive the gate explicitly with speed_up_waiver: REASON"
            )
    floors = m.get("per_position_floors")
    if floors is not None:
        if isinstance(floors, list):
            t.per_position_floors = {
                i: _num(f"per_position_floors[{i}]", v)
                for i, v in enumerate(floors)
                if v is not None
            }
        elif isinstance(floors, dict):
            try:
                t.per_position_floors = {
                    int(k): _num(f"per_position_floors[{k}]", v) for k, v in floors.items()
                }
            except ValueError:
                raise GateConfigError("per_position_floors keys must be positions 0..k-1") from None
        else:
            raise GateConfigError("per_position_floors must be a list or a mapping")
    if t.min_draft_acceptance_rate is not None and not 0 <= t.min_draft_acceptance_rate <= 1:
        raise GateConfigError("min_draft_acceptance_rate is a fraction in [0, 1]")
    for k, v in t.per_position_floors.items():
        if not 0 <= v <= 1 or k < 0:
            raise GateConfigError(f"per_position_floors[{k}]={v}: want a fraction in [0, 1]")
    return t


def load_thresholds(path: str | Path | None) -> Thresholds:
    if path is None:
        return Thresholds()
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    if p.suffix == ".json":
        data = jsontext.loads(text)
    else:
        try:
            import yaml
        except ImportError:
            data = jsontext.loads(text)
        else:
            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError as e:  # syntax, or a key YAML cannot hash ({[1]: 2})
                raise GateConfigError(cli.reason(e)) from None
    return thresholds_from_mapping(data)


def validate(t: Thresholds, num_speculative_tokens: int, levels: list[int], flag: str = "") -> None:
    """What the preflight checks before any change (raises :class:`GateConfigError`).

    More per-position floors than drafted positions, or a ``min_speed_up`` level that is never
    measured, is an input error here rather than a failure after a long model load.
    """
    if num_speculative_tokens < 0:
        raise GateConfigError(f"num_speculative_tokens: {num_speculative_tokens} is not >= 0")
    if num_speculative_tokens > 0 and t.per_position_floors:
        beyond = sorted(p for p in t.per_position_floors if p >= num_speculative_tokens)
        if beyond:
            raise GateConfigError(
                f"per_position_floors: a floor for position {beyond[0]} but "
                f"num_speculative_tokens is {num_speculative_tokens} (positions 0.."
                f"{num_speculative_tokens - 1}); give at most {num_speculative_tokens} floors"
            )
    unmeasured = sorted(set(t.min_speed_up_by_level) - set(levels))
    if unmeasured:
        raise GateConfigError(
            f"min_speed_up: level {unmeasured[0]} is not one of the measured concurrency levels "
            f"{levels} ({flag or 'validation_concurrency'}); a gate for a level never measured "
            "would never be checked"
        )


@dataclass
class GateCheck:
    name: str
    status: str  # pass | fail | skip | error | unmeasured | waived
    value: float | None
    threshold: str
    message: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass
class GateResult:
    checks: list[GateCheck]
    exit_code: int
    reasons: list[str]
    thresholds: Thresholds
    speed: dict[str, object] | None = None
    previous: dict[str, object] | None = None

    @property
    def passed(self) -> bool:
        return self.exit_code == EXIT_PASS

    @property
    def waived(self) -> bool:
        return self.passed and any(c.status == "waived" for c in self.checks)

    @property
    def unsure(self) -> list[str]:
        """Why a pass is not firm: gates passed by a median within the repeats' spread."""
        return [c.message for c in self.checks if c.status == "unsure"] if self.passed else []

    def to_dict(self) -> dict[str, object]:
        return {
            "passed": self.passed,
            "waived": self.waived,
            "unsure": self.unsure,
            "exit_code": self.exit_code,
            "reasons": self.reasons,
            "thresholds": self.thresholds.to_dict(),
            "checks": [c.to_dict() for c in self.checks],
        }


# --------------------------------------------------------------------------- speed-up per level

LEVEL_FIGURES = ("ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s")


def _f(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _positive(v: object) -> float | None:
    """A throughput figure: a finite number > 0, else None (not a measurement)."""
    x = _f(v)
    return x if x is not None and math.isfinite(x) and x > 0 else None


def _measured(lv: dict[str, object]) -> float | None:
    """A level's output tok/s, None when the level ran no request or holds no finite figure
    (an infinite tok/s, e.g. a zero-length window, is no speed-up)."""
    return None if lv.get("requests") == 0 else _positive(lv.get("output_tps"))


def evaluate_speed(
    levels: list[dict[str, object]],
    baseline: dict[int, float] | None,
    source: str | None,
    t: Thresholds,
    *,
    speculative: bool = True,
    waiver: str | None = None,
) -> dict[str, object]:
    """The speed-up gate per concurrency level (the ``speed`` section of a result).

    ``levels``: measured levels (``loadgen.to_dict`` form: concurrency, output_tps, spread,
    TTFT/ITL). ``baseline``: no-speculation output tokens/s by level (None: none known).
    Status: ``pass`` | ``unsure`` (passed, but the floor lies within the repeats' spread) |
    ``fail`` | ``waived`` | ``unmeasured`` (speculative, some level without a baseline or a
    figure: a level with 0 requests or a non-finite tok/s has none) | ``not_applicable``.
    """
    reason = (waiver if waiver is not None else t.speed_up_waiver).strip()
    rows: list[dict[str, object]] = []
    for lv in sorted(levels, key=lambda x: int(x["concurrency"])):  # type: ignore[call-overload]
        c = int(lv["concurrency"])  # type: ignore[call-overload]
        tps = _measured(lv)
        base = _positive((baseline or {}).get(c))
        su = tps / base if tps is not None and base else None
        floor = t.min_speed_up_at(c)
        spread = _f(lv.get("spread"))
        # The verdict holds when the gate lies outside the repeats' spread around the median
        # speed-up; otherwise more or longer repeats could turn it.
        holds = abs(su - floor) > (spread or 0.0) * su / 2 if su is not None else None
        if not speculative:
            status = "not_applicable"
        elif reason:
            status = "waived"
        elif su is None:
            status = "unmeasured"
        elif su < floor:
            status = "fail"
        else:
            status = "pass" if holds else "unsure"
        row: dict[str, object] = {
            "concurrency": c,
            "output_tps": tps,
            "spread": _f(lv.get("spread")),
            "repeats_tps": lv.get("repeats_tps"),
            "baseline_tps": base,
            "speed_up": round(su, 4) if su is not None else None,
            "min_speed_up": floor,
        }
        row.update({k: _f(lv.get(k)) for k in LEVEL_FIGURES})
        row["verdict_holds"] = holds
        row["status"] = status
        rows.append(row)
    src = f"baseline: {source}" if source else "no baseline"
    failed = [r for r in rows if r["status"] == "fail"]
    missing = [r for r in rows if r["status"] == "unmeasured"]
    unsure = [r for r in rows if r["status"] == "unsure"]
    if not speculative:
        status, message = "not_applicable", "no speculation: the speed-up gate does not apply"
    elif not rows:
        status, message = "unmeasured", "speed-up not measured: no concurrency level measured"
    elif reason:
        shown = ", ".join(
            f"{r['speed_up']:.2f}x at c={r['concurrency']}" if r["speed_up"] is not None else
            f"unmeasured at c={r['concurrency']}" for r in rows
        )  # fmt: skip
        status, message = "waived", f"speed-up gate WAIVED ({reason}): {shown} ({src})"
    elif failed:
        status = "fail"
        message = (
            "; ".join(
                f"speed-up {r['speed_up']:.2f}x < {r['min_speed_up']:.2f} at c={r['concurrency']}"
                + (f" (spread {r['spread']:.0%})" if r["spread"] is not None else "")
                for r in failed
            )
            + f" ({src})"
        )
    elif missing:
        status = "unmeasured"
        lv_text = ",".join(str(r["concurrency"]) for r in missing)
        message = (
            f"speed-up not measured at c={lv_text}: no no-speculation baseline "
            f"({src}); a speculative release never passes without one (or an explicit waiver)"
        )
    else:
        status = "unsure" if unsure else "pass"
        message = (
            ", ".join(
                f"{r['speed_up']:.2f}x >= {r['min_speed_up']:.2f} at c={r['concurrency']}"
                + (" (UNSURE: within the spread)" if r["status"] == "unsure" else "")
                for r in rows
            )
            + f" ({src})"
        )
    return {
        "baseline_source": source,
        "speculative": speculative,
        "waiver": reason or None,
        "levels": rows,
        "status": status,
        "failed_levels": [r["concurrency"] for r in failed],
        "message": message,
    }


def evaluate_previous(
    levels: list[dict[str, object]],
    previous: dict[int, float],
    release: str | None,
    max_regression: float,
) -> dict[str, object]:
    """Canary comparison: the new release against the one it replaces, per level."""
    rows: list[dict[str, object]] = []
    for lv in sorted(levels, key=lambda x: int(x["concurrency"])):  # type: ignore[call-overload]
        c = int(lv["concurrency"])  # type: ignore[call-overload]
        tps = _measured(lv)
        prev = _positive(previous.get(c))
        change = (tps - prev) / prev if tps is not None and prev else None
        status = "pass"
        if change is None:
            status = "unmeasured"
        elif change < -max_regression:
            status = "fail"
        rows.append(
            {
                "concurrency": c,
                "previous_tps": prev,
                "output_tps": tps,
                "change": round(change, 4) if change is not None else None,
                "status": status,
            }
        )
    failed = [r for r in rows if r["status"] == "fail"]
    compared = [r for r in rows if r["status"] != "unmeasured"]
    who = f"previous release {release}" if release else "the previous release"
    if failed:
        status = "fail"
        message = "; ".join(_regression_text(r, who, max_regression) for r in failed)
    elif not compared:
        status = "unmeasured"
        message = f"no level measured both here and for {who}"
    else:
        status = "pass"
        message = (
            ", ".join(f"{r['change']:+.1%} at c={r['concurrency']}" for r in compared)
            + f" vs {who}"
        )
    return {
        "release": release,
        "levels": rows,
        "max_regression": max_regression,
        "status": status,
        "message": message,
    }


def _regression_text(r: dict[str, object], who: str, max_regression: float) -> str:
    return (
        f"throughput {r['change']:+.0%} vs {who} at c={r['concurrency']} "
        f"({r['output_tps']:.1f} vs {r['previous_tps']:.1f} tok/s; max regression "
        f"{max_regression:.0%})"
    )


def levels_from_acceptance(res: AcceptanceResult, concurrency: int) -> list[dict[str, object]]:
    """One level from the acceptance run's repeats (when no load-generator levels ran)."""
    tps = res.output_tokens_per_s
    if tps is None:
        return []
    spread = (tps.max - tps.min) / tps.median if tps.median > 0 else 0.0
    return [
        {
            "concurrency": concurrency,
            "output_tps": tps.median,
            "repeats_tps": list(tps.values),
            "spread": spread,
        }
    ]


# --------------------------------------------------------------------------- acceptance gates


def _acceptance_checks(res: AcceptanceResult, t: Thresholds) -> list[GateCheck]:
    checks: list[GateCheck] = []
    total = res.total
    if total is None:
        return checks
    checks.append(
        GateCheck(
            "speculation_on", "pass", total.num_drafts, "drafts > 0", f"{total.num_drafts:g} drafts"
        )
    )
    mal = total.mean_acceptance_length
    rate = total.draft_acceptance_rate
    floors = (
        ("mean_acceptance_length", "mean acceptance length", mal, t.min_mean_acceptance_length,
         (".2f", "g")),
        ("draft_acceptance_rate", "draft acceptance rate", rate, t.min_draft_acceptance_rate,
         (".1%", ".1%")),
    )  # fmt: skip
    for name, what, value, floor, formats in floors:
        if floor is not None and value is not None:
            checks.append(_at_least(name, what, value, floor, formats))
    if t.expected_mean_acceptance_length is not None and mal is not None:
        exp = t.expected_mean_acceptance_length
        dev = abs(mal - exp) / exp
        ok = dev <= t.rel_tolerance
        checks.append(
            GateCheck(
                "expected_mean_acceptance_length",
                "pass" if ok else "fail",
                mal,
                f"{exp:g} +/- {t.rel_tolerance:.0%}",
                f"mean acceptance length {mal:.2f} is {dev:.1%} from the expected {exp:g}",
            )
        )
    per_pos = total.per_position_rate or []
    for pos, floor in sorted(t.per_position_floors.items()):
        name = f"position_{pos}_acceptance"
        if not total.per_position_available:
            checks.append(
                GateCheck(
                    name,
                    "unmeasured",
                    None,
                    f">= {floor:.3f}",
                    f"{PER_POSITION_UNAVAILABLE}: /metrics has no per-position counters",
                )
            )
            continue
        if pos >= len(per_pos):
            checks.append(
                GateCheck(
                    name,
                    "fail",
                    None,
                    f">= {floor:.3f}",
                    f"no position {pos}: the server drafts {len(per_pos)} tokens per step",
                )
            )
            continue
        checks.append(
            _at_least(name, f"position {pos} acceptance", per_pos[pos], floor, (".3f", ".3f"))
        )
    return checks


def _at_least(
    name: str, what: str, value: float, floor: float, formats: tuple[str, str]
) -> GateCheck:
    """A check that ``value`` is at least ``floor``; ``formats``: how the value and the floor
    are shown (format specs), e.g. "mean acceptance length 2.41 >= 2.2"."""
    ok = value >= floor
    shown_floor = format(floor, formats[1])
    return GateCheck(
        name,
        "pass" if ok else "fail",
        value,
        f">= {shown_floor}",
        f"{what} {format(value, formats[0])} {'>=' if ok else '<'} {shown_floor}",
    )


def _speed_checks(speed: dict[str, object], per_level_names: bool) -> list[GateCheck]:
    checks: list[GateCheck] = []
    rows: list[dict[str, object]] = speed["levels"]  # type: ignore[assignment]
    if speed["status"] == "not_applicable":
        return checks
    if not rows:
        return [GateCheck("speed_up", "unmeasured", None, "measured", str(speed["message"]))]
    src = speed.get("baseline_source") or "none"
    for r in rows:
        c = r["concurrency"]
        name = f"speed_up.c{c}" if per_level_names else "speed_up"
        su = r["speed_up"]
        floor = r["min_speed_up"]
        status = str(r["status"])
        if status == "unmeasured":
            msg = (
                f"speed-up not measured at c={c}: no no-speculation baseline (baseline: {src})"
                if r["output_tps"] is not None
                else f"speed-up not measured at c={c}: the level has no throughput figure "
                "(no request completed, or not a finite number)"
            )
        elif status == "waived":
            shown = f"{su:.2f}x" if isinstance(su, float) else "unmeasured"
            msg = f"WAIVED ({speed['waiver']}): speed-up {shown} at c={c}"
        else:
            ok = status in ("pass", "unsure")
            msg = (
                f"speed-up {su:.2f}x {'>=' if ok else '<'} {floor:.2f} at c={c} "
                f"({r['output_tps']:.1f} vs baseline {r['baseline_tps']:.1f} tok/s"
                + (f", spread {r['spread']:.0%}" if r["spread"] is not None else "")
                + f"; baseline: {src})"
            )
            if status == "unsure":
                msg = f"UNSURE: {msg}: the floor lies within the repeats' spread; repeat or "
                msg += "lengthen the window (--repeats, --min-window-s) to be sure"
        checks.append(GateCheck(name, status, su, f">= {floor:g}", msg))  # type: ignore[arg-type]
    return checks


def _previous_checks(previous: dict[str, object]) -> list[GateCheck]:
    checks: list[GateCheck] = []
    limit = float(previous["max_regression"])  # type: ignore[arg-type]
    rel = previous.get("release")
    who = f"previous release {rel}" if rel else "the previous release"
    for r in previous["levels"]:  # type: ignore[attr-defined]
        c = r["concurrency"]
        ch = r["change"]
        if r["status"] == "unmeasured":
            msg = f"c={c}: not measured for {who}"
        else:
            msg = _regression_text(r, who, limit)
        checks.append(GateCheck(f"vs_previous.c{c}", r["status"], ch, f">= -{limit:.0%}", msg))
    return checks


def evaluate(
    res: AcceptanceResult,
    t: Thresholds,
    speed: dict[str, object] | None = None,
    previous: dict[str, object] | None = None,
    *,
    concurrency: int = 1,
) -> GateResult:
    """All gates over one run. ``speed``: from :func:`evaluate_speed` (default: one level from
    the acceptance repeats against ``res``'s baseline); ``previous``: :func:`evaluate_previous`."""
    checks: list[GateCheck] = []
    if res.status == "spec_off":
        checks.append(GateCheck("speculation_on", "fail", 0.0, "drafts > 0", res.message))
        return GateResult(checks, EXIT_FAIL, [res.message], t, speed, previous)
    if res.status != "ok":
        checks.append(GateCheck("measurement", "error", None, "measured", res.message))
        return GateResult(checks, EXIT_UNMEASURED, [res.message], t, speed, previous)
    per_level_names = speed is not None
    if speed is None:
        base = res.baseline_output_tokens_per_s
        lv = levels_from_acceptance(res, concurrency)
        speed = evaluate_speed(
            lv,
            {concurrency: base} if base else None,
            res.baseline_source,
            t,
            speculative=res.spec_mode,
        )
    if res.spec_mode:
        checks += _acceptance_checks(res, t)
    checks += _speed_checks(speed, per_level_names)
    if previous is not None:
        checks += _previous_checks(previous)
    failed = [c for c in checks if c.status == "fail"]
    unmeasured = [c for c in checks if c.status in ("error", "unmeasured")]
    if failed:
        return GateResult(checks, EXIT_FAIL, [c.message for c in failed], t, speed, previous)
    if unmeasured:
        return GateResult(
            checks, EXIT_UNMEASURED, [c.message for c in unmeasured], t, speed, previous
        )
    return GateResult(checks, EXIT_PASS, [], t, speed, previous)


# --------------------------------------------------------------------------- preflight CLI


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m specdeploy.node.validation.gate",
        description="Validate a gates file before any change (preflight).",
    )
    p.add_argument("--validate", required=True, metavar="FILE", help="gates JSON or YAML")
    p.add_argument("--num-speculative-tokens", type=int, required=True, metavar="K")
    p.add_argument("--levels", required=True, help="validation_concurrency, e.g. 1,8,32")
    p.add_argument("--waiver", default=None, help="specdeploy_speed_up_waiver (a reason)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    try:
        levels = list(parse_levels(a.levels))  # the Workload's parser: the same one-line errors
        t = load_thresholds(a.validate)
        validate(t, a.num_speculative_tokens, levels)
    except (GateConfigError, WorkloadError) as e:
        print(f"gates {a.validate}: {e}", file=sys.stderr)
        return EXIT_UNMEASURED
    except (OSError, ValueError) as e:
        print(f"gates {a.validate}: unreadable: {e}", file=sys.stderr)
        return EXIT_UNMEASURED
    waiver = (a.waiver or t.speed_up_waiver).strip()
    summary = {
        "valid": True,
        "levels": levels,
        "min_speed_up": {str(c): t.min_speed_up_at(c) for c in levels},
        "max_regression_vs_previous": t.max_regression_vs_previous,
        "per_position_floors": {str(k): v for k, v in sorted(t.per_position_floors.items())},
        "speed_up_waiver": waiver or None,
    }
    if a.json:
        print(json.dumps(summary))
    else:
        gates = ", ".join(f"c={c} >= {t.min_speed_up_at(c):g}x" for c in levels)
        print(
            f"gates OK: speed-up {'WAIVED (' + waiver + ')' if waiver else gates}; "
            f"at most {t.max_regression_vs_previous:.0%} slower than the previous release; "
            f"{len(t.per_position_floors)} per-position floor(s) for k={a.num_speculative_tokens}"
        )
    return EXIT_PASS


if __name__ == "__main__":
    sys.exit(main())
