"""SQLite history of validation results, keyed by node and release (controller side).

Every ``specdeploy.node.validation.check`` result JSON can be recorded (``record``); a result is
stored once
(keyed by its ``run_id``, or the hash of its JSON when it has none). A run is a regression
when its figures fall more than a relative tolerance below that release's FIRST VALIDATED run
on the same node (the first run with status ``pass`` that measured acceptance): mean
acceptance length, median output tokens/s and median speed-up.

A run is also compared with the latest validated run of the release it replaced (another
release on the same node and model, validated before it): per concurrency level, a new release
slower than the previous one is flagged too, not only a drift within one release.

The no-speculation baseline of a node is the latest passed ``--no-spec-baseline`` run for
that node and served model (a release deployed with speculation off); validations of
speculative releases compare their throughput with it (``check --baseline-tps``). Per
concurrency level, :func:`baseline_levels` also matches the parallel sizes and the hardware
(the result's ``parallel`` and ``hardware`` labels, e.g. ``tp=8,pp=1`` and ``NVIDIA H200``)::

    python -m specdeploy.controller.history baseline --db DB --node N --model NAME  # exit 1 none
    python -m specdeploy.controller.history baseline-levels --db DB --node N --model NAME \
        --parallel tp=8,pp=1 --hardware "NVIDIA H200"   # {"found", "levels": {"1": tps}}; 1 none
    python -m specdeploy.controller.history runs --db DB [--node NODE] [--release ID]  # JSON lines

Each server start a deploy or rollback made is recorded too (table ``starts``): its downtime
window (the old server's stop to the new one's readiness, from the engine log) with its parts
(weights, compilation, graph capture), and the throughput and speed-up of the validation that
followed it, when one ran::

    python -m specdeploy.controller.history downtime --json '[{...}, ...]' [--db DB]
        # {"lines": [one line per node, what a deploy prints last], "recorded": N}
    python -m specdeploy.controller.history starts --db DB [--node NODE] [--latest]  # JSON lines
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import sqlite3
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from specdeploy.node import cli, jsontext
from specdeploy.node.validation.result import from_throughput

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
CREATE TABLE IF NOT EXISTS starts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    node TEXT NOT NULL,
    release TEXT NOT NULL,
    action TEXT NOT NULL,
    at TEXT NOT NULL,
    restarted INTEGER NOT NULL,
    window_s REAL,
    parts TEXT,
    output_tps REAL,
    speed_up REAL,
    validation_run_id TEXT
);
CREATE INDEX IF NOT EXISTS starts_node ON starts (node, at);
"""

START_FIELDS = (
    "node", "release", "action", "at", "restarted", "window_s", "parts", "output_tps",
    "speed_up", "validation_run_id",
)  # fmt: skip

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


def _create(p: Path) -> None:
    """A new history appears whole: built beside ``p``, then linked into place. Two nodes of
    a rollout record at once; a plain connect would let the second see the first's file while
    it is still empty, which is what a truncated copy looks like (refused below)."""
    p.parent.mkdir(parents=True, exist_ok=True)
    fresh = p.with_name(f".{p.name}.{os.getpid()}.new")
    try:
        with contextlib.closing(sqlite3.connect(str(fresh))) as conn:
            conn.executescript(SCHEMA)
        with contextlib.suppress(FileExistsError):  # the other writer made it first: use theirs
            os.link(fresh, p)
    finally:
        fresh.unlink(missing_ok=True)


def connect(path: str | Path) -> sqlite3.Connection:
    """The history at ``path``, created when there is no file there. An existing file that is
    empty, or not SQLite, is a HistoryError: never silently turned into a new database (an
    empty file is what a truncated copy or a full disk leaves)."""
    p = Path(path)
    try:
        if not p.exists():
            _create(p)
        if p.is_file() and p.stat().st_size == 0:
            raise HistoryError(
                f"{p}: empty file, not a history database (remove it to start a new history)"
            )
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


