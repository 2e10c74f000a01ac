"""Acceptance-rate and throughput measurement against a running vLLM server (node, stdlib).

One repeat: read the spec-decode counters from ``/metrics``, send the fixed prompt set
(temperature 0, ``ignore_eos`` so every request generates exactly ``max_tokens``), bounded by
a request count and a time budget, read the counters again. From the deltas: mean acceptance
length, draft acceptance rate, per-position acceptance, accepted tokens/s; from the
completions' ``usage.completion_tokens`` over the wall time: output tokens/s. Repeats give the
median and spread of the throughput; the acceptance figures are computed over the sum of all
repeats' deltas.

Outcomes (``AcceptanceResult.status``):
``ok``             measured
``spec_off``       speculation is off: no spec-decode counters for the model, or no drafts
``counter_reset``  a counter went down between the reads (server restarted): not measured
``error``          could not measure (server unreachable, request failed or timed out, ...)

``no_spec_baseline=True`` measures output tokens/s only (for a server without speculation);
it is an ``error`` if that server turns out to speculate.
"""

from __future__ import annotations

import json
import statistics
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path

from specdeploy.node import jsontext
from specdeploy.node.validation import metrics
from specdeploy.node.validation.smoke import Client, HttpError, completion_tokens
from specdeploy.node.validation.workload import Workload

DEFAULT_PROMPTS = Path(__file__).resolve().parents[1] / "prompts" / "prompts.jsonl"


@dataclass(frozen=True)
class Prompt:
    id: str
    kind: str
    prompt: str
    max_tokens: int
    messages: tuple[dict[str, str], ...] = ()

    def as_messages(self) -> list[dict[str, str]]:
        """Chat messages: the prompt file's own, else the text as one user message (a
        ``User: ...\nAssistant:`` transcript is unwrapped so the chat template applies)."""
        if self.messages:
            return [dict(m) for m in self.messages]
        text = self.prompt
        if text.startswith("User: ") and text.rstrip().endswith("Assistant:"):
            text = text[len("User: ") : text.rstrip().rfind("Assistant:")].strip()
        return [{"role": "user", "content": text}]

    def as_text(self) -> str:
        if self.prompt:
            return self.prompt
        return "\n".join(str(m.get("content", "")) for m in self.messages)


def _messages(d: dict[str, object]) -> tuple[dict[str, str], ...]:
    msgs = d.get("messages")
    if msgs is None:
        return ()
    if not isinstance(msgs, list) or not msgs:
        raise ValueError("messages: want a non-empty list")
    out = []
    for m in msgs:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or "content" not in m:
            raise ValueError('messages: each one wants {"role": str, "content": str}')
        out.append({"role": str(m["role"]), "content": str(m["content"])})
    return tuple(out)


def load_prompts(path: str | Path | None = None) -> list[Prompt]:
    """JSONL: ``{"kind", "prompt": text}`` or ``{"kind", "messages": [...]}`` (the operator's
    ``validation_prompts_file``), optional ``id`` and ``max_tokens`` (default 128)."""
    p = Path(path) if path else DEFAULT_PROMPTS
    out: list[Prompt] = []
    for n, d in jsontext.read_objects(p):
        try:
            msgs = _messages(d)
            if not msgs and not isinstance(d.get("prompt"), str):
                raise ValueError('want "prompt" (text) or "messages" (chat)')
            out.append(
                Prompt(
                    str(d.get("id", f"p{n}")),
                    str(d.get("kind", "")),
                    str(d.get("prompt", "")),
                    int(d.get("max_tokens", 128)),
                    msgs,
                )
            )
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{p}:{n}: bad prompt line ({e})") from None
    if not out:
        raise ValueError(f"{p}: no prompts")
    return out


@dataclass
class Spread:
    median: float
    min: float
    max: float
    q1: float
    q3: float
    values: list[float]

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        v = sorted(values)
        if len(v) >= 2:
            q = statistics.quantiles(v, n=4, method="inclusive")
            q1, q3 = q[0], q[2]
        else:
            q1 = q3 = v[0]
        return cls(statistics.median(v), v[0], v[-1], q1, q3, list(values))

    def scaled(self, factor: float) -> Spread:
        return Spread(
            self.median * factor,
            self.min * factor,
            self.max * factor,
            self.q1 * factor,
            self.q3 * factor,
            [x * factor for x in self.values],
        )

    def to_dict(self) -> dict[str, object]:
        return asdict(self) | {"n": len(self.values)}


