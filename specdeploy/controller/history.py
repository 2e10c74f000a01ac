"""SQLite history of validation results, keyed by node and release (controller side).

Every ``specdeploy.node.check`` result JSON can be recorded (``record``); a result is stored once
(keyed by its ``run_id``, or the hash of its JSON when it has none). A run is a regression
when its figures fall more than a relative tolerance below that release's FIRST VALIDATED run
on the same node (the first run with status ``pass`` that measured acceptance): mean
acceptance length, median output tokens/s and median speed-up.

The no-speculation baseline of a node is the latest passed ``--no-spec-baseline`` run for
that node and served model (a release deployed with speculation off); validations of
speculative releases compare their throughput with it (``check --baseline-tps``)::

    python -m specdeploy.controller.history baseline --db DB --node N --model NAME  # exit 1 none
    python -m specdeploy.controller.history runs --db DB [--node NODE] [--release ID]  # JSON lines
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdeploy.node import cli

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL UNIQUE,
    node TEXT NOT NULL,
    release TEXT NOT NULL,
    model TEXT,
    started_at TEXT NOT NULL,
    mode TEXT,
    status TEXT,
    exit_code INTEGER,
    acceptance_status TEXT,
    mean_acceptance_length REAL,
    draft_acceptance_rate REAL,
    per_position TEXT,
    output_tps REAL,
    output_tps_min REAL,
    output_tps_max REAL,
    accepted_tps REAL,
    speed_up REAL,
    result_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_node_release ON runs (node, release, started_at);
"""

COLUMNS = (
    "id", "run_id", "node", "release", "model", "started_at", "mode", "status", "exit_code",
    "acceptance_status", "mean_acceptance_length", "draft_acceptance_rate", "per_position",
    "output_tps", "output_tps_min", "output_tps_max", "accepted_tps", "speed_up",
)  # fmt: skip


class HistoryError(Exception):
    """The history file cannot be used (not a database, unreadable); names the file."""


class _Connection(sqlite3.Connection):
    """Every query error is a HistoryError naming the file (a broken history is a usage
    error of the tool that reads it, exit 2, never a traceback)."""

    path = ""

    def execute(self, *args: Any, **kwargs: Any) -> sqlite3.Cursor:
        try:
            return super().execute(*args, **kwargs)
        except sqlite3.Error as exc:
            raise HistoryError(f"{self.path}: {exc}") from exc


def connect(path: str | Path) -> sqlite3.Connection:
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(p), timeout=30, factory=_Connection)
        conn.path = str(p)  # type: ignore[attr-defined]
        conn.row_factory = sqlite3.Row
        conn.executescript(SCHEMA)
    except (sqlite3.Error, OSError) as exc:
        raise HistoryError(f"{p}: {cli.reason(exc)}") from exc
    return conn


def _median(d: object) -> float | None:
    if isinstance(d, dict) and isinstance(d.get("median"), (int, float)):
        return float(d["median"])
    return None


def row_values(result: dict[str, Any]) -> dict[str, Any]:
    acc = result.get("acceptance") or {}
    tps = acc.get("output_tokens_per_s") or {}
    blob = json.dumps(result, sort_keys=True)
    return {
        "run_id": str(result.get("run_id") or hashlib.sha256(blob.encode()).hexdigest()),
        "node": str(result.get("node") or "unknown"),
        "release": str(result.get("release") or "unknown"),
        "model": result.get("served_model_name"),
        "started_at": str(result.get("started_at") or ""),
        "mode": result.get("mode"),
        "status": result.get("status"),
        "exit_code": result.get("exit_code"),
        "acceptance_status": acc.get("status"),
        "mean_acceptance_length": acc.get("mean_acceptance_length"),
        "draft_acceptance_rate": acc.get("draft_acceptance_rate"),
        "per_position": json.dumps(acc.get("per_position_acceptance")),
        "output_tps": _median(tps),
        "output_tps_min": tps.get("min") if isinstance(tps, dict) else None,
        "output_tps_max": tps.get("max") if isinstance(tps, dict) else None,
        "accepted_tps": _median(acc.get("accepted_tokens_per_s")),
        "speed_up": _median(acc.get("speed_up")),
        "result_json": blob,
    }


def record(conn: sqlite3.Connection, result: dict[str, Any]) -> int | None:
    """Insert one result; returns its row id, or None when it was already recorded."""
    v = row_values(result)
    cols = ", ".join(v)
    marks = ", ".join("?" for _ in v)
    with conn:
        cur = conn.execute(
            f"INSERT OR IGNORE INTO runs ({cols}) VALUES ({marks})", tuple(v.values())
        )
    return cur.lastrowid if cur.rowcount else None