def _levels_tps(result: dict[str, Any]) -> dict[int, float]:
    """Output tokens/s by concurrency level of a stored result (its ``speed`` section; an
    older result without one: the acceptance median, measured at concurrency 1)."""
    speed = result.get("speed")
    out: dict[int, float] = {}
    if isinstance(speed, dict):
        for lv in speed.get("levels") or []:
            c, tps = lv.get("concurrency"), lv.get("output_tps")
            if lv.get("requests") == 0:  # a level that ran no request measured nothing
                continue
            if isinstance(c, int) and isinstance(tps, (int, float)) and 0 < tps < math.inf:
                out[c] = float(tps)
        return out
    acc = result.get("acceptance") or {}
    med = _median(acc.get("output_tokens_per_s"))
    if med:
        out[1] = med
    return out


def is_no_spec(result: dict[str, Any]) -> bool:
    speed = result.get("speed")
    if isinstance(speed, dict) and speed.get("speculative") is False:
        return True
    return (result.get("acceptance") or {}).get("mode") == "no_spec_baseline"


def baseline_levels(
    db: sqlite3.Connection | str | Path,
    node: str,
    model: str,
    parallel: str | None,
    hardware: str | None,
) -> dict[int, float]:
    """No-speculation output tokens/s by concurrency level for this node, model, parallel
    sizes and hardware (labels ``parallel`` / ``hardware``; None matches any); the newest
    passed no-speculation run that measured a level gives that level. {} when none."""
    return baseline_levels_with_sources(db, node, model, parallel, hardware)[0]


def baseline_levels_with_sources(
    db: sqlite3.Connection | str | Path,
    node: str,
    model: str,
    parallel: str | None,
    hardware: str | None,
) -> tuple[dict[int, float], dict[int, dict[str, str]]]:
    """baseline_levels and, per level, the run it came from (run_id, started_at, hardware,
    parallel labels): what a consumer must say when the levels mix runs."""
    conn = db if isinstance(db, sqlite3.Connection) else connect(db)
    try:
        found: dict[int, float] = {}
        sources: dict[int, dict[str, str]] = {}
        q = (
            "SELECT run_id, started_at, result_json FROM runs WHERE node = ? AND model = ? "
            "AND status = 'pass' ORDER BY started_at DESC, id DESC"
        )
        for run_id, started_at, blob in conn.execute(q, (node, model)):
            r = json.loads(blob)
            labels = r.get("labels") or {}
            if not is_no_spec(r):
                continue
            if parallel is not None and labels.get("parallel") != parallel:
                continue
            if hardware is not None and labels.get("hardware") != hardware:
                continue
            for c, tps in _levels_tps(r).items():
                if c not in found:
                    found[c] = tps
                    sources[c] = {
                        "run_id": str(run_id),
                        "started_at": str(started_at or ""),
                        "hardware": str(labels.get("hardware") or ""),
                        "parallel": str(labels.get("parallel") or ""),
                    }
        return found, sources
    finally:
        if conn is not db:
            conn.close()


def mixing_notes(sources: dict[int, dict[str, str]], max_days: float = 7.0) -> list[str]:
    """What a baseline assembled from several runs mixes: other GPUs, other parallel layouts,
    runs measured more than ``max_days`` apart (one line each, empty when it mixes nothing)."""
    import datetime as _dt

    notes: list[str] = []
    runs = {s["run_id"]: s for s in sources.values()}
    if len(runs) <= 1:
        return notes
    for key, what in (("hardware", "GPUs"), ("parallel", "parallel layouts")):
        vals = sorted({s[key] or "(unlabelled)" for s in runs.values()})
        if len(vals) > 1:
            notes.append(f"the no-speculation baseline mixes {what}: {', '.join(vals)}")
    stamps = []
    for s in runs.values():
        try:
            stamps.append(_dt.datetime.fromisoformat(s["started_at"].replace("Z", "+00:00")))
        except ValueError:
            continue
    if len(stamps) >= 2 and (max(stamps) - min(stamps)).total_seconds() > max_days * 86400:
        days = (max(stamps) - min(stamps)).total_seconds() / 86400
        notes.append(
            f"the no-speculation baseline mixes runs measured {days:.0f} days apart "
            f"({min(stamps).date()} .. {max(stamps).date()})"
        )
    levels = ", ".join(f"c={c}: {s['run_id'][:12]}" for c, s in sorted(sources.items()))
    if notes:
        notes.append(f"baseline levels by run: {levels}")
    return notes


