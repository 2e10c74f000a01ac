"""Controller-side reports from ``specdeploy.node.validation.check`` result JSONs.

Usage::

    spec-report RESULT.json|DIR ... [--history DB] [--record] [--regression-tolerance 0.1]
        [--junit FILE] [--prom FILE]... [--html FILE] [--json FILE] [--quiet]

* a human table on stdout (one line per node);
* ``--junit``: JUnit XML, one testsuite per result, one testcase per smoke stage / gate;
* ``--prom`` (repeatable): Prometheus textfile for node_exporter's textfile collector (written
  atomically): the newest result per node, release and model (labels ``node``, ``release``,
  ``model``; per level also ``concurrency``), and per node its newest validation of all
  (``specdeploy_last_validation_*``), so no two samples share a label set;
* ``--html``: a self-contained HTML report with inline SVG plots (no scripts): the fleet
  headline, per-level speed (serving-before vs new vs baseline) when results have it,
  per-position acceptance for every run, and over time (with ``--history``: every recorded
  run) mean acceptance length, output tokens/s and speed-up, failed and regressed runs marked;
* ``--history DB`` + ``--record``: store the results in the SQLite history and check each
  against its release's first validated run (``--regression-tolerance``, relative).

Exit code: the worst result's exit code (0 pass, 1 failed, 2 could not measure), at least 1
when a result regressed; 2 for unreadable input.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdeploy.controller import history, plots
from specdeploy.node import cli
from specdeploy.node.module_utils.specdeploy_fsio import atomic_write
from specdeploy.node.validation.result import SCHEMA_PREFIX, read_result
from specdeploy.node.validation.textfile import (
    _acc,
    _med,
    _num,
    _speed_levels,
    prom_textfile,
)

STARTS_SHOWN = 50  # the report's restarts table: the newest ones


def load_results(paths: list[str]) -> list[dict[str, Any]]:
    """Result JSONs from files and directories (in a directory, other JSON files are
    skipped; a named file that is not a result is an error)."""
    files: list[tuple[Path, bool]] = []
    for p in paths:
        pp = Path(p)
        files += [(f, False) for f in sorted(pp.glob("*.json"))] if pp.is_dir() else [(pp, True)]
    out = []
    for f, named in files:
        if not named:  # a directory: other JSON files in it are skipped
            try:
                d = json.loads(f.read_text(encoding="utf-8"))
            except ValueError:
                d = None
            if not isinstance(d, dict) or not str(d.get("schema", "")).startswith(SCHEMA_PREFIX):
                continue
        d = read_result(f)
        d.setdefault("_source", str(f))
        out.append(d)
    return out


def _f(v: float | None, fmt: str = ".2f") -> str:
    return "-" if v is None else format(v, fmt)


# --------------------------------------------------------------------------- table


def render_table(
    results: list[dict[str, Any]], regress: dict[int, list[history.Regression]] | None = None
) -> str:
    head = (
        "NODE",
        "RELEASE",
        "STATUS",
        "MAL",
        "DRAFT%",
        "PER-POSITION",
        "TOK/S",
        "SPEEDUP",
        "REASONS",
    )
    rows = []
    for i, r in enumerate(results):
        a = _acc(r)
        status = str(r.get("status", "?")).upper()
        reasons = list(r.get("reasons") or [])
        if regress and regress.get(i):
            status = "REGRESS" if status == "PASS" else status
            reasons += [g.message() for g in regress[i]]
        rate = a.get("draft_acceptance_rate")
        rows.append(
            (
                str(r.get("node")),
                str(r.get("release") or "-"),
                status,
                _f(a.get("mean_acceptance_length")),
                "-" if rate is None else f"{rate * 100:.1f}",
                ",".join(f"{x:.2f}" for x in a.get("per_position_acceptance") or []) or "-",
                _f(_med(a.get("output_tokens_per_s")), ".1f"),
                _f(_med(a.get("speed_up"))),
                "; ".join(reasons) or "-",
            )
        )
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


# --------------------------------------------------------------------------- JUnit


def junit_xml(
    results: list[dict[str, Any]], regress: dict[int, list[history.Regression]] | None = None
) -> str:
    suites = ET.Element("testsuites", name="specdeploy-validation")
    tot = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for i, r in enumerate(results):
        name = f"{r.get('node')}.{r.get('release') or 'unknown'}"
        suite = ET.SubElement(
            suites, "testsuite", name=name, timestamp=str(r.get("started_at", ""))
        )
        cases: list[tuple[str, str, str, float]] = []
        sm = r.get("smoke")
        if isinstance(sm, dict):
            for s in sm.get("stages", []):
                cases.append(
                    (f"smoke.{s['name']}", s["status"], s["message"], float(s.get("seconds") or 0))
                )
        a = _acc(r)
        if a:
            st = {"ok": "pass", "spec_off": "fail"}.get(a.get("status", ""), "error")
            cases.append(
                ("acceptance.measure", st, a.get("message", ""), float(a.get("wall_s") or 0))
            )
        g = r.get("gates")
        if isinstance(g, dict):
            for c in g.get("checks", []):
                if c["name"] == "measurement":
                    continue
                cases.append((f"gate.{c['name']}", c["status"], c["message"], 0.0))
        for reg in (regress or {}).get(i, []):
            cases.append((f"regression.{reg.metric}", "fail", reg.message(), 0.0))
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        for cname, st, msg, secs in cases:
            tc = ET.SubElement(suite, "testcase", classname=name, name=cname, time=f"{secs:.3f}")
            counts["tests"] += 1
            if st == "fail":
                ET.SubElement(tc, "failure", message=msg[:500]).text = msg
                counts["failures"] += 1
            elif st == "error":
                ET.SubElement(tc, "error", message=msg[:500]).text = msg
                counts["errors"] += 1
            elif st == "skip":
                ET.SubElement(tc, "skipped", message=msg[:500])
                counts["skipped"] += 1
            else:
                ET.SubElement(tc, "system-out").text = msg
        for k, v in counts.items():
            suite.set(k, str(v))
            tot[k] += v
    for k, v in tot.items():
        suites.set(k, str(v))
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode")


# --------------------------------------------------------------------------- Prometheus


# --------------------------------------------------------------------------- HTML


@dataclass
class RunView:
    """One run as the report shows it (from the history, or from a result of this report)."""

    node: str
    release: str
    started_at: str
    t: float | None
    mode: str
    concurrency: str
    k: str
    outcome: str  # pass | failed | regressed | error
    mal: float | None
    tps: float | None
    speed_up: float | None
    per_position: list[float]
    reasons: list[str]
    result: dict[str, Any]

    @property
    def when(self) -> str:
        return plots.fmt_time(self.t) if self.t is not None else self.started_at or "-"

    def label(self, what: str = "", value: float | None = None) -> str:
        v = "" if value is None else f": {what} {value:.3g}"
        return (
            f"{self.when} UTC {self.node} {self.release} mode={self.mode} c={self.concurrency} "
            f"k={self.k}{v} ({self.outcome.upper()})"
        )


def _mode(r: dict[str, Any]) -> str:
    a = _acc(r)
    if a.get("mode") == "no_spec_baseline":
        return "no-spec baseline"
    return {"spec": "spec", None: str(r.get("mode") or "-")}.get(a.get("mode"), str(a.get("mode")))


def _concurrency(r: dict[str, Any]) -> str:
    levels = [str(lv["concurrency"]) for lv in _speed_levels(r)]
    if levels:
        return "/".join(levels)
    c = _acc(r).get("concurrency") or (r.get("labels") or {}).get("concurrency")
    return str(c) if c else "-"


def _k(r: dict[str, Any]) -> str:
    a = _acc(r)
    pp = a.get("per_position_acceptance") or a.get("accepted_per_position")
    return str(len(pp)) if pp else "-"


def run_view(r: dict[str, Any], regressed: bool) -> RunView:
    a = _acc(r)
    status = str(r.get("status", "error"))
    outcome = {"fail": "failed", "error": "error"}.get(status, "regressed" if regressed else "pass")
    return RunView(
        node=str(r.get("node")),
        release=str(r.get("release") or "-"),
        started_at=str(r.get("started_at") or ""),
        t=plots.parse_time(r.get("started_at")),
        mode=_mode(r),
        concurrency=_concurrency(r),
        k=_k(r),
        outcome=outcome,
        mal=_num(a.get("mean_acceptance_length")),
        tps=_med(a.get("output_tokens_per_s")),
        speed_up=_med(a.get("speed_up")),
        per_position=list(a.get("per_position_acceptance") or []),
        reasons=list(r.get("reasons") or []),
        result=r,
    )


def history_views(hist: list[dict[str, Any]], tolerance: float) -> list[RunView]:
    """History rows (oldest first, with their results) as runs; a passed run counts as
    regressed against its release's first validated run on the node (history.compare)."""
    first: dict[tuple[str, str], dict[str, Any]] = {}
    out = []
    for row in hist:
        key = (row["node"], row["release"])
        ref = first.get(key)
        reg = history.compare(row, ref, tolerance) if ref else []
        view = run_view(row.get("result") or row, bool(reg))
        view.reasons += [g.message() for g in reg]
        out.append(view)
        if ref is None and row["status"] == "pass" and row["acceptance_status"] == "ok":
            first[key] = row
    return out