@dataclass
class AcceptanceConfig:
    """One acceptance run: the workload it sends (its counts, budget, sampling and endpoint,
    read from ``workload``, written once there) and what is not the workload's."""

    served_model_name: str
    prompts: list[Prompt]  # the workload's prompt set, already read
    workload: Workload = field(default_factory=Workload)
    metrics_timeout_s: float = 10.0
    no_spec_baseline: bool = False
    per_kind: bool = True  # one /metrics window per prompt kind after the repeats
    per_kind_requests: int = 4


@dataclass
class RepeatResult:
    index: int
    requests: int
    completion_tokens: int
    wall_s: float
    stopped_by: str
    delta: metrics.SpecDelta | None = None

    @property
    def output_tokens_per_s(self) -> float:
        return self.completion_tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def accepted_tokens_per_s(self) -> float | None:
        if self.delta is None or self.wall_s <= 0:
            return None
        return self.delta.num_accepted_tokens / self.wall_s

    def to_dict(self) -> dict[str, object]:
        d: dict[str, object] = {
            "index": self.index,
            "requests": self.requests,
            "completion_tokens": self.completion_tokens,
            "wall_s": round(self.wall_s, 4),
            "stopped_by": self.stopped_by,
            "output_tokens_per_s": self.output_tokens_per_s,
            "accepted_tokens_per_s": self.accepted_tokens_per_s,
        }
        if self.delta is not None:
            d["spec"] = self.delta.to_dict()
        return d