def previous_release_run(conn: sqlite3.Connection, result: dict[str, Any]) -> dict[str, Any] | None:
    """The latest validated run of another release on the same node and model, before this
    run: the run of the release this one replaced."""
    v = row_values(result)
    q = (
        "SELECT run_id, release, started_at, result_json FROM runs WHERE node = ? AND "
        "model IS ? AND release != ? AND status = 'pass' AND acceptance_status = 'ok' AND "
        "started_at < ? ORDER BY started_at DESC, id DESC LIMIT 1"
    )
    row = conn.execute(q, (v["node"], v["model"], v["release"], v["started_at"])).fetchone()
    return dict(row) if row else None


@dataclass
class Regression:
    metric: str
    value: float
    reference: float
    rel_drop: float
    reference_started_at: str
    reference_what: str = "the release's first validated run"

    def message(self) -> str:
        return (
            f"{self.metric} {self.value:.3f} is {self.rel_drop:.1%} below "
            f"{self.reference_what} ({self.reference:.3f} at {self.reference_started_at})"
        )

    def to_dict(self) -> dict[str, object]:
        return asdict(self) | {"message": self.message()}


def regressions(
    conn: sqlite3.Connection,
    result: dict[str, Any],
    tolerance: float = 0.1,
    previous_tolerance: float | None = None,
) -> list[Regression]:
    """Compare ``result`` with its release's first validated run on the same node, and its
    output tokens/s per level with the previous release's latest validated run (runs apart in
    time: ``previous_tolerance`` defaults to ``tolerance``; the deploy's back-to-back canary
    comparison has its own gate, max_regression_vs_previous)."""
    if previous_tolerance is None:
        previous_tolerance = tolerance
    v = row_values(result)
    out: list[Regression] = []
    prev = previous_release_run(conn, result)
    if prev is not None:
        mine = _levels_tps(result)
        theirs = _levels_tps(json.loads(prev["result_json"]))
        for c in sorted(set(mine) & set(theirs)):
            drop = (theirs[c] - mine[c]) / theirs[c]
            if drop > previous_tolerance:
                out.append(
                    Regression(
                        f"output_tokens_per_s at c={c}",
                        mine[c],
                        theirs[c],
                        drop,
                        prev["started_at"],
                        f"the previous release {prev['release']}",
                    )
                )
    ref = first_validated(conn, v["node"], v["release"])
    if ref is None or ref["run_id"] == v["run_id"]:
        return out
    return out + compare(v, ref, tolerance)


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


def _number(value: object) -> float | None:
    """A figure from Ansible (a number, a numeric string, or None / '' for not measured)."""
    if value is None or value == "" or isinstance(value, bool):
        return None
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"not a number: {value!r}") from None


def start_values(entry: dict[str, Any]) -> dict[str, Any]:
    """One start as stored: node, release, action and at are required; ``window`` is
    engine_log.downtime_window's dict (None when the engine log did not say ready)."""
    missing = [k for k in ("node", "release", "action", "at") if not entry.get(k)]
    if missing:
        raise ValueError(f"a start needs {', '.join(missing)}: {json.dumps(entry)[:200]}")
    window = entry.get("window") or {}
    if not isinstance(window, dict):
        raise ValueError(f"window is not an object: {window!r}")
    return {
        "node": str(entry["node"]),
        "release": str(entry["release"]),
        "action": str(entry["action"]),
        "at": str(entry["at"]),
        "restarted": int(str(entry.get("restarted", True)).lower() in ("true", "1")),
        "window_s": _number(window.get("window_s")),
        "parts": json.dumps(window.get("parts")) if window.get("parts") else None,
        "output_tps": _number(entry.get("output_tps")),
        "speed_up": _number(entry.get("speed_up")),
        "validation_run_id": entry.get("validation_run_id") or None,
    }


def record_starts(conn: sqlite3.Connection, entries: list[dict[str, Any]]) -> int:
    """Store the starts of one deploy or rollback; returns how many were stored."""
    rows = [start_values(e) for e in entries]  # all checked before any is written
    with conn:
        for v in rows:
            conn.execute(
                f"INSERT INTO starts ({', '.join(v)}) VALUES ({', '.join('?' for _ in v)})",
                tuple(v.values()),
            )
    return len(rows)


