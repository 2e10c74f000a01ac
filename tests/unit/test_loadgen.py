"""specdeploy.node.validation.loadgen against a small streaming server on 127.0.0.1 (real sockets,
real
Server-Sent Events framing as vLLM writes it: ``data: {json}\\n\\n`` ... ``data: [DONE]``).

Timing appears only as lower bounds the server enforces (a TTFT cannot be shorter than the
server's delay before its first chunk), never as upper bounds (CI runs under load)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from specdeploy.node.validation import loadgen
from specdeploy.node.validation.workload import Workload

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(120)

PROMPTS = [
    [{"role": "user", "content": "first prompt"}],
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "second"}],
]


class FakeServer:
    """Streams ``max_tokens`` tokens, ``tokens_per_chunk`` per SSE event (speculative decoding
    sends several accepted tokens in one chunk), with a first-token delay and a per-chunk delay.
    Records every request body and the most requests it ever had in flight."""

    def __init__(
        self,
        first_delay_s: float = 0.03,
        chunk_delay_s: float = 0.004,
        tokens_per_chunk: int = 1,
        status: int = 200,
        usage: bool = True,
    ) -> None:
        self.first_delay_s = first_delay_s
        self.chunk_delay_s = chunk_delay_s
        self.tokens_per_chunk = tokens_per_chunk
        self.status = status
        self.usage = usage
        self.bodies: list[tuple[str, dict]] = []
        self.auth: list[str | None] = []
        self.inflight = 0
        self.max_inflight = 0
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: object) -> None:
                pass

            def do_GET(self) -> None:
                body = json.dumps({"object": "list", "data": [{"id": "tiny"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                n = int(self.headers["Content-Length"])
                body = json.loads(self.rfile.read(n))
                with fake.lock:
                    fake.bodies.append((self.path, body))
                    fake.auth.append(self.headers.get("Authorization"))
                    fake.inflight += 1
                    fake.max_inflight = max(fake.max_inflight, fake.inflight)
                self.counted = True
                try:
                    fake.stream(self, body)
                finally:
                    fake.finished(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def finished(self, h: BaseHTTPRequestHandler) -> None:
        """The request leaves the in-flight count once, before its last bytes go out: after them
        the client sends its next request, which a loaded machine may let in before this
        handler's thread runs again (ci49 saw c + 1 in flight)."""
        with self.lock:
            if getattr(h, "counted", False):
                h.counted = False  # type: ignore[attr-defined]
                self.inflight -= 1

    def stream(self, h: BaseHTTPRequestHandler, body: dict) -> None:
        if self.status != 200:
            msg = json.dumps({"error": {"message": "model 'x' does not exist"}}).encode()
            h.send_response(self.status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(msg)))
            h.end_headers()
            h.wfile.write(msg)
            return
        chat = h.path == "/v1/chat/completions"
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()

        def chunk(frame: bytes) -> None:  # HTTP/1.1 chunked transfer encoding
            h.wfile.write(f"{len(frame):x}\r\n".encode() + frame + b"\r\n")
            h.wfile.flush()

        def event(obj: object) -> None:
            data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
            chunk(b"data: " + data + b"\n\n")

        def choice(text: str) -> dict:
            return {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}

        # vLLM's chat stream opens with an empty role delta: not a token
        if chat:
            event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        chunk(b": keep-alive\n\n")  # an SSE comment: must be skipped
        time.sleep(self.first_delay_s)
        left = int(body["max_tokens"])
        while left > 0:
            k = min(self.tokens_per_chunk, left)
            event({"choices": [choice("tok " * k)]})
            left -= k
            if left:
                time.sleep(self.chunk_delay_s)
        if self.usage:
            event({"choices": [], "usage": {"completion_tokens": int(body["max_tokens"])}})
        self.finished(h)
        event(b"[DONE]")
        chunk(b"")  # the last chunk

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def __exit__(self, *a: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# measure_levels' own arguments; the rest of a test's keywords are the Workload's fields
CALL_ARGS = ("prompts", "api_key", "ignore_eos", "warmup_per_level")


def measure(server: FakeServer, levels: list[int], **kw: object) -> list[loadgen.LevelResult]:
    args: dict = {"prompts": PROMPTS, "max_tokens": 6, "repeats": 2, "min_window_s": 0.0}
    args.update(kw)
    call = {k: args.pop(k) for k in CALL_ARGS if k in args}
    workload = Workload(levels=levels, **args)
    return loadgen.measure_levels(server.url, "tiny", workload, **call)


def test_chat_levels_count_requests_tokens_and_repeats() -> None:
    with FakeServer() as srv:
        rows = measure(srv, [1, 4], repeats=3)
    assert [r.concurrency for r in rows] == [1, 4]
    one, four = rows
    # a repeat issues at least max(8, 2c) requests: 8 at c=1 and c=4, three repeats each
    assert one.requests == 24 and four.requests == 24
    assert one.output_tokens == 24 * 6 and four.output_tokens == 24 * 6
    assert len(one.repeats_tps) == 3 and all(x > 0 for x in one.repeats_tps)
    # the summary is the median of the repeats, the spread their range over it
    assert one.output_tps == sorted(one.repeats_tps)[1]
    lo, hi = min(four.repeats_tps), max(four.repeats_tps)
    assert four.spread == pytest.approx((hi - lo) / sorted(four.repeats_tps)[1])
    # one warm-up request before the first level, not counted
    assert len(srv.bodies) == 1 + 24 + 24


def test_warmup_per_level_sends_one_unmeasured_round_of_c_before_each_level() -> None:
    with FakeServer() as srv:
        rows = measure(srv, [2, 4], repeats=1, warmup_per_level=True)
    measured = sum(r.requests for r in rows)
    assert [r.requests for r in rows] == [8, 8]
    assert len(srv.bodies) == 1 + 2 + 4 + measured


def test_workers_keep_exactly_c_requests_in_flight() -> None:
    with FakeServer(first_delay_s=0.1) as srv:
        measure(srv, [4], repeats=1)
    assert srv.max_inflight == 4


def test_window_keeps_issuing_requests_until_it_has_passed() -> None:
    with FakeServer(first_delay_s=0.02, chunk_delay_s=0.0) as srv:
        (row,) = measure(srv, [2], repeats=1, min_window_s=0.6)
    assert row.wall_s >= 0.6
    # each request takes >= 20 ms with 2 workers: far more than the 8-request minimum
    assert row.requests > 8


def test_ttft_and_itl_come_from_the_stream() -> None:
    with FakeServer(first_delay_s=0.05, chunk_delay_s=0.02) as srv:
        (row,) = measure(srv, [1], repeats=1)
    # TTFT skips the empty role delta and the comment: it includes the first-token delay
    assert row.ttft_p50_s >= 0.05 and row.ttft_p99_s >= row.ttft_p50_s
    # five gaps per request of six one-token chunks, each >= the server's chunk delay
    assert row.itl_p50_s >= 0.02 and row.itl_p99_s >= row.itl_p50_s


def test_several_tokens_per_chunk_are_counted_from_usage_not_chunks() -> None:
    with FakeServer(tokens_per_chunk=3) as srv:
        (row,) = measure(srv, [1], repeats=1, max_tokens=9)
    assert row.output_tokens == row.requests * 9


def test_request_bodies_stream_with_usage_and_carry_the_sampling_knobs() -> None:
    with FakeServer() as srv:
        measure(srv, [1], repeats=1, temperature=0.7, top_p=0.9)
    path, body = srv.bodies[-1]
    assert path == "/v1/chat/completions"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["temperature"] == 0.7 and body["top_p"] == 0.9
    assert body["ignore_eos"] is True and body["max_tokens"] == 6 and body["model"] == "tiny"
    sent = [b["messages"] for _, b in srv.bodies]
    assert PROMPTS[0] in sent and PROMPTS[1] in sent  # the workers cycle over the prompts


def test_completions_endpoint_sends_the_joined_text_and_ignore_eos_can_be_off() -> None:
    with FakeServer() as srv:
        (row,) = measure(srv, [2], repeats=1, endpoint="completions", ignore_eos=False)
    assert row.output_tokens == row.requests * 6
    paths = {p for p, _ in srv.bodies}
    assert paths == {"/v1/completions"}
    prompts = {b["prompt"] for _, b in srv.bodies}
    assert prompts == {"first prompt", "be brief\nsecond"}
    assert all("ignore_eos" not in b and "messages" not in b for _, b in srv.bodies)


def test_api_key_is_sent_as_bearer() -> None:
    with FakeServer() as srv:
        measure(srv, [1], repeats=1, api_key="s3cret")
    assert srv.auth and set(srv.auth) == {"Bearer s3cret"}


def test_http_error_stops_the_measurement_naming_the_status() -> None:
    with FakeServer(status=404) as srv, pytest.raises(loadgen.LoadgenError) as e:
        measure(srv, [1])
    assert "HTTP 404" in str(e.value) and "does not exist" in str(e.value)


def test_stream_without_usage_is_an_error_not_a_guess() -> None:
    with FakeServer(usage=False) as srv, pytest.raises(loadgen.LoadgenError, match="no usage"):
        measure(srv, [1])


def test_unreachable_server_is_an_error() -> None:
    with FakeServer() as srv:
        url = srv.url
    with pytest.raises(loadgen.LoadgenError, match="POST"):
        loadgen.measure_levels(
            url,
            "tiny",
            Workload(levels=[1], max_tokens=2, request_timeout_s=5),
            prompts=PROMPTS,
        )


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"levels": []}, "levels"),
        ({"levels": [0]}, "levels"),
        ({"prompts": []}, "prompts"),
        ({"endpoint": "embeddings"}, "endpoint"),
        ({"repeats": 0}, "repeats"),
    ],
)
def test_bad_arguments_are_refused_before_any_request(kw: dict, match: str) -> None:
    args: dict = {"levels": [1], "prompts": PROMPTS}
    args.update(kw)
    prompts = args.pop("prompts")
    # the workload's values are refused when it is made (WorkloadError is a ValueError), the
    # prompts by measure_levels: either way before any request
    with FakeServer() as srv, pytest.raises(ValueError, match=match):
        loadgen.measure_levels(srv.url, "tiny", Workload(**args), prompts=prompts)
    assert srv.bodies == []


