"""Controller-side reports from ``specdeploy.node.check`` result JSONs.

Usage::

    spec-report RESULT.json|DIR ... [--history DB] [--record] [--regression-tolerance 0.1]
        [--junit FILE] [--prom FILE] [--html FILE] [--json FILE] [--quiet]

* a human table on stdout (one line per node);
* ``--junit``: JUnit XML, one testsuite per result, one testcase per smoke stage / gate;
* ``--prom``: Prometheus textfile for node_exporter's textfile collector (written atomically),
  gauges labelled ``node``, ``release``, ``model``;
* ``--html``: a self-contained HTML report with inline SVG plots (per-position acceptance;
  with ``--history``, the history of mean acceptance length and output tokens/s per release);
* ``--history DB`` + ``--record``: store the results in the SQLite history and check each
  against its release's first validated run (``--regression-tolerance``, relative).

Exit code: the worst result's exit code (0 pass, 1 failed, 2 could not measure), at least 1
when a result regressed; 2 for unreadable input.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from specdeploy.controller import history
from specdeploy.node import cli
from specdeploy.node.module_utils.specdeploy_fsio import atomic_write

SCHEMA_PREFIX = "specdeploy.validation/"
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf"]  # fmt: skip


def load_results(paths: list[str]) -> list[dict[str, Any]]:
    """Result JSONs from files and directories (in a directory, other JSON files are
    skipped; a named file that is not a result is an error)."""
    files: list[tuple[Path, bool]] = []
    for p in paths:
        pp = Path(p)
        files += [(f, False) for f in sorted(pp.glob("*.json"))] if pp.is_dir() else [(pp, True)]
    out = []
    for f, named in files:
        try:
            d = json.loads(f.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ValueError(f"{f}: not JSON ({exc})") from exc
        if not isinstance(d, dict) or not str(d.get("schema", "")).startswith(SCHEMA_PREFIX):
            if not named:
                continue
            raise ValueError(f"{f}: not a specdeploy validation result (schema field)")
        d.setdefault("_source", str(f))
        out.append(d)
    return out


def _acc(r: dict[str, Any]) -> dict[str, Any]:
    a = r.get("acceptance")
    return a if isinstance(a, dict) else {}


def _med(d: Any) -> float | None:
    return float(d["median"]) if isinstance(d, dict) and d.get("median") is not None else None


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


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def prom_textfile(
    results: list[dict[str, Any]], regress: dict[int, list[history.Regression]] | None = None
) -> str:
    metrics: dict[str, tuple[str, list[str]]] = {}

    def add(name: str, help_: str, labels: dict[str, str], value: float | None) -> None:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return
        lab = ",".join(f'{k}="{_esc(str(v))}"' for k, v in labels.items())
        metrics.setdefault(name, (help_, []))[1].append(f"{name}{{{lab}}} {float(value)!r}")

    import datetime as _dt

    for i, r in enumerate(results):
        base = {
            "node": str(r.get("node")),
            "release": str(r.get("release") or "unknown"),
            "model": str(r.get("served_model_name") or ""),
        }
        a = _acc(r)
        add(
            "specdeploy_validation_passed",
            "1 if the last validation passed, else 0",
            base,
            1.0 if r.get("status") == "pass" else 0.0,
        )
        add(
            "specdeploy_validation_exit_code",
            "Exit code of the last validation (0/1/2)",
            base,
            float(r.get("exit_code", 2)),
        )
        try:
            ts = _dt.datetime.fromisoformat(str(r.get("finished_at")).replace("Z", "+00:00"))
            add(
                "specdeploy_validation_timestamp_seconds",
                "When the validation finished",
                base,
                ts.timestamp(),
            )
        except ValueError:
            pass
        sm = r.get("smoke")
        if isinstance(sm, dict):
            for s in sm.get("stages", []):
                add(
                    "specdeploy_smoke_stage_ok",
                    "1 if the smoke stage passed",
                    base | {"stage": s["name"]},
                    1.0 if s.get("ok") else 0.0,
                )
        add(
            "specdeploy_mean_acceptance_length",
            "1 + accepted / drafts over the run",
            base,
            a.get("mean_acceptance_length"),
        )
        add(
            "specdeploy_draft_acceptance_rate",
            "accepted / draft tokens over the run",
            base,
            a.get("draft_acceptance_rate"),
        )
        for pos, v in enumerate(a.get("per_position_acceptance") or []):
            add(
                "specdeploy_position_acceptance_rate",
                "accepted at position / drafts",
                base | {"position": str(pos)},
                v,
            )
        add(
            "specdeploy_output_tokens_per_second",
            "Median output tokens/s of the workload",
            base,
            _med(a.get("output_tokens_per_s")),
        )
        add(
            "specdeploy_accepted_tokens_per_second",
            "Median accepted draft tokens/s",
            base,
            _med(a.get("accepted_tokens_per_s")),
        )
        add(
            "specdeploy_speed_up",
            "Median output tokens/s over the no-speculation baseline",
            base,
            _med(a.get("speed_up")),
        )
        if regress is not None:
            add(
                "specdeploy_regression",
                "1 if below the release's first validated run",
                base,
                1.0 if regress.get(i) else 0.0,
            )
    lines = []
    for name in sorted(metrics):
        help_, samples = metrics[name]
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} gauge", *samples]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- SVG plots


def svg_bars(
    groups: list[tuple[str, list[float]]],
    title: str,
    floors: list[float] | None = None,
    width: int = 640,
    height: int = 260,
) -> str:
    """Grouped bars: one group per position, one bar per series, y in [0, 1]."""
    npos = max((len(v) for _, v in groups), default=0)
    per_row = 3
    legend_rows = max(1, (len(groups) + per_row - 1) // per_row)
    height += 16 * (legend_rows - 1)
    ml, mr, mt, mb = 46, 12, 28, 28 + 16 * legend_rows
    pw, ph = width - ml - mr, height - mt - mb
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'role="img" aria-label="{html.escape(title)}" font-family="sans-serif" '
        'font-size="11">',
        f'<text x="{width / 2}" y="16" text-anchor="middle" font-size="13">'
        f"{html.escape(title)}</text>",
    ]
    for i in range(6):
        y = mt + ph - ph * i / 5
        out.append(
            f'<line x1="{ml}" x2="{ml + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
            f'<text x="{ml - 6}" y="{y + 4:.1f}" text-anchor="end">{i / 5:.1f}</text>'
        )
    if npos == 0:
        out.append(
            f'<text x="{width / 2}" y="{mt + ph / 2}" text-anchor="middle">no data</text></svg>'
        )
        return "".join(out)
    gw = pw / npos
    bw = gw * 0.8 / max(1, len(groups))
    for p in range(npos):
        x0 = ml + p * gw + gw * 0.1
        for s, (label, vals) in enumerate(groups):
            if p >= len(vals):
                continue
            v = max(0.0, min(1.0, vals[p]))
            h = ph * v
            out.append(
                f'<rect x="{x0 + s * bw:.1f}" y="{mt + ph - h:.1f}" width="{bw - 1:.1f}" '
                f'height="{h:.1f}" fill="{PALETTE[s % len(PALETTE)]}">'
                f"<title>{html.escape(label)} position {p}: {vals[p]:.3f}</title></rect>"
            )
            if bw > 22:
                out.append(
                    f'<text x="{x0 + s * bw + bw / 2:.1f}" y="{mt + ph - h - 3:.1f}" '
                    f'text-anchor="middle" font-size="9">{vals[p]:.2f}</text>'
                )
        if floors and p < len(floors) and floors[p] is not None:
            y = mt + ph - ph * floors[p]
            out.append(
                f'<line x1="{ml + p * gw:.1f}" x2="{ml + (p + 1) * gw:.1f}" y1="{y:.1f}" '
                f'y2="{y:.1f}" stroke="#000" stroke-dasharray="4 3"><title>floor '
                f"{floors[p]:.3f}</title></line>"
            )
        out.append(
            f'<text x="{ml + p * gw + gw / 2:.1f}" y="{mt + ph + 14}" '
            f'text-anchor="middle">position {p}</text>'
        )
    for s, (label, _) in enumerate(groups):
        x = ml + (s % per_row) * 200
        y = mt + ph + 24 + 16 * (s // per_row)
        out.append(
            f'<rect x="{x}" y="{y}" width="10" height="10" '
            f'fill="{PALETTE[s % len(PALETTE)]}"/><text x="{x + 14}" y="{y + 9}">'
            f"{html.escape(label[:30])}</text>"
        )
    out.append("</svg>")
    return "".join(out)


def svg_history(
    points: list[dict[str, Any]],
    key: str,
    title: str,
    ylabel: str,
    width: int = 560,
    height: int = 260,
    all_releases: list[str] | None = None,
    labels: dict[str, str] | None = None,
    ref: tuple[float, str] | None = None,
) -> str:
    """Chronological points (dicts with node, release, started_at, key); dots coloured by
    release (``all_releases`` fixes the colours across plots; ``labels`` adds a note to a
    release in the legend), one line per node; ``ref`` = (value, label): a dashed line."""
    pts = [p for p in points if isinstance(p.get(key), (int, float))]
    ml, mr, mt, mb = 70, 12, 28, 58
    pw, ph = width - ml - mr, height - mt - mb
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'role="img" aria-label="{html.escape(title)}" font-family="sans-serif" '
        'font-size="11">',
        f'<text x="{width / 2}" y="16" text-anchor="middle" font-size="13">'
        f"{html.escape(title)}</text>",
        f'<text x="12" y="{mt + ph / 2}" transform="rotate(-90 12 {mt + ph / 2})" '
        f'text-anchor="middle">{html.escape(ylabel)}</text>',
    ]
    if not pts:
        out.append(
            f'<text x="{width / 2}" y="{mt + ph / 2}" text-anchor="middle">no history</text></svg>'
        )
        return "".join(out)
    vals = [float(p[key]) for p in pts] + ([ref[0]] if ref else [])
    lo, hi = min(vals), max(vals)
    if hi - lo < 0.1 * max(abs(hi), 1e-9):  # a flat series: show +/-10% around it
        mid = (hi + lo) / 2
        lo, hi = mid - 0.1 * max(abs(mid), 0.1), mid + 0.1 * max(abs(mid), 0.1)
    lo = min(lo, 0.0) if lo > 0 and lo < (hi - lo) else lo
    n = len(pts)

    def xy(i: int, v: float) -> tuple[float, float]:
        x = ml + (pw * (i + 0.5) / n)
        y = mt + ph - ph * (v - lo) / (hi - lo)
        return x, y

    for i in range(5):
        v = lo + (hi - lo) * i / 4
        y = mt + ph - ph * i / 4
        tick = f"{v:.0f}" if hi - lo >= 20 else (f"{v:.2f}" if hi - lo >= 0.2 else f"{v:.3f}")
        out.append(
            f'<line x1="{ml}" x2="{ml + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
            f'<text x="{ml - 6}" y="{y + 4:.1f}" text-anchor="end">{tick}</text>'
        )
    if ref is not None:
        yr = mt + ph - ph * (ref[0] - lo) / (hi - lo)
        out.append(
            f'<line x1="{ml}" x2="{ml + pw}" y1="{yr:.1f}" y2="{yr:.1f}" stroke="#000" '
            f'stroke-dasharray="5 3"/><text x="{ml + pw - 4}" y="{yr - 4:.1f}" '
            f'text-anchor="end">{html.escape(ref[1])}</text>'
        )
    releases = list(dict.fromkeys(str(p.get("release")) for p in pts))
    order = list(dict.fromkeys([*(all_releases or []), *releases]))
    colour = {r: PALETTE[order.index(r) % len(PALETTE)] for r in releases}
    nodes = list(dict.fromkeys(str(p.get("node")) for p in pts))
    for node in nodes:
        seq = [xy(i, float(p[key])) for i, p in enumerate(pts) if str(p.get("node")) == node]
        if len(seq) > 1:
            d = " ".join(f"{x:.1f},{y:.1f}" for x, y in seq)
            out.append(f'<polyline points="{d}" fill="none" stroke="#999" stroke-width="1"/>')
    for i, p in enumerate(pts):
        x, y = xy(i, float(p[key]))
        c = colour[str(p.get("release"))]
        ok = p.get("status") == "pass"
        out.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{c if ok else "#fff"}" '
            f'stroke="{c}" stroke-width="2"><title>{html.escape(str(p.get("node")))} '
            f"{html.escape(str(p.get('release')))} {html.escape(str(p.get('started_at')))}"
            f": {float(p[key]):.3f} ({html.escape(str(p.get('status')))})</title>"
            "</circle>"
        )
    first, last = str(pts[0].get("started_at", ""))[:16], str(pts[-1].get("started_at", ""))[:16]
    out.append(
        f'<text x="{ml}" y="{mt + ph + 14}">{html.escape(first)}</text>'
        f'<text x="{ml + pw}" y="{mt + ph + 14}" text-anchor="end">'
        f"{html.escape(last)}</text>"
    )
    x = ml
    for rel in releases[:6]:
        text = rel[:16] + (f" ({labels[rel]})" if labels and rel in labels else "")
        out.append(
            f'<circle cx="{x + 5}" cy="{height - 12}" r="4" '
            f'fill="{colour[rel]}"/><text x="{x + 13}" y="{height - 8}">'
            f"{html.escape(text)}</text>"
        )
        x += 24 + 6 * len(text)
    out.append("</svg>")
    return "".join(out)


HTML_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>specdeploy validation report</title>
<style>
body{font-family:sans-serif;margin:24px;color:#222;max-width:1200px}
table{border-collapse:collapse;margin:8px 0 20px}
th,td{border:1px solid #ccc;padding:4px 8px;font-size:13px;text-align:left;vertical-align:top}
th{background:#f3f3f3}
.pass{background:#dff0d8}.fail{background:#f2dede}.error{background:#fcf8e3}
.skip{color:#888}.plots{display:flex;flex-wrap:wrap;gap:16px}
code{font-size:12px}
</style></head><body>
<h1>specdeploy validation report</h1>
<p>Generated {{ generated }} from {{ results|length }} result(s).</p>
<h2>Summary</h2>
<table><tr><th>node</th><th>release</th><th>model</th><th>status</th>
<th>mean acceptance length</th><th>draft acceptance</th><th>output tok/s (median, min-max)</th>
<th>no-spec baseline tok/s</th><th>speed-up (median, min-max, n)</th><th>reasons</th></tr>
{% for r in rows %}<tr class="{{ r.status }}"><td>{{ r.node }}</td><td>{{ r.release }}</td>
<td>{{ r.model }}</td><td>{{ r.status|upper }}</td><td>{{ r.mal }}</td><td>{{ r.rate }}</td>
<td>{{ r.tps }}</td><td title="{{ r.baseline_source }}">{{ r.baseline }}</td>
<td>{{ r.speed_up }}</td><td>{{ r.reasons }}</td></tr>
{% endfor %}</table>
<h2>Per-position acceptance</h2>
<div class="plots">{{ bars|safe }}</div>
{% if hist_mal %}<h2>History per release</h2>
<div class="plots">{{ hist_mal|safe }}{{ hist_tps|safe }}{{ hist_su|safe }}</div>
<p>Filled dots: passed runs; hollow: failed. Colour: release. Hover for details.</p>
{% endif %}
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


def _spread_x(su: Any) -> str:
    if not isinstance(su, dict) or su.get("median") is None:
        return "-"
    return f"{su['median']:.2f}x ({su['min']:.2f}-{su['max']:.2f}, n={su.get('n')})"


def render_html(
    results: list[dict[str, Any]],
    hist: list[dict[str, Any]] | None = None,
    regress: dict[int, list[history.Regression]] | None = None,
) -> str:
    import datetime as _dt

    import jinja2

    rows, details = [], []
    latest: dict[tuple[str, str], list[float]] = {}
    floors: list[float] | None = None
    for i, r in enumerate(results):
        a = _acc(r)
        tps = a.get("output_tokens_per_s") or {}
        reasons = list(r.get("reasons") or []) + [g.message() for g in (regress or {}).get(i, [])]
        rate = a.get("draft_acceptance_rate")
        status = str(r.get("status", "error"))
        if (regress or {}).get(i) and status == "pass":
            status = "fail"
        rows.append(
            {
                "node": r.get("node"),
                "release": r.get("release") or "-",
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
        if a.get("per_position_acceptance"):
            latest[(str(r.get("node")), str(r.get("release") or "-"))] = list(
                a["per_position_acceptance"]
            )
            fl = ((r.get("gates") or {}).get("thresholds") or {}).get("per_position_floors")
            if fl and floors is None:
                n = max(int(k) for k in fl) + 1
                floors = [fl.get(str(k)) for k in range(n)]
    groups = [(f"{n} {rel}", v) for (n, rel), v in sorted(latest.items())]
    env = jinja2.Environment(autoescape=True)
    tpl = env.from_string(HTML_TEMPLATE)
    ctx: dict[str, Any] = {
        "generated": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "results": results,
        "rows": rows,
        "details": details,
        "bars": svg_bars(
            groups,
            "Per-position acceptance rate (accepted_i / drafts), latest "
            "run per node and release; dashed: floors",
            floors,
        ),
        "hist_mal": None,
    }
    if hist:
        order = list(dict.fromkeys(str(h.get("release")) for h in hist))
        nospec = {
            str(h.get("release")): "no spec"
            for h in hist
            if h.get("mean_acceptance_length") is None and h.get("output_tps") is not None
        }
        ctx["hist_mal"] = svg_history(
            hist,
            "mean_acceptance_length",
            "Mean acceptance length per run",
            "tokens per step",
            all_releases=order,
            ref=(1.0, "1 = no accepted drafts"),
        )
        ctx["hist_tps"] = svg_history(
            hist,
            "output_tps",
            "Output tokens/s per run (median over repeats)",
            "tokens/s",
            all_releases=order,
            labels=nospec,
        )
        ctx["hist_su"] = svg_history(
            hist,
            "speed_up",
            "Speed-up vs no speculation (median)",
            "x",
            all_releases=order,
            ref=(1.0, "1.0 = as fast as no speculation"),
        )
    return tpl.render(**ctx)


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="spec-report", description=__doc__.split("\n")[0])
    p.add_argument("results", nargs="+", help="result JSON files or directories of them")
    p.add_argument("--history", help="SQLite history database")
    p.add_argument("--record", action="store_true", help="store the results in --history")
    p.add_argument("--regression-tolerance", type=float, default=0.1)
    p.add_argument("--junit")
    p.add_argument("--prom")
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
    if args.history:
        try:
            conn = history.connect(args.history)
            regress = {}
            for i, r in enumerate(results):
                if args.record:
                    history.record(conn, r)
                regress[i] = history.regressions(conn, r, args.regression_tolerance)
            hist_rows = history.runs(conn)
            conn.close()
        except history.HistoryError as e:
            return cli.usage_error("spec-report", f"--history {e}")
    if args.junit:
        atomic_write(args.junit, junit_xml(results, regress))
    if args.prom:
        atomic_write(args.prom, prom_textfile(results, regress))
    if args.html:
        atomic_write(args.html, render_html(results, hist_rows, regress))
    if args.json:
        atomic_write(
            args.json,
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
    if not args.quiet:
        print(render_table(results, regress))
    code = max(int(r.get("exit_code", 2)) for r in results)
    if any(v for v in (regress or {}).values()):
        code = max(code, 1)
    return code


if __name__ == "__main__":
    sys.exit(main())