def levels_text(levels: object) -> str:
    """Per-level figures as the operator reads them: ``c=1 112.3 tok/s 1.84x, c=8 ...``
    (rounded; a level without a figure is left out)."""
    out = []
    rows = levels.values() if isinstance(levels, dict) else levels
    for lv in sorted(
        (x for x in rows or [] if isinstance(x, dict)),
        key=lambda x: _number(x.get("concurrency")) or 0,
    ):
        tps = _number(lv.get("output_tps"))
        if tps is None or not math.isfinite(tps):
            continue
        su = _number(lv.get("speed_up"))
        shown = f"c={lv.get('concurrency')} {tps:.1f} tok/s"
        out.append(shown + (f" {su:.2f}x" if su is not None and math.isfinite(su) else ""))
    return ", ".join(out)


def downtime_line(entry: dict[str, Any]) -> str:
    """What the operator reads last after a deploy or rollback, for one start of a node (a
    deploy with a baseline start has two): its downtime window and parts, then what was
    measured after it, per level: the validation's throughput and speed-up (``levels``), or a
    baseline start's throughput without speculation (``baseline``, a throughput/1 document)."""
    v = start_values(entry)
    node, release, action = v["node"], v["release"], v["action"]
    if not v["restarted"]:
        return f"{node}: no restart, no downtime (release {release})"
    if v["window_s"] is None:
        head = f"{node}: restarted ({action} of {release}); the engine log did not say ready"
    else:
        window = entry.get("window") or {}
        parts = ", ".join(f"{phase} {seconds} s" for phase, seconds in window["parts"].items())
        head = f"{node}: downtime window {window['window_s']} s ({action} of {release}; {parts})"
    baseline = entry.get("baseline")
    if isinstance(baseline, dict) and (text := levels_text(baseline.get("levels"))):
        return f"{head}; measured without speculation: {text}"
    if text := levels_text(entry.get("levels")):
        return f"{head}; validated: {text}"
    if v["output_tps"] is not None:  # a validation without levels: its acceptance repeats
        return (
            head
            + f"; validated: {v['output_tps']:.1f} tok/s"
            + (f", speed-up {v['speed_up']:.2f}x" if v["speed_up"] is not None else "")
        )
    return head


def starts(
    conn: sqlite3.Connection, node: str | None = None, *, latest: bool = False
) -> list[dict[str, Any]]:
    """Recorded starts, oldest first (``latest``: only each node's newest)."""
    q = f"SELECT {', '.join(START_FIELDS)} FROM starts"
    args: list[str] = []
    if node:
        q += " WHERE node = ?"
        args.append(node)
    if latest:
        q += (" AND" if node else " WHERE") + (
            " id = (SELECT MAX(id) FROM starts AS s WHERE s.node = starts.node)"
        )
    out = []
    for r in conn.execute(q + " ORDER BY at, id", args):
        d = dict(r)
        d["restarted"] = bool(d["restarted"])
        d["parts"] = json.loads(d["parts"]) if d["parts"] else {}
        out.append(d)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="spec-history", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("baseline", help="latest no-speculation baseline of a node and model")
    b.add_argument("--db", required=True)
    b.add_argument("--node", required=True)
    b.add_argument("--model", required=True)
    bl = sub.add_parser(
        "baseline-levels", help="no-speculation tok/s by level (node, model, parallel, hardware)"
    )
    bl.add_argument("--db", required=True)
    bl.add_argument("--node", required=True)
    bl.add_argument("--model", required=True)
    bl.add_argument("--parallel", default=None, help="e.g. tp=8,pp=1 (default: any)")
    bl.add_argument("--hardware", default=None, help="GPU name (default: any)")
    r = sub.add_parser("runs", help="recorded runs, one JSON object a line")
    r.add_argument("--db", required=True)
    r.add_argument("--node")
    r.add_argument("--release")
    dt = sub.add_parser(
        "downtime",
        help="one line per node on a deploy's or rollback's starts; --db records the restarts",
    )
    dt.add_argument("--json", required=True, help="a JSON list of starts (node, release, ...)")
    dt.add_argument("--db", help="record the starts that restarted a server here")
    rec = sub.add_parser("record", help="record one validation result (JSON on stdin)")
    rec.add_argument("--db", required=True)
    br = sub.add_parser(
        "baseline-record", help="keep a baseline start's measurement (throughput/1) as a run"
    )
    br.add_argument("--db", required=True)
    br.add_argument("--json", required=True, help="the throughput/1 document")
    st = sub.add_parser("starts", help="recorded starts and their downtime, one JSON a line")
    st.add_argument("--db", required=True)
    st.add_argument("--node")
    st.add_argument("--latest", action="store_true", help="only each node's newest start")
    args = p.parse_args(argv)
    if args.cmd == "downtime":
        return _downtime(args.json, args.db)
    if args.cmd == "record":
        return _record(args.db, sys.stdin.read())
    if args.cmd == "baseline-record":
        return _baseline_record(args.json, args.db)
    if not Path(args.db).exists():
        if args.cmd in ("baseline", "baseline-levels"):
            print(json.dumps({"found": False, "reason": f"no history at {args.db}"}))
            return 1
        print(f"spec-history: error: no history at {args.db}", file=sys.stderr)
        return 2
    try:
        conn = connect(args.db)
    except HistoryError as exc:
        return cli.usage_error("spec-history", f"--db {exc}")
    try:
        if args.cmd == "baseline-levels":
            levels = baseline_levels(conn, args.node, args.model, args.parallel, args.hardware)
            what = (
                f"node {args.node!r}, model {args.model!r}, parallel {args.parallel or 'any'}, "
                f"hardware {args.hardware or 'any'}"
            )
            if not levels:
                print(json.dumps({"found": False, "reason": f"no no-spec run for {what}"}))
                return 1
            print(
                json.dumps(
                    {"found": True, "levels": {str(c): t for c, t in sorted(levels.items())}}
                )
            )
            return 0
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
        if args.cmd == "starts":
            for row in starts(conn, args.node, latest=args.latest):
                print(json.dumps(row))
            return 0
        for row in runs(conn, args.node, args.release):
            print(json.dumps(row))
        return 0
    except HistoryError as exc:
        return cli.usage_error("spec-history", f"--db {exc}")
    finally:
        conn.close()


