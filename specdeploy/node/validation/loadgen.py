"""Concurrency load generator for an OpenAI-compatible server (node side, standard library only).

Runs in the release's Python on the node (and on the GPU machine). For each concurrency level
``c`` and each repeat, ``c`` worker threads loop over the prompts, each sending one streamed
request at a time (``stream: true``, ``stream_options: {include_usage: true}``) to
``/v1/chat/completions`` (endpoint ``chat``: the server applies the model's chat template) or
``/v1/completions`` (endpoint ``completions``: the messages' contents joined by newlines, no
template). A repeat stops issuing requests once it has run ``min_window_s`` AND issued at least
``max(8, 2c)`` requests, then waits for the ones in flight.

Figures per level:

* output tokens/s of a repeat = the completion tokens the server reports (the final usage
  chunk; a chunk can carry several tokens under speculative decoding, so chunks are not
  counted) / the repeat's wall time; ``output_tps`` is the median over repeats and ``spread``
  = (max - min) / median, so a gate can tell a real difference from run-to-run noise;
* TTFT = request sent -> first chunk with non-empty content; ITL = the gaps between later
  content chunks (one chunk per engine step, so under speculation one gap can cover several
  tokens); p50 and p99 over every request / gap of every repeat of the level.

A failed request (HTTP error, no usage chunk, connection refused, timeout) stops the
measurement with :class:`LoadgenError`: a throughput figure with silent gaps is worse than none.

CLI (exit codes: 0 measured, 2 usage or environment error, e.g. server unreachable)::

    python -m specdeploy.node.validation.loadgen --base-url http://127.0.0.1:8000 --levels 1,4,16
    --json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from specdeploy.node import jsontext
from specdeploy.node.validation.workload import LEVEL_MAX_TOKENS, Workload, WorkloadError

ENDPOINTS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
MIN_REQUESTS_PER_REPEAT = 8  # and at least two per worker: max(8, 2c)
# Default prompt set: the toolkit's own (``specdeploy/node/prompts/prompts.jsonl``, in the node
# package beside this sub-package).
_PROMPT_FILES = (Path(__file__).resolve().parents[1] / "prompts" / "prompts.jsonl",)


class LoadgenError(Exception):
    """The measurement could not be made (bad input, server error, unreachable server)."""


@dataclass(frozen=True)
class LevelResult:
    concurrency: int
    requests: int  # over all repeats
    output_tokens: int  # over all repeats
    wall_s: float  # over all repeats
    output_tps: float  # median over repeats
    repeats_tps: list[float]  # each repeat's output tokens / wall time of that repeat
    spread: float  # (max - min) / median of repeats_tps
    ttft_p50_s: float
    ttft_p99_s: float
    itl_p50_s: float
    itl_p99_s: float


@dataclass
class _Request:
    output_tokens: int
    ttft_s: float
    gaps_s: list[float]


def to_dict(result: LevelResult) -> dict:
    """JSON-ready form of one level (floats rounded to what the measurement resolves)."""
    d = asdict(result)
    for k in ("wall_s", "ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s"):
        d[k] = round(d[k], 5)
    d["output_tps"] = round(d["output_tps"], 2)
    d["repeats_tps"] = [round(x, 2) for x in d["repeats_tps"]]
    d["spread"] = round(d["spread"], 4)
    return d


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default), ``q`` in [0, 100]."""
    if not values:
        return 0.0
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def spread_of(values: list[float]) -> float:
    med = statistics.median(values)
    return (max(values) - min(values)) / med if med > 0 else 0.0


def sse_events(lines: Iterator[bytes]) -> Iterator[str]:
    """The ``data`` payloads of a Server-Sent Events stream (comments and other fields skipped,
    multi-line data joined with newlines, CRLF or LF line ends)."""
    data: list[str] = []
    for raw in lines:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if field == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


def _request_body(
    endpoint: str, model: str, messages: list[dict], params: dict[str, object]
) -> dict[str, object]:
    body: dict[str, object] = {"model": model}
    if endpoint == "chat":
        body["messages"] = messages
    else:
        body["prompt"] = "\n".join(str(m.get("content", "")) for m in messages)
    body.update(params)
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    return body


def _chunk_text(endpoint: str, chunk: dict) -> str:
    choices = chunk.get("choices") or []
    if not choices:
        return ""
    c = choices[0]
    if endpoint == "chat":
        return str((c.get("delta") or {}).get("content") or "")
    return str(c.get("text") or "")


