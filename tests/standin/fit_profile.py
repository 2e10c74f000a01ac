#!/usr/bin/env python3
"""Fit the stand-in's step-time model (standin_timing.Timing) to recorded GPU throughput.

    python3 tests/standin/fit_profile.py [DIR]   # default: tests/fixtures/moe-speedup-h200

Reads the ``bench-*.json`` files (real vLLM 0.20.2 on one H200, see that directory's README):
the no-speculation runs and the k = 1, 3, 5 runs of the well-accepting drafter. Minimises the
squared log error of the modelled output tokens/s at every recorded (k, c) with Nelder-Mead
(standard library only), then prints the parameters (paste them into standin_timing.DEFAULT)
and the modelled against the measured speed-ups.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from standin_timing import Timing

HERE = Path(__file__).resolve().parent
DEFAULT_DIR = HERE.parent / "fixtures" / "moe-speedup-h200"
# Runs of the drafter that accepts (MAL 1.8-3.6); bench-spec3.json / bench-nospec.json are the
# low-acceptance model (a different target scale), kept for the low-acceptance check only.
NOSPEC = ("bench-nospec-b.json", "bench-nospec-c25448.json", "bench-nospec-c31227.json")
SPEC = {1: ("bench-spec1-b.json",), 3: ("bench-spec3-b.json", "bench-spec3-c.json"),
        5: ("bench-spec5-c.json",)}  # fmt: skip


def load(d: Path) -> tuple[dict[int, float], dict[int, dict[int, float]], dict[int, list[float]]]:
    """(no-spec median tok/s by c, spec median tok/s by k and c, per-position rates by k)."""
    nospec: dict[int, list[float]] = {}
    for name in NOSPEC:
        for c, v in json.loads((d / name).read_text()).items():
            nospec.setdefault(int(c), []).append(float(v["tok_s"]))
    spec: dict[int, dict[int, list[float]]] = {}
    rates: dict[int, list[list[float]]] = {}
    for k, names in SPEC.items():
        for name in names:
            for c, v in json.loads((d / name).read_text()).items():
                spec.setdefault(k, {}).setdefault(int(c), []).append(float(v["tok_s"]))
                rates.setdefault(k, []).append([float(x) for x in v["per_pos"]])
    return (
        {c: statistics.median(v) for c, v in nospec.items()},
        {k: {c: statistics.median(v) for c, v in by_c.items()} for k, by_c in spec.items()},
        {k: [statistics.mean(col) for col in zip(*rs, strict=True)] for k, rs in rates.items()},
    )


def loss(t: Timing, nospec, spec, rates) -> float:
    err = 0.0
    for c, tps in nospec.items():
        err += (math.log(t.output_tps(c)) - math.log(tps)) ** 2
    for k, by_c in spec.items():
        for c, tps in by_c.items():
            err += (math.log(t.output_tps(c, k, rates[k])) - math.log(tps)) ** 2
    return err


def nelder_mead(f, x0: list[float], steps: int = 800) -> list[float]:
    n = len(x0)
    pts = [list(x0)] + [[x * (1.3 if i == j else 1.0) for j, x in enumerate(x0)] for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(steps):
        order = sorted(range(n + 1), key=vals.__getitem__)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        centre = [sum(p[j] for p in pts[:-1]) / n for j in range(n)]
        refl = [centre[j] + (centre[j] - pts[-1][j]) for j in range(n)]
        fr = f(refl)
        if fr < vals[0]:
            exp = [centre[j] + 2 * (centre[j] - pts[-1][j]) for j in range(n)]
            fe = f(exp)
            pts[-1], vals[-1] = (exp, fe) if fe < fr else (refl, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = refl, fr
        else:
            con = [centre[j] + 0.5 * (pts[-1][j] - centre[j]) for j in range(n)]
            fc = f(con)
            if fc < vals[-1]:
                pts[-1], vals[-1] = con, fc
            else:
                pts = [pts[0]] + [[pts[0][j] + 0.5 * (p[j] - pts[0][j]) for j in range(n)]
                                  for p in pts[1:]]  # fmt: skip
                vals = [f(p) for p in pts]
    return pts[min(range(n + 1), key=vals.__getitem__)]


def fit(d: Path) -> tuple[Timing, float]:
    nospec, spec, rates = load(d)

    def make(x: list[float]) -> Timing:
        # log-parameters keep every cost positive
        return Timing(*(math.exp(v) for v in x))

    x0 = [math.log(v) for v in (1e-3, 6e-5, 4e-5, 2e-4, 4e-6)]
    best = nelder_mead(lambda x: loss(make(x), nospec, spec, rates), x0)
    t = make(best)
    return t, loss(t, nospec, spec, rates)


def main(argv: list[str]) -> int:
    d = Path(argv[0]) if argv else DEFAULT_DIR
    t, err = fit(d)
    nospec, spec, rates = load(d)
    print(f"fitted to {d} (sum of squared log errors {err:.3f}):")
    for k, v in t.to_dict().items():
        print(f"    {k}={v:.7f}," if isinstance(v, float) else f"    {k}={v},")
    print(f"{'c':>3} {'no-spec tok/s meas/model':>26}  " + "  ".join(
        f"{'k=' + str(k) + ' speed-up meas/model':>24}" for k in sorted(spec)))  # fmt: skip
    for c in sorted(nospec):
        cells = []
        for k in sorted(spec):
            m = spec[k].get(c)
            mod = t.speed_up(c, k, rates[k])
            cells.append(f"{(m / nospec[c]) if m else float('nan'):>15.2f} / {mod:<6.2f}")
        print(f"{c:>3} {nospec[c]:>14.0f} / {t.output_tps(c):<9.0f}  " + "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
