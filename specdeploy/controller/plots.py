"""Inline SVG plots for the HTML report (no scripts, no dependencies): round tick values, a
time axis with dates, markers that say how a run ended, legends that wrap instead of overlap.

Each plot is an ``<svg>`` with ``class`` names a test (or a reader of the DOM) can find:
``axis-x``/``axis-y`` groups whose ``<text class="tick">`` are the tick labels, ``run-pass``,
``run-failed``, ``run-regressed`` markers with a ``<title>`` naming the run, ``legend``.
"""

from __future__ import annotations

import datetime as dt
import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf", "#393b79"]  # fmt: skip
FAIL_COLOUR = "#d62728"
CHAR_W = 6.4  # average glyph width of 11px sans-serif, for wrapping legends


def nice_step(span: float, target: int = 5) -> float:
    """A round step (1, 2, 2.5 or 5 times a power of ten) giving about ``target`` intervals."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / target
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (the first <= lo, the last >= hi)."""
    if hi <= lo:
        hi = lo + (abs(lo) * 0.1 or 1.0)
    step = nice_step(hi - lo, target)
    start = math.floor(lo / step + 1e-9) * step
    ticks = []
    v = start
    while v < hi - 1e-9 * step:
        ticks.append(round(v, 10))
        v += step
    ticks.append(round(v, 10))
    return ticks


def tick_label(v: float, step: float) -> str:
    """As many decimals as the step needs (0.25 steps: two; 0.5: one; 50: none)."""
    decimals = 0
    while decimals < 6 and abs(round(step, decimals) - step) > 1e-9 * max(1.0, step):
        decimals += 1
    return f"{v:.{decimals}f}"


TIME_STEPS = [3600 * h for h in (1, 2, 3, 6, 12)] + [86400 * d for d in (1, 2, 7, 14, 28)]


def time_ticks(t0: float, t1: float, max_ticks: int = 8) -> tuple[list[float], str]:
    """Tick times aligned to UTC hours/midnights (epoch seconds) and their strftime format."""
    span = max(t1 - t0, 3600.0)
    step = next((s for s in TIME_STEPS if span / s <= max_ticks), TIME_STEPS[-1])
    first = math.ceil(t0 / step) * step
    ticks = [first + i * step for i in range(int((t1 - first) // step) + 1)]
    return ticks, ("%b %d" if step >= 86400 else "%b %d %H:%M")


def parse_time(s: object) -> float | None:
    try:
        t = dt.datetime.fromisoformat(str(s).replace("Z", "+00:00"))
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=dt.UTC)).timestamp()


def fmt_time(t: float, fmt: str = "%Y-%m-%d %H:%M") -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime(fmt)


def _e(s: object) -> str:
    return html.escape(str(s))


@dataclass
class Point:
    """One run on a time plot."""

    t: float  # epoch seconds
    value: float
    series: str  # colour key (the release)
    line: str  # runs joined by a line (the node)
    outcome: str  # pass | failed | regressed | error
    label: str  # the marker's tooltip: time, node, release, mode, concurrency, k, value


@dataclass
class Legend:
    items: list[tuple[str, str]] = field(default_factory=list)  # (svg of the swatch, text)

    def render(self, x0: float, y0: float, width: float) -> tuple[str, float]:
        """The legend wrapped into rows within ``width``; returns (svg, height used)."""
        out, x, y = ['<g class="legend">'], x0, y0
        for swatch, text in self.items:
            w = 18 + CHAR_W * len(text) + 14
            if x > x0 and x + w > x0 + width:
                x, y = x0, y + 16
            out.append(
                f'<g transform="translate({x:.1f},{y:.1f})">{swatch}'
                f'<text x="16" y="9">{_e(text)}</text></g>'
            )
            x += w
        out.append("</g>")
        return "".join(out), y - y0 + 16


def marker(outcome: str, x: float, y: float, colour: str, title: str) -> str:
    t = f"<title>{_e(title)}</title>"
    if outcome == "failed":
        return (
            f'<g class="run run-failed" data-outcome="failed">{t}'
            f'<path d="M{x - 5:.1f},{y - 5:.1f}L{x + 5:.1f},{y + 5:.1f}M{x - 5:.1f},{y + 5:.1f}'
            f'L{x + 5:.1f},{y - 5:.1f}" stroke="{FAIL_COLOUR}" stroke-width="2.5"/></g>'
        )
    if outcome == "regressed":
        return (
            f'<g class="run run-regressed" data-outcome="regressed">{t}'
            f'<path d="M{x:.1f},{y - 6:.1f}L{x + 6:.1f},{y + 5:.1f}L{x - 6:.1f},{y + 5:.1f}Z" '
            f'fill="#fff" stroke="{colour}" stroke-width="2"/></g>'
        )
    if outcome == "error":
        return (
            f'<g class="run run-error" data-outcome="error">{t}<rect x="{x - 4:.1f}" '
            f'y="{y - 4:.1f}" width="8" height="8" fill="#fff" stroke="#777" stroke-width="2"/></g>'
        )
    return (
        f'<g class="run run-pass" data-outcome="pass">{t}<circle cx="{x:.1f}" cy="{y:.1f}" '
        f'r="4.5" fill="{colour}"/></g>'
    )


def _svg_open(kind: str, width: int, height: int, title: str) -> str:
    """The opening ``<svg>`` of a plot (``class="plot {kind}"``) with its centred title."""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot {kind}" width="{width}" '
        f'height="{height}" role="img" aria-label="{_e(title)}" font-family="sans-serif" '
        f'font-size="11"><text class="title" x="{width / 2}" y="17" text-anchor="middle" '
        f'font-size="13">{_e(title)}</text>'
    )


