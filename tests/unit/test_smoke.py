"""Smoke-check client pieces and the spec-check CLI surface (table, JSON, exit codes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from harness import Standin

from specdeploy.node.validation import check, smoke

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(60)


def test_api_key_sources(tmp_path, monkeypatch):
    monkeypatch.delenv("SPECDEPLOY_API_KEY", raising=False)
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    assert smoke.read_api_key(None) is None
    monkeypatch.setenv("VLLM_API_KEY", "from-vllm-env")
    assert smoke.read_api_key(None) == "from-vllm-env"
    monkeypatch.setenv("SPECDEPLOY_API_KEY", "from-our-env")
    assert smoke.read_api_key(None) == "from-our-env"
    f = tmp_path / "k"
    f.write_text("  file-key  \nsecond line\n")
    assert smoke.read_api_key(str(f)) == "file-key"


def test_no_api_key_argument_exists():
    opts = {a for act in check.build_parser()._actions for a in act.option_strings}
    assert "--api-key-file" in opts and "--api-key" not in opts


def test_bad_base_url():
    with pytest.raises(ValueError):
        smoke.Client("127.0.0.1:8000")


def test_usage_errors_exit_2(tmp_path, capsys):
    g = tmp_path / "g.json"
    g.write_text('{"min_mean_acceptance_lenght": 2}')
    rc = check.main(
        [
            "acceptance",
            "--base-url",
            "http://127.0.0.1:9",
            "--served-model-name",
            "m",
            "--gates",
            str(g),
        ]
    )
    assert rc == 2 and "unknown gate keys" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        check.main(["smoke", "--base-url", "http://127.0.0.1:9"])
    assert e.value.code == 2


def test_wrapper_table_and_json(tmp_path):
    with Standin() as s:
        base = [
            sys.executable,
            "-m",
            "specdeploy.node.validation.check",
            "all",
            "--base-url",
            s.base_url,
            "--served-model-name",
            "tiny-dsv3",
            "--max-requests",
            "4",
            "--max-tokens",
            "32",
            "--baseline-tps",
            "100",
        ]
        p = subprocess.run(base, capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert p.returncode == 0, p.stdout + p.stderr
        lines = p.stdout.splitlines()
        assert lines[0].startswith("specdeploy check all")
        assert any(ln.split()[:2] == ["PASS", "smoke.determinism"] for ln in lines)
        assert lines[-1] == "RESULT: PASS (exit 0)"
        p = subprocess.run([*base, "--json"], capture_output=True, text=True, timeout=60, cwd=ROOT)
        d = json.loads(p.stdout)
        assert d["schema"] == "specdeploy.validation/1" and d["exit_code"] == 0
        assert set(d) >= {
            "run_id",
            "node",
            "release",
            "smoke",
            "acceptance",
            "gates",
            "started_at",
            "finished_at",
            "duration_s",
            "reasons",
        }


def test_check_baseline_and_speed_inputs_fail_with_exit_2(tmp_path, capsys):
    """`check baseline` against nothing, and unusable baseline inputs: could not measure (2)."""
    out = tmp_path / "b.json"
    rc = check.main(
        ["baseline", "--base-url", "http://127.0.0.1:9", "--served-model-name", "m",
         "--levels", "1,8", "--out", str(out)]
    )  # fmt: skip
    assert rc == 2 and not out.exists()
    assert "could not measure" in capsys.readouterr().err
    rc = check.main(["baseline", "--base-url", "http://127.0.0.1:9", "--served-model-name", "m"])
    assert rc == 2 and "--levels is required" in capsys.readouterr().err
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps({"schema": "specdeploy.throughput/1", "speculative": True,
                    "levels": {"1": {"output_tps": 500.0}}})
    )  # fmt: skip
    base = ["all", "--base-url", "http://127.0.0.1:9", "--served-model-name", "m"]
    assert check.main([*base, "--baseline-file", str(spec)]) == 2
    assert "measured with speculation on; not a baseline" in capsys.readouterr().err
    assert check.main([*base, "--baseline-tps", "1=fast"]) == 2
    assert "LEVEL=TPS pairs" in capsys.readouterr().err
    assert check.main([*base, "--levels", "1,1"]) == 2
    assert "distinct integers" in capsys.readouterr().err


class _GoneMidCheck:
    """A server that answers /health and /v1/models, then closes the connection on a completion
    without a response: what a server killed during the smoke check looks like to the client."""

    def __init__(self) -> None:
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                body = b'{"data": [{"id": "m"}]}' if self.path == "/v1/models" else b"{}"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                self.close_connection = True  # no status line: "closed without response"

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_a_server_gone_mid_check_could_not_be_measured_not_a_failed_check(capsys):
    # ci57: a server SIGKILLed during the smoke check after its readiness was reported as a
    # failed check (exit 1) "smoke.completion: ... Remote end closed connection without response"
    gone = _GoneMidCheck()
    try:
        rc = check.main(["smoke", "--base-url", gone.url, "--served-model-name", "m", "--json"])
    finally:
        gone.server.shutdown()
    out = json.loads(capsys.readouterr().out)
    assert rc == 2, out
    (reason,) = [r for r in out["reasons"] if "smoke.completion" in r]
    assert reason.startswith("could not measure: ") and "stopped answering" in reason
    stage = next(s for s in out["smoke"]["stages"] if s["name"] == "completion")
    assert stage["error_kind"] == "network"


def test_a_wrong_answer_is_still_a_failed_check():
    wrong = smoke.StageResult("completion", False, 0.1, "completion returned empty text", value="")
    assert not smoke.stopped_answering(wrong)
    refused = smoke.StageResult("models", False, 0.1, "refused", error_kind="refused")
    assert smoke.stopped_answering(refused)
    http_500 = smoke.StageResult("completion", False, 0.1, "HTTP 500", error_kind="http")
    assert not smoke.stopped_answering(http_500)
