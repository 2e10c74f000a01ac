"""STAND-IN HTTP server: the routes, status codes and JSON shapes of vLLM 0.20.2's OpenAI server
(``/health``, ``/v1/models``, ``/version``, ``/metrics``, ``/v1/completions``,
``/v1/chat/completions`` with ``stream: true`` as server-sent events, 401 without the API key)."""

from __future__ import annotations

import hashlib
import json
import queue
import sys
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import standin_log
import standin_metrics
from standin_engine import Engine


def stand_in_token_ids(text: str, n: int) -> list[int]:
    """``return_token_ids``: n ids for text (the stand-in has no tokenizer; real vLLM returns
    its tokenizer's ids): stable, so a resumed run sees the same ids as an uninterrupted one."""
    digest = hashlib.sha256(text.encode()).digest()
    return [(digest[i % 32] * 131 + i) % 32000 for i in range(n)]


class Server(ThreadingHTTPServer):
    request_queue_size = 128
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        # A client that went away mid-answer is not the server's error: the engines' servers
        # (uvicorn) log no traceback for it, and a traceback buries their own lines.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


ROUTES = [
    ("/openapi.json", "HEAD, GET"),
    ("/docs", "HEAD, GET"),
    ("/health", "GET"),
    ("/metrics", "GET"),
    ("/version", "GET"),
    ("/v1/models", "GET"),
    ("/ping", "GET"),
    ("/v1/chat/completions", "POST"),
    ("/v1/completions", "POST"),
]


