"""Compare two engines (vLLM, SGLang) on one node with the same workload and gates.

`make compare-engines` (``run``): deploy each engine in turn on one node (each its own release,
validated by the deploy as any release: every level with and without speculation), then print
per level, for both, the throughput with speculation, the no-speculation baseline of the same
release, the speed-up, the mean acceptance length and TTFT / ITL p50, and which engine serves
more tokens/s at the operator's load mix (``validation_load_profile``'s shares; default equal
shares over the levels both measured). Then it leaves what served before serving, or the
winner with ``--keep winner``, through ``playbooks/rollback.yml``.

``table`` is the comparison alone, from the controller's history (no node touched)::

    python -m specdeploy.controller.compare_engines table --db HISTORY --node N \
        --release ID_A --release ID_B [--load-profile 1=0.5,16=0.5] [--json]
    python -m specdeploy.controller.compare_engines run -i INVENTORY --node N \
        [--engines vllm,sglang] [--set sglang='{"specdeploy_drafter_path": "/srv/..."}'] \
        [--keep before|winner] [--db HISTORY] [--load-profile ...] [--json] [-- EXTRA ...]

Each engine's figures are its release's latest validation on that node in the history (a
deploy that found the release already serving, validated, measures nothing new). Throughput is
compared, not the speed-up: each engine's speed-up is against its own baseline.

Exit codes: 0 compared; 1 an engine's deploy failed or it has no measured level (what was
measured is still printed); 2 usage or environment error (a bad flag, an unreadable history, a
release the history does not have for that node).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specdeploy.controller import advisor, history
from specdeploy.controller.engines import ENGINES
from specdeploy.node import cli

REPO = Path(__file__).resolve().parents[2]


class CompareError(Exception):
    """The comparison cannot be made (a usage or environment error); names what is wrong."""


@dataclass
class Level:
    concurrency: int
    output_tps: float
    baseline_tps: float | None
    speed_up: float | None
    ttft_p50_s: float | None
    itl_p50_s: float | None
    status: str


@dataclass
class EngineRun:
    engine: str
    release: str
    run_id: str
    started_at: str
    status: str
    mean_acceptance_length: float | None
    k_schedule: str
    levels: dict[int, Level] = field(default_factory=dict)


def engine_of(result: dict[str, Any]) -> str:
    """The engine a validation result measured: the engine label the validation adds, else the
    server's own name in its version string, else vLLM (every release before issue 29)."""
    labels = result.get("labels") or {}
    if labels.get("engine") in ENGINES:
        return str(labels["engine"])
    server = str(result.get("server_version") or "").lower()
    return (
        "sglang"
        if "sglang" in server or str(result.get("release", "")).startswith("sglang-")
        else "vllm"
    )


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def engine_run(result: dict[str, Any]) -> EngineRun:
    acc = result.get("acceptance") or {}
    labels = result.get("labels") or {}
    per_position = acc.get("per_position_acceptance")
    schedule = labels.get("k_schedule") or (f"k={len(per_position)}" if per_position else "-")
    run = EngineRun(
        engine=engine_of(result),
        release=str(result.get("release") or "-"),
        run_id=str(result.get("run_id") or "-"),
        started_at=str(result.get("started_at") or ""),
        status=str(result.get("status") or "-"),
        mean_acceptance_length=_number(acc.get("mean_acceptance_length")),
        k_schedule=str(schedule),
    )
    for lv in (result.get("speed") or {}).get("levels") or []:
        c, tps = lv.get("concurrency"), _number(lv.get("output_tps"))
        if not isinstance(c, int) or tps is None or tps <= 0 or lv.get("requests") == 0:
            continue  # a level that measured nothing is not a figure to compare
        run.levels[c] = Level(
            concurrency=c,
            output_tps=tps,
            baseline_tps=_number(lv.get("baseline_tps")),
            speed_up=_number(lv.get("speed_up")),
            ttft_p50_s=_number(lv.get("ttft_p50_s")),
            itl_p50_s=_number(lv.get("itl_p50_s")),
            status=str(lv.get("status") or "-"),
        )
    return run


def latest_run(conn: Any, node: str, release: str) -> EngineRun:
    """The release's latest speculative validation on the node that measured levels."""
    found = [
        r["result"]
        for r in history.runs(conn, node, release, with_result=True)
        if not history.is_no_spec(r["result"])
    ]
    if not found:
        raise CompareError(f"release {release}: no validation of it on {node} in the history")
    return engine_run(found[-1])


def parse_profile(text: str) -> dict[int, float]:
    """The advisor's load profile (LEVEL=SHARE pairs or a JSON object; '' -> {}: equal shares
    over the levels both engines measured), whose shares must not all be 0."""
    if not text.strip():
        return {}
    try:
        out = advisor.level_share_map(text) or {}
    except advisor.AdviceInputError as e:
        raise CompareError(str(e)) from None
    if out and sum(out.values()) <= 0:
        raise CompareError(f"--load-profile {text}: the shares sum to 0")
    return out


