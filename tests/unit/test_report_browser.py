"""The HTML report in a real headless browser (Debian's chromium, installed by `make setup`):
a report rendered from a fleet history (tests/unit/fleet_history.py) is loaded by chromium,
which dumps the DOM as it parsed it and takes a screenshot. The checks are about structure, not
pixels: dated time axes with round ticks, a speed-up axis around 1.0, failed and regressed runs
drawn as such, the fleet headline, a bar chart per run, the per-level speed comparison, and a
screenshot of the expected size whose regions are not blank."""

from __future__ import annotations

import math
import re
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import ClassVar

import pytest
from fleet_history import fleet, write

from specdeploy.controller import plots, report

pytestmark = pytest.mark.timeout(180)
WIDTH, HEIGHT, SCALE = 1400, 6000, 0.5  # CSS pixels of the window; device pixels per CSS px


def chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("chromium")
    if binary is None:
        pytest.fail("chromium not installed (Debian package chromium: make setup)")
    return subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--user-data-dir={tmp / 'profile'}", *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    d = tmp_path_factory.mktemp("browser")
    paths = write(d / "results", fleet())
    rc = report.main(
        [
            *map(str, paths),
            "--history",
            str(d / "h.sqlite"),
            "--record",
            "--quiet",
            "--html",
            str(d / "report.html"),
        ]
    )
    assert rc == 1  # the history holds failed runs
    dom = chromium(d, "--dump-dom", (d / "report.html").as_uri())
    assert dom.returncode == 0 and "</html>" in dom.stdout, dom.stderr[-2000:]
    shot = chromium(
        d,
        f"--window-size={WIDTH},{HEIGHT}",
        f"--force-device-scale-factor={SCALE}",
        f"--screenshot={d / 'report.png'}",
        (d / "report.html").as_uri(),
    )
    assert shot.returncode == 0, shot.stderr[-2000:]
    return Dom.parse(dom.stdout), d / "report.png"


class Node:
    def __init__(self, tag: str, attrs: dict[str, str], parent: Node | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Node] = []
        self.text = ""

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def all_text(self) -> str:
        return self.text + "".join(c.all_text() for c in self.children)

    def find(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[Node]:
        out = []
        for c in self.children:
            if (
                (tag is None or c.tag == tag)
                and (cls is None or cls in c.classes)
                and all(c.attrs.get(k) == v for k, v in attrs.items())
            ):
                out.append(c)
            out += c.find(tag, cls, **attrs)
        return out


class Dom(HTMLParser):
    VOID: ClassVar[set[str]] = {"meta", "br", "link", "img", "input", "hr"}

    def __init__(self) -> None:
        super().__init__()
        self.root = Node("root", {}, None)
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs}, self.cur)
        self.cur.children.append(node)
        if tag not in self.VOID:
            self.cur = node

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Node(tag, {k: v or "" for k, v in attrs}, self.cur))

    def handle_endtag(self, tag):
        n = self.cur
        while n.parent is not None and n.tag != tag:
            n = n.parent
        if n.parent is not None:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.text += data

    @classmethod
    def parse(cls, text: str) -> Node:
        p = cls()
        p.feed(text)
        return p.root


def time_plots(dom: Node) -> dict[str, Node]:
    return {svg.attrs["aria-label"]: svg for svg in dom.find("svg") if "time-plot" in svg.classes}


def ticks(svg: Node, axis: str) -> list[Node]:
    (group,) = svg.find("g", cls=f"axis-{axis}")
    return group.find("text", cls="tick")


def test_time_axes_have_dates_and_round_ticks(page):
    dom, _ = page
    found = time_plots(dom)
    assert set(found) == {
        "Mean acceptance length per run",
        "Output tokens/s per run (median over repeats)",
        "Speed-up vs no speculation (median)",
    }
    for title, svg in found.items():
        xt = ticks(svg, "x")
        assert len(xt) >= 4, title
        assert all(re.fullmatch(r"[A-Z][a-z]{2} \d{2}", t.all_text()) for t in xt), title
        times = [t.attrs["data-time"] for t in xt]
        assert times == sorted(times) and times[0].startswith("2026-11-"), (title, times)
        yv = [float(t.all_text()) for t in ticks(svg, "y")]
        step = yv[1] - yv[0]
        mantissa = step / 10 ** math.floor(math.log10(step))
        assert round(mantissa, 6) in (1, 2, 2.5, 5), (title, yv)
        assert all(abs(v / step - round(v / step)) < 1e-6 for v in yv), (title, yv)
    su = [float(t.all_text()) for t in ticks(found["Speed-up vs no speculation (median)"], "y")]
    assert su[0] < 1.0 < su[-1] and su[-1] - su[0] >= 1.0, su  # around 1.0, with room
    tps_plot = found["Output tokens/s per run (median over repeats)"]
    tps = [float(t.all_text()) for t in ticks(tps_plot, "y")]
    assert tps[0] == 0.0