def _colours(views: list[RunView]) -> dict[str, str]:
    releases = list(dict.fromkeys(v.release for v in sorted(views, key=lambda v: v.t or 0)))
    return {r: plots.PALETTE[i % len(plots.PALETTE)] for i, r in enumerate(releases)}


def history_plots(views: list[RunView]) -> list[str]:
    timed = [v for v in views if v.t is not None]
    colours = _colours(timed)

    def pts(attr: str, what: str) -> list[plots.Point]:
        return [
            plots.Point(v.t, val, v.release, v.node, v.outcome, v.label(what, val))
            for v in timed
            if v.t is not None and (val := getattr(v, attr)) is not None
        ]

    return [
        plots.time_plot(pts(attr, what), title, ylabel, colours=colours, **axis)
        for attr, what, title, ylabel, axis in _HISTORY_PLOTS
    ]


# The time plots of the history page: (RunView attribute, what a marker's tooltip calls the
# value, title, y-axis label, axis options of plots.time_plot).
_HISTORY_PLOTS: tuple[tuple[str, str, str, str, dict[str, Any]], ...] = (
    (
        "mal",
        "mean acceptance length",
        "Mean acceptance length per run",
        "tokens per step",
        {"y_min": 1.0, "refs": [(1.0, "1 = no accepted drafts")]},
    ),
    (
        "tps",
        "output tok/s",
        "Output tokens/s per run (median over repeats)",
        "tokens/s",
        {"y_min": 0.0},
    ),
    (
        "speed_up",
        "speed-up",
        "Speed-up vs no speculation (median)",
        "x",
        {"around": 1.0, "refs": [(1.0, "1.0 = as fast as no speculation")]},
    ),
)


