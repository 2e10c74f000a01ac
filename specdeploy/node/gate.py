"""Pass/fail gates over an acceptance measurement (node-side, stdlib + optional PyYAML).

Thresholds come from a JSON or YAML mapping (inventory: per model and drafter)::

    min_mean_acceptance_length: 1.8     # 1 + accepted/drafts must be >= this
    min_draft_acceptance_rate: 0.3      # accepted/draft_tokens, optional
    per_position_floors: [0.6, 0.4, 0.25]   # or {0: 0.6, 2: 0.25}; accepted_i/drafts >= floor
    min_speed_up: 1.0                   # median output tok/s / baseline tok/s (default 1.0)
    require_baseline: false             # no baseline -> speed gate skipped (true: exit 2)
    expected_mean_acceptance_length: 3.0  # optional, with rel_tolerance (upstream's test style)
    rel_tolerance: 0.1

A top-level ``gates:`` key around the mapping is accepted. Unknown keys are an error (a typo
must not silently disable a gate). Exit codes: 0 pass, 1 a gate failed, 2 could not measure.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from specdeploy.node.acceptance import AcceptanceResult

EXIT_PASS = 0
EXIT_FAIL = 1
EXIT_UNMEASURED = 2

KNOWN_KEYS = {
    "min_mean_acceptance_length",
    "min_draft_acceptance_rate",
    "per_position_floors",
    "min_speed_up",
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
    min_speed_up: float = 1.0
    require_baseline: bool = False
    expected_mean_acceptance_length: float | None = None
    rel_tolerance: float = 0.1

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["per_position_floors"] = {str(k): v for k, v in sorted(self.per_position_floors.items())}
        return d


def _num(key: str, v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise GateConfigError(f"gate {key!r}: expected a number, got {v!r}")
    return float(v)


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
        t.min_speed_up = _num("min_speed_up", m["min_speed_up"])
    if m.get("rel_tolerance") is not None:
        t.rel_tolerance = _num("rel_tolerance", m["rel_tolerance"])
    if "require_baseline" in m:
        if not isinstance(m["require_baseline"], bool):
            raise GateConfigError("gate 'require_baseline' must be true or false")
        t.require_baseline = m["require_baseline"]
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
        data = json.loads(text)
    else:
        try:
            import yaml
        except ImportError:
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    return thresholds_from_mapping(data)


@dataclass
class GateCheck:
    name: str
    status: str  # pass | fail | skip | error
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

    @property
    def passed(self) -> bool:
        return self.exit_code == EXIT_PASS

    def to_dict(self) -> dict[str, object]:
        return {
            "passed": self.passed,
            "exit_code": self.exit_code,
            "reasons": self.reasons,
            "thresholds": self.thresholds.to_dict(),
            "checks": [c.to_dict() for c in self.checks],
        }


def evaluate(res: AcceptanceResult, t: Thresholds) -> GateResult:
    checks: list[GateCheck] = []
    if res.status == "spec_off":
        checks.append(GateCheck("speculation_on", "fail", 0.0, "drafts > 0", res.message))
        return GateResult(checks, EXIT_FAIL, [res.message], t)
    if res.status != "ok":
        checks.append(GateCheck("measurement", "error", None, "measured", res.message))
        return GateResult(checks, EXIT_UNMEASURED, [res.message], t)

    total = res.total
    if res.spec_mode and total is not None:
        checks.append(
            GateCheck(
                "speculation_on",
                "pass",
                total.num_drafts,
                "drafts > 0",
                f"{total.num_drafts:g} drafts",
            )
        )
        mal = total.mean_acceptance_length
        if t.min_mean_acceptance_length is not None and mal is not None:
            ok = mal >= t.min_mean_acceptance_length
            checks.append(
                GateCheck(
                    "mean_acceptance_length",
                    "pass" if ok else "fail",
                    mal,
                    f">= {t.min_mean_acceptance_length:g}",
                    f"mean acceptance length {mal:.2f} "
                    f"{'>=' if ok else '<'} {t.min_mean_acceptance_length:g}",
                )
            )
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
        rate = total.draft_acceptance_rate
        if t.min_draft_acceptance_rate is not None and rate is not None:
            ok = rate >= t.min_draft_acceptance_rate
            checks.append(
                GateCheck(
                    "draft_acceptance_rate",
                    "pass" if ok else "fail",
                    rate,
                    f">= {t.min_draft_acceptance_rate:.1%}",
                    f"draft acceptance rate {rate:.1%} {'>=' if ok else '<'} "
                    f"{t.min_draft_acceptance_rate:.1%}",
                )
            )
        per_pos = total.per_position_rate or []
        for pos, floor in sorted(t.per_position_floors.items()):
            if pos >= len(per_pos):
                checks.append(
                    GateCheck(
                        f"position_{pos}_acceptance",
                        "fail",
                        None,
                        f">= {floor:.3f}",
                        f"no position {pos}: the server drafts {len(per_pos)} tokens per step",
                    )
                )
                continue
            v = per_pos[pos]
            ok = v >= floor
            checks.append(
                GateCheck(
                    f"position_{pos}_acceptance",
                    "pass" if ok else "fail",
                    v,
                    f">= {floor:.3f}",
                    f"position {pos} acceptance {v:.3f} {'>=' if ok else '<'} {floor:.3f}",
                )
            )
    if res.spec_mode:
        if res.speed_up is not None:
            su = res.speed_up
            ok = su.median >= t.min_speed_up
            checks.append(
                GateCheck(
                    "speed_up",
                    "pass" if ok else "fail",
                    su.median,
                    f">= {t.min_speed_up:g}",
                    f"speed-up {su.median:.2f}x (min {su.min:.2f}, max {su.max:.2f}, "
                    f"n={len(su.values)}) vs baseline {res.baseline_output_tokens_per_s:.1f} tok/s",
                )
            )
        elif t.require_baseline:
            checks.append(
                GateCheck(
                    "speed_up",
                    "error",
                    None,
                    f">= {t.min_speed_up:g}",
                    "no baseline throughput given (require_baseline)",
                )
            )
        else:
            checks.append(
                GateCheck(
                    "speed_up",
                    "skip",
                    None,
                    f">= {t.min_speed_up:g}",
                    "no baseline throughput given: speed-up not gated",
                )
            )
    failed = [c for c in checks if c.status == "fail"]
    errors = [c for c in checks if c.status == "error"]
    if failed:
        return GateResult(checks, EXIT_FAIL, [c.message for c in failed], t)
    if errors:
        return GateResult(checks, EXIT_UNMEASURED, [c.message for c in errors], t)
    return GateResult(checks, EXIT_PASS, [], t)
