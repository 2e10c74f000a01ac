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
  (its ``speed.levels``; an older result without them: its acceptance median, which stands for
  the one concurrency it was measured at, never for the other levels: those have no baseline).

Every figure read is a finite number > 0 from a level that ran requests: NaN, infinity, a
level measured with 0 requests are refused (one line naming the file and the level), never
turned into a speed-up.
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass
from pathlib import Path

from specdeploy.node import cli, jsontext
from specdeploy.node.validation import loadgen, metrics
from specdeploy.node.validation.acceptance import Prompt
from specdeploy.node.validation.smoke import Client
from specdeploy.node.validation.workload import Workload

THROUGHPUT_SCHEMA = "specdeploy.throughput/1"
BASELINE_SOURCES = ("knob", "history", "serving-release", "baseline-start")


class SpeedInputError(ValueError):
    """A baseline or previous-run input that cannot be used (one line, names the file)."""


@dataclass(frozen=True)
class LevelsFile:
    levels: dict[int, float]  # output tokens/s by concurrency level
    release: str | None
    speculative: bool | None

    def at(self, levels: list[int]) -> dict[int, float]:
        """The figures of the ``levels`` asked for that this file measured (no others)."""
        return {c: t for c, t in self.levels.items() if c in levels}


def parse_baseline_tps(text: str, levels: list[int]) -> dict[int, float]:
    """``--baseline-tps 500`` (every level) or ``1=500,8=1900`` (by level)."""
    try:
        if "=" not in text:
            v = float(text)
            if not math.isfinite(v) or v <= 0:
                raise ValueError
            return dict.fromkeys(levels, v)
        out: dict[int, float] = {}
        for part in text.split(","):
            k, _, v = part.partition("=")
            out[int(k)] = float(v)
        if any(c < 1 or not math.isfinite(v) or v <= 0 for c, v in out.items()):
            raise ValueError
        return out
    except ValueError:
        raise SpeedInputError(
            f"--baseline-tps {text!r}: a number > 0 or LEVEL=TPS pairs (1=500,8=1900)"
        ) from None


def level_figure(where: str, row: object) -> float | None:
    """The output tok/s of one measured level: None when it holds no figure (not measured);
    SpeedInputError when it holds one that cannot be a measurement (NaN, infinity, <= 0, or
    measured with 0 requests)."""
    if not isinstance(row, dict) or row.get("output_tps") is None:
        return None
    if row.get("requests") == 0:
        raise SpeedInputError(f"{where}: measured with 0 requests; no throughput to compare")
    try:
        return cli.finite(where, row["output_tps"], positive=True)
    except ValueError as e:
        raise SpeedInputError(f"{e} (output tok/s)") from None


def _level_key(where: str, c: object) -> int:
    text = str(c).strip()
    if isinstance(c, bool) or not text.isdigit() or int(text) < 1:
        raise SpeedInputError(f"{where}: level {c!r} is not a concurrency level (int >= 1)")
    return int(text)


def read_levels_file(path: str | Path) -> LevelsFile:
    try:
        d = jsontext.parse_object(Path(path).read_text(encoding="utf-8"), str(path))
    except ValueError as e:  # "PATH: not JSON (...)" / "PATH: not a JSON object"
        raise SpeedInputError(
            f"{e}" if str(path) in str(e) else f"{path}: {cli.reason(e)}"
        ) from None
    except OSError as e:
        raise SpeedInputError(f"{path}: {cli.reason(e)}") from None
    levels: dict[int, float] = {}
    if d.get("schema") == THROUGHPUT_SCHEMA:
        rows = d.get("levels")
        for c, lv in (rows if isinstance(rows, dict) else {}).items():
            key = _level_key(f"{path}: levels", c)
            if (x := level_figure(f"{path}: level c={key}", lv)) is not None:
                levels[key] = x
        if not levels:
            raise SpeedInputError(f"{path}: no measured level")
        return LevelsFile(levels, d.get("release"), bool(d.get("speculative")))
    speed = d.get("speed")
    acc = d.get("acceptance") if isinstance(d.get("acceptance"), dict) else {}
    spec = None if not acc else acc.get("mode") == "spec"
    if isinstance(speed, dict) and isinstance(speed.get("levels"), list) and speed["levels"]:
        for lv in speed["levels"]:
            key = _level_key(f"{path}: speed.levels", (lv or {}).get("concurrency"))
            if (x := level_figure(f"{path}: level c={key}", lv)) is not None:
                levels[key] = x
        if levels:
            spec = bool(speed.get("speculative", spec))
            return LevelsFile(levels, d.get("release"), spec)
    tps = (acc or {}).get("output_tokens_per_s")
    if isinstance(tps, dict) and tps.get("median") is not None:
        if acc.get("status") != "ok":
            raise SpeedInputError(f"{path}: run status is {acc.get('status')!r}, not 'ok'")
        # An older result: one figure from the acceptance repeats at the concurrency it ran
        # (its acceptance or labels' "concurrency", else 1); no baseline for any other level.
        ran = acc.get("concurrency") or (d.get("labels") or {}).get("concurrency") or 1
        c = _level_key(f"{path}: concurrency", ran)
        x = level_figure(f"{path}: acceptance c={c}", {**acc, "output_tps": tps["median"]})
        if x is not None:
            return LevelsFile({c: x}, d.get("release"), spec)
    raise SpeedInputError(f"{path}: neither a {THROUGHPUT_SCHEMA} file nor a result with speed")


def measure(
    base_url: str,
    model: str,
    workload: Workload,
    prompts: list[Prompt],
    *,
    api_key: str | None,
) -> list[dict[str, object]]:
    """Each of the workload's levels measured by the load generator (``loadgen.to_dict``
    form); ``prompts`` are the workload's, already read (the caller reads them once for the
    acceptance run too)."""
    rows = loadgen.measure_levels(
        base_url, model, workload, prompts=[p.as_messages() for p in prompts], api_key=api_key
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
