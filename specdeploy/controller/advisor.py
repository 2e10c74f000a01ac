"""The k advisor: predicted EAGLE-3 speed-up for every num_speculative_tokens at each level.

From what a serving node already shows, without a restart:

* the per-position acceptance at the deployed k (``accepted_i / drafts`` from /metrics),
* the output tokens/s with speculation at each concurrency level (a short measurement now),
* the output tokens/s without speculation at the same levels (the node's baseline: history,
  a baseline start, or the operator's figures),

it predicts, per level ``c`` and for every k from 1 to ``--k-max``::

    step_nospec(c)   = c / tps_nospec(c)                       (measured)
    step_spec(c, K)  = c * (1 + sum(r[:K])) / tps_spec(c)      (measured at the deployed K)
    target(T)        = a + e * E[distinct experts](T) + t * T  (fitted to step_nospec over c)
    E[distinct](T)   = E * (1 - (1 - top_k / E) ** T)          (MoESD, arXiv 2505.19645)
    overhead(c)      = step_spec(c, K) - target(c * (K + 1))      (drafting, sampling, ...)
    draft(c)         = (1 - FIXED_SHARE) * overhead(c) / K          (per drafter step)
    step_spec(c, k)  = target(c * (k + 1)) + FIXED_SHARE * overhead(c) + k * draft(c)
    speed_up(c, k)   = (1 + sum(r[:k])) * step_nospec(c) / step_spec(c, k)

FIXED_SHARE (0.25): the part of the speculative overhead that does not scale with k,
calibrated on the two H200 recordings (docs/advisor.md).

Smaller k use the measured rates of their positions (a drafter's position i does not depend
on later ones); larger k continue the last two positions' ratio and are marked extrapolated.
The recommended k of a level is the one with the highest predicted speed-up, or ``off`` when
none beats speculation off. The model, its sources and limits: docs/advisor.md.

    python -m specdeploy.controller.advisor --result CHECK_RESULT.json [--experts 64 --top-k 8]
    python -m specdeploy.controller.advisor --metrics METRICS.txt --model NAME \\
        --spec-file THROUGHPUT.json (--baseline-file F | --baseline-tps 1=500,8=1900 |
        --history DB --node N [--parallel P] [--hardware H]) [--k-max 8] [--json]
    python -m specdeploy.controller.advisor --per-position 0.84,0.61,0.45 \\
        --spec-tps 1=526,8=2415 --baseline-tps 1=501,8=1943 --experts 64 --top-k 8

Exit codes: 0 a table, 2 bad or missing input (one line naming it).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from specdeploy.node import cli, jsontext, metrics

SCHEMA = "specdeploy.advice/1"
# Share of a step's speculative overhead that does not shrink with k (rejection sampling, the
# drafter's pass over the accepted tokens, scheduling): 0.25 predicts the other k's recorded
# speed-ups best on both H200 recordings (mean |log error| 0.158 and 0.127; 0: 0.175, 0.196).
FIXED_SHARE = 0.25


class AdviceInputError(ValueError):
    pass


def distinct_experts(n_experts: int, top_k: int, tokens: float) -> float:
    """Expected distinct experts ``tokens`` tokens are routed to (uniform, independent routing)."""
    if n_experts <= 0 or top_k <= 0 or tokens <= 0:
        return 0.0
    return n_experts * (1.0 - (1.0 - top_k / n_experts) ** tokens)


@dataclass(frozen=True)
class TargetModel:
    """Target forward-pass time over ``T`` tokens: a + e * distinct(T) + t * T (seconds)."""

    a: float
    e: float
    t: float
    n_experts: int
    top_k: int
    how: str  # how it was obtained (fit over levels, or an assumption)

    def step_s(self, tokens: float) -> float:
        return (
            self.a + self.e * distinct_experts(self.n_experts, self.top_k, tokens) + self.t * tokens
        )


def _solve(rows: list[list[float]], ys: list[float]) -> list[float] | None:
    """Least squares via the normal equations (tiny systems; None when singular)."""
    n = len(rows[0])
    m = [[sum(r[i] * r[j] for r in rows) for j in range(n)] for i in range(n)]
    v = [sum(r[i] * y for r, y in zip(rows, ys, strict=True)) for i in range(n)]
    for col in range(n):
        piv = max(range(col, n), key=lambda i: abs(m[i][col]))
        if abs(m[piv][col]) < 1e-18:
            return None
        m[col], m[piv] = m[piv], m[col]
        v[col], v[piv] = v[piv], v[col]
        for i in range(n):
            if i != col:
                f = m[i][col] / m[col][col]
                m[i] = [a - f * b for a, b in zip(m[i], m[col], strict=True)]
                v[i] -= f * v[col]
    return [v[i] / m[i][i] for i in range(n)]


def fit_target(step_nospec: dict[int, float], n_experts: int, top_k: int) -> TargetModel:
    """Fit a, e, t (all >= 0) to the no-speculation step times of the measured levels; with
    fewer levels than terms, the best non-negative subset of terms that the levels determine."""
    basis = {
        "a": lambda c: 1.0,
        "e": lambda c: distinct_experts(n_experts, top_k, c),
        "t": lambda c: float(c),
    }
    names = ["a", "e", "t"] if n_experts > 0 else ["a", "t"]
    levels = sorted(step_nospec)
    best: tuple[float, dict[str, float]] | None = None
    for size in range(min(len(names), len(levels)), 0, -1):
        for subset in itertools.combinations(names, size):
            rows = [[basis[n](c) for n in subset] for c in levels]
            coef = _solve(rows, [step_nospec[c] for c in levels])
            if coef is None or any(x < 0 for x in coef):
                continue
            params = dict(zip(subset, coef, strict=True))
            err = sum(
                (sum(params.get(n, 0.0) * basis[n](c) for n in names) - step_nospec[c]) ** 2
                for c in levels
            )
            if best is None or err < best[0] - 1e-15:
                best = (err, params)
        if best is not None and size == min(len(names), len(levels)):
            break
    if best is None:
        raise AdviceInputError("no-speculation step times do not fit any target model")
    p = best[1]
    terms = "+".join(sorted(p)) or "-"
    how = f"fitted to {len(levels)} level(s) ({terms})"
    return TargetModel(p.get("a", 0.0), p.get("e", 0.0), p.get("t", 0.0), n_experts, top_k, how)


def extend_rates(rates: list[float], k_max: int) -> tuple[list[float], int]:
    """Rates for positions 0..k_max-1: measured ones, then the last two positions' ratio
    continued (geometric); returns (rates, number measured)."""
    out = list(rates[:k_max])
    ratio = rates[-1] / rates[-2] if len(rates) >= 2 and rates[-2] > 0 else 0.8
    ratio = min(max(ratio, 0.0), 1.0)
    while len(out) < k_max:
        out.append((out[-1] if out else 0.5) * ratio)
    return out, min(len(rates), k_max)


@dataclass
class Prediction:
    concurrency: int
    k: int
    speed_up: float
    extrapolated: bool
    measured: bool  # the deployed k: the measured speed-up itself

    def to_dict(self) -> dict[str, object]:
        return {
            "k": self.k,
            "speed_up": round(self.speed_up, 4),
            "extrapolated": self.extrapolated,
            "measured": self.measured,
        }


@dataclass
class Advice:
    deployed_k: int
    rates: list[float]
    target: TargetModel
    levels: dict[int, list[Prediction]] = field(default_factory=dict)
    draft_s: dict[int, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    fixed_share: float = FIXED_SHARE

    def recommended(self, c: int) -> int:
        """Best k at level c; 0 when no k beats speculation off."""
        best = max(self.levels[c], key=lambda p: p.speed_up)
        return best.k if best.speed_up > 1.0 else 0

    def to_dict(self) -> dict[str, object]:
        return {
            "schema": SCHEMA,
            "deployed_k": self.deployed_k,
            "per_position_acceptance": [round(r, 4) for r in self.rates],
            "fixed_share": self.fixed_share,
            "target_model": {
                "a_s": self.target.a,
                "expert_s": self.target.e,
                "token_s": self.target.t,
                "n_experts": self.target.n_experts,
                "top_k": self.target.top_k,
                "how": self.target.how,
            },
            "levels": [
                {
                    "concurrency": c,
                    "draft_step_s": round(self.draft_s[c], 7),
                    "recommended_k": self.recommended(c),
                    "predictions": [p.to_dict() for p in preds],
                }
                for c, preds in sorted(self.levels.items())
            ],
            "notes": self.notes,
        }


def advise(
    rates: list[float],
    spec_tps: dict[int, float],
    nospec_tps: dict[int, float],
    *,
    n_experts: int = 0,
    top_k: int = 0,
    k_max: int | None = None,
    fixed_share: float = FIXED_SHARE,
) -> Advice:
    """The table (see the module docstring). ``rates``: per-position acceptance at the deployed
    k = len(rates); the tps maps: output tokens/s by concurrency level."""
    if not rates:
        raise AdviceInputError(
            "per-position acceptance unavailable: the advisor needs the per-position counters"
        )
    if any(not 0 <= r <= 1 for r in rates):
        raise AdviceInputError(f"per-position acceptance {rates}: want fractions in [0, 1]")
    levels = sorted(set(spec_tps) & set(nospec_tps))
    if not levels:
        raise AdviceInputError(
            f"no level measured both with speculation {sorted(spec_tps)} and without "
            f"{sorted(nospec_tps)}"
        )
    if not 0 <= fixed_share < 1:
        raise AdviceInputError(f"fixed share {fixed_share}: want a fraction in [0, 1)")
    if (n_experts > 0) != (top_k > 0) or top_k > n_experts:
        raise AdviceInputError(f"experts {n_experts} / top-k {top_k}: give both, top-k <= experts")
    deployed = len(rates)
    k_max = k_max or max(deployed + 2, 5)
    all_rates, n_measured = extend_rates(rates, k_max)
    step_nospec = {c: c / nospec_tps[c] for c in levels}
    target = fit_target(step_nospec, n_experts, top_k)
    adv = Advice(deployed, list(rates), target, fixed_share=fixed_share)
    if n_experts == 0:
        adv.notes.append("dense target assumed (no --experts): verification cost grows per token")
    for c in levels:
        per_step = 1.0 + sum(rates)
        measured_step = c * per_step / spec_tps[c]
        t_deployed = target.step_s(c * (deployed + 1))
        overhead = max(0.0, measured_step - t_deployed)
        fixed = fixed_share * overhead
        draft = (overhead - fixed) / deployed
        adv.draft_s[c] = draft
        preds = []
        for k in range(1, k_max + 1):
            step = target.step_s(c * (k + 1)) + fixed + k * draft
            if k == deployed:
                step = measured_step  # the measurement itself, also when the fit undershoots
            su = (1.0 + sum(all_rates[:k])) * step_nospec[c] / step
            preds.append(Prediction(c, k, su, k > n_measured, k == deployed))
        adv.levels[c] = preds
    return adv


# --------------------------------------------------------------------------- inputs


def _level_map(text: str, what: str) -> dict[int, float]:
    try:
        out = {}
        for part in text.split(","):
            c, _, v = part.partition("=")
            out[int(c)] = float(v)
        if not out or any(c < 1 or not 0 < v < math.inf for c, v in out.items()):
            raise ValueError
        return out
    except ValueError:
        raise AdviceInputError(
            f"{what} {text!r}: want LEVEL=TPS pairs, e.g. 1=500,8=1900"
        ) from None


def _levels_file(path: str) -> tuple[dict[int, float], bool | None]:
    from specdeploy.node import speed  # node code, stdlib only

    try:
        f = speed.read_levels_file(path)
    except speed.SpeedInputError as e:
        raise AdviceInputError(str(e)) from None
    return f.levels, f.speculative


def rates_from_metrics(path: str, model: str | None) -> list[float]:
    try:
        snap = metrics.snapshot(cli.read_text("--metrics", path), model)
    except cli.PathError as e:
        raise AdviceInputError(str(e)) from None
    except metrics.MetricsError as e:
        raise AdviceInputError(f"--metrics {path}: {e}") from None
    if not snap.present or snap.num_drafts <= 0:
        raise AdviceInputError(f"{path}: no speculative drafts for model {model!r}")
    if not snap.accepted_per_pos:
        raise AdviceInputError(
            f"{path}: per-position acceptance unavailable (no "
            f"{metrics.ACCEPTED_PER_POS}); the advisor needs it"
        )
    return _rates(f"--metrics {path}", [a / snap.num_drafts for a in snap.accepted_per_pos])


def _rates(where: str, values: object) -> list[float]:
    """Per-position acceptance rates: a non-empty list of finite numbers (advise() checks
    that each is a fraction)."""
    if not isinstance(values, list) or not values:
        raise AdviceInputError(f"{where}: per-position acceptance unavailable")
    out = []
    for i, v in enumerate(values):
        try:
            x = cli.finite(f"{where}: position {i}", v)
        except ValueError as e:
            raise AdviceInputError(str(e)) from None
        out.append(x)
    return out


def inputs_from_result(path: str) -> tuple[list[float], dict[int, float], dict[int, float]]:
    try:
        d = jsontext.parse_object(cli.read_text("--result", path), f"--result {path}")
    except (cli.PathError, ValueError) as e:
        raise AdviceInputError(str(e)) from None
    acc = d.get("acceptance") if isinstance(d.get("acceptance"), dict) else {}
    rates = acc.get("per_position_acceptance")
    if not rates:
        raise AdviceInputError(f"{path}: per-position acceptance unavailable in this result")
    spec: dict[int, float] = {}
    base: dict[int, float] = {}
    sp = d.get("speed") if isinstance(d.get("speed"), dict) else {}
    for lv in sp.get("levels") or []:
        if not isinstance(lv, dict) or lv.get("requests") == 0:
            continue
        tps, bl, c = lv.get("output_tps"), lv.get("baseline_tps"), lv.get("concurrency")
        if tps and bl and isinstance(c, int):
            try:
                spec[c] = cli.finite(f"{path}: c={c} output_tps", tps, positive=True)
                base[c] = cli.finite(f"{path}: c={c} baseline_tps", bl, positive=True)
            except ValueError as e:
                raise AdviceInputError(str(e)) from None
    if not spec:
        raise AdviceInputError(f"{path}: no level with both a throughput and a baseline")
    return _rates(f"--result {path}", rates), spec, base


def render(adv: Advice, title: str = "") -> str:
    ks = [p.k for p in next(iter(adv.levels.values()))]
    head = f"{'c':>4}  " + "  ".join(f"{'k=' + str(k):>7}" for k in ks) + "  recommended"
    lines = []
    if title:
        lines.append(title)
    lines.append(
        f"deployed k={adv.deployed_k}, per-position acceptance "
        + "/".join(f"{r:.2f}" for r in adv.rates)
        + f"; target model {adv.target.how}"
    )
    lines.append(head)
    for c, preds in sorted(adv.levels.items()):
        cells = []
        for p in preds:
            mark = "*" if p.measured else ("~" if p.extrapolated else " ")
            cells.append(f"{p.speed_up:>6.2f}{mark}")
        rec = adv.recommended(c)
        lines.append(f"{c:>4}  " + "  ".join(cells) + f"  {'off' if rec == 0 else 'k=' + str(rec)}")
    lines.append("* measured at the deployed k   ~ extrapolated (acceptance beyond the deployed k)")
    lines += [f"note: {n}" for n in adv.notes]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m specdeploy.controller.advisor", description=__doc__.split("\n")[0]
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--result", help="a check result JSON (speed levels with baselines)")
    src.add_argument("--metrics", help="/metrics text of the serving node (cumulative counters)")
    src.add_argument("--per-position", help="per-position acceptance, e.g. 0.84,0.61,0.45")
    p.add_argument("--model", help="served model name in /metrics (default: all)")
    p.add_argument("--spec-file", help="throughput/1 JSON measured with speculation now")
    p.add_argument("--spec-tps", help="with speculation: LEVEL=TPS pairs")
    p.add_argument("--baseline-file", help="throughput/1 or result JSON without speculation")
    p.add_argument("--baseline-tps", help="without speculation: LEVEL=TPS pairs")
    p.add_argument("--history", help="controller history DB: the node's no-spec baseline levels")
    p.add_argument("--node")
    p.add_argument("--parallel", default=None)
    p.add_argument("--hardware", default=None)
    p.add_argument("--experts", type=int, default=0, help="routed experts (0: dense target)")
    p.add_argument("--top-k", type=int, default=0, help="experts per token")
    p.add_argument("--target-config", help="the target's config.json (experts and top-k)")
    p.add_argument("--k-max", type=int, default=None)
    p.add_argument(
        "--fixed-share",
        type=cli.finite_float,
        default=FIXED_SHARE,
        help=f"share of the speculative overhead that does not scale with k ({FIXED_SHARE})",
    )
    p.add_argument("--title", default="")
    p.add_argument("--json", action="store_true")
    return p


def _experts_from_config(path: str) -> tuple[int, int]:
    try:
        cfg = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise AdviceInputError(f"{path}: unreadable ({e})") from None
    cfg = cfg.get("text_config", cfg) if isinstance(cfg, dict) else {}
    n = cfg.get("n_routed_experts") or cfg.get("num_experts") or cfg.get("num_local_experts") or 0
    k = cfg.get("num_experts_per_tok") or cfg.get("moe_topk") or 0
    return int(n), int(k)


def gather(a: argparse.Namespace) -> tuple[list[float], dict[int, float], dict[int, float]]:
    if a.result:
        return inputs_from_result(a.result)
    if a.metrics:
        rates = rates_from_metrics(a.metrics, a.model)
    else:
        try:
            values = [float(x) for x in a.per_position.split(",")]
        except ValueError:
            raise AdviceInputError(f"--per-position {a.per_position!r}: numbers") from None
        rates = _rates(f"--per-position {a.per_position}", values)
    if a.spec_file:
        spec, speculative = _levels_file(a.spec_file)
        if speculative is False:
            raise AdviceInputError(f"{a.spec_file}: measured without speculation")
    elif a.spec_tps:
        spec = _level_map(a.spec_tps, "--spec-tps")
    else:
        raise AdviceInputError("give --spec-file or --spec-tps (throughput with speculation)")
    if a.baseline_file:
        base, speculative = _levels_file(a.baseline_file)
        if speculative:
            raise AdviceInputError(f"{a.baseline_file}: measured with speculation on")
    elif a.baseline_tps:
        base = _level_map(a.baseline_tps, "--baseline-tps")
    elif a.history:
        from specdeploy.controller import history

        if not a.node or not a.model:
            raise AdviceInputError("--history needs --node and --model")
        if not Path(a.history).exists():
            raise AdviceInputError(f"--history {a.history}: no such file")
        try:
            base = history.baseline_levels(a.history, a.node, a.model, a.parallel, a.hardware)
        except history.HistoryError as e:  # a corrupt or non-SQLite file
            raise AdviceInputError(f"--history {e}") from None
        if not base:
            raise AdviceInputError(f"--history {a.history}: no no-spec baseline for {a.node}")
    else:
        raise AdviceInputError("give --baseline-file, --baseline-tps or --history")
    return rates, spec, base


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        rates, spec, base = gather(a)
        experts, top_k = a.experts, a.top_k
        if a.target_config:
            experts, top_k = _experts_from_config(a.target_config)
        adv = advise(
            rates,
            spec,
            base,
            n_experts=experts,
            top_k=top_k,
            k_max=a.k_max,
            fixed_share=a.fixed_share,
        )
    except AdviceInputError as e:
        print(f"advisor: error: {e}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(adv.to_dict(), indent=1))
    else:
        print(render(adv, a.title))
    return 0


if __name__ == "__main__":
    sys.exit(main())
