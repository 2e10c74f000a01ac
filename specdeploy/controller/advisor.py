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
    draft(c)         = overhead(c) / (FIXED_STEPS + K)              (per drafter step)
    step_spec(c, k)  = target(c * (k + 1)) + (FIXED_STEPS + k) * draft(c)
    speed_up(c, k)   = (1 + sum(r[:k])) * step_nospec(c) / step_spec(c, k)

FIXED_STEPS (1.5): what a speculative step costs beyond its k drafter steps whatever k is (the
drafter's first pass over the verified tokens, rejection sampling, bookkeeping), in drafter
steps, calibrated on the two H200 recordings (docs/advisor.md). The earlier model took a fixed
SHARE of the deployed K's overhead (``--fixed-share``), which makes the drafter step of the
same node depend on which K was deployed (75% of the overhead on one step at K=1, 15% per step
at K=5): larger k came out 13-25% low.

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
import dataclasses
import itertools
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from specdeploy.node import cli, jsontext
from specdeploy.node.validation import metrics

SCHEMA = "specdeploy.advice/1"
# What a speculative step costs beyond its k drafter steps, whatever k (the drafter's first pass
# over the verified tokens, rejection sampling, scheduling), in drafter steps: 1.5 predicts the
# other k's recorded speed-ups best on both H200 recordings (mean |log error| 0.099 and 0.142;
# 1: 0.104, 0.143; 2: 0.100, 0.144; the old fixed share 0.25: 0.127, 0.158).
FIXED_STEPS = 1.5
# The earlier model (--fixed-share): a fixed share of the deployed K's overhead.
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

    token_share: float = 1.0  # share of t that is per token (the rest: per request)

    def step_s(self, tokens: float) -> float:
        return (
            self.a + self.e * distinct_experts(self.n_experts, self.top_k, tokens) + self.t * tokens
        )

    def verify_s(self, c: float, k: int) -> float:
        """A verification pass: c requests of k + 1 tokens each."""
        tokens = c * (k + 1)
        return (
            self.a
            + self.e * distinct_experts(self.n_experts, self.top_k, tokens)
            + self.t * c * (1 + self.token_share * k)
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
    fixed_share: float | None = None
    fixed_steps: float | None = FIXED_STEPS
    # per measured level: the no-speculation step (s) and the k-independent overhead (s);
    # what speed_up_at interpolates between levels
    step_nospec: dict[int, float] = field(default_factory=dict)
    fixed_s: dict[int, float] = field(default_factory=dict)
    all_rates: list[float] = field(default_factory=list)

    def _between(self, c: float, values: dict[int, float]) -> float:
        """Linear interpolation in log(c) between the measured levels; flat outside them."""
        lv = sorted(values)
        if c <= lv[0]:
            return values[lv[0]]
        if c >= lv[-1]:
            return values[lv[-1]]
        for lo, hi in itertools.pairwise(lv):
            if lo <= c <= hi:
                w = (math.log(c) - math.log(lo)) / (math.log(hi) - math.log(lo))
                return values[lo] * (1 - w) + values[hi] * w
        raise AssertionError("unreachable")

    def speed_up_at(self, c: float, k: int) -> float:
        """Predicted speed-up of k at any batch size c (k = 0: 1.0). At a measured level it is
        the table's cell; between levels the model's target passes at c and c * (k + 1), the
        no-speculation step scaled by the neighbouring levels' measured/fitted ratio, and their
        overheads interpolated in log(c); beyond the outermost levels those of the nearest one."""
        if k == 0:
            return 1.0
        if int(c) == c and int(c) in self.levels:
            return self.levels[int(c)][k - 1].speed_up
        ratio = self._between(
            c, {lv: s / self.target.step_s(lv) for lv, s in self.step_nospec.items()}
        )
        nospec = ratio * self.target.step_s(c)
        step = (
            self.target.verify_s(c, k)
            + self._between(c, self.fixed_s)
            + k * self._between(c, self.draft_s)
        )
        return (1.0 + sum(self.all_rates[:k])) * nospec / step

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
            "fixed_steps": self.fixed_steps,
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


@dataclass(frozen=True)
class Mix:
    """The one k that maximises the time-weighted mean speed-up of a load profile, and what a
    schedule (vLLM with dynamic k) would gain over it at each level."""

    shares: dict[int, float]  # normalised share of time per level
    k: int  # 0: off
    mean_speed_up: float
    per_level: dict[int, float]  # the chosen k's speed-up per level (1.0 where off)
    best_per_level: dict[int, tuple[int, float]]  # (best k or 0, its speed-up) per level
    schedule_mean: float  # the time-weighted mean with the best k at every level

    def to_dict(self) -> dict[str, object]:
        return {
            "shares": {str(c): round(w, 4) for c, w in sorted(self.shares.items())},
            "k": self.k,
            "mean_speed_up": round(self.mean_speed_up, 4),
            "per_level": {str(c): round(v, 4) for c, v in sorted(self.per_level.items())},
            "dynamic_k_per_level": {
                str(c): {"k": k, "speed_up": round(v, 4), "gain": round(v / self.per_level[c], 4)}
                for c, (k, v) in sorted(self.best_per_level.items())
            },
            "dynamic_k_mean_speed_up": round(self.schedule_mean, 4),
        }


def load_mix(adv: Advice, profile: dict[int, float] | None = None) -> Mix:
    """The one k (or off) with the highest time-weighted mean predicted speed-up over the load
    profile (share of time at each level; None or {}: equal shares over the measured levels).
    A level of the profile the advice did not measure is an error."""
    levels = sorted(adv.levels)
    prof = dict(profile or {})
    if not prof:
        prof = dict.fromkeys(levels, 1.0)
    bad = [c for c, w in prof.items() if not (isinstance(w, int | float) and math.isfinite(w))]
    if bad or any(w < 0 for w in prof.values()) or sum(prof.values()) <= 0:
        raise AdviceInputError(f"load profile {prof}: want shares >= 0 with a positive sum")
    missing = sorted(set(prof) - set(levels))
    if missing:
        raise AdviceInputError(
            f"load profile levels {missing} were not measured (measured: {levels})"
        )
    total = sum(prof.values())
    shares = {c: w / total for c, w in prof.items() if w > 0}
    ks = [p.k for p in adv.levels[levels[0]]]

    def su(c: int, k: int) -> float:
        return 1.0 if k == 0 else adv.levels[c][k - 1].speed_up

    best_k, best_mean = 0, 1.0
    for k in ks:
        mean = sum(w * su(c, k) for c, w in shares.items())
        if mean > best_mean:
            best_k, best_mean = k, mean
    per_level = {c: su(c, best_k) for c in shares}
    best = {}
    for c in shares:
        k = adv.recommended(c)
        best[c] = (k, su(c, k))
    sched_mean = sum(w * best[c][1] for c, w in shares.items())
    return Mix(shares, best_k, best_mean, per_level, best, sched_mean)


def render_mix(mix: Mix) -> str:
    share = ", ".join(f"c={c} {w:.0%}" for c, w in sorted(mix.shares.items()))
    one = "off" if mix.k == 0 else f"k={mix.k}"
    lines = [
        f"load profile (share of time): {share}",
        f"one k for this mix (a vLLM without dynamic k): {one}, time-weighted mean speed-up "
        f"{mix.mean_speed_up:.2f}x",
        f"with k by batch size (vLLM >= 0.24.0, specdeploy_speculative_schedule): "
        f"{mix.schedule_mean:.2f}x; per level:",
    ]
    for c, (k, v) in sorted(mix.best_per_level.items()):
        lines.append(
            f"  c={c}: {'off' if k == 0 else f'k={k}'} {v:.2f}x against {mix.per_level[c]:.2f}x "
            f"with {one} ({v / mix.per_level[c] - 1:+.0%})"
        )
    return "\n".join(lines)


def advise(
    rates: list[float],
    spec_tps: dict[int, float],
    nospec_tps: dict[int, float],
    *,
    n_experts: int = 0,
    top_k: int = 0,
    k_max: int | None = None,
    fixed_share: float | None = None,
    token_share: float = 1.0,
    fixed_steps: float = FIXED_STEPS,
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
    if fixed_share is not None and not 0 <= fixed_share < 1:
        raise AdviceInputError(f"fixed share {fixed_share}: want a fraction in [0, 1)")
    if not 0 <= fixed_steps < 100:
        raise AdviceInputError(f"fixed steps {fixed_steps}: want a number in [0, 100)")
    if (n_experts > 0) != (top_k > 0) or top_k > n_experts:
        raise AdviceInputError(f"experts {n_experts} / top-k {top_k}: give both, top-k <= experts")
    deployed = len(rates)
    k_max = k_max or max(deployed + 2, 5)
    all_rates, n_measured = extend_rates(rates, k_max)
    step_nospec = {c: c / nospec_tps[c] for c in levels}
    target = dataclasses.replace(fit_target(step_nospec, n_experts, top_k), token_share=token_share)
    adv = Advice(
        deployed,
        list(rates),
        target,
        fixed_share=fixed_share,
        fixed_steps=None if fixed_share is not None else fixed_steps,
        all_rates=all_rates,
    )
    if n_experts == 0:
        adv.notes.append("dense target assumed (no --experts): verification cost grows per token")
    for c in levels:
        per_step = 1.0 + sum(rates)
        measured_step = c * per_step / spec_tps[c]
        t_deployed = target.verify_s(c, deployed)
        overhead = max(0.0, measured_step - t_deployed)
        if fixed_share is not None:  # the earlier model: a share of the deployed K's overhead
            fixed = fixed_share * overhead
            draft = (overhead - fixed) / deployed
        else:  # the fixed part as a number of drafter steps: overhead = (f + K) * draft
            draft = overhead / (fixed_steps + deployed)
            fixed = fixed_steps * draft
        adv.draft_s[c] = draft
        adv.fixed_s[c] = fixed
        adv.step_nospec[c] = step_nospec[c]
        preds = []
        for k in range(1, k_max + 1):
            step = target.verify_s(c, k) + fixed + k * draft
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
    from specdeploy.node.validation import speed  # node code, stdlib only

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
        default=None,
        help=f"the earlier model: this share of the deployed k's overhead does not scale with k "
        f"(was {FIXED_SHARE}); default: --fixed-steps",
    )
    p.add_argument(
        "--fixed-steps",
        type=cli.finite_float,
        default=FIXED_STEPS,
        help=f"a speculative step's cost beyond its k drafter steps, in drafter steps "
        f"({FIXED_STEPS})",
    )
    p.add_argument(
        "--load-profile",
        default=None,
        help="share of time per level, e.g. 1=0.4,4=0.2,16=0.2,64=0.2 (validation_load_profile;"
        " default: equal shares over the measured levels): the one k for that mix and what"
        " dynamic k would gain per level",
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
            base, sources = history.baseline_levels_with_sources(
                a.history, a.node, a.model, a.parallel, a.hardware
            )
        except history.HistoryError as e:  # a corrupt or non-SQLite file
            raise AdviceInputError(f"--history {e}") from None
        if not base:
            raise AdviceInputError(f"--history {a.history}: no no-spec baseline for {a.node}")
        a.notes = history.mixing_notes(sources)
        for flag, value in (("--parallel", a.parallel), ("--hardware", a.hardware)):
            if value is None:
                a.notes.append(f"the history's baseline was not matched by {flag}")
    else:
        raise AdviceInputError("give --baseline-file, --baseline-tps or --history")
    return rates, spec, base


def advice_from_args(a: argparse.Namespace) -> Advice:
    """The Advice for parsed CLI arguments (also the schedule CLI's input)."""
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
        fixed_steps=a.fixed_steps,
    )
    adv.notes += getattr(a, "notes", [])
    return adv


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        adv = advice_from_args(a)
    except AdviceInputError as e:
        print(f"advisor: error: {e}", file=sys.stderr)
        return 2
    try:
        profile = level_share_map(a.load_profile) if a.load_profile else None
        mix = load_mix(adv, profile)
    except AdviceInputError as e:
        print(f"advisor: error: {e}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps({**adv.to_dict(), "load_mix": mix.to_dict()}, indent=1))
    else:
        print(render(adv, a.title))
        print(render_mix(mix))
    return 0


def level_share_map(text: str) -> dict[int, float] | None:
    """LEVEL=SHARE pairs, or a JSON object {"LEVEL": SHARE} ({}: None, equal shares)."""
    try:
        out: dict[int, float] = {}
        if text.strip().startswith("{"):
            obj = json.loads(text)
            if not isinstance(obj, dict):
                raise ValueError
            out = {int(c): float(v) for c, v in obj.items()}
            if not out:
                return None
            if any(c < 1 or not math.isfinite(v) or v < 0 for c, v in out.items()):
                raise ValueError
            return out
        for part in text.split(","):
            c, _, v = part.partition("=")
            out[int(c)] = float(v)
        if not out or any(c < 1 or not math.isfinite(v) or v < 0 for c, v in out.items()):
            raise ValueError
        return out
    except ValueError:
        raise AdviceInputError(
            f"--load-profile {text!r}: want LEVEL=SHARE pairs (1=0.5,16=0.5) or a JSON object"
        ) from None


if __name__ == "__main__":
    sys.exit(main())
