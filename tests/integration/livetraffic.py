"""Live traffic through the sandbox's load balancer, and the table docs/live-traffic.md.

``Traffic`` sends a steady stream of streamed chat requests (``stream: true``, one request at a
time per worker thread, a short pause between them) to the balancer's frontend and records each
request as one of

* completed: HTTP 200 and the stream ended with ``data: [DONE]`` after content and usage;
* failed: refused before any of the answer came (an HTTP error status such as HAProxy's 503,
  connection refused or reset before the response);
* cut: the answer had begun (HTTP 200, possibly chunks) and the stream ended without
  ``[DONE]`` (connection closed or reset mid-stream, a timeout, an error event).

The SSE parsing is the toolkit's own (specdeploy.node.validation.loadgen.sse_events). Phases
are by the request's start time: before the operation, during it, after it; the p99 latency
(request sent -> stream ended) is over the completed requests of each phase.

Each scenario's row goes to build/live-traffic.json; docs/live-traffic.md is rendered from it
(``render``), as docs/faults.md is from the fault groups' files.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from specdeploy.node.validation.loadgen import percentile, sse_events

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "build" / "live-traffic.json"
DOCS = REPO / "docs" / "live-traffic.md"


@dataclass
class Outcome:
    started: float
    ended: float
    kind: str  # completed | failed | cut
    detail: str = ""


def one_request(
    url: str, model: str, timeout_s: float = 60.0, max_tokens: int = 24
) -> tuple[str, str]:
    """One streamed chat request: (kind, detail)."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Count from one to twenty, please."}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    request = urllib.request.Request(
        f"{url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        response = urllib.request.urlopen(request, timeout=timeout_s)
    except urllib.error.HTTPError as e:
        return "failed", f"HTTP {e.code}"
    except (urllib.error.URLError, OSError) as e:
        return "failed", str(getattr(e, "reason", e))
    content = usage = done = False
    try:
        with response:
            for payload in sse_events(iter(response.readline, b"")):
                if payload.strip() == "[DONE]":
                    done = True
                    break
                chunk = json.loads(payload)
                if "error" in chunk:
                    return "cut", f"error event: {str(chunk['error'])[:100]}"
                choices = chunk.get("choices") or []
                if choices and (choices[0].get("delta") or {}).get("content"):
                    content = True
                if chunk.get("usage"):
                    usage = True
    except (OSError, ValueError, urllib.error.URLError) as e:
        return "cut", f"{type(e).__name__}: {e}"[:120]
    if done and content and usage:
        return "completed", ""
    return "cut", f"stream ended without [DONE] (content={content}, usage={usage})"


@dataclass
class Traffic:
    """Worker threads sending streamed requests through the balancer until stop()."""

    url: str
    model: str
    workers: int = 2
    pause_s: float = 0.1
    outcomes: list[Outcome] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _work(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            kind, detail = one_request(self.url, self.model)
            with self._lock:
                self.outcomes.append(Outcome(t0, time.monotonic(), kind, detail))
            self._stop.wait(self.pause_s)

    def start(self) -> Traffic:
        self._stop.clear()
        self._threads = [
            threading.Thread(target=self._work, daemon=True) for _ in range(self.workers)
        ]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)


def summarize(outcomes: list[Outcome], began: float, ended: float) -> dict:
    """Counts and p99 latency (ms) before / during / after the operation [began, ended)."""

    def p99(phase: list[Outcome]) -> float | None:
        latencies = [o.ended - o.started for o in phase if o.kind == "completed"]
        return round(percentile(latencies, 99) * 1000) if latencies else None

    before = [o for o in outcomes if o.started < began]
    during = [o for o in outcomes if began <= o.started < ended]
    after = [o for o in outcomes if o.started >= ended]
    problems = [f"{o.kind}: {o.detail}" for o in outcomes if o.kind != "completed"]
    return {
        "sent": len(outcomes),
        "completed": sum(o.kind == "completed" for o in outcomes),
        "failed": sum(o.kind == "failed" for o in outcomes),
        "cut": sum(o.kind == "cut" for o in outcomes),
        "sent_during": len(during),
        "p99_ms": {"before": p99(before), "during": p99(during), "after": p99(after)},
        "operation_s": round(ended - began, 1),
        "problems": problems[:10],
    }


def record(key: str, row: dict) -> None:
    """Add (or replace) one scenario's row in build/live-traffic.json, then render the doc."""
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    # two modules (test_live_traffic, test_live_traffic_fleet) run as parallel sessions
    with open(RESULTS.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            data = json.loads(RESULTS.read_text())
        except (OSError, ValueError):
            data = {"rows": {}}
        data["rows"][key] = row
        data["finished"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        tmp = RESULTS.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, RESULTS)
        DOCS.write_text(render(data))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value}"


def render(data: dict) -> str:
    lines = [
        "# Live traffic: requests lost while the toolkit restarts nodes",
        "",
        "GENERATED by `tests/integration/test_live_traffic.py` and `test_live_traffic_fleet.py` "
        "(part of `make test`) from "
        f"build/live-traffic.json; do not edit. Last run: {data.get('finished', '?')}.",
        "",
        "Two sandbox nodes (four in the fleet row; systemd-nspawn, real SSH and systemd, the real "
        "vLLM 0.16.0 wheel, the CI stand-in in place of the GPU server; vLLM 0.16 has no "
        "`--shutdown-timeout`, so a stop aborts whatever is in flight) behind the sandbox's "
        "HAProxy (Debian's package). "
        "Two client threads send streamed chat requests (24 tokens, 0.1 s apart) through the "
        "balancer for the whole scenario: before it, during the operation, after it. Every "
        "restart drains the node first (HAProxy runtime API `set server ... state drain`, the "
        "balancer's sessions and the server's `vllm:num_requests_running` waited down to 0, "
        "then the stop) and puts it back (`state ready`) after readiness and the gates. "
        "*failed*: refused before the answer began; *cut*: the stream ended without "
        "`[DONE]`. p99 is over the completed requests that started in each phase (ms; the "
        "stand-in on a loaded CI machine, not a GPU figure). A single node (the last row: the "
        "other one in maintenance) has no other to take the traffic: its restart window is "
        "refused (HAProxy's 503, which a client can retry), never cut.",
        "",
        "| scenario | sent | completed | failed | cut | p99 before / during / after (ms) "
        "| operation (s) | node states after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key in sorted(data.get("rows", {})):
        row = data["rows"][key]
        p99 = row["p99_ms"]
        lines.append(
            f"| {row['scenario']} | {row['sent']} | {row['completed']} | {row['failed']} "
            f"| {row['cut']} | {_ms(p99['before'])} / {_ms(p99['during'])} / "
            f"{_ms(p99['after'])} | {row['operation_s']} | {row['nodes']} |"
        )
    return "\n".join(lines) + "\n"
