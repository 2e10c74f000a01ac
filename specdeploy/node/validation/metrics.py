"""Speculative-decoding counters from vLLM's Prometheus ``/metrics`` text.

Runs on the node (standard library only).

* :func:`parse_exposition` parses the Prometheus text exposition format (labels in any
  order, escaped label values, comments, ``_created`` series, ``+Inf``/``NaN`` values,
  optional timestamps).
* :func:`snapshot` picks the four spec-decode counters vLLM defines in
  ``v1/spec_decode/metrics.py`` (``SpecDecodingProm``), keeps only the series whose
  ``model_name`` label matches, and sums over the ``engine`` label (per position for the
  per-position counter).
* SGLang (issue 29) has none of vLLM's counters: :func:`snapshot` then reads SGLang's
  (``sglang:spec_verify_calls_total``, ``sglang:generation_tokens_total``,
  ``sglang:num_requests_total``, the gauge ``sglang:spec_num_draft_tokens``) into the same
  shape, see :func:`sglang_snapshot`; per position stays unavailable (SGLang counts none).
* :func:`delta` subtracts two snapshots; a counter that went down (or an engine whose series
  disappeared, or a changed ``_created`` timestamp) raises :class:`CounterReset` instead of
  producing nonsense numbers.
* :class:`SpecDelta` derives the figures with vLLM's own formulas (mean acceptance length
  = 1 + accepted / drafts, draft acceptance rate = accepted / draft tokens, per-position rate
  = accepted_at_position / drafts) and :func:`format_vllm_log_line` prints them exactly as
  vLLM's ``SpecDecodingLogging.log`` does, so the checker can be compared with the engine log.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
SPEC_COUNTERS = (DRAFTS, DRAFT_TOKENS, ACCEPTED, ACCEPTED_PER_POS)
_CREATED = DRAFTS[: -len("_total")] + "_created"
# SGLang 0.5.15's counters (observability/metrics_collector.py:1434-1442, 1635-1649: all three
# counted when a request finishes) and the gauge of its draft tokens per verify (:431-436).
SGL_VERIFY = "sglang:spec_verify_calls_total"
SGL_GENERATED = "sglang:generation_tokens_total"
SGL_REQUESTS = "sglang:num_requests_total"
SGL_DRAFT_TOKENS = "sglang:spec_num_draft_tokens"

LOG_PREFIX = "SpecDecoding metrics: "
# vLLM's format string, verbatim (v1/spec_decode/metrics.py, SpecDecodingLogging.log).
VLLM_LOG_FORMAT = (
    "SpecDecoding metrics: "
    "Mean acceptance length: %.2f, "
    "Accepted throughput: %.2f tokens/s, "
    "Drafted throughput: %.2f tokens/s, "
    "Accepted: %d tokens, "
    "Drafted: %d tokens, "
    "Per-position acceptance rate: %s, "
    "Avg Draft acceptance rate: %.1f%%"
)


class MetricsError(Exception):
    """The metrics text could not be used (malformed, incomplete)."""


class MetricsParseError(MetricsError):
    """A line of the exposition text is malformed."""


class CounterReset(MetricsError):
    """A counter went down between two snapshots: the server restarted in between."""

    def __init__(self, details: list[str]) -> None:
        self.details = details
        super().__init__(
            "counters went down between the two reads (server restarted?): " + "; ".join(details)
        )


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float
    timestamp_ms: int | None = None


_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


def _parse_value(token: str, lineno: int) -> float:
    t = token.strip()
    low = t.lower()
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    if low == "nan":
        return math.nan
    try:
        return float(t)
    except ValueError:
        raise MetricsParseError(f"line {lineno}: bad sample value {token!r}") from None


def _parse_labels(line: str, pos: int, lineno: int) -> tuple[dict[str, str], int]:
    """Parse ``{a="x",b="y"}`` starting at ``line[pos] == '{'``; return labels, next pos."""
    labels: dict[str, str] = {}
    pos += 1
    n = len(line)
    while True:
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos < n and line[pos] == "}":
            return labels, pos + 1
        m = _LABEL_NAME_RE.match(line, pos)
        if not m:
            raise MetricsParseError(f"line {lineno}: bad label name at column {pos + 1}")
        lname = m.group(0)
        pos = m.end()
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos >= n or line[pos] != "=":
            raise MetricsParseError(f"line {lineno}: expected '=' after label {lname!r}")
        pos += 1
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos >= n or line[pos] != '"':
            raise MetricsParseError(f"line {lineno}: label {lname!r} value must be quoted")
        pos += 1
        buf: list[str] = []
        while True:
            if pos >= n:
                raise MetricsParseError(f"line {lineno}: unterminated value of label {lname!r}")
            c = line[pos]
            if c == "\\" and pos + 1 < n:
                nxt = line[pos + 1]
                buf.append(_ESCAPES.get(nxt, "\\" + nxt))
                pos += 2
                continue
            if c == '"':
                pos += 1
                break
            buf.append(c)
            pos += 1
        if lname in labels:
            raise MetricsParseError(f"line {lineno}: label {lname!r} repeated")
        labels[lname] = "".join(buf)
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos < n and line[pos] == ",":
            pos += 1
            continue
        if pos < n and line[pos] == "}":
            return labels, pos + 1
        raise MetricsParseError(f"line {lineno}: expected ',' or '}}' in label set")


def parse_exposition(text: str) -> list[Sample]:
    """Parse Prometheus text exposition (0.0.4; OpenMetrics' ``# EOF`` is a comment)."""
    samples: list[Sample] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _NAME_RE.match(line)
        if not m:
            raise MetricsParseError(f"line {lineno}: bad metric name in {raw[:80]!r}")
        name = m.group(0)
        pos = m.end()
        labels: dict[str, str] = {}
        if pos < len(line) and line[pos] == "{":
            labels, pos = _parse_labels(line, pos, lineno)
        rest = line[pos:].split()
        if not rest:
            raise MetricsParseError(f"line {lineno}: sample {name!r} has no value")
        if len(rest) > 2:
            raise MetricsParseError(f"line {lineno}: trailing garbage after sample {name!r}")
        value = _parse_value(rest[0], lineno)
        ts: int | None = None
        if len(rest) == 2:
            try:
                ts = int(float(rest[1]))
            except ValueError:
                raise MetricsParseError(f"line {lineno}: bad timestamp {rest[1]!r}") from None
        samples.append(Sample(name, labels, value, ts))
    return samples


@dataclass(frozen=True)
class EngineCounters:
    num_drafts: float = 0.0
    num_draft_tokens: float = 0.0
    num_accepted_tokens: float = 0.0
    accepted_per_pos: dict[int, float] = field(default_factory=dict)
    created: float | None = None


@dataclass(frozen=True)
class SpecSnapshot:
    """The four spec-decode counters of one model at one moment, summed over engines."""

    model_name: str | None
    present: bool
    num_drafts: float
    num_draft_tokens: float
    num_accepted_tokens: float
    accepted_per_pos: tuple[float, ...]
    engines: dict[str, EngineCounters]
    timestamp: float = 0.0
    other_models: tuple[str, ...] = ()

    @property
    def num_positions(self) -> int:
        return len(self.accepted_per_pos)

    def to_dict(self) -> dict[str, object]:
        return {
            "model_name": self.model_name,
            "present": self.present,
            "engines": sorted(self.engines),
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "accepted_per_position": list(self.accepted_per_pos),
            "timestamp": self.timestamp,
        }


def snapshot(text: str, model_name: str | None, timestamp: float = 0.0) -> SpecSnapshot:
    """Pick the spec-decode counters of ``model_name`` (all models when None) from ``text``.

    ``present`` is False when no spec-decode counter exists for that model (a server
    started without ``--speculative-config`` exposes none). A partial set (some of the four
    counters missing) raises :class:`MetricsError`.
    """
    samples = parse_exposition(text)
    if not any(s.name in SPEC_COUNTERS for s in samples) and any(
        s.name == SGL_VERIFY for s in samples
    ):
        return sglang_snapshot(samples, model_name, timestamp)
    seen_names: set[str] = set()
    models_seen: set[str] = set()
    eng: dict[str, dict[str, object]] = {}
    for s in samples:
        if s.name not in SPEC_COUNTERS and s.name != _CREATED:
            continue
        mname = s.labels.get("model_name", "")
        models_seen.add(mname)
        if model_name is not None and mname != model_name:
            continue
        engine = s.labels.get("engine", "")
        key = engine if model_name is not None else f"{mname}/{engine}"
        e = eng.setdefault(key, {"pos": {}})
        if s.name == _CREATED:
            e["created"] = s.value
            continue
        seen_names.add(s.name)
        if s.name == ACCEPTED_PER_POS:
            p = s.labels.get("position")
            if p is None or not p.isdigit():
                raise MetricsError(f"{ACCEPTED_PER_POS} sample without a numeric position label")
            pos_map = e["pos"]
            assert isinstance(pos_map, dict)
            pos_map[int(p)] = pos_map.get(int(p), 0.0) + s.value
        else:
            e[s.name] = float(e.get(s.name, 0.0)) + s.value  # type: ignore[arg-type]
    others = tuple(sorted(m for m in models_seen if m != model_name))
    if not seen_names:
        return SpecSnapshot(model_name, False, 0.0, 0.0, 0.0, (), {}, timestamp, others)
    missing = [n for n in (DRAFTS, DRAFT_TOKENS, ACCEPTED) if n not in seen_names]
    if missing:
        raise MetricsError("incomplete spec-decode counters, missing: " + ", ".join(missing))
    engines: dict[str, EngineCounters] = {}
    for key, e in eng.items():
        if not any(n in e for n in (DRAFTS, DRAFT_TOKENS, ACCEPTED)) and not e["pos"]:
            continue
        pos_map = e["pos"]
        assert isinstance(pos_map, dict)
        created = e.get("created")
        engines[key] = EngineCounters(
            float(e.get(DRAFTS, 0.0)),  # type: ignore[arg-type]
            float(e.get(DRAFT_TOKENS, 0.0)),  # type: ignore[arg-type]
            float(e.get(ACCEPTED, 0.0)),  # type: ignore[arg-type]
            dict(pos_map),
            float(created) if isinstance(created, float) else None,
        )
    npos = max(
        (max(ec.accepted_per_pos) + 1 for ec in engines.values() if ec.accepted_per_pos), default=0
    )
    per_pos = tuple(
        sum(ec.accepted_per_pos.get(i, 0.0) for ec in engines.values()) for i in range(npos)
    )
    return SpecSnapshot(
        model_name,
        True,
        sum(ec.num_drafts for ec in engines.values()),
        sum(ec.num_draft_tokens for ec in engines.values()),
        sum(ec.num_accepted_tokens for ec in engines.values()),
        per_pos,
        engines,
        timestamp,
        others,
    )


def sglang_snapshot(
    samples: list[Sample], model_name: str | None, timestamp: float = 0.0
) -> SpecSnapshot:
    """SGLang's counters in vLLM's terms, so every gate and output reads one shape.

    SGLang counts verifies (target forward passes over drafts) and generated tokens, not
    accepted drafts. A request's first token comes from its prefill, every later one from a
    verify, which emits the correct drafts plus one bonus token. So over any interval:

        drafts (vLLM: one per request per speculative step) = verify calls
        accepted drafts = generated tokens - finished requests - verify calls
        mean acceptance length = 1 + accepted / drafts = (generated - requests) / verifies

    which is vLLM's definition (1 + accepted / drafts, the bonus token included) and SGLang's
    own ``accept len`` (log line, ``sglang:spec_accept_length``, ``/server_info``: (correct +
    verifies) / verifies). Tokens a verify produced past ``max_tokens`` are cut and not counted,
    so it can read slightly low (at most k per request). SGLang's per-request ``meta_info``
    ``spec_accept_length`` (completion tokens / verifies) counts the prefill's token too: it is
    higher by 1 / verifies. On the recorded H200 run: (6144 - 72) / 1922 = 3.16, /server_info
    3.20 (tests/fixtures/sglang-0.5.15-h200/metrics-spec.txt). Draft tokens = verifies x
    (num_draft_tokens - 1). Per position: none (unavailable).
    """
    eng: dict[str, dict[str, float]] = {}
    others: set[str] = set()
    for s in samples:
        if s.name not in (SGL_VERIFY, SGL_GENERATED, SGL_REQUESTS, SGL_DRAFT_TOKENS):
            continue
        mname = s.labels.get("model_name", "")
        if model_name is not None and mname != model_name:
            others.add(mname)
            continue
        if not math.isfinite(s.value) or s.value < 0:
            raise MetricsError(f"{s.name} is {s.value!r}")
        key = s.labels.get("engine_type", "") if model_name is not None else mname
        e = eng.setdefault(key, {})
        if s.name == SGL_DRAFT_TOKENS:
            e[s.name] = max(e.get(s.name, 0.0), s.value)
        else:
            e[s.name] = e.get(s.name, 0.0) + s.value
    engines: dict[str, EngineCounters] = {}
    for key, e in eng.items():
        if SGL_VERIFY not in e:
            continue
        missing = [n for n in (SGL_GENERATED, SGL_REQUESTS) if n not in e]
        if missing:
            raise MetricsError("incomplete SGLang counters, missing: " + ", ".join(missing))
        verify = e[SGL_VERIFY]
        accepted = max(0.0, e[SGL_GENERATED] - e[SGL_REQUESTS] - verify)
        per_verify = max(0.0, e.get(SGL_DRAFT_TOKENS, 0.0) - 1)
        engines[key] = EngineCounters(verify, verify * per_verify, accepted, {}, None)
    if not engines:
        return SpecSnapshot(model_name, False, 0.0, 0.0, 0.0, (), {}, timestamp, tuple(others))
    return SpecSnapshot(
        model_name,
        True,
        sum(ec.num_drafts for ec in engines.values()),
        sum(ec.num_draft_tokens for ec in engines.values()),
        sum(ec.num_accepted_tokens for ec in engines.values()),
        (),
        engines,
        timestamp,
        tuple(sorted(others)),
    )


def _ratio(part: float, whole: float) -> float | None:
    """``part / whole``, or None when there is no whole (no drafts, no time): unknown, not 0."""
    return part / whole if whole > 0 else None


@dataclass(frozen=True)
class SpecDelta:
    """Counter increments between two snapshots, with vLLM's derived figures."""

    num_drafts: float
    num_draft_tokens: float
    num_accepted_tokens: float
    accepted_per_pos: tuple[float, ...]
    elapsed_s: float

    @property
    def mean_acceptance_length(self) -> float | None:
        rate = _ratio(self.num_accepted_tokens, self.num_drafts)
        return None if rate is None else 1.0 + rate

    @property
    def draft_acceptance_rate(self) -> float | None:
        return _ratio(self.num_accepted_tokens, self.num_draft_tokens)

    @property
    def per_position_available(self) -> bool:
        """False when /metrics had no per-position counter (drafts but no position series):
        then nothing is known per position, which is not "0 tokens per position"."""
        return bool(self.accepted_per_pos)

    @property
    def per_position_rate(self) -> list[float] | None:
        if self.num_drafts <= 0 or not self.per_position_available:
            return None
        return [a / self.num_drafts for a in self.accepted_per_pos]

    @property
    def accepted_throughput(self) -> float | None:
        return _ratio(self.num_accepted_tokens, self.elapsed_s)

    @property
    def drafted_throughput(self) -> float | None:
        return _ratio(self.num_draft_tokens, self.elapsed_s)

    def to_dict(self) -> dict[str, object]:
        return {
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "accepted_per_position": list(self.accepted_per_pos),
            "elapsed_s": self.elapsed_s,
            "mean_acceptance_length": self.mean_acceptance_length,
            "draft_acceptance_rate": self.draft_acceptance_rate,
            "per_position_acceptance": self.per_position_rate,
            "per_position_available": self.per_position_available,
        }


def _merge(a: SpecDelta, b: SpecDelta) -> SpecDelta:
    n = max(len(a.accepted_per_pos), len(b.accepted_per_pos))
    pa = list(a.accepted_per_pos) + [0.0] * (n - len(a.accepted_per_pos))
    pb = list(b.accepted_per_pos) + [0.0] * (n - len(b.accepted_per_pos))
    return SpecDelta(
        a.num_drafts + b.num_drafts,
        a.num_draft_tokens + b.num_draft_tokens,
        a.num_accepted_tokens + b.num_accepted_tokens,
        tuple(x + y for x, y in zip(pa, pb, strict=True)),
        a.elapsed_s + b.elapsed_s,
    )


def sum_deltas(deltas: list[SpecDelta]) -> SpecDelta:
    out = SpecDelta(0.0, 0.0, 0.0, (), 0.0)
    for d in deltas:
        out = _merge(out, d)
    return out


def delta(before: SpecSnapshot, after: SpecSnapshot, elapsed_s: float | None = None) -> SpecDelta:
    """``after - before``; raises :class:`CounterReset` if any series went down or vanished."""
    if elapsed_s is None:
        elapsed_s = after.timestamp - before.timestamp
    problems: list[str] = []
    if before.present and not after.present:
        problems.append("spec-decode counters disappeared")
    for key, b in before.engines.items():
        a = after.engines.get(key)
        if a is None:
            problems.append(f"engine {key!r} disappeared")
            continue
        if b.created is not None and a.created is not None and a.created != b.created:
            problems.append(f"engine {key!r} counters were re-created")
        for label, bv, av in (
            ("num_drafts", b.num_drafts, a.num_drafts),
            ("num_draft_tokens", b.num_draft_tokens, a.num_draft_tokens),
            ("num_accepted_tokens", b.num_accepted_tokens, a.num_accepted_tokens),
        ):
            if av < bv:
                problems.append(f"engine {key!r} {label} {bv:g} -> {av:g}")
        for pos, bv in b.accepted_per_pos.items():
            av = a.accepted_per_pos.get(pos)
            if av is None or av < bv:
                problems.append(f"engine {key!r} position {pos} {bv:g} -> {av}")
    if problems:
        raise CounterReset(problems)
    n = max(before.num_positions, after.num_positions)
    bp = list(before.accepted_per_pos) + [0.0] * (n - before.num_positions)
    ap = list(after.accepted_per_pos) + [0.0] * (n - after.num_positions)
    return SpecDelta(
        after.num_drafts - before.num_drafts,
        after.num_draft_tokens - before.num_draft_tokens,
        after.num_accepted_tokens - before.num_accepted_tokens,
        tuple(x - y for x, y in zip(ap, bp, strict=True)),
        elapsed_s,
    )


def format_vllm_log_line(d: SpecDelta) -> str | None:
    """The message vLLM 0.15-0.34 logs for these counters (``SpecDecodingLogging.log``).

    Returns None when there were no drafts (vLLM logs nothing then). Throughputs use
    ``d.elapsed_s`` as vLLM uses the time since its previous log line.
    """
    if not d.num_drafts:
        return None
    draft_tp = 0.0
    accepted_tp = 0.0
    if d.elapsed_s > 0:
        draft_tp = d.num_draft_tokens / d.elapsed_s
        accepted_tp = d.num_accepted_tokens / d.elapsed_s
    rate = d.num_accepted_tokens / d.num_draft_tokens * 100 if d.num_draft_tokens > 0 else math.nan
    mal = 1 + (d.num_accepted_tokens / d.num_drafts)
    rates_str = ", ".join(f"{a / d.num_drafts:.3f}" for a in d.accepted_per_pos)
    args = (mal, accepted_tp, draft_tp, d.num_accepted_tokens, d.num_draft_tokens, rates_str, rate)
    return VLLM_LOG_FORMAT % args


_LOG_RE = re.compile(
    r"SpecDecoding metrics: Mean acceptance length: (?P<mal>[\d.]+|nan), "
    r"Accepted throughput: (?P<atp>[\d.]+) tokens/s, "
    r"Drafted throughput: (?P<dtp>[\d.]+) tokens/s, "
    r"Accepted: (?P<acc>\d+) tokens, Drafted: (?P<dr>\d+) tokens, "
    r"Per-position acceptance rate: (?P<pos>[\d., ]*?), "
    r"Avg Draft acceptance rate: (?P<rate>[\d.]+|nan)%"
)


def parse_vllm_log_line(line: str) -> dict[str, object] | None:
    """Parse vLLM's ``SpecDecoding metrics:`` log line (None when ``line`` is not one)."""
    m = _LOG_RE.search(line)
    if not m:
        return None
    return {
        "message": line[m.start() : m.end()],
        "mean_acceptance_length": float(m["mal"]),
        "accepted_throughput": float(m["atp"]),
        "drafted_throughput": float(m["dtp"]),
        "accepted": int(m["acc"]),
        "drafted": int(m["dr"]),
        "per_position": [float(x) for x in m["pos"].split(",") if x.strip()],
        "draft_acceptance_rate_pct": float(m["rate"]),
    }