def make_handler(eng: Engine, api_keys: list[str]) -> type[BaseHTTPRequestHandler]:
    key_hashes = [hashlib.sha256(k.encode()).digest() for k in api_keys]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "uvicorn"
        sys_version = ""

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _send(self, code: int, body: object, ctype: str = "application/json") -> None:
            raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
            standin_log.access_log(
                f"{self.client_address[0]}:{self.client_address[1]}", self.command, self.path, code
            )

        def _err(self, code: int, message: str, etype: str, param: str | None = None) -> None:
            self._send(
                code, {"error": {"message": message, "type": etype, "param": param, "code": code}}
            )

        def _authorised(self) -> bool:
            if not key_hashes or not self.path.startswith("/v1"):
                return True
            h = self.headers.get("Authorization") or ""
            scheme, _, param = h.partition(" ")
            if scheme.lower() != "bearer":
                return False
            d = hashlib.sha256(param.encode()).digest()
            return any(d == k for k in key_hashes)

        def _gate(self) -> bool:
            if eng.hung.is_set():
                while True:
                    time.sleep(3600)
            if not self._authorised():
                self._send(401, {"error": "Unauthorized"})
                return False
            return True

        def _stream(
            self, chat: bool, prompt: str, words: list[str], p_tok: int, usage_too: bool
        ) -> None:
            """Server-sent events as vLLM's OpenAI server sends them: one chunk per engine step
            (several tokens under speculation), a usage chunk when asked, then [DONE]."""
            steps: queue.Queue[int] = queue.Queue()
            eng.submit(prompt, len(words), steps.put)
            rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
            created = int(time.time())
            obj = "chat.completion.chunk" if chat else "text_completion"
            self.send_response(200)
            self.send_header("content-type", "text/event-stream; charset=utf-8")
            self.send_header("connection", "close")
            self.end_headers()
            self.close_connection = True

            def event(choices: list[dict[str, object]], usage: object = None) -> None:
                chunk = {"id": rid, "object": obj, "created": created, "model": eng.names[0],
                         "choices": choices}  # fmt: skip
                if usage is not None:
                    chunk["usage"] = usage
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.flush()

            sent = 0
            try:
                if chat:
                    event([{"index": 0, "delta": {"role": "assistant", "content": ""},
                            "logprobs": None, "finish_reason": None}])  # fmt: skip
                while sent < len(words):
                    n = steps.get()
                    piece = "".join(words[sent : sent + n])
                    sent += n
                    last = sent >= len(words)
                    finish = "length" if last else None
                    if chat:
                        event([{"index": 0, "delta": {"content": piece}, "logprobs": None,
                                "finish_reason": finish}])  # fmt: skip
                    else:
                        event([{"index": 0, "text": piece, "logprobs": None,
                                "finish_reason": finish, "stop_reason": None}])  # fmt: skip
                if usage_too:
                    event([], {"prompt_tokens": p_tok, "total_tokens": p_tok + len(words),
                               "completion_tokens": len(words)})  # fmt: skip
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                return
            standin_log.access_log(
                f"{self.client_address[0]}:{self.client_address[1]}", "POST", self.path, 200
            )

        def do_GET(self) -> None:
            if not self._gate():
                return
            path = self.path.split("?", 1)[0]
            if path == "/health":
                if eng.faults.get("never_healthy"):
                    self._send(503, "", "application/json")
                else:
                    self._send(200, "", "application/json")
            elif path in ("/ping",):
                self._send(200, "", "application/json")
            elif path == "/version":
                self._send(200, {"version": eng.prof["_version"]})
            elif path == "/metrics":
                self._send(
                    200,
                    standin_metrics.metrics_text(eng),
                    "text/plain; version=0.0.4; charset=utf-8",
                )
            elif path == "/v1/models":
                now = int(eng.started)
                self._send(
                    200,
                    {
                        "object": "list",
                        "data": [
                            {
                                "id": n,
                                "object": "model",
                                "created": now,
                                "owned_by": "vllm",
                                "root": eng.model,
                                "parent": None,
                                "max_model_len": eng.max_model_len,
                                "permission": [
                                    {
                                        "id": f"modelperm-{uuid.uuid4().hex}",
                                        "object": "model_permission",
                                        "created": now,
                                        "allow_create_engine": False,
                                        "allow_sampling": True,
                                        "allow_logprobs": True,
                                        "allow_search_indices": False,
                                        "allow_view": True,
                                        "allow_fine_tuning": False,
                                        "organization": "*",
                                        "group": None,
                                        "is_blocking": False,
                                    }
                                ],
                            }
                            for n in eng.names
                        ],
                    },
                )
            else:
                self._send(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            # Counted until the response is written: a drain that waited only for the engine's
            # batch exited between a request's last step and its response (the client saw the
            # connection cut; real vLLM's server finishes the response first).
            with eng.lock:
                eng.in_flight += 1
            try:
                self._post()
            finally:
                with eng.lock:
                    eng.in_flight -= 1

        def _post(self) -> None:
            if not self._gate():
                return
            if eng.draining.is_set():
                self._err(503, "The server is shutting down.", "ServiceUnavailableError")
                return
            n = int(self.headers.get("content-length") or 0)
            try:
                body = json.loads(self.rfile.read(n) or b"{}")
                if not isinstance(body, dict):
                    raise ValueError("not an object")
            except ValueError as e:
                self._err(400, f"JSON decode error: {e}", "BadRequestError")
                return
            path = self.path.split("?", 1)[0]
            if path not in ("/v1/completions", "/v1/chat/completions"):
                self._send(404, {"detail": "Not Found"})
                return
            model = body.get("model")
            if model is not None and model not in eng.names:
                self._err(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
                return
            if eng.faults.get("never_healthy"):
                self._err(
                    500,
                    "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                    "EngineDeadError",
                )
                return
            chat = path.endswith("chat/completions")
            if chat:
                msgs = body.get("messages")
                if not isinstance(msgs, list) or not msgs:
                    self._err(400, "messages: field required", "BadRequestError", "messages")
                    return
                prompt = "\n".join(
                    f"{m.get('role')}: {m.get('content')}" for m in msgs if isinstance(m, dict)
                )
            else:
                prompt = body.get("prompt")
                if isinstance(prompt, list):
                    prompt = prompt[0] if prompt else ""
                if not isinstance(prompt, str):
                    self._err(400, "prompt: field required", "BadRequestError", "prompt")
                    return
            max_tokens = body.get("max_tokens") or body.get("max_completion_tokens") or 16
            if not isinstance(max_tokens, int) or max_tokens < 1:
                self._err(
                    400,
                    f"max_tokens must be at least 1, got {max_tokens}.",
                    "BadRequestError",
                    "max_tokens",
                )
                return
            temperature = float(
                body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0
            )
            p_tok = max(1, len(prompt.encode()) // 4)
            if p_tok + max_tokens > eng.max_model_len:
                self._err(
                    400,
                    f"This model's maximum context length is {eng.max_model_len} "
                    f"tokens. However, you requested {p_tok + max_tokens} tokens "
                    f"({p_tok} in the messages, {max_tokens} in the completion). Please "
                    "reduce the length of the messages or completion.",
                    "BadRequestError",
                )
                return
            seed = body.get("seed") if isinstance(body.get("seed"), int) else None
            words = eng.words_for(prompt, max_tokens, temperature, seed)
            eng.account_request(p_tok)
            if body.get("stream"):
                opts = body.get("stream_options")
                usage_too = isinstance(opts, dict) and bool(opts.get("include_usage"))
                self._stream(chat, prompt, words, p_tok, usage_too)
                return
            eng.submit(prompt, max_tokens, None).done.wait()
            text = "".join(words)
            usage = {
                "prompt_tokens": p_tok,
                "total_tokens": p_tok + max_tokens,
                "completion_tokens": max_tokens,
                "prompt_tokens_details": None,
            }
            created = int(time.time())
            # vLLM's return_token_ids: the prompt's ids on the response (chat) or on the
            # choice (completions), the completion's on the choice
            want_ids = bool(body.get("return_token_ids"))
            p_ids = stand_in_token_ids(prompt, p_tok) if want_ids else None
            c_ids = stand_in_token_ids(prompt + text, max_tokens) if want_ids else None
            if chat:
                self._send(
                    200,
                    {
                        "id": f"chatcmpl-{uuid.uuid4().hex}",
                        "object": "chat.completion",
                        "created": created,
                        "model": eng.names[0],
                        "choices": [
                            {
                                "index": 0,
                                "message": {
                                    "role": "assistant",
                                    "content": text,
                                    "refusal": None,
                                    "annotations": None,
                                    "audio": None,
                                    "function_call": None,
                                    "tool_calls": [],
                                    "reasoning": None,
                                },
                                "logprobs": None,
                                "finish_reason": "length",
                                "stop_reason": None,
                                "token_ids": c_ids,
                            }
                        ],
                        "service_tier": None,
                        "system_fingerprint": None,
                        "usage": usage,
                        "prompt_logprobs": None,
                        "prompt_token_ids": p_ids,
                        "kv_transfer_params": None,
                    },
                )
            else:
                self._send(
                    200,
                    {
                        "id": f"cmpl-{uuid.uuid4().hex}",
                        "object": "text_completion",
                        "created": created,
                        "model": eng.names[0],
                        "choices": [
                            {
                                "index": 0,
                                "text": text,
                                "logprobs": None,
                                "finish_reason": "length",
                                "stop_reason": None,
                                "token_ids": c_ids,
                                "prompt_logprobs": None,
                                "prompt_token_ids": p_ids,
                            }
                        ],
                        "service_tier": None,
                        "system_fingerprint": None,
                        "usage": usage,
                        "kv_transfer_params": None,
                    },
                )

    return Handler