def _floors(r: dict[str, Any], k: int) -> list[float | None] | None:
    fl = ((r.get("gates") or {}).get("thresholds") or {}).get("per_position_floors")
    if not isinstance(fl, dict) or not fl:
        return None
    return [fl.get(str(i)) for i in range(k)]


def position_plots(views: list[RunView]) -> tuple[str, list[dict[str, Any]]]:
    """The newest run per node and release side by side, and one chart per run (newest first)."""
    newest: dict[tuple[str, str], RunView] = {}
    for v in views:
        if v.per_position:
            newest[(v.node, v.release)] = v
    latest = sorted(newest.values(), key=lambda v: (v.node, v.t or 0))
    k = max((len(v.per_position) for v in latest), default=0)
    overview = plots.bar_chart(
        [f"position {i}" for i in range(k)],
        [(f"{v.node} {v.release} ({v.when})", v.per_position) for v in latest],
        "Per-position acceptance (accepted_i / drafts), newest run per node and release",
        y_max=1.0,
        floors=_floors(latest[-1].result, k) if latest else None,
    )
    per_run = []
    for v in sorted((v for v in views if v.per_position), key=lambda v: -(v.t or 0)):
        n = len(v.per_position)
        per_run.append(
            {
                "label": v.label(),
                "outcome": v.outcome,
                "svg": plots.bar_chart(
                    [f"position {i}" for i in range(n)],
                    [(f"{v.node} {v.release}", v.per_position)],
                    f"{v.node}, {v.when} UTC: accepted_i / drafts",
                    y_max=1.0,
                    floors=_floors(v.result, n),
                    width=460,
                    height=220,
                    colours=[plots.FAIL_COLOUR if v.outcome == "failed" else plots.PALETTE[0]],
                ),
            }
        )
    return overview, per_run


