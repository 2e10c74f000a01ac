"""Wait until the server's in-flight requests are done, before its stop (node side, stdlib only).

After the balancer stopped sending the node new requests (specdeploy.controller.drain), the
requests it already accepted are still being generated. This polls the engine's
running-requests gauge (vLLM: ``vllm:num_requests_running``, summed over its model labels) on
the server's own /metrics until it reads 0, at most --max-wait-s (the knob
specdeploy_drain_timeout_s); then the stop goes ahead either way (the unit's
--shutdown-timeout, where the version has it, lets what is left finish). A server that does not
answer (it is down already) has nothing in flight.

    python -m specdeploy.node.service.inflight --url http://127.0.0.1:8000/metrics \\
        [--max-wait-s 120] [--poll-s 0.5] [--engine auto|vllm|sglang] [--json]

Exit codes: 0 idle or the cap reached (the message says which), 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass

from specdeploy.node.validation.metrics import parse_exposition

# The gauge of requests being generated now, per engine (SGLang's as its 0.5.15 /metrics
# exports it, tests/fixtures/sglang-0.5.15-h200). "auto": whichever the server exports (the
# drain runs before the stop of whatever serves, which may be either engine's release).
RUNNING_GAUGE = {"vllm": "vllm:num_requests_running", "sglang": "sglang:num_running_reqs"}
AUTO = "auto"


class InflightError(RuntimeError):
    """The gauge could not be read; the message names it."""


def running_requests(metrics_text: str, engine: str = AUTO) -> float:
    """Requests in flight on the server, summed over its model labels."""
    if engine != AUTO and engine not in RUNNING_GAUGE:
        raise InflightError(f"no running-requests gauge known for engine {engine!r}")
    names = list(RUNNING_GAUGE.values()) if engine == AUTO else [RUNNING_GAUGE[engine]]
    samples = parse_exposition(metrics_text)
    name, values = names[0], []
    for name in names:
        values = [s.value for s in samples if s.name == name]
        if values:
            break
    if not values:
        raise InflightError(f"{' or '.join(names)} not in the server's /metrics")
    total = sum(values)
    if not math.isfinite(total):
        raise InflightError(f"{name} is not a finite number: {total}")
    return total


def fetch_metrics(url: str, timeout_s: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as r:
        return r.read().decode()


@dataclass
class WaitResult:
    drained: bool
    waited_s: float
    running: float


def wait_until_idle(
    read: Callable[[], float],
    max_wait_s: float,
    poll_s: float = 0.5,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> WaitResult:
    """Poll the running-requests gauge until 0 or max_wait_s (the knob's cap)."""
    start = clock()
    while True:
        running = read()
        waited = clock() - start
        if running <= 0:
            return WaitResult(True, waited, running)
        if waited >= max_wait_s:
            return WaitResult(False, waited, running)
        sleep(poll_s)


def reader(url: str, engine: str) -> Callable[[], float]:
    """The gauge of the server at url; a server that does not answer has nothing in flight."""

    def read() -> float:
        try:
            text = fetch_metrics(url)
        except (urllib.error.URLError, OSError):
            return 0.0
        return running_requests(text, engine)

    return read


def message(result: WaitResult, max_wait_s: float) -> str:
    if result.drained:
        return f"no request in flight (waited {result.waited_s:.1f} s)"
    return (
        f"{result.running:g} request(s) still in flight after {result.waited_s:.1f} s "
        f"(specdeploy_drain_timeout_s={max_wait_s:g}): stopping anyway"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="specdeploy.node.service.inflight", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--url", required=True, help="the server's /metrics")
    parser.add_argument("--max-wait-s", type=float, default=120.0)
    parser.add_argument("--poll-s", type=float, default=0.5)
    parser.add_argument("--engine", default=AUTO, choices=[AUTO, *sorted(RUNNING_GAUGE)])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    for flag, value in (("--max-wait-s", args.max_wait_s), ("--poll-s", args.poll_s)):
        if not math.isfinite(value) or value < 0:
            print(f"inflight: error: {flag} {value}: not a finite number >= 0", file=sys.stderr)
            return 2
    try:
        result = wait_until_idle(reader(args.url, args.engine), args.max_wait_s, args.poll_s)
    except InflightError as e:
        print(f"inflight: error: {args.url}: {e}", file=sys.stderr)
        return 2
    text = message(result, args.max_wait_s)
    print(json.dumps({**asdict(result), "message": text}) if args.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
