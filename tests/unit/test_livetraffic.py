"""The live-traffic client (tests/integration/livetraffic.py) tells completed, failed and cut
requests apart, against a real HTTP server on loopback that answers each way."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from integration import livetraffic

CHUNK = b'data: {"choices": [{"delta": {"content": "one"}}]}\n\n'
USAGE = b'data: {"choices": [], "usage": {"completion_tokens": 1}}\n\n'


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        mode = self.server.mode  # type: ignore[attr-defined]
        if mode == "refuse":
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(CHUNK)
        if mode == "complete":
            self.wfile.write(USAGE + b"data: [DONE]\n\n")
        self.wfile.flush()  # "cut": the connection closes mid-stream


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd
    httpd.shutdown()


@pytest.mark.parametrize(
    ("mode", "kind"), [("complete", "completed"), ("refuse", "failed"), ("cut", "cut")]
)
def test_each_outcome_is_told_apart(server, mode, kind) -> None:
    server.mode = mode
    url = f"http://127.0.0.1:{server.server_address[1]}"
    assert livetraffic.one_request(url, "m")[0] == kind


def test_refused_connection_is_failed() -> None:
    assert livetraffic.one_request("http://127.0.0.1:9", "m")[0] == "failed"


def test_summary_phases_and_table() -> None:
    out = [
        livetraffic.Outcome(0.0, 0.1, "completed"),
        livetraffic.Outcome(5.0, 5.4, "completed"),
        livetraffic.Outcome(6.0, 6.1, "cut", "reset"),
        livetraffic.Outcome(11.0, 11.2, "completed"),
    ]
    s = livetraffic.summarize(out, 4.0, 10.0)
    assert (s["sent"], s["completed"], s["failed"], s["cut"], s["sent_during"]) == (4, 3, 0, 1, 2)
    assert s["p99_ms"] == {"before": 100, "during": 400, "after": 200}
    row = {"scenario": "x", "nodes": "n1: r, in rotation", **s}
    table = livetraffic.render({"rows": {"1": row}, "finished": "now"})
    assert "| x | 4 | 3 | 0 | 1 | 100 / 400 / 200 | 6.0 | n1: r, in rotation |" in table
