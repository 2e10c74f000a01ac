"""Staged smoke check of a vLLM OpenAI-compatible server (runs on the node, stdlib only).

Stages, in order, each with its own timeout and message; a failed stage skips the rest:

``port``         TCP connect to host:port
``health``       ``GET /health`` answers 200
``models``       ``GET /v1/models`` lists the served model name
``completion``   ``POST /v1/completions`` returns non-empty text
``determinism``  the same greedy request (temperature 0, fixed max_tokens) twice gives
                 identical text

vLLM's port accepts connections before the engine is ready and requests then hang, so every
request carries a client timeout. The API key (Bearer) comes from a file or the environment,
never from a command-line value.
"""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

API_KEY_ENV_VARS = ("SPECDEPLOY_API_KEY", "VLLM_API_KEY")

SMOKE_PROMPT = "Write one sentence about the sea."


class HttpError(Exception):
    """A request failed: ``kind`` is timeout | refused | http | bad_response | network."""

    def __init__(self, kind: str, message: str, status: int | None = None) -> None:
        self.kind = kind
        self.status = status
        super().__init__(message)


def read_api_key(path: str | None = None) -> str | None:
    """API key from ``path`` (first line) or $SPECDEPLOY_API_KEY / $VLLM_API_KEY."""
    if path:
        with open(path, encoding="utf-8") as f:
            key = f.read().strip().splitlines()
        return key[0].strip() if key else None
    for var in API_KEY_ENV_VARS:
        v = os.environ.get(var, "").strip()
        if v:
            return v
    return None