def test_sse_parser_handles_crlf_comments_and_multiline_data() -> None:
    raw = [
        b": hello\r\n",
        b'data: {"a":\r\n',
        b"data: 1}\r\n",
        b"\r\n",
        b"event: x\n",
        b"data:[DONE]\n",
        b"\n",
    ]
    assert list(loadgen.sse_events(iter(raw))) == ['{"a":\n1}', "[DONE]"]


def test_prompts_file_accepts_messages_and_prompt_lines(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text(
        json.dumps({"messages": [{"role": "user", "content": "hi"}]})
        + "\n\n"
        + json.dumps({"prompt": "plain"})
        + "\n"
    )
    assert loadgen.load_prompts_file(f) == [
        [{"role": "user", "content": "hi"}],
        [{"role": "user", "content": "plain"}],
    ]
    f.write_text('{"messages": "nope"}\n')
    with pytest.raises(loadgen.LoadgenError, match="line 1"):
        loadgen.load_prompts_file(f)


def test_the_toolkit_prompt_set_loads() -> None:
    prompts = loadgen.load_prompts_file(loadgen.default_prompts_file())
    assert len(prompts) >= 8 and all(p[0]["role"] == "user" for p in prompts)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specdeploy.node.validation.loadgen", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
    )


def test_cli_json_measures_every_level_with_the_served_model() -> None:
    with FakeServer(chunk_delay_s=0.0) as srv:
        p = _cli(
            "--base-url",
            srv.url,
            "--levels",
            "1,2",
            "--max-tokens",
            "4",
            "--repeats",
            "2",
            "--min-window-s",
            "0",
            "--json",
        )
        models = {b["model"] for _, b in srv.bodies}
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["model"] == "tiny" and models == {"tiny"}
    assert [lv["concurrency"] for lv in out["levels"]] == [1, 2]
    assert all(lv["output_tokens"] == lv["requests"] * 4 for lv in out["levels"])
    assert set(out["levels"][0]) == {
        "concurrency",
        "requests",
        "output_tokens",
        "wall_s",
        "output_tps",
        "repeats_tps",
        "spread",
        "ttft_p50_s",
        "ttft_p99_s",
        "itl_p50_s",
        "itl_p99_s",
    }


def test_cli_table_and_exit_codes() -> None:
    with FakeServer(chunk_delay_s=0.0) as srv:
        ok = _cli(
            "--base-url",
            srv.url,
            "--model",
            "tiny",
            "--levels",
            "1",
            "--repeats",
            "1",
            "--max-tokens",
            "2",
            "--min-window-s",
            "0",
        )
        url = srv.url
    assert ok.returncode == 0, ok.stderr
    assert "tok/s" in ok.stdout and "ttft" in ok.stdout
    down = _cli("--base-url", url, "--model", "tiny", "--levels", "1", "--timeout-s", "5")
    assert down.returncode == 2
    assert down.stderr.startswith("loadgen: POST ") and len(down.stderr.strip().splitlines()) == 1
    bad = _cli("--base-url", url, "--levels", "1,x")
    assert bad.returncode == 2 and "--levels" in bad.stderr