def _y_axis(ticks: Sequence[float], ml: float, pw: float, y_of: Callable[[float], float]) -> str:
    """The ``axis-y`` group: per tick a light grid line across the plot area (``ml`` to
    ``ml + pw``, at height ``y_of(tick)``) and its label on the left, as many decimals as the
    tick step needs."""
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    out = ['<g class="axis-y">']
    for v in ticks:
        y = y_of(v)
        out.append(
            f'<line x1="{ml}" x2="{ml + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e3e3e3"/>'
            f'<text class="tick" x="{ml - 6}" y="{y + 4:.1f}" text-anchor="end">'
            f"{tick_label(v, step)}</text>"
        )
    return "".join(out) + "</g>"


def _legend_below(legend_svg: str, top: float) -> str:
    """A rendered legend moved down to ``top`` (below the plot area)."""
    return legend_svg.replace(
        '<g class="legend">', f'<g class="legend" transform="translate(0,{top})">'
    )


MARKER_LEGEND = [
    ("pass", "passed"),
    ("regressed", "regressed (below the release's first validated run)"),
    ("failed", "failed"),
]


def time_plot(
    points: Sequence[Point],
    title: str,
    ylabel: str,
    *,
    y_min: float | None = None,
    around: float | None = None,
    refs: Sequence[tuple[float, str]] = (),
    colours: dict[str, str] | None = None,
    width: int = 640,
    height: int = 300,
) -> str:
    """Runs over time: x = when (dates on the axis), y with round ticks; ``y_min`` pins the
    bottom (tokens/s from 0); ``around`` keeps that value inside with room on both sides (a
    speed-up axis around 1.0); ``refs``: dashed reference lines."""
    ml, mr, mt = 58, 16, 30
    colours = colours or {}
    series = list(dict.fromkeys(p.series for p in points))
    legend = Legend()
    for s in series:
        c = colours.get(s, PALETTE[len(legend.items) % len(PALETTE)])
        colours.setdefault(s, c)
        legend.items.append((f'<rect width="10" height="10" fill="{c}"/>', s))
    for outcome, text in MARKER_LEGEND:
        if any(p.outcome == outcome for p in points):
            legend.items.append((marker(outcome, 5, 5, "#555", text), text))
    legend_svg, legend_h = legend.render(ml, 0, width - ml - mr)
    mb = 44 + legend_h
    height += int(legend_h)
    pw, ph = width - ml - mr, height - mt - mb
    out = [
        _svg_open("time-plot", width, height, title)
        + f'<text x="13" y="{mt + ph / 2}" transform="rotate(-90 13 {mt + ph / 2})" '
        f'text-anchor="middle">{_e(ylabel)}</text>'
    ]
    if not points:
        out.append(
            f'<text x="{width / 2}" y="{mt + ph / 2}" text-anchor="middle">no runs</text></svg>'
        )
        return "".join(out)
    vals = [p.value for p in points] + [r[0] for r in refs]
    lo, hi = min(vals), max(vals)
    if around is not None:
        room = max(0.1 * around, 0.25 * (hi - lo))
        lo, hi = min(lo, around) - room, max(hi, around) + room
    if y_min is not None:
        lo = min(y_min, lo)
    if hi - lo < 1e-9:
        hi = lo + (abs(lo) * 0.2 or 1.0)
    yt = nice_ticks(lo, hi)
    ylo, yhi = yt[0], yt[-1]
    ts = [p.t for p in points]
    t0, t1 = min(ts), max(ts)
    pad = max((t1 - t0) * 0.04, 1800.0)
    t0, t1 = t0 - pad, t1 + pad

    def xy(t: float, v: float) -> tuple[float, float]:
        return ml + pw * (t - t0) / (t1 - t0), mt + ph - ph * (v - ylo) / (yhi - ylo)

    out.append(_y_axis(yt, ml, pw, lambda v: xy(t0, v)[1]))
    out.append('<g class="axis-x">')
    xt, fmt = time_ticks(t0, t1)
    for t in xt:
        x, _ = xy(t, ylo)
        out.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{mt}" y2="{mt + ph}" stroke="#f0f0f0"/>'
            f'<text class="tick" x="{x:.1f}" y="{mt + ph + 15}" text-anchor="middle" '
            f'data-time="{fmt_time(t, "%Y-%m-%dT%H:%MZ")}">{fmt_time(t, fmt)}</text>'
        )
    out.append(
        f'<text x="{ml + pw / 2}" y="{mt + ph + 31}" text-anchor="middle" fill="#555">'
        "time (UTC)</text></g>"
    )
    out.append(f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
    for value, text in refs:
        _, y = xy(t0, value)
        out.append(
            f'<g class="ref"><line x1="{ml}" x2="{ml + pw}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="#000" stroke-dasharray="5 3"/><text x="{ml + pw - 4}" y="{y - 4:.1f}" '
            f'text-anchor="end">{_e(text)}</text></g>'
        )
    for line in dict.fromkeys(p.line for p in points):
        seq = sorted((p.t, p.value) for p in points if p.line == line)
        if len(seq) > 1:
            d = " ".join("{:.1f},{:.1f}".format(*xy(t, v)) for t, v in seq)
            out.append(
                f'<polyline class="node-line" points="{d}" fill="none" stroke="#bbb" '
                f'stroke-width="1"><title>{_e(line)}</title></polyline>'
            )
    for p in points:
        x, y = xy(p.t, p.value)
        out.append(marker(p.outcome, x, y, colours[p.series], p.label))
    out.append(_legend_below(legend_svg, height - legend_h) + "</svg>")
    return "".join(out)


def bar_chart(
    groups: Sequence[str],
    series: Sequence[tuple[str, Sequence[float | None]]],
    title: str,
    *,
    y_max: float | None = None,
    floors: Sequence[float | None] | None = None,
    value_fmt: str = "{:.2f}",
    notes: Sequence[str] | None = None,
    width: int = 640,
    height: int = 260,
    colours: Sequence[str] | None = None,
) -> str:
    """Grouped bars: one group per entry of ``groups``, one bar per series, values above the
    bars; ``floors``: a dashed line per group; ``notes``: a text above each group."""
    ml, mr, mt = 52, 12, (46 if notes else 30)
    colours = list(colours or PALETTE)
    legend = Legend(
        [(f'<rect width="10" height="10" fill="{colours[i % len(colours)]}"/>', name)
         for i, (name, _) in enumerate(series)]
    )  # fmt: skip
    legend_svg, legend_h = legend.render(ml, 0, width - ml - mr)
    mb = 24 + legend_h
    height += int(legend_h)
    pw, ph = width - ml - mr, height - mt - mb
    out = [_svg_open("bar-chart", width, height, title)]
    vals = [v for _, vs in series for v in vs if v is not None]
    if not groups or not vals:
        out.append(f'<text x="{width / 2}" y="{mt + ph / 2}" text-anchor="middle">no data</text>')
        return "".join(out) + "</svg>"
    top = y_max if y_max is not None else max(vals) * 1.12
    yt = nice_ticks(0.0, top)
    yhi = yt[-1]
    out.append(_y_axis(yt, ml, pw, lambda v: mt + ph - ph * v / yhi))
    out.append('<g class="axis-x">')
    gw = pw / len(groups)
    bw = gw * 0.8 / max(1, len(series))
    for g, name in enumerate(groups):
        x0 = ml + g * gw + gw * 0.1
        for s, (sname, vs) in enumerate(series):
            v = vs[g] if g < len(vs) else None
            if v is None:
                continue
            h = ph * max(0.0, min(v, yhi)) / yhi
            out.append(
                f'<rect class="bar" x="{x0 + s * bw:.1f}" y="{mt + ph - h:.1f}" '
                f'width="{bw - 2:.1f}" height="{h:.1f}" fill="{colours[s % len(colours)]}">'
                f"<title>{_e(sname)} {_e(name)}: {value_fmt.format(v)}</title></rect>"
            )
            if bw >= 24:
                out.append(
                    f'<text x="{x0 + s * bw + bw / 2 - 1:.1f}" y="{mt + ph - h - 3:.1f}" '
                    f'text-anchor="middle" font-size="9">{value_fmt.format(v)}</text>'
                )
        if floors and g < len(floors) and floors[g] is not None:
            y = mt + ph - ph * floors[g] / yhi
            out.append(
                f'<line class="floor" x1="{ml + g * gw:.1f}" x2="{ml + (g + 1) * gw:.1f}" '
                f'y1="{y:.1f}" y2="{y:.1f}" stroke="#000" stroke-dasharray="4 3">'
                f"<title>floor {floors[g]:.2f}</title></line>"
            )
        if notes and g < len(notes) and notes[g]:
            out.append(
                f'<text class="note" x="{ml + g * gw + gw / 2:.1f}" y="{mt - 4}" '
                f'text-anchor="middle" font-weight="bold">{_e(notes[g])}</text>'
            )
        out.append(
            f'<text class="tick" x="{ml + g * gw + gw / 2:.1f}" y="{mt + ph + 14}" '
            f'text-anchor="middle">{_e(name)}</text>'
        )
    out.append("</g>")
    out.append(_legend_below(legend_svg, height - legend_h) + "</svg>")
    return "".join(out)