class Client:
    """Minimal JSON-over-HTTP client with a timeout on every call."""

    def __init__(self, base_url: str, api_key: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        u = urllib.parse.urlsplit(self.base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"bad base URL {base_url!r} (want http://HOST:PORT)")
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def request(
        self, method: str, path: str, body: object | None, timeout: float
    ) -> tuple[int, bytes]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(
            self.base_url + path, data=data, method=method, headers=headers
        )
        try:
            with self._opener.open(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            try:
                payload = e.read()[:500].decode("utf-8", "replace")
            except Exception:
                payload = ""
            raise HttpError(
                "http", f"{method} {path}: HTTP {e.code} {payload}".strip(), e.code
            ) from None
        except TimeoutError:
            raise HttpError("timeout", f"{method} {path}: no answer within {timeout:g}s") from None
        except urllib.error.URLError as e:
            reason = e.reason
            if isinstance(reason, (TimeoutError, socket.timeout)):
                raise HttpError(
                    "timeout", f"{method} {path}: no answer within {timeout:g}s"
                ) from None
            if isinstance(reason, ConnectionRefusedError):
                raise HttpError("refused", f"{method} {path}: connection refused") from None
            raise HttpError("network", f"{method} {path}: {reason}") from None
        except (ConnectionError, OSError) as e:
            raise HttpError("network", f"{method} {path}: {e}") from None

    def json(self, method: str, path: str, body: object | None, timeout: float) -> object:
        status, raw = self.request(method, path, body, timeout)
        try:
            return json.loads(raw)
        except ValueError:
            raise HttpError(
                "bad_response",
                f"{method} {path}: HTTP {status} but not JSON: {raw[:120]!r}",
                status,
            ) from None

    def text(self, path: str, timeout: float) -> str:
        _, raw = self.request("GET", path, None, timeout)
        return raw.decode("utf-8", "replace")

    def completion(
        self,
        model: str,
        prompt: str,
        max_tokens: int,
        timeout: float,
        temperature: float = 0.0,
        ignore_eos: bool = True,
        seed: int | None = 0,
    ) -> dict[str, object]:
        body: dict[str, object] = {
            "model": model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "ignore_eos": ignore_eos,
        }
        if seed is not None:
            body["seed"] = seed
        out = self.json("POST", "/v1/completions", body, timeout)
        if (
            not isinstance(out, dict)
            or not isinstance(out.get("choices"), list)
            or not out["choices"]
        ):
            raise HttpError("bad_response", f"/v1/completions: no choices in {str(out)[:200]}")
        return out


def completion_text(resp: dict[str, object]) -> str:
    choices = resp.get("choices")
    assert isinstance(choices, list)
    c = choices[0]
    t = c.get("text") if isinstance(c, dict) else None
    return t if isinstance(t, str) else ""


def completion_tokens(resp: dict[str, object]) -> int | None:
    usage = resp.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        return int(usage["completion_tokens"])
    return None


@dataclass
class StageResult:
    name: str
    ok: bool
    seconds: float
    message: str
    status: str = ""  # pass | fail | skip
    value: str | None = None
    # HttpError.kind of a failed request: "refused" or "network" after an earlier stage passed
    # means the server went away mid-check (killed, crashed), not that it answered wrongly
    error_kind: str | None = None

    def __post_init__(self) -> None:
        if not self.status:
            self.status = "pass" if self.ok else "fail"

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


# The smoke stages in the order they run, each with its time limit in seconds.
STAGE_TIMEOUTS_S = {
    "port": 3.0,
    "health": 5.0,
    "models": 10.0,
    "completion": 60.0,
    "determinism": 120.0,
}


@dataclass
class SmokeConfig:
    served_model_name: str
    max_tokens: int = 32
    prompt: str = SMOKE_PROMPT
    stages: list[str] = field(default_factory=lambda: list(STAGE_TIMEOUTS_S))
    timeouts_s: dict[str, float] = field(default_factory=lambda: dict(STAGE_TIMEOUTS_S))


def _timed(name: str, fn: Callable[[], tuple[bool, str, str | None]]) -> StageResult:
    t0 = time.monotonic()
    kind = None
    try:
        ok, msg, value = fn()
    except HttpError as e:
        ok, msg, value, kind = False, str(e), None, e.kind
    except OSError as e:
        ok, msg, value, kind = False, f"{type(e).__name__}: {e}", None, "network"
    return StageResult(name, ok, round(time.monotonic() - t0, 3), msg, value=value, error_kind=kind)


# The request failures that mean no server answered at all (as against a wrong answer).
GONE = ("refused", "network")


def stopped_answering(stage: StageResult) -> bool:
    """Whether this failed stage found no server to answer: the port or /health without any
    HTTP status (down or hung), or any stage whose connection was refused or closed without a
    response (the server went away mid-check: killed, crashed, OOM)."""
    if stage.name in ("port", "health") and stage.value is None:
        return True
    return stage.error_kind in GONE


def check_port(host: str, port: int, timeout: float) -> tuple[bool, str, str | None]:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True, f"{host}:{port} accepts connections", None
    except TimeoutError:
        return False, f"{host}:{port}: connect timed out after {timeout:g}s", None
    except ConnectionRefusedError:
        return False, f"{host}:{port}: connection refused (server not running?)", None
    except OSError as e:
        return False, f"{host}:{port}: {e}", None


def run_smoke(client: Client, cfg: SmokeConfig) -> list[StageResult]:
    results: list[StageResult] = []
    first_text: dict[str, str] = {}

    def port() -> tuple[bool, str, str | None]:
        return check_port(client.host, client.port, cfg.timeouts_s["port"])

    def health() -> tuple[bool, str, str | None]:
        try:
            status, _ = client.request("GET", "/health", None, cfg.timeouts_s["health"])
        except HttpError as e:
            if e.kind == "timeout":
                return (
                    False,
                    (
                        f"GET /health: no answer within {cfg.timeouts_s['health']:g}s "
                        "(engine still loading, or hung)"
                    ),
                    None,
                )
            # An HTTP status is an answer (value set); no status means no answer (value None).
            return False, str(e), None if e.status is None else str(e.status)
        return status == 200, f"GET /health -> {status}", str(status)

    def models() -> tuple[bool, str, str | None]:
        out = client.json("GET", "/v1/models", None, cfg.timeouts_s["models"])
        data = out.get("data") if isinstance(out, dict) else None
        if not isinstance(data, list):
            return False, f"/v1/models: unexpected body {str(out)[:200]}", None
        ids = [m.get("id") for m in data if isinstance(m, dict)]
        if cfg.served_model_name in ids:
            return True, f"served model {cfg.served_model_name!r} listed", cfg.served_model_name
        return (
            False,
            (f"served model {cfg.served_model_name!r} not listed; server lists {ids}"),
            ",".join(str(i) for i in ids),
        )

    def completion() -> tuple[bool, str, str | None]:
        resp = client.completion(
            cfg.served_model_name, cfg.prompt, cfg.max_tokens, cfg.timeouts_s["completion"]
        )
        text = completion_text(resp)
        ntok = completion_tokens(resp)
        first_text["text"] = text
        if not text.strip():
            return False, f"completion returned empty text (completion_tokens={ntok})", ""
        if ntok is not None and ntok <= 0:
            return False, f"completion has text but usage.completion_tokens={ntok}", None
        return True, f"{len(text)} chars, {ntok} tokens: {text[:60]!r}", str(ntok)

    def determinism() -> tuple[bool, str, str | None]:
        a = first_text.get("text")
        if a is None:
            a = completion_text(
                client.completion(
                    cfg.served_model_name, cfg.prompt, cfg.max_tokens, cfg.timeouts_s["determinism"]
                )
            )
        b = completion_text(
            client.completion(
                cfg.served_model_name, cfg.prompt, cfg.max_tokens, cfg.timeouts_s["determinism"]
            )
        )
        if a == b:
            return True, "same greedy request twice: identical text", None
        i = next(
            (k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
        )
        return (
            False,
            (f"greedy outputs differ from char {i}: {a[i : i + 30]!r} vs {b[i : i + 30]!r}"),
            str(i),
        )

    stages: dict[str, Callable[[], tuple[bool, str, str | None]]] = {
        "port": port,
        "health": health,
        "models": models,
        "completion": completion,
        "determinism": determinism,
    }
    failed: str | None = None
    for name in cfg.stages:
        if name not in stages:
            raise ValueError(f"unknown smoke stage {name!r}")
        if failed:
            results.append(
                StageResult(name, False, 0.0, f"skipped: stage {failed!r} failed", status="skip")
            )
            continue
        r = _timed(name, stages[name])
        results.append(r)
        if not r.ok:
            failed = name
    return results


def wait_ready(
    client: Client,
    budget_s: float,
    interval_s: float = 2.0,
    probe_timeout_s: float = 5.0,
    progress: Callable[[str], None] | None = None,
) -> tuple[bool, str]:
    """Poll ``/health`` until it answers 200 or ``budget_s`` runs out (progress every ~10 s)."""
    t0 = time.monotonic()
    last_report = -1e9
    last = "not probed"
    while True:
        elapsed = time.monotonic() - t0
        try:
            status, _ = client.request("GET", "/health", None, probe_timeout_s)
            if status == 200:
                return True, f"/health 200 after {elapsed:.1f}s"
            last = f"HTTP {status}"
        except HttpError as e:
            last = str(e)
        if progress and elapsed - last_report >= 10:
            progress(
                f"waiting for {client.base_url}/health: {elapsed:.0f}s of {budget_s:g}s ({last})"
            )
            last_report = elapsed
        if elapsed + interval_s > budget_s:
            return False, f"not ready after {elapsed:.1f}s: {last}"
        time.sleep(interval_s)