@dataclass
class Verdict:
    levels: list[int]
    profile: dict[int, float]
    weighted_tps: dict[str, float]
    winner: str | None
    message: str


def verdict(runs: list[EngineRun], profile: dict[int, float]) -> Verdict:
    """The engine with the highest time-weighted output tokens/s over the load mix."""
    common = sorted(set.intersection(*(set(r.levels) for r in runs))) if runs else []
    prof = dict(profile) or dict.fromkeys(common, 1.0)
    missing = sorted(set(prof) - set(common))
    if missing:
        why = f"load-profile levels {missing} were not measured by every engine"
        return Verdict(
            common, prof, {}, None, f"no winner: {why} (both measured: {common or 'none'})"
        )
    if not prof:
        return Verdict(common, prof, {}, None, "no winner: no level measured by every engine")
    total = sum(prof.values())
    weighted = {
        r.release: sum(w * r.levels[c].output_tps for c, w in prof.items()) / total for r in runs
    }
    ranked = sorted(runs, key=lambda r: -weighted[r.release])
    best, rest = ranked[0], ranked[1:]
    mix = ", ".join(f"c={c}: {w / total:.0%}" for c, w in sorted(prof.items()))
    top = weighted[best.release]
    others = "; ".join(
        f"{r.engine} {weighted[r.release]:.1f} tok/s ({top / weighted[r.release]:.2f}x)"
        for r in rest
    )
    return Verdict(common, prof, weighted, best.release,
                   f"winner at the load mix ({mix}): {best.engine} ({best.release}), "
                   f"{weighted[best.release]:.1f} tok/s weighted; {others}")  # fmt: skip


def _f(value: float | None, scale: float = 1.0, fmt: str = ".1f") -> str:
    return "-" if value is None else format(value * scale, fmt)


def table_lines(runs: list[EngineRun], v: Verdict) -> list[str]:
    lines = []
    for r in runs:
        acc = _f(r.mean_acceptance_length, fmt=".2f")
        lines.append(f"{r.engine}: release {r.release} ({r.status}, validated {r.started_at}), "
                     f"mean acceptance length {acc}, {r.k_schedule}")  # fmt: skip
    lines.append(
        f"{'c':>4} {'engine':<7} {'tok/s':>9} {'no-spec':>9} {'speed-up':>9} "
        f"{'TTFT p50 ms':>12} {'ITL p50 ms':>11} {'gate':<8}"
    )
    levels = sorted(set().union(*(r.levels for r in runs))) if runs else []
    for c in levels:
        for r in runs:
            lv = r.levels.get(c)
            if lv is None:
                lines.append(f"{c:>4} {r.engine:<7} {'not measured':>9}")
                continue
            lines.append(
                f"{c:>4} {r.engine:<7} {lv.output_tps:>9.1f} {_f(lv.baseline_tps):>9} "
                f"{_f(lv.speed_up, fmt='.2f'):>9} {_f(lv.ttft_p50_s, 1e3):>12} "
                f"{_f(lv.itl_p50_s, 1e3):>11} {lv.status:<8}"
            )
    lines.append(v.message)
    return lines


def compare(
    db: str, node: str, releases: list[str], profile: dict[int, float]
) -> tuple[list[EngineRun], Verdict]:
    try:
        conn = history.connect(db)
    except history.HistoryError as e:
        raise CompareError(f"--db {e}") from None
    runs = [latest_run(conn, node, rel) for rel in releases]
    return runs, verdict(runs, profile)


def report(
    runs: list[EngineRun], v: Verdict, as_json: bool, extra: dict[str, Any] | None = None
) -> None:
    if as_json:
        doc = {"engines": [asdict(r) for r in runs], "verdict": asdict(v), **(extra or {})}
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        print("\n".join(table_lines(runs, v)))


# --- run: the deploys ------------------------------------------------------------------------