@dataclass
class AcceptanceResult:
    status: str
    message: str
    spec_mode: bool
    repeats: list[RepeatResult] = field(default_factory=list)
    total: metrics.SpecDelta | None = None
    engines: list[str] = field(default_factory=list)
    speed_up: Spread | None = None
    baseline_output_tokens_per_s: float | None = None
    baseline_source: str | None = None
    by_kind: dict[str, dict[str, object]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def output_tokens_per_s(self) -> Spread | None:
        vals = [r.output_tokens_per_s for r in self.repeats if r.wall_s > 0]
        return Spread.of(vals) if vals else None

    @property
    def accepted_tokens_per_s(self) -> Spread | None:
        vals = [v for r in self.repeats if (v := r.accepted_tokens_per_s) is not None]
        return Spread.of(vals) if vals else None

    def set_baseline(self, baseline_tps: float, source: str) -> None:
        self.baseline_output_tokens_per_s = baseline_tps
        self.baseline_source = source
        tps = self.output_tokens_per_s
        if tps is not None and baseline_tps > 0:
            self.speed_up = tps.scaled(1.0 / baseline_tps)

    def to_dict(self) -> dict[str, object]:
        t = self.total
        tps = self.output_tokens_per_s
        atps = self.accepted_tokens_per_s
        wall = sum(r.wall_s for r in self.repeats)
        return {
            "status": self.status,
            "message": self.message,
            "mode": "spec" if self.spec_mode else "no_spec_baseline",
            "requests": sum(r.requests for r in self.repeats),
            "completion_tokens": sum(r.completion_tokens for r in self.repeats),
            "wall_s": round(wall, 4),
            "engines": self.engines,
            "num_drafts": t.num_drafts if t else None,
            "num_draft_tokens": t.num_draft_tokens if t else None,
            "num_accepted_tokens": t.num_accepted_tokens if t else None,
            "accepted_per_position": list(t.accepted_per_pos) if t else None,
            "mean_acceptance_length": t.mean_acceptance_length if t else None,
            "draft_acceptance_rate": t.draft_acceptance_rate if t else None,
            "per_position_acceptance": t.per_position_rate if t else None,
            "per_position_note": (
                "per-position acceptance unavailable: /metrics has no "
                "vllm:spec_decode_num_accepted_tokens_per_pos_total"
                if t and t.num_drafts > 0 and not t.per_position_available
                else None
            ),
            "output_tokens_per_s": tps.to_dict() if tps else None,
            "accepted_tokens_per_s": atps.to_dict() if atps else None,
            "baseline_output_tokens_per_s": self.baseline_output_tokens_per_s,
            "baseline_source": self.baseline_source,
            "speed_up": self.speed_up.to_dict() if self.speed_up else None,
            "vllm_log_line": metrics.format_vllm_log_line(t) if t else None,
            "repeats": [r.to_dict() for r in self.repeats],
            "by_kind": self.by_kind,
        }


def read_snapshot(client: Client, model: str, timeout: float) -> metrics.SpecSnapshot:
    text = client.text("/metrics", timeout)
    return metrics.snapshot(text, model, timestamp=time.monotonic())


def send(client: Client, cfg: AcceptanceConfig, p: Prompt, max_tokens: int) -> dict[str, object]:
    """One request of the workload: chat (the model's chat template) or raw completions,
    greedy or sampled, ``ignore_eos`` so that it generates exactly ``max_tokens``."""
    body: dict[str, object] = {
        "model": cfg.served_model_name,
        "max_tokens": max_tokens,
        "temperature": cfg.workload.temperature,
        "top_p": cfg.workload.top_p,
        "ignore_eos": True,
        "seed": 0,
    }
    if cfg.workload.endpoint == "chat":
        body["messages"] = p.as_messages()
        path = "/v1/chat/completions"
    else:
        body["prompt"] = p.as_text()
        path = "/v1/completions"
    out = client.json("POST", path, body, cfg.workload.request_timeout_s)
    if not isinstance(out, dict) or not isinstance(out.get("choices"), list) or not out["choices"]:
        raise HttpError("bad_response", f"{path}: no choices in {str(out)[:200]}")
    return out


def _run_requests(
    client: Client,
    cfg: AcceptanceConfig,
    budget_s: float,
    index: int,
    prompts: list[Prompt] | None = None,
    max_requests: int | None = None,
) -> RepeatResult:
    prompts = prompts or cfg.prompts
    limit = max_requests or cfg.workload.max_requests
    t0 = time.monotonic()
    n_sent = 0
    tokens = 0
    stopped_by = "count"

    def one(p: Prompt) -> int:
        n = completion_tokens(send(client, cfg, p, cfg.workload.max_tokens or p.max_tokens))
        if n is None:
            raise HttpError(
                "bad_response", f"prompt {p.id}: response has no usage.completion_tokens"
            )
        return n

    with ThreadPoolExecutor(max_workers=max(1, cfg.workload.concurrency)) as pool:
        inflight: set[Future[int]] = set()
        while True:
            while len(inflight) < max(1, cfg.workload.concurrency) and n_sent < limit:
                if n_sent > 0 and time.monotonic() - t0 >= budget_s:
                    stopped_by = "time"
                    break
                inflight.add(pool.submit(one, prompts[n_sent % len(prompts)]))
                n_sent += 1
            if not inflight:
                break
            done, inflight = wait(inflight, return_when=FIRST_COMPLETED)
            for f in done:
                tokens += f.result()  # re-raises HttpError
            if stopped_by == "time" and not inflight:
                break
    return RepeatResult(index, n_sent, tokens, time.monotonic() - t0, stopped_by)


def run_acceptance(client: Client, cfg: AcceptanceConfig) -> AcceptanceResult:
    spec = not cfg.no_spec_baseline
    res = AcceptanceResult("error", "", spec)
    model = cfg.served_model_name
    t_start = time.monotonic()
    try:
        for i in range(cfg.workload.warmup):
            p = cfg.prompts[i % len(cfg.prompts)]
            send(client, cfg, p, min(16, cfg.workload.max_tokens or p.max_tokens))
        budget_left = cfg.workload.time_budget_s - (time.monotonic() - t_start)
        per_repeat = max(budget_left, 0.0) / max(1, cfg.workload.repeats)
        deltas: list[metrics.SpecDelta] = []
        for i in range(max(1, cfg.workload.repeats)):
            before = read_snapshot(client, model, cfg.metrics_timeout_s)
            if spec and not before.present:
                res.status = "spec_off"
                res.message = (
                    f"speculation is off: /metrics has no spec-decode counters for "
                    f"model_name={model!r}"
                )
                if before.other_models:
                    res.message += f" (counters exist for: {', '.join(before.other_models)})"
                return res
            rep = _run_requests(client, cfg, per_repeat, i)
            after = read_snapshot(client, model, cfg.metrics_timeout_s)
            if before.present or after.present:
                d = metrics.delta(before, after, elapsed_s=rep.wall_s)
                rep.delta = d
                deltas.append(d)
            res.engines = sorted(after.engines)
            res.repeats.append(rep)
        if spec and cfg.per_kind and len({p.kind for p in cfg.prompts}) > 1:
            res.by_kind = measure_kinds(client, cfg)
    except metrics.CounterReset as e:
        res.status = "counter_reset"
        res.message = str(e)
        return res
    except metrics.MetricsError as e:
        res.message = f"/metrics unusable: {e}"
        return res
    except HttpError as e:
        res.message = f"could not measure: {e}"
        return res
    res.total = metrics.sum_deltas(deltas) if deltas else None
    n_req = sum(r.requests for r in res.repeats)
    n_tok = sum(r.completion_tokens for r in res.repeats)
    if n_tok <= 0:
        res.message = f"{n_req} requests produced no completion tokens"
        return res
    if spec:
        assert res.total is not None
        if res.total.num_drafts <= 0:
            res.status = "spec_off"
            res.message = (
                f"speculation is off: no drafts during {n_req} requests ({n_tok} output tokens)"
            )
            return res
        res.status = "ok"
        mal = res.total.mean_acceptance_length
        res.message = f"{n_req} requests, {n_tok} tokens, mean acceptance length {mal:.2f}"
    else:
        if res.total is not None and res.total.num_drafts > 0:
            res.message = (
                "no-spec baseline requested but the server speculates "
                f"({res.total.num_drafts:g} drafts)"
            )
            return res
        res.status = "ok"
        tps = res.output_tokens_per_s
        res.message = (
            f"{n_req} requests, {n_tok} tokens, "
            f"{tps.median if tps else 0:.1f} output tokens/s (no speculation)"
        )
    return res


def measure_kinds(client: Client, cfg: AcceptanceConfig) -> dict[str, dict[str, object]]:
    """Acceptance per prompt kind: one window of ``per_kind_requests`` requests of that kind
    only, between two /metrics reads (the counters have no kind label)."""
    out: dict[str, dict[str, object]] = {}
    kinds = sorted({p.kind for p in cfg.prompts})
    for kind in kinds:
        prompts = [p for p in cfg.prompts if p.kind == kind]
        before = read_snapshot(client, cfg.served_model_name, cfg.metrics_timeout_s)
        rep = _run_requests(
            client, cfg, cfg.workload.time_budget_s, 0, prompts, max(1, cfg.per_kind_requests)
        )
        after = read_snapshot(client, cfg.served_model_name, cfg.metrics_timeout_s)
        d = metrics.delta(before, after, elapsed_s=rep.wall_s)
        out[kind or "-"] = {
            "requests": rep.requests,
            "completion_tokens": rep.completion_tokens,
            "mean_acceptance_length": d.mean_acceptance_length,
            "draft_acceptance_rate": d.draft_acceptance_rate,
            "per_position_acceptance": d.per_position_rate,
        }
    return out


def baseline_from_result(path: str | Path) -> float:
    """Median output tokens/s of a saved check result (a ``--no-spec-baseline`` run)."""
    d = json.loads(Path(path).read_text(encoding="utf-8"))
    acc = d.get("acceptance") if isinstance(d, dict) else None
    tps = acc.get("output_tokens_per_s") if isinstance(acc, dict) else None
    if not isinstance(tps, dict) or not isinstance(tps.get("median"), (int, float)):
        raise ValueError(f"{path}: no acceptance.output_tokens_per_s.median")
    if acc.get("status") != "ok":
        raise ValueError(f"{path}: baseline run status is {acc.get('status')!r}, not 'ok'")
    return float(tps["median"])