def test_failed_and_regressed_runs_are_drawn_as_such(page):
    dom, _ = page
    mal = time_plots(dom)["Mean acceptance length per run"]
    failed = [g for g in mal.find("g", cls="run-failed") if g.parent.tag == "svg"]
    regressed = [g for g in mal.find("g", cls="run-regressed") if g.parent.tag == "svg"]
    passed = [g for g in mal.find("g", cls="run-pass") if g.parent.tag == "svg"]
    assert len(failed) == 2 and len(regressed) == 1 and len(passed) == 4
    (title,) = regressed[0].find("title")
    assert title.all_text().startswith("2026-12-01 10:00 UTC gpu-01 20261129-eagle3-k3-3c4d")
    assert "mode=spec c=1 k=3" in title.all_text() and "(REGRESSED)" in title.all_text()
    rows = dom.find("table", id="runs")[0].find("tr")[1:]
    outcomes = [r.find("td")[6].all_text() for r in rows]
    assert outcomes.count("FAILED") == 2 and outcomes.count("REGRESSED") == 1
    assert len(rows) == len(fleet())


def test_fleet_headline_and_last_run_per_node(page):
    dom, _ = page
    (headline,) = dom.find(id="headline")
    assert headline.all_text() == (
        "1 of 2 node(s) passing; release(s) serving: 20261202-eagle3-k4-5e6f (2 nodes)"
    )
    rows = dom.find("table", id="last-runs")[0].find("tr")[1:]
    cells = [[td.all_text() for td in r.find("td")][:4] for r in rows]
    assert cells == [
        ["gpu-01", "20261202-eagle3-k4-5e6f", "2026-12-02 11:00", "PASS"],
        ["gpu-02", "20261202-eagle3-k4-5e6f", "2026-12-03 08:45", "FAILED"],
    ]


def test_per_position_bars_for_every_run_and_speed_levels(page):
    dom, _ = page
    runs = dom.find("details", cls="run-positions")
    spec_runs = [r for r in fleet() if r["acceptance"]["per_position_acceptance"]]
    assert len(runs) == len(spec_runs)
    assert "open" in runs[0].attrs and not any("open" in r.attrs for r in runs[1:])
    assert [len(r.find("rect", cls="bar")) for r in runs] == [
        len(r["acceptance"]["per_position_acceptance"])
        for r in sorted(spec_runs, key=lambda r: r["started_at"], reverse=True)
    ]
    (speed,) = dom.find("section", id="speed")
    charts = speed.find("svg")
    assert len(charts) == 2
    notes = [t.all_text() for t in charts[1].find("text", cls="note")]
    assert notes == ["1.85x", "1.51x", "0.94x FAIL"]
    legend = charts[1].find("g", cls="legend")[0].all_text()
    assert "serving before (20261129-eagle3-k3-3c4d)" in legend and "new (20261202" in legend


def read_png(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and RGB rows of an 8-bit RGB/RGBA PNG (stdlib only)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w, h, bpp = 8, b"", 0, 0, 3
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6), (depth, colour)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        start = y * (stride + 1)
        f, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(v for i, v in enumerate(line) if i % bpp < 3))
        prev = line
    return w, h, rows


def test_screenshot_has_the_size_and_no_blank_regions(page):
    _, png = page
    w, h, rows = read_png(png)
    assert (w, h) == (int(WIDTH * SCALE), int(HEIGHT * SCALE))
    bands = 12
    band_h = h // bands
    ink, red = [], 0
    for b in range(bands):
        n = 0
        for row in rows[b * band_h : (b + 1) * band_h]:
            for i in range(0, len(row), 3):
                r, g, bl = row[i], row[i + 1], row[i + 2]
                if r + g + bl < 600:
                    n += 1
                if r > 180 and g < 90 and bl < 90:
                    red += 1
        ink.append(n / (band_h * w))
    # The page (header, tables, plots) fills the first bands; what is past its end is white.
    used = [i for i, v in enumerate(ink) if v > 0.01]
    assert used[:6] == list(range(6)), [f"{v:.3f}" for v in ink]
    assert red > 50  # the failed runs' red crosses and bars, the FAIL rows
    assert max(ink) < 0.9  # not one solid block (a page that failed to render)


def test_png_reader_sees_a_difference():
    """The screenshot check can fail: a blank image has no ink."""
    raw = b"".join(b"\x00" + b"\xff\xff\xff" * 4 for _ in range(3))

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + body))
        return struct.pack(">I", len(body)) + kind + body + crc

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 3, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    assert plots.nice_ticks(0.82, 2.47) == [0.5, 1.0, 1.5, 2.0, 2.5]
    path = Path(__file__).parent / ".blank-test.png"
    try:
        path.write_bytes(png)
        w, h, rows = read_png(path)
    finally:
        path.unlink()
    assert (w, h) == (4, 3) and all(row == b"\xff" * 12 for row in rows)