def speed_section(r: dict[str, Any]) -> dict[str, Any] | None:
    """The speed contract's per-level results: serving-before vs new vs no-spec baseline."""
    levels = _speed_levels(r)
    if not levels:
        return None
    prev = r.get("previous") if isinstance(r.get("previous"), dict) else {}
    before = {
        lv.get("concurrency"): _num(lv.get("previous_tps"))
        for lv in prev.get("levels") or []
        if isinstance(lv, dict)
    }
    change = {
        lv.get("concurrency"): _num(lv.get("change"))
        for lv in prev.get("levels") or []
        if isinstance(lv, dict)
    }
    cs = [lv["concurrency"] for lv in levels]
    su = [_num(lv.get("speed_up")) for lv in levels]
    series = [
        (
            f"serving before ({prev.get('release') or 'previous release'})",
            [before.get(c) for c in cs],
        ),
        (f"new ({r.get('release') or '-'})", [_num(lv.get("output_tps")) for lv in levels]),
        ("no-speculation baseline", [_num(lv.get("baseline_tps")) for lv in levels]),
    ]
    svg = plots.bar_chart(
        [f"c={c}" for c in cs],
        series,
        f"Output tokens/s per concurrency level: {r.get('node')}, {r.get('release')}",
        value_fmt="{:.0f}",
        notes=[
            "-" if s is None else f"{s:.2f}x" + (" FAIL" if lv.get("status") == "fail" else "")
            for s, lv in zip(su, levels, strict=True)
        ],
        colours=["#9e9e9e", plots.PALETTE[0], "#dddddd"],
    )
    rows = [
        {
            "c": lv["concurrency"],
            "before": _f(before.get(lv["concurrency"]), ".1f"),
            "new": _f(_num(lv.get("output_tps")), ".1f"),
            "change": "-"
            if change.get(lv["concurrency"]) is None
            else f"{change[lv['concurrency']]:+.1%}",
            "baseline": _f(_num(lv.get("baseline_tps")), ".1f"),
            "speed_up": "-" if s is None else f"{s:.2f}x",
            "gate": _f(_num(lv.get("min_speed_up"))),
            "status": str(lv.get("status") or "-"),
        }
        for lv, s in zip(levels, su, strict=True)
    ]
    sp = r.get("speed") or {}
    sched = k_schedule_of(r)
    if sched:
        from specdeploy.controller import schedule

        for row in rows:
            row["k"] = str(schedule.k_at(sched, int(row["c"])))
    return {
        "node": r.get("node"),
        "release": r.get("release"),
        "svg": svg,
        "rows": rows,
        "k_schedule": _describe_schedule(sched),
        "baseline_source": sp.get("baseline_source") or "-",
        "message": sp.get("message") or "",
    }


def k_schedule_of(r: dict[str, Any]) -> list[tuple[int, int, int]] | None:
    """The k schedule a run was measured with (its label ``k_schedule``), or None (one k)."""
    from specdeploy.controller import schedule

    raw: object = (r.get("labels") or {}).get("k_schedule")
    for _ in range(2):  # the label is JSON text (Ansible may have encoded it twice)
        if isinstance(raw, str):
            try:
                raw = json.loads(raw)
            except ValueError:
                return None
    try:
        return schedule.validate(raw) if raw else None
    except schedule.ScheduleError:
        return None


def _describe_schedule(sched: list[tuple[int, int, int]] | None) -> str:
    from specdeploy.controller import schedule

    return schedule.describe(sched) if sched else ""