def runs(
    conn: sqlite3.Connection,
    node: str | None = None,
    release: str | None = None,
    *,
    with_result: bool = False,
) -> list[dict[str, Any]]:
    """Recorded runs, oldest first; ``with_result`` adds each run's whole result (``result``)."""
    cols = [*COLUMNS, "result_json"] if with_result else list(COLUMNS)
    q = f"SELECT {', '.join(cols)} FROM runs"
    where, args = [], []
    if node:
        where.append("node = ?")
        args.append(node)
    if release:
        where.append("release = ?")
        args.append(release)
    if where:
        q += " WHERE " + " AND ".join(where)
    q += " ORDER BY started_at, id"
    out = []
    for r in conn.execute(q, args):
        d = dict(r)
        d["per_position"] = json.loads(d["per_position"]) if d["per_position"] else None
        if with_result:
            d["result"] = json.loads(d.pop("result_json"))
        out.append(d)
    return out


def baselines(
    conn: sqlite3.Connection, node: str | None = None, model: str | None = None
) -> list[dict[str, Any]]:
    """Passed no-speculation baseline runs (oldest first), optionally of one node and model."""
    q = (
        "SELECT run_id, node, release, model, started_at, output_tps, output_tps_min, "
        "output_tps_max, result_json FROM runs WHERE status = 'pass' AND acceptance_status = 'ok' "
        "AND output_tps IS NOT NULL"
    )
    args: list[str] = []
    if node:
        q += " AND node = ?"
        args.append(node)
    if model:
        q += " AND model = ?"
        args.append(model)
    out = []
    for r in conn.execute(q + " ORDER BY started_at, id", args):
        d = dict(r)
        acc = json.loads(d.pop("result_json")).get("acceptance") or {}
        if acc.get("mode") != "no_spec_baseline":
            continue
        d["n"] = (acc.get("output_tokens_per_s") or {}).get("n")
        out.append(d)
    return out


def latest_baseline(conn: sqlite3.Connection, node: str, model: str) -> dict[str, Any] | None:
    found = baselines(conn, node, model)
    return found[-1] if found else None


def first_validated(conn: sqlite3.Connection, node: str, release: str) -> dict[str, Any] | None:
    for r in runs(conn, node, release):
        if r["status"] == "pass" and r["acceptance_status"] == "ok":
            return r
    return None


@dataclass
class Regression:
    metric: str
    value: float
    reference: float
    rel_drop: float
    reference_started_at: str

    def message(self) -> str:
        return (
            f"{self.metric} {self.value:.3f} is {self.rel_drop:.1%} below the release's "
            f"first validated run ({self.reference:.3f} at {self.reference_started_at})"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "metric": self.metric,
            "value": self.value,
            "reference": self.reference,
            "rel_drop": self.rel_drop,
            "reference_started_at": self.reference_started_at,
            "message": self.message(),
        }


def regressions(
    conn: sqlite3.Connection, result: dict[str, Any], tolerance: float = 0.1
) -> list[Regression]:
    """Compare ``result`` with its release's first validated run on the same node."""
    v = row_values(result)
    ref = first_validated(conn, v["node"], v["release"])
    if ref is None or ref["run_id"] == v["run_id"]:
        return []
    return compare(v, ref, tolerance)


def compare(v: dict[str, Any], ref: dict[str, Any], tolerance: float) -> list[Regression]:
    """The metrics of run ``v`` more than ``tolerance`` (relative) below reference run ``ref``
    (both history rows)."""
    out: list[Regression] = []
    for metric, col in (
        ("mean_acceptance_length", "mean_acceptance_length"),
        ("output_tokens_per_s", "output_tps"),
        ("speed_up", "speed_up"),
    ):
        cur, base = v[col], ref[col]
        if cur is None or base is None or base <= 0:
            continue
        drop = (base - cur) / base
        if drop > tolerance:
            out.append(Regression(metric, float(cur), float(base), drop, ref["started_at"]))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="spec-history", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("baseline", help="latest no-speculation baseline of a node and model")
    b.add_argument("--db", required=True)
    b.add_argument("--node", required=True)
    b.add_argument("--model", required=True)
    r = sub.add_parser("runs", help="recorded runs, one JSON object a line")
    r.add_argument("--db", required=True)
    r.add_argument("--node")
    r.add_argument("--release")
    args = p.parse_args(argv)
    if not Path(args.db).exists():
        if args.cmd == "baseline":
            print(json.dumps({"found": False, "reason": f"no history at {args.db}"}))
            return 1
        print(f"spec-history: error: no history at {args.db}", file=sys.stderr)
        return 2
    try:
        conn = connect(args.db)
    except HistoryError as exc:
        return cli.usage_error("spec-history", f"--db {exc}")
    try:
        if args.cmd == "baseline":
            base = latest_baseline(conn, args.node, args.model)
            if base is None:
                print(
                    json.dumps(
                        {
                            "found": False,
                            "reason": f"no passed no-spec baseline run for node {args.node!r} "
                            f"and model {args.model!r} in {args.db}",
                        }
                    )
                )
                return 1
            print(json.dumps({"found": True, **base}))
            return 0
        for row in runs(conn, args.node, args.release):
            print(json.dumps(row))
        return 0
    except HistoryError as exc:
        return cli.usage_error("spec-history", f"--db {exc}")
    finally:
        conn.close()


if __name__ == "__main__":
    sys.exit(main())