class Playbooks:
    """ansible-playbook from this toolkit's venv against one inventory, limited to one node
    and the controller (the plays on localhost: the summary, the history's downtime record,
    status's table)."""

    def __init__(self, inventory: str, node: str, extra: list[str]) -> None:
        self.base = [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            inventory,
            "--limit",
            f"{node},localhost",
        ]
        self.extra = extra
        self.node = node

    def __call__(self, playbook: str, extra_vars: dict[str, Any]) -> int:
        argv = [*self.base, str(REPO / playbook), *self.extra, "-e", json.dumps(extra_vars)]
        print(f"compare-engines: {playbook} on {self.node}, {json.dumps(extra_vars)}", flush=True)
        return subprocess.run(argv, cwd=REPO, check=False).returncode

    def serving(self) -> str | None:
        """The node's current release (playbooks/status.yml's machine output)."""
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "status.json"
            argv = [*self.base, str(REPO / "playbooks/status.yml"), *self.extra,
                    "-e", json.dumps({"status_json_file": str(out)})]  # fmt: skip
            ran = subprocess.run(argv, cwd=REPO, check=False, capture_output=True, text=True)
            try:
                rows = json.loads(out.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                tail = (ran.stdout + ran.stderr).strip().splitlines()[-1:] or ["no output"]
                raise CompareError(
                    f"{self.node}: make status gave no answer (exit {ran.returncode}: {tail[0]})"
                ) from None
        release = next((r.get("release") for r in rows if r.get("node") == self.node), None)
        return release if release not in (None, "-") else None


def latest_release_of(db: str, node: str, engine: str, since: str) -> str | None:
    """The release of this engine validated on the node since ``since`` (a failed deploy's)."""
    conn = history.connect(db)
    found = [r for r in history.runs(conn, node, with_result=True)
             if r["started_at"] >= since and engine_of(r["result"]) == engine]  # fmt: skip
    return found[-1]["release"] if found else None


def run(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    bad = [e for e in engines if e not in ENGINES]
    if bad or len(set(engines)) < 2:
        raise CompareError(f"--engines {args.engines}: want two or more of {', '.join(ENGINES)}")
    per_engine = _engine_vars(args.set, engines)
    profile = parse_profile(args.load_profile)
    if not Path(args.inventory).exists():
        raise CompareError(f"-i {args.inventory}: no such inventory")
    play = Playbooks(args.inventory, args.node, args.extra)
    before = play.serving()
    since = datetime.now(UTC).isoformat(timespec="seconds")
    releases: dict[str, str | None] = {}
    failed: list[str] = []
    now = before
    for engine in engines:
        rc = play("deploy.yml", {"specdeploy_engine": engine, **per_engine.get(engine, {})})
        now = play.serving()  # what serves after this deploy (its release, or rolled back)
        if rc == 0:
            releases[engine] = now
        else:
            failed.append(f"the {engine} deploy failed (exit {rc}; it rolled back by itself)")
            releases[engine] = latest_release_of(args.db, args.node, engine, since)
    measured = [rel for rel in releases.values() if rel]
    runs, v = (
        compare(args.db, args.node, measured, profile) if measured else ([], verdict([], profile))
    )
    keep = v.winner if args.keep == "winner" and v.winner else before
    restored = ""
    if keep and keep != now:
        rc = play("playbooks/rollback.yml", {"rollback_to": keep})
        restored = (
            f"{keep} serves again" if rc == 0 else f"the rollback to {keep} failed (exit {rc})"
        )
        if rc:
            failed.append(restored)
    elif keep:
        restored = f"{keep} serves (left as it is)"
    report(runs, v, args.json, {"before": before, "serving": keep, "failed": failed})
    if not args.json:
        left = restored or "nothing served before; the last deploy is left serving"
        print(f"compare-engines: {left}")
        for line in failed:
            print(f"compare-engines: FAILED: {line}")
    unmeasured = [e for e, rel in releases.items() if not rel]
    return cli.EXIT_CHECK_FAILED if failed or unmeasured or v.winner is None else cli.EXIT_OK


def _engine_vars(pairs: list[str], engines: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for pair in pairs:
        engine, sep, text = pair.partition("=")
        try:
            value = json.loads(text) if sep else None
        except ValueError:
            value = None
        if engine not in engines or not isinstance(value, dict):
            want = f"want ENGINE='{{\"knob\": value}}', ENGINE one of {', '.join(engines)}"
            raise CompareError(f"--set {pair}: {want}")
        out.setdefault(engine, {}).update(value)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="compare-engines", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--node", required=True)
    common.add_argument(
        "--db", default=str(REPO / "reports" / "history.sqlite"), help="the controller's history"
    )
    common.add_argument(
        "--load-profile", default="", help="LEVEL=SHARE,... (default: equal shares)"
    )
    common.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    t = sub.add_parser("table", parents=[common], help="compare releases from the history")
    t.add_argument("--release", action="append", required=True)
    r = sub.add_parser("run", parents=[common], help="deploy each engine, compare, restore")
    r.add_argument("-i", "--inventory", required=True)
    r.add_argument("--engines", default="vllm,sglang")
    r.add_argument(
        "--set", action="append", default=[], help="ENGINE=JSON extra vars for that engine's deploy"
    )
    r.add_argument("--keep", choices=("before", "winner"), default="before")
    r.add_argument(
        "extra", nargs=argparse.REMAINDER, help="after --: more ansible-playbook arguments"
    )
    args = p.parse_args(argv)
    if args.command == "run":
        args.extra = [a for a in args.extra if a != "--"]
    try:
        if args.command == "table":
            if len(args.release) < 2:
                raise CompareError("--release: give two releases (one per engine)")
            runs, v = compare(args.db, args.node, args.release, parse_profile(args.load_profile))
            report(runs, v, args.json)
            return cli.EXIT_OK if v.winner else cli.EXIT_CHECK_FAILED
        return run(args)
    except (CompareError, history.HistoryError) as e:
        return cli.usage_error("compare-engines", e)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
