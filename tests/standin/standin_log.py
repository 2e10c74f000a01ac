"""STAND-IN log writing: vLLM's own line formats (APIServer/EngineCore prefixes, the uvicorn
access log, the periodic ``loggers.py`` throughput line and ``SpecDecoding metrics:`` line,
EngineCore start-up failures), so the toolkit's log readers see what real vLLM writes."""

from __future__ import annotations

import http
import os
import sys
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from standin_engine import Engine

VLLM_LOG_FORMAT = (
    "SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s, "
    "Drafted throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens, "
    "Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%"
)

PID = os.getpid()
_print_lock = threading.Lock()


def log(level: str, where: str, msg: str, proc: str = "APIServer") -> None:
    ts = time.strftime("%m-%d %H:%M:%S")
    with _print_lock:
        for line in msg.split("\n"):
            sys.stdout.write(f"({proc} pid={PID}) {level} {ts} [{where}] {line}\n")
        sys.stdout.flush()


def log_raw(line: str, proc: str = "APIServer") -> None:
    """A line without level and time, as vLLM's progress bars (tqdm) print them."""
    with _print_lock:
        sys.stdout.write(f"({proc} pid={PID}) {line}\n")
        sys.stdout.flush()


def access_log(client: str, method: str, path: str, code: int) -> None:
    try:
        phrase = http.HTTPStatus(code).phrase
    except ValueError:
        phrase = ""
    with _print_lock:
        sys.stdout.write(
            f'(APIServer pid={PID}) INFO:     {client} - "{method} {path} '
            f'HTTP/1.1" {code} {phrase}\n'
        )
        sys.stdout.flush()


def fail_engine(msg: str, exc: str = "ValueError") -> None:
    """Print an EngineCore failure the way vLLM does, then exit 1."""
    log("ERROR", "core.py:1136", "EngineCore failed to start.", proc="EngineCore")
    log("ERROR", "core.py:1136", "Traceback (most recent call last):", proc="EngineCore")
    log("ERROR", "core.py:1136", f"{exc}: {msg}", proc="EngineCore")
    with _print_lock:
        sys.stdout.write(
            f"(EngineCore pid={PID}) Process EngineCore:\n"
            f"(EngineCore pid={PID}) {exc}: {msg}\n"
            f"(APIServer pid={PID}) RuntimeError: Engine core initialization "
            "failed. See root cause above. Failed core proc(s): {}\n"
        )
        sys.stdout.flush()
    sys.exit(1)


def stats_logger(eng: Engine, interval: float) -> None:
    last = time.monotonic()
    prev = dict(eng.c)
    prev_pos = list(eng.per_pos)
    was_busy = False
    while True:
        time.sleep(interval)
        now = time.monotonic()
        with eng.lock:
            cur = dict(eng.c)
            cur_pos = list(eng.per_pos)
            running = eng.running
        elapsed = now - last
        d = {k: cur[k] - prev[k] for k in cur}
        busy = d["requests"] > 0 or running > 0
        if busy or was_busy:
            log(
                "INFO",
                "loggers.py:271",
                f"Engine 000: Avg prompt throughput: {d['prompt_tokens'] / elapsed:.1f} tokens/s,"
                f" Avg generation throughput: {d['generation_tokens'] / elapsed:.1f} tokens/s, "
                f"Running: {running} reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, "
                "Prefix cache hit rate: 0.0%",
            )
            if d["drafts"] > 0:
                dp = [a - b for a, b in zip(cur_pos, prev_pos, strict=True)]
                rate = (
                    d["accepted"] / d["draft_tokens"] * 100 if d["draft_tokens"] else float("nan")
                )
                log(
                    "INFO",
                    "metrics.py:101",
                    VLLM_LOG_FORMAT
                    % (
                        1 + d["accepted"] / d["drafts"],
                        d["accepted"] / elapsed,
                        d["draft_tokens"] / elapsed,
                        d["accepted"],
                        d["draft_tokens"],
                        ", ".join(f"{a / d['drafts']:.3f}" for a in dp),
                        rate,
                    ),
                )
        was_busy = busy
        prev, prev_pos, last = cur, cur_pos, now


def banner(version: str, model: str) -> None:
    for line in (
        "",
        "       \u2588     \u2588     \u2588\u2584   \u2584\u2588",
        f" \u2584\u2584 \u2584\u2588 \u2588     \u2588     \u2588 \u2580\u2584\u2580 "
        f"\u2588  version {version}",
        f"  \u2588\u2584\u2588\u2580 \u2588     \u2588     \u2588     \u2588  model   {model}",
        "   \u2580\u2580  \u2580\u2580\u2580\u2580\u2580 \u2580\u2580\u2580"
        "\u2580\u2580 \u2580     \u2580",
        "",
    ):
        log("INFO", "utils.py:299", line)
