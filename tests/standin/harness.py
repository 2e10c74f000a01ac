"""Test helper: start the vLLM STAND-IN (``vllm_standin.py``) on 127.0.0.1 and a free port.

    with Standin(profile={"acceptance": [0.8, 0.6]}, spec_tokens=2) as s:
        s.base_url, s.log_text(), s.proc

Only the process this helper started is ever stopped (by its own pid).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

STANDIN = Path(__file__).resolve().parent / "vllm_standin.py"
STANDIN_SGLANG = Path(__file__).resolve().parent / "sglang_standin.py"
PYTHON = os.environ.get("SPECDEPLOY_STANDIN_PYTHON", sys.executable)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Standin:
    def __init__(
        self,
        profile: dict[str, Any] | None = None,
        spec_tokens: int | None = 3,
        served_name: str = "tiny-dsv3",
        model_path: str = "/nonexistent/target",
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
        wait: bool = True,
        spec_config: dict[str, Any] | None = None,
        dialect: str = "vllm",
    ) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.served_name = served_name
        self._tmp = tempfile.TemporaryDirectory(prefix="standin-")
        self.log_path = Path(self._tmp.name) / "server.log"
        prof_path = Path(self._tmp.name) / "profile.json"
        prof = {"startup_delay_s": 0.1, "tokens_per_s": 4000.0, "log_stats_interval_s": 1.0}
        prof.update(profile or {})
        prof_path.write_text(json.dumps(prof))
        self.args = [
            PYTHON,
            str(STANDIN),
            "serve",
            model_path,
            "--served-model-name",
            served_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        if dialect == "sglang":  # launched as `python -m sglang.launch_server` is
            self.args = [PYTHON, str(STANDIN_SGLANG), "--model-path", model_path,
                         "--served-model-name", served_name, "--host", "127.0.0.1",
                         "--port", str(self.port), "--enable-metrics"]  # fmt: skip
            if spec_tokens:
                self.args += ["--speculative-algorithm", "EAGLE3",
                              "--speculative-draft-model-path", "/nonexistent/drafter",
                              "--speculative-num-steps", str(spec_tokens),
                              "--speculative-eagle-topk", "1",
                              "--speculative-num-draft-tokens", str(spec_tokens + 1)]  # fmt: skip
        elif spec_config is not None:
            self.args += ["--speculative-config", json.dumps(spec_config)]
        elif spec_tokens:
            self.args += [
                "--speculative-config",
                json.dumps(
                    {
                        "method": "eagle3",
                        "model": "/nonexistent/drafter",
                        "num_speculative_tokens": spec_tokens,
                    }
                ),
            ]
        self.args += extra_args or []
        base_env = {k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"}
        self.env = dict(base_env, SPECDEPLOY_STANDIN_PROFILE=str(prof_path), **(env or {}))
        # As on a sandbox node (the unit's PYTHONPATH is the release's toolkit): the stand-in
        # reads SpeculativeConfig with the toolkit's own extractor.
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (self.env.get("PYTHONPATH"), str(STANDIN.parents[2])) if p
        )
        self.wait = wait
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Standin:
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            self.args,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
        )
        if self.wait:
            self.wait_healthy()
        return self

    def wait_healthy(self, budget: float = 15.0) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < budget:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"stand-in exited {self.proc.returncode}:\n{self.log_text()}")
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"stand-in not healthy after {budget}s:\n{self.log_text()}")

    def wait_port(self, budget: float = 10.0) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < budget:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("stand-in port never opened")

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if getattr(self, "_log", None):
            self._log.close()

    def __enter__(self) -> Standin:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._tmp.cleanup()