def _record(db: str, text: str) -> int:
    """Record one result (the deploy's validation); prints {"recorded": 0|1}."""
    try:
        result = json.loads(text)
        if not isinstance(result, dict) or not result.get("run_id"):
            raise ValueError("not a result object with a run_id")
    except ValueError as exc:
        return cli.usage_error("spec-history", f"record: the result on stdin: {exc}")
    try:
        conn = connect(db)
    except HistoryError as exc:
        return cli.usage_error("spec-history", f"--db {exc}")
    try:
        print(json.dumps({"recorded": 0 if record(conn, result) is None else 1}))
    finally:
        conn.close()
    return 0


def _downtime(text: str, db: str | None) -> int:
    """downtime: {"lines": [...], "recorded": N}; every entry is checked first (exit 2 on bad
    input, nothing recorded)."""
    try:
        entries = json.loads(text)
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise ValueError("must be a list of objects")
        lines = [downtime_line(e) for e in entries]
    except (json.JSONDecodeError, ValueError) as exc:
        return cli.usage_error("spec-history", f"--json: {exc}")
    restarts = [e for e in entries if start_values(e)["restarted"]]
    recorded = 0
    if db and restarts:
        try:
            conn = connect(db)
            try:
                recorded = record_starts(conn, restarts)
            finally:
                conn.close()
        except HistoryError as exc:
            return cli.usage_error("spec-history", f"--db {exc}")
    print(json.dumps({"lines": lines, "recorded": recorded, "db": db}))
    return 0


def _baseline_record(text: str, db: str) -> int:
    """baseline-record: a baseline start's throughput/1 document kept as the node's
    no-speculation run (result.from_throughput), so the next release plans 'history' instead
    of another baseline start and `make advise` finds a baseline. Recorded once (its run id
    comes from the document). {"recorded": bool, "levels": {c: tok/s}}; exit 2 on bad input."""
    try:
        result = from_throughput(jsontext.parse_object(text, "--json"), "--json")
    except ValueError as exc:
        return cli.usage_error("spec-history", exc)
    try:
        conn = connect(db)
        try:
            new = record(conn, result) is not None
        finally:
            conn.close()
    except HistoryError as exc:
        return cli.usage_error("spec-history", f"--db {exc}")
    levels = {str(lv["concurrency"]): lv["output_tps"] for lv in result["speed"]["levels"]}
    print(json.dumps({"recorded": new, "levels": levels, "db": db}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