def fleet_headline(views: list[RunView]) -> dict[str, Any]:
    """Releases serving (by each node's newest run), nodes passing, the last run per node."""
    last: dict[str, RunView] = {}
    for v in sorted(views, key=lambda v: v.t or 0):
        last[v.node] = v
    nodes = sorted(last.values(), key=lambda v: v.node)
    releases: dict[str, int] = {}
    for v in nodes:
        releases[v.release] = releases.get(v.release, 0) + 1
    passing = sum(v.outcome == "pass" for v in nodes)
    return {
        "nodes": nodes,
        "passing": passing,
        "releases": sorted(releases.items()),
        "text": f"{passing} of {len(nodes)} node(s) passing; release(s) serving: "
        + ", ".join(f"{r} ({n} node{'s' if n > 1 else ''})" for r, n in sorted(releases.items())),
    }


HTML_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>specdeploy validation report</title>
<style>
body{font-family:sans-serif;margin:24px;color:#222;max-width:1340px}
table{border-collapse:collapse;margin:8px 0 20px}
th,td{border:1px solid #ccc;padding:4px 8px;font-size:13px;text-align:left;vertical-align:top}
th{background:#f3f3f3}
.pass{background:#dff0d8}.fail,.failed{background:#f2dede}.error{background:#fcf8e3}
.regressed{background:#fde9c9}
.skip{color:#888}.plots{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}
.headline{font-size:20px;font-weight:bold;margin:4px 0 8px}
details{margin:2px 0}summary{cursor:pointer;font-size:13px}
code{font-size:12px}
</style></head><body>
<h1>specdeploy validation report</h1>
<p>Generated {{ generated }} from {{ results|length }} result(s){% if nruns %} and
{{ nruns }} recorded run(s){% endif %}. Times are UTC.</p>
<section id="fleet"><h2>Fleet</h2>
<p class="headline" id="headline">{{ fleet.text }}</p>
<table id="last-runs"><tr><th>node</th><th>release</th><th>last run</th><th>outcome</th>
<th>mode</th><th>concurrency</th><th>k</th><th>mean acceptance length</th><th>output tok/s</th>
<th>speed-up</th><th>reasons</th></tr>
{% for v in fleet.nodes %}<tr class="{{ v.outcome }}"><td>{{ v.node }}</td><td>{{ v.release }}</td>
<td>{{ v.when }}</td><td>{{ v.outcome|upper }}</td><td>{{ v.mode }}</td><td>{{ v.concurrency }}</td>
<td>{{ v.k }}</td><td>{{ f(v.mal) }}</td><td>{{ f(v.tps, '.1f') }}</td><td>{{ f(v.speed_up) }}</td>
<td>{{ v.reasons|join('; ') }}</td></tr>
{% endfor %}</table></section>
<h2>This report's results</h2>
<table id="results"><tr><th>node</th><th>release</th><th>time</th><th>mode</th><th>concurrency</th>
<th>k</th><th>model</th><th>status</th><th>mean acceptance length</th><th>draft acceptance</th>
<th>output tok/s (median, min-max)</th><th>no-spec baseline tok/s</th>
<th>speed-up (median, min-max, n)</th><th>reasons</th></tr>
{% for r in rows %}<tr class="{{ r.status }}"><td>{{ r.node }}</td><td>{{ r.release }}</td>
<td>{{ r.when }}</td><td>{{ r.mode }}</td><td>{{ r.concurrency }}</td><td>{{ r.k }}</td>
<td>{{ r.model }}</td><td>{{ r.status|upper }}</td><td>{{ r.mal }}</td><td>{{ r.rate }}</td>
<td>{{ r.tps }}</td><td title="{{ r.baseline_source }}">{{ r.baseline }}</td>
<td>{{ r.speed_up }}</td><td>{{ r.reasons }}</td></tr>
{% endfor %}</table>
{% if speed %}<section id="speed"><h2>Speed per concurrency level</h2>
<p>Serving-before (the release that served before the switch, measured just before it) next to
the new release and the no-speculation baseline; above each level: the speed-up over the
baseline.</p>
{% for s in speed %}<h3>{{ s.node }} / {{ s.release }} (baseline: {{ s.baseline_source }}
{%- if s.k_schedule %}; k schedule: {{ s.k_schedule }}{% endif %})</h3>
<div class="plots">{{ s.svg|safe }}
<table><tr><th>concurrency</th>{% if s.k_schedule %}<th>k</th>{% endif %}
<th>serving before tok/s</th><th>new tok/s</th><th>change</th>
<th>baseline tok/s</th><th>speed-up</th><th>gate</th><th>status</th></tr>
{% for l in s.rows %}<tr class="{{ l.status }}"><td>{{ l.c }}</td>
{%- if s.k_schedule %}<td>{{ l.k }}</td>{% endif %}<td>{{ l.before }}</td>
<td>{{ l.new }}</td><td>{{ l.change }}</td><td>{{ l.baseline }}</td><td>{{ l.speed_up }}</td>
<td>{{ l.gate }}</td><td>{{ l.status|upper }}</td></tr>{% endfor %}</table></div>
{% if s.message %}<p>{{ s.message }}</p>{% endif %}
{% endfor %}</section>{% endif %}
<section id="positions"><h2>Per-position acceptance</h2>
<div class="plots">{{ positions|safe }}</div>
<p>Every run (newest first; open one to see its bars; dashed: the gate's floors):</p>
{% for p in per_run %}<details class="run-positions {{ p.outcome }}"
{%- if loop.first %} open{% endif %}><summary>{{ p.label }}</summary>{{ p.svg|safe }}</details>
{% endfor %}</section>
{% if hist_plots %}<section id="history"><h2>History</h2>
<div class="plots">{% for h in hist_plots %}{{ h|safe }}{% endfor %}</div>
<p>Dots: passed runs; triangles: regressed (passed, but below the release's first validated run
on the node); red crosses: failed. Colour: release; grey lines join a node's runs.</p>
<table id="runs"><tr><th>time</th><th>node</th><th>release</th><th>mode</th><th>concurrency</th>
<th>k</th><th>outcome</th><th>mean acceptance length</th><th>output tok/s</th><th>speed-up</th>
<th>reasons</th></tr>
{% for v in runs %}<tr class="{{ v.outcome }}"><td>{{ v.when }}</td><td>{{ v.node }}</td>
<td>{{ v.release }}</td><td>{{ v.mode }}</td><td>{{ v.concurrency }}</td><td>{{ v.k }}</td>
<td>{{ v.outcome|upper }}</td><td>{{ f(v.mal) }}</td><td>{{ f(v.tps, '.1f') }}</td>
<td>{{ f(v.speed_up) }}</td><td>{{ v.reasons|join('; ') }}</td></tr>
{% endfor %}</table></section>{% endif %}
{% if starts %}<section id="starts"><h2>Restarts and downtime</h2>
<p>Each server start a deploy or rollback made (newest first): the downtime window from the old
server's stop to the new one's readiness, its parts from the engine log, and the validation that
followed it.</p>
<table id="downtime"><tr><th>time</th><th>node</th><th>action</th><th>release</th>
<th>downtime window s</th><th>parts (s)</th><th>validated output tok/s</th><th>speed-up</th></tr>
{% for s in starts %}<tr><td>{{ s.at }}</td><td>{{ s.node }}</td><td>{{ s.action }}</td>
<td>{{ s.release }}</td><td>{{ f(s.window_s, '.1f') }}</td>
<td>{{ s.parts_text }}</td>
<td>{{ f(s.output_tps, '.1f') }}</td><td>{{ f(s.speed_up) }}</td></tr>
{% endfor %}</table></section>{% endif %}
<h2>Checks</h2>
{% for r in details %}<h3>{{ r.node }} / {{ r.release }} ({{ r.started_at }})</h3>
<table><tr><th>status</th><th>check</th><th>value</th><th>threshold</th><th>message</th></tr>
{% for c in r.checks %}<tr class="{{ c.status }}"><td>{{ c.status|upper }}</td>
<td>{{ c.name }}</td><td>{{ c.value }}</td><td>{{ c.threshold }}</td><td>{{ c.message }}</td>
</tr>{% endfor %}</table>
{% if r.log_line %}<p>vLLM-format line for the same counters:<br><code>{{ r.log_line }}</code>
</p>{% endif %}
{% endfor %}
</body></html>
"""


def start_views(starts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The restarts table: history.starts rows that restarted a server, newest first."""
    shown = [row for row in reversed(starts) if row["restarted"]][:STARTS_SHOWN]
    return [
        {
            **row,
            "parts_text": ", ".join(f"{phase} {sec}" for phase, sec in row["parts"].items())
            or "the engine log did not say ready",
        }
        for row in shown
    ]


def _spread_x(su: Any) -> str:
    if not isinstance(su, dict) or su.get("median") is None:
        return "-"
    return f"{su['median']:.2f}x ({su['min']:.2f}-{su['max']:.2f}, n={su.get('n')})"


def render_html(
    results: list[dict[str, Any]],
    hist: list[dict[str, Any]] | None = None,
    regress: dict[int, list[history.Regression]] | None = None,
    tolerance: float = 0.1,
    starts: list[dict[str, Any]] | None = None,
) -> str:
    """The report page. ``hist``: history rows with their results (history.runs(...,
    with_result=True)); without it the plots show this report's results. ``starts``: the
    history's recorded restarts (history.starts), shown newest first."""
    import datetime as _dt

    import jinja2

    rows, details = [], []
    for i, r in enumerate(results):
        a = _acc(r)
        tps = a.get("output_tokens_per_s") or {}
        reasons = list(r.get("reasons") or []) + [g.message() for g in (regress or {}).get(i, [])]
        rate = a.get("draft_acceptance_rate")
        status = str(r.get("status", "error"))
        if (regress or {}).get(i) and status == "pass":
            status = "regressed"
        view = run_view(r, status == "regressed")
        rows.append(
            {
                "node": r.get("node"),
                "release": r.get("release") or "-",
                "when": view.when,
                "mode": view.mode,
                "concurrency": view.concurrency,
                "k": view.k,
                "model": r.get("served_model_name"),
                "status": status,
                "mal": _f(a.get("mean_acceptance_length")),
                "rate": "-" if rate is None else f"{rate:.1%}",
                "tps": "-"
                if not tps
                else f"{tps['median']:.1f} ({tps['min']:.1f}-{tps['max']:.1f})",
                "speed_up": _spread_x(a.get("speed_up")),
                "baseline": _f(a.get("baseline_output_tokens_per_s"), ".1f")
                if a.get("mode") != "no_spec_baseline"
                else "this run (no speculation)",
                "baseline_source": (r.get("labels") or {}).get("baseline")
                or a.get("baseline_source")
                or "",
                "reasons": "; ".join(reasons) or "",
            }
        )
        checks = []
        for s in (r.get("smoke") or {}).get("stages", []):
            checks.append(
                {
                    "status": s["status"],
                    "name": f"smoke.{s['name']}",
                    "value": f"{s['seconds']:.2f}s",
                    "threshold": "",
                    "message": s["message"],
                }
            )
        for c in (r.get("gates") or {}).get("checks", []):
            v = c.get("value")
            checks.append(
                {
                    "status": c["status"],
                    "name": f"gate.{c['name']}",
                    "value": "-" if v is None else f"{v:.3f}",
                    "threshold": c["threshold"],
                    "message": c["message"],
                }
            )
        details.append(
            {
                "node": r.get("node"),
                "release": r.get("release") or "-",
                "started_at": r.get("started_at"),
                "checks": checks,
                "log_line": a.get("vllm_log_line"),
            }
        )
    if hist:
        views = history_views(hist, tolerance)
    else:
        views = [run_view(r, bool((regress or {}).get(i))) for i, r in enumerate(results)]
    positions, per_run = position_plots(views)
    env = jinja2.Environment(autoescape=True)
    tpl = env.from_string(HTML_TEMPLATE)
    return tpl.render(
        generated=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        results=results,
        nruns=len(hist or []),
        rows=rows,
        details=details,
        fleet=fleet_headline(views),
        speed=[s for r in results if (s := speed_section(r))],
        positions=positions,
        per_run=per_run,
        hist_plots=history_plots(views) if views else [],
        runs=sorted(views, key=lambda v: -(v.t or 0)),
        starts=start_views(starts or []),
        f=_f,
    )


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="spec-report", description=__doc__.split("\n")[0])
    p.add_argument("results", nargs="+", help="result JSON files or directories of them")
    p.add_argument("--history", help="SQLite history database")
    p.add_argument("--record", action="store_true", help="store the results in --history")
    p.add_argument("--regression-tolerance", type=float, default=0.1)
    p.add_argument("--junit")
    p.add_argument(
        "--prom",
        action="append",
        default=[],
        help="Prometheus textfile to write (repeatable; an empty value is skipped)",
    )
    p.add_argument("--html")
    p.add_argument("--json", help="write a summary JSON (results + regressions)")
    p.add_argument("--quiet", action="store_true", help="no table on stdout")
    args = p.parse_args(argv)
    if args.record and not args.history:
        p.error("--record needs --history")
    outputs = [("--junit", args.junit), ("--prom", args.prom), ("--html", args.html)]
    try:
        cli.check_paths(
            readable=[("RESULTS", args.results)],
            writable=[*outputs, ("--json", args.json), ("--history", args.history)],
        )
        results = load_results(args.results)
    except cli.PathError as e:
        return cli.usage_error("spec-report", e)
    except (OSError, ValueError) as e:
        return cli.usage_error("spec-report", f"RESULTS {e}")
    if not results:
        print("spec-report: error: no results", file=sys.stderr)
        return 2
    results.sort(key=lambda r: (str(r.get("node")), str(r.get("started_at"))))
    regress: dict[int, list[history.Regression]] | None = None
    hist_rows: list[dict[str, Any]] | None = None
    start_rows: list[dict[str, Any]] | None = None
    if args.history:
        try:
            conn = history.connect(args.history)
            regress = {}
            for i, r in enumerate(results):
                if args.record:
                    history.record(conn, r)
                regress[i] = history.regressions(conn, r, args.regression_tolerance)
            hist_rows = history.runs(conn, with_result=True)
            start_rows = history.starts(conn)
            conn.close()
        except history.HistoryError as e:
            return cli.usage_error("spec-report", f"--history {e}")
    try:
        write_outputs(args, results, regress, hist_rows, start_rows)
    except cli.PathError as e:  # e.g. a directory that cannot hold a file (/proc, read-only)
        return cli.usage_error("spec-report", e)
    if not args.quiet:
        print(render_table(results, regress))
    code = max(int(r.get("exit_code", 2)) for r in results)
    if any(v for v in (regress or {}).values()):
        code = max(code, 1)
    return code


def write_outputs(
    args: argparse.Namespace,
    results: list[dict[str, Any]],
    regress: dict[int, list[history.Regression]] | None,
    hist_rows: list[dict[str, Any]] | None,
    start_rows: list[dict[str, Any]] | None,
) -> None:
    """Every output file the flags name; a PathError names the flag of one that cannot be
    written."""
    if args.junit:
        with cli.naming("--junit", args.junit):
            atomic_write(args.junit, junit_xml(results, regress))
    for prom in filter(None, args.prom):
        with cli.naming("--prom", prom):
            atomic_write(prom, prom_textfile(results, regress))
    if args.html:
        page = render_html(results, hist_rows, regress, args.regression_tolerance, start_rows)
        with cli.naming("--html", args.html):
            atomic_write(args.html, page)
    if args.json:
        with cli.naming("--json", args.json):
            _write_json(args.json, results, regress)


def _write_json(
    path: str, results: list[dict[str, Any]], regress: dict[int, list[history.Regression]] | None
) -> None:
    if path:
        atomic_write(
            path,
            json.dumps(
                {
                    "results": [{k: v for k, v in r.items() if k != "_source"} for r in results],
                    "regressions": {
                        f"{results[i].get('node')}/{results[i].get('release')}": [
                            g.to_dict() for g in v
                        ]
                        for i, v in (regress or {}).items()
                        if v
                    },
                },
                indent=2,
            )
            + "\n",
        )


if __name__ == "__main__":
    sys.exit(main())