def stream_one(
    url: str,
    body: dict[str, object],
    endpoint: str,
    headers: dict[str, str],
    timeout_s: float,
) -> _Request:
    """Send one streamed request; return its token count, TTFT and inter-chunk gaps."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    t0 = time.monotonic()
    first: float | None = None
    last = 0.0
    gaps: list[float] = []
    usage_tokens: int | None = None
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            for payload in sse_events(iter(resp.readline, b"")):
                if payload.strip() == "[DONE]":
                    break
                try:
                    chunk = json.loads(payload)
                except ValueError as e:
                    raise LoadgenError(f"{url}: not a JSON event: {payload[:120]!r}") from e
                if "error" in chunk:
                    raise LoadgenError(f"{url}: server error in stream: {chunk['error']}")
                if _chunk_text(endpoint, chunk):
                    now = time.monotonic()
                    if first is None:
                        first = now
                    else:
                        gaps.append(now - last)
                    last = now
                usage = chunk.get("usage")
                if usage and usage.get("completion_tokens") is not None:
                    usage_tokens = int(usage["completion_tokens"])
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")[:300].strip()
        raise LoadgenError(f"POST {url}: HTTP {e.code}: {detail}") from e
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise LoadgenError(f"POST {url}: {reason}") from e
    if usage_tokens is None:
        raise LoadgenError(
            f"POST {url}: the stream carried no usage (stream_options.include_usage unsupported?)"
        )
    if first is None:
        raise LoadgenError(f"POST {url}: the stream carried no content")
    return _Request(usage_tokens, first - t0, gaps)


def _one_repeat(
    c: int,
    next_prompt: Iterator[list[dict]],
    send: Callable[[list[dict]], _Request],
    min_window_s: float,
    min_requests: int | None = None,
) -> tuple[list[_Request], float]:
    """``c`` workers until the window and the request minimum (default max(8, 2c)) are both
    reached."""
    if min_requests is None:
        min_requests = max(MIN_REQUESTS_PER_REPEAT, 2 * c)
    lock = threading.Lock()
    issued = [0]
    done: list[_Request] = []
    errors: list[Exception] = []
    t0 = time.monotonic()

    def take() -> list[dict] | None:
        with lock:
            if errors:
                return None
            if issued[0] >= min_requests and time.monotonic() - t0 >= min_window_s:
                return None
            issued[0] += 1
            return next(next_prompt)

    def worker() -> None:
        while (messages := take()) is not None:
            try:
                r = send(messages)
            except Exception as e:  # re-raised in the caller's thread after the join
                with lock:
                    errors.append(e)
                return
            with lock:
                done.append(r)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(c)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    if errors:
        raise errors[0]
    return done, wall


def measure_levels(
    base_url: str,
    model: str,
    workload: Workload,
    *,
    prompts: list[list[dict]],
    api_key: str | None = None,
    ignore_eos: bool = True,
    warmup_per_level: bool = False,
) -> list[LevelResult]:
    """Measure every level of ``workload`` in order (its ``measured_levels``, with its
    sampling, endpoint, repeats, window, request timeout and ``level_max_tokens``); see the
    module docstring for what is measured. The workload's values were checked when it was
    made (:class:`WorkloadError` is a :class:`ValueError`).

    ``workload.warmup`` requests (not counted) go out once before the first level;
    ``warmup_per_level`` adds one unmeasured round of ``c`` concurrent requests before each
    level (on the H200 MoE recording the first repeat at a new concurrency was often much
    slower than the next two: docs/speedup-gpu.md).
    Raises :class:`ValueError` for bad prompts and :class:`LoadgenError` when a request fails.
    """
    if not prompts or any(not isinstance(p, list) or not p for p in prompts):
        raise ValueError("prompts: give one or more non-empty lists of chat messages")
    endpoint = workload.endpoint
    timeout_s = workload.request_timeout_s
    url = base_url.rstrip("/") + ENDPOINTS[endpoint]
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    params: dict[str, object] = {
        "max_tokens": workload.level_max_tokens,
        "temperature": workload.temperature,
        "top_p": workload.top_p,
    }
    if ignore_eos:
        params["ignore_eos"] = True  # vLLM's extension: every request generates max_tokens

    def send(messages: list[dict]) -> _Request:
        body = _request_body(endpoint, model, messages, params)
        return stream_one(url, body, endpoint, headers, timeout_s)

    cycle = itertools.cycle(prompts)
    for _ in range(workload.warmup):
        send(next(cycle))
    results = []
    for c in workload.measured_levels:
        if warmup_per_level:
            _one_repeat(c, cycle, send, 0.0, min_requests=c)
        tps: list[float] = []
        reqs: list[_Request] = []
        wall_total = 0.0
        for _ in range(workload.repeats):
            done, wall = _one_repeat(c, cycle, send, workload.min_window_s)
            tokens = sum(r.output_tokens for r in done)
            tps.append(tokens / wall if wall > 0 else 0.0)
            reqs.extend(done)
            wall_total += wall
        ttft = [r.ttft_s for r in reqs]
        itl = [g for r in reqs for g in r.gaps_s]
        results.append(
            LevelResult(
                concurrency=c,
                requests=len(reqs),
                output_tokens=sum(r.output_tokens for r in reqs),
                wall_s=wall_total,
                output_tps=statistics.median(tps),
                repeats_tps=tps,
                spread=spread_of(tps),
                ttft_p50_s=percentile(ttft, 50),
                ttft_p99_s=percentile(ttft, 99),
                itl_p50_s=percentile(itl, 50),
                itl_p99_s=percentile(itl, 99),
            )
        )
    return results


def load_prompts_file(path: str | Path) -> list[list[dict]]:
    """JSONL, one prompt a line: ``{"messages": [{"role": ..., "content": ...}, ...]}`` or
    ``{"prompt": "text"}`` (sent as one user message). Raises :class:`LoadgenError`."""
    out: list[list[dict]] = []
    try:
        objects = jsontext.read_objects(path)
    except OSError as e:
        raise LoadgenError(f"prompts file {path}: {e.strerror or e}") from e
    except ValueError as e:
        raise LoadgenError(f"prompts file {e}") from None
    for n, obj in objects:
        msgs = obj.get("messages")
        if (
            isinstance(msgs, list)
            and msgs
            and all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and "content" in m
                for m in msgs
            )
        ):
            out.append(msgs)
        elif isinstance(obj.get("prompt"), str):
            out.append([{"role": "user", "content": obj["prompt"]}])
        else:
            raise LoadgenError(
                f'prompts file {path} line {n}: expected {{"messages": [{{"role", "content"}}]}}'
                ' or {"prompt": "text"}'
            )
    if not out:
        raise LoadgenError(f"prompts file {path}: no prompts")
    return out


def default_prompts_file() -> Path:
    for p in _PROMPT_FILES:
        if p.is_file():
            return p
    raise LoadgenError("the toolkit's prompt set is missing: give --prompts-file")


def served_model(base_url: str, api_key: str | None, timeout_s: float) -> str:
    """The first model the server lists at ``/v1/models``."""
    req = urllib.request.Request(base_url.rstrip("/") + "/v1/models")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            data = json.loads(r.read())
        return str(data["data"][0]["id"])
    except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError) as e:
        raise LoadgenError(f"{base_url}/v1/models: {getattr(e, 'reason', e)}") from e


# The load generator's own defaults: three repeats give a spread, and 1,4,16 spans a lone
# user to a loaded node when nothing says which levels matter.
DEFAULT_WORKLOAD = Workload(levels=(1, 4, 16), repeats=3, max_tokens=LEVEL_MAX_TOKENS)
# The workload fields this command measures with (the acceptance run's own are the checker's).
WORKLOAD_FIELDS = (
    "levels", "prompts", "endpoint", "max_tokens", "temperature", "top_p", "repeats",
    "min_window_s", "warmup", "request_timeout_s",
)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m specdeploy.node.validation.loadgen",
        description="Output tokens/s, TTFT and ITL per concurrency level (streamed requests).",
    )
    ap.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000")
    ap.add_argument("--model", help="served model name (default: the first in /v1/models)")
    Workload.add_arguments(ap, DEFAULT_WORKLOAD, WORKLOAD_FIELDS)
    ap.add_argument("--no-ignore-eos", action="store_true", help="let requests stop at EOS")
    ap.add_argument(
        "--warmup-per-level", action="store_true", help="one unmeasured round before each level"
    )
    ap.add_argument("--api-key-env", help="name of the environment variable holding the key")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return ap


def render_table(rows: list[LevelResult]) -> str:
    head = (
        f"{'c':>4} {'req':>5} {'tok/s':>9} {'spread':>7} "
        f"{'ttft p50/p99 ms':>17} {'itl p50/p99 ms':>16}"
    )
    out = [head]
    for r in rows:
        out.append(
            f"{r.concurrency:>4} {r.requests:>5} {r.output_tps:>9.1f} {r.spread:>7.1%} "
            f"{r.ttft_p50_s * 1e3:>8.1f}/{r.ttft_p99_s * 1e3:<8.1f}"
            f"{r.itl_p50_s * 1e3:>8.2f}/{r.itl_p99_s * 1e3:<7.2f}"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    a = ap.parse_args(argv)
    try:
        workload = Workload.from_args(a, DEFAULT_WORKLOAD)
    except WorkloadError as e:
        print(f"loadgen: {e}", file=sys.stderr)
        return 2
    api_key = None
    if a.api_key_env:
        api_key = os.environ.get(a.api_key_env)
        if not api_key:
            print(f"loadgen: environment variable {a.api_key_env} is not set", file=sys.stderr)
            return 2
    try:
        prompts = load_prompts_file(workload.prompts or default_prompts_file())
        model = a.model or served_model(a.base_url, api_key, workload.request_timeout_s)
        rows = measure_levels(
            a.base_url,
            model,
            workload,
            prompts=prompts,
            api_key=api_key,
            ignore_eos=not a.no_ignore_eos,
            warmup_per_level=a.warmup_per_level,
        )
    except LoadgenError as e:
        print(f"loadgen: {e}", file=sys.stderr)
        return 2
    if a.json:
        print(
            json.dumps(
                {
                    "model": model,
                    "endpoint": workload.endpoint,
                    "levels": [to_dict(r) for r in rows],
                },
                indent=1,
            )
        )
    else:
        print(
            f"model {model}, endpoint {workload.endpoint}, max_tokens {workload.level_max_tokens}"
        )
        print(render_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
