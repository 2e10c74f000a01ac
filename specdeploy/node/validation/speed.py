"""Throughput per concurrency level: measuring it, and reading baselines and previous runs.

Node side, standard library only. The measurement is :mod:`specdeploy.node.validation.loadgen`'s
(streamed
requests, ``c`` workers, repeats); this module turns it into the documents the deploy flow
passes around:

* ``specdeploy.throughput/1``: what ``check baseline`` writes (whatever serves now, no gates)::

    {"schema": "specdeploy.throughput/1", "release": str|null, "speculative": bool,
     "measured_at": ISO-8601 UTC, "model": str, "endpoint": "chat"|"completions",
     "levels": {"1": {LevelResult fields}, "8": {...}}}

* a baseline or previous-run file may be that, or a full ``specdeploy.validation/1`` result
  (its ``speed.levels``; an older result without them: its acceptance median, for every level).
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass
from pathlib import Path

from specdeploy.node.validation import loadgen, metrics
from specdeploy.node.validation.acceptance import Prompt
from specdeploy.node.validation.smoke import Client

THROUGHPUT_SCHEMA = "specdeploy.throughput/1"
BASELINE_SOURCES = ("knob", "history", "serving-release", "baseline-start")


class SpeedInputError(ValueError):
    """A baseline or previous-run input that cannot be used (one line, names the file)."""


@dataclass(frozen=True)
class LevelsFile:
    levels: dict[int, float]  # output tokens/s by concurrency level
    release: str | None
    speculative: bool | None
    all_levels: bool = False  # one figure that stands for every level (older results)

    def at(self, levels: list[int]) -> dict[int, float]:
        if self.all_levels and self.levels:
            only = next(iter(self.levels.values()))
            return dict.fromkeys(levels, only)
        return {c: t for c, t in self.levels.items() if c in levels}


def parse_levels(text: str) -> list[int]:
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SpeedInputError(f"--levels {text!r}: comma-separated integers, e.g. 1,8,32") from None
    if not levels or min(levels) < 1 or len(set(levels)) != len(levels):
        raise SpeedInputError(f"--levels {text!r}: distinct integers >= 1")
    return levels


def parse_baseline_tps(text: str, levels: list[int]) -> dict[int, float]:
    """``--baseline-tps 500`` (every level) or ``1=500,8=1900`` (by level)."""
    try:
        if "=" not in text:
            v = float(text)
            if v <= 0:
                raise ValueError
            return dict.fromkeys(levels, v)
        out: dict[int, float] = {}
        for part in text.split(","):
            k, _, v = part.partition("=")
            out[int(k)] = float(v)
        if any(c < 1 or v <= 0 for c, v in out.items()):
            raise ValueError
        return out
    except ValueError:
        raise SpeedInputError(
            f"--baseline-tps {text!r}: a number > 0 or LEVEL=TPS pairs (1=500,8=1900)"
        ) from None


def read_levels_file(path: str | Path) -> LevelsFile:
    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SpeedInputError(f"{path}: unreadable ({e})") from None
    if not isinstance(d, dict):
        raise SpeedInputError(f"{path}: not a JSON object")
    if d.get("schema") == THROUGHPUT_SCHEMA:
        levels = {
            int(c): float(lv["output_tps"])
            for c, lv in (d.get("levels") or {}).items()
            if isinstance(lv, dict) and isinstance(lv.get("output_tps"), (int, float))
        }
        if not levels:
            raise SpeedInputError(f"{path}: no measured level")
        return LevelsFile(levels, d.get("release"), bool(d.get("speculative")))
    speed = d.get("speed")
    acc = d.get("acceptance") if isinstance(d.get("acceptance"), dict) else {}
    spec = None if not acc else acc.get("mode") == "spec"
    if isinstance(speed, dict) and speed.get("levels"):
        levels = {
            int(lv["concurrency"]): float(lv["output_tps"])
            for lv in speed["levels"]
            if isinstance(lv.get("output_tps"), (int, float))
        }
        if levels:
            spec = bool(speed.get("speculative", spec))
            return LevelsFile(levels, d.get("release"), spec)
    tps = (acc or {}).get("output_tokens_per_s")
    if isinstance(tps, dict) and isinstance(tps.get("median"), (int, float)):
        if acc.get("status") != "ok":
            raise SpeedInputError(f"{path}: run status is {acc.get('status')!r}, not 'ok'")
        return LevelsFile({1: float(tps["median"])}, d.get("release"), spec, all_levels=True)
    raise SpeedInputError(f"{path}: neither a {THROUGHPUT_SCHEMA} file nor a result with speed")


def measure(
    base_url: str,
    model: str,
    levels: list[int],
    prompts: list[Prompt],
    *,
    api_key: str | None,
    endpoint: str = "chat",
    max_tokens: int = 128,
    temperature: float = 0.0,
    top_p: float = 1.0,
    repeats: int = 3,
    min_window_s: float = 5.0,
    timeout_s: float = 120.0,
) -> list[dict[str, object]]:
    """Each level measured by the load generator (``loadgen.to_dict`` form)."""
    rows = loadgen.measure_levels(
        base_url,
        model,
        levels,
        prompts=[p.as_messages() for p in prompts],
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        repeats=repeats,
        min_window_s=min_window_s,
        endpoint=endpoint,
        api_key=api_key,
        timeout_s=timeout_s,
    )
    return [loadgen.to_dict(r) for r in rows]


def serves_speculatively(client: Client, model: str, timeout_s: float = 10.0) -> bool:
    """Whether /metrics has spec-decode counters for ``model`` (vLLM has none without a
    speculative config)."""
    return metrics.snapshot(client.text("/metrics", timeout_s), model).present


def throughput_document(
    levels: list[dict[str, object]],
    *,
    release: str | None,
    speculative: bool,
    model: str,
    endpoint: str,
    node: str | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, object]:
    return {
        "schema": THROUGHPUT_SCHEMA,
        "node": node,
        "labels": labels or {},
        "release": release,
        "speculative": speculative,
        "measured_at": _dt.datetime.now(_dt.UTC)
        .isoformat(timespec="seconds")
        .replace("+00:00", "Z"),
        "model": model,
        "endpoint": endpoint,
        "levels": {str(lv["concurrency"]): lv for lv in levels},
    }
