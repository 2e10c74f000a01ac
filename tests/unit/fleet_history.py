"""A fleet's validation history as result JSONs (schema specdeploy.validation/1), for the report
and textfile tests: two nodes over five days with gaps, a no-speculation baseline release, two
speculative releases, a failed run, a run that regressed against its release's first validated
run, repeated runs of one release on one node, and the per-level speed results of the speed
contract ("speed" and "previous") on the newest runs. The figures are shaped like the recorded
real runs (tests/fixtures/vllm-0.20.2-gpu-tier), not measured here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MODEL = "kimi-k2.5"
BASELINE = "20261128-nospec-1a2b"
OLD = "20261129-eagle3-k3-3c4d"
NEW = "20261202-eagle3-k4-5e6f"


def _spread(v: float) -> dict[str, float | int]:
    return {"median": v, "min": v * 0.97, "max": v * 1.02, "q1": v * 0.99, "q3": v * 1.01, "n": 3}


def result(
    node: str,
    release: str,
    at: str,
    *,
    mal: float | None,
    tps: float,
    per_position: list[float] | None = None,
    speed_up: float | None = None,
    status: str = "pass",
    reasons: list[str] | None = None,
    concurrency: int = 1,
) -> dict[str, Any]:
    spec = mal is not None
    return {
        "schema": "specdeploy.validation/1",
        "run_id": f"{node}-{release}-{at}",
        "mode": "all",
        "status": status,
        "exit_code": {"pass": 0, "fail": 1}.get(status, 2),
        "reasons": reasons or [],
        "node": node,
        "release": release,
        "labels": {},
        "base_url": "http://127.0.0.1:8000",
        "served_model_name": MODEL,
        "server_version": "0.20.2",
        "started_at": at,
        "finished_at": at.replace(":00Z", ":40Z"),
        "duration_s": 40.0,
        "smoke": {"ok": True, "stages": []},
        "acceptance": {
            "status": "ok",
            "message": "",
            "mode": "spec" if spec else "no_spec_baseline",
            "concurrency": concurrency,
            "mean_acceptance_length": mal,
            "draft_acceptance_rate": None if mal is None else (mal - 1) / len(per_position or [1]),
            "per_position_acceptance": per_position,
            "output_tokens_per_s": _spread(tps),
            "accepted_tokens_per_s": None,
            "baseline_output_tokens_per_s": None if speed_up is None else tps / speed_up,
            "speed_up": None if speed_up is None else _spread(speed_up),
        },
        "gates": {
            "passed": status == "pass",
            "exit_code": 0 if status == "pass" else 1,
            "reasons": reasons or [],
            "thresholds": {"per_position_floors": {"0": 0.5, "1": 0.3, "2": 0.2}},
            "checks": [],
        },
    }


def with_speed(r: dict[str, Any], levels: dict[int, tuple[float, float]], prev: dict[int, float]):
    """Adds the speed contract's "speed" (level -> (output tok/s, baseline tok/s)) and
    "previous" (level -> the serving release's tok/s before the switch) keys."""
    rows = []
    for c, (tps, base) in sorted(levels.items()):
        su = tps / base
        rows.append(
            {
                "concurrency": c,
                "output_tps": tps,
                "spread": 0.03,
                "baseline_tps": base,
                "speed_up": su,
                "min_speed_up": 1.0,
                "ttft_p50_s": 0.4,
                "status": "pass" if su >= 1.0 else "fail",
            }
        )
    failed = [x["concurrency"] for x in rows if x["status"] == "fail"]
    r["speed"] = {
        "baseline_source": "history",
        "levels": rows,
        "status": "fail" if failed else "pass",
        "failed_levels": failed,
        "message": "",
    }
    r["previous"] = {
        "release": OLD,
        "levels": [
            {
                "concurrency": c,
                "previous_tps": p,
                "output_tps": levels[c][0],
                "change": levels[c][0] / p - 1,
                "status": "pass" if levels[c][0] / p - 1 >= -0.05 else "fail",
            }
            for c, p in sorted(prev.items())
        ],
        "max_regression": 0.05,
        "status": "pass",
    }
    return r


def fleet() -> list[dict[str, Any]]:
    """Oldest first; gpu-01 validated daily, gpu-02 with a two-day gap."""
    pp_old, pp_new = [0.80, 0.62, 0.47], [0.82, 0.66, 0.51, 0.38]
    out = [
        result("gpu-01", BASELINE, "2026-11-28T09:00:00Z", mal=None, tps=61.0),
        result("gpu-02", BASELINE, "2026-11-28T09:30:00Z", mal=None, tps=60.2),
        result("gpu-01", OLD, "2026-11-29T10:00:00Z", mal=2.89, tps=101.0, per_position=pp_old,
               speed_up=1.66),
        result("gpu-02", OLD, "2026-11-29T10:20:00Z", mal=2.86, tps=99.5, per_position=pp_old,
               speed_up=1.65),
        result("gpu-01", OLD, "2026-11-30T10:00:00Z", mal=2.88, tps=100.2, per_position=pp_old,
               speed_up=1.64),
        # Regressed: passes its gates, but 14% slower than the release's first validated run.
        result("gpu-01", OLD, "2026-12-01T10:00:00Z", mal=2.49, tps=86.5,
               per_position=[0.70, 0.50, 0.29], speed_up=1.42),
        # Failed: a gate failed (acceptance below the floor at position 2).
        result("gpu-02", OLD, "2026-12-01T22:10:00Z", mal=1.71, tps=70.3,
               per_position=[0.55, 0.31, 0.12], speed_up=1.15, status="fail",
               reasons=["position_2_acceptance 0.120 < 0.2"]),
        with_speed(
            result("gpu-01", NEW, "2026-12-02T11:00:00Z", mal=3.37, tps=112.0,
                   per_position=pp_new, speed_up=1.84, concurrency=8),
            {1: (112.0, 61.0), 8: (610.0, 402.0), 32: (1490.0, 1390.0)},
            {1: 100.2, 8: 560.0, 32: 1460.0},
        ),
        with_speed(
            result("gpu-02", NEW, "2026-12-03T08:45:00Z", mal=3.35, tps=111.4,
                   per_position=pp_new, speed_up=1.85, concurrency=8),
            {1: (111.4, 60.2), 8: (604.0, 400.0), 32: (1301.0, 1388.0)},
            {1: 99.5, 8: 551.0, 32: 1455.0},
        ),
    ]  # fmt: skip
    out[-1]["status"], out[-1]["exit_code"] = "fail", 1
    out[-1]["reasons"] = ["speed-up 0.94x < 1.00 at c=32 (baseline: history)"]
    return out


def write(directory: Path, results: list[dict[str, Any]] | None = None) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, r in enumerate(results if results is not None else fleet()):
        p = directory / f"{i:02d}-{r['node']}.json"
        p.write_text(json.dumps(r, indent=1))
        paths.append(p)
    return paths


def one_result(
    node: str, release: str, started: str, mal: float, tps: float, status: str = "pass"
) -> dict:
    """One plain result (one acceptance figure, one speed) for the history tests."""
    return {
        "schema": "specdeploy.validation/1",
        "node": node,
        "release": release,
        "started_at": started,
        "finished_at": started,
        "status": status,
        "exit_code": 0 if status == "pass" else 1,
        "mode": "all",
        "reasons": [],
        "served_model_name": "m",
        "acceptance": {
            "status": "ok",
            "mean_acceptance_length": mal,
            "draft_acceptance_rate": (mal - 1) / 3,
            "per_position_acceptance": [0.8, 0.6, 0.4],
            "output_tokens_per_s": {"median": tps, "min": tps, "max": tps},
            "accepted_tokens_per_s": None,
            "speed_up": None,
        },
    }
