#!/usr/bin/env python3
"""STAND-IN for the SGLang GPU inference server. NOT SGLang. For tests and sandbox nodes only.

Started the way ``python -m sglang.launch_server --model-path M [flags]`` is (the SGLang dialect;
``vllm_standin.py serve M`` is the vLLM one, and ``vllm_standin.py --model-path M ...`` hands
over here), it answers SGLang 0.5.15's HTTP surface: ``/health``, ``/health_generate``,
``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``, native ``/generate`` with
``meta_info``, ``/server_info`` (also ``/get_server_info``), ``/metrics`` (only with
``--enable-metrics``, SGLang's names). Batching, timing and text are the vLLM stand-in's engine
(``standin_engine``); what SGLang does differently (log lines, counters, acceptance
bookkeeping) is ``standin_sglang``, fitted to the real SGLang 0.5.15 run recorded on an H200
(tests/fixtures/sglang-0.5.15-h200/, from shared/gpu-recipe/sglang/recorded/run3-final).

Behaviour profile: the vLLM stand-in's ``$SPECDEPLOY_STANDIN_PROFILE`` keys (``acceptance``,
``startup_delay_s``, ``tokens_per_s``, ``timing``, ``faults``), plus ``sglang_version``.

Like real SGLang:
* a flag this SGLang does not have: argparse error, exit 2 (the flag set is read from the SGLang
  installed next to the interpreter, ``srt/server_args.py``, by AST);
* ``--speculative-algorithm EAGLE3`` without ``--speculative-draft-model-path`` on a target that
  is not DeepSeek: ValueError, exit 1;
* the port is bound only when the model is loaded (uvicorn starts last, ``server-spec.log``);
* SIGTERM: ``SIGTERM received. ... Draining requests and shutting down...``, exit.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable

import standin_log
import standin_sglang as sgl
from standin_engine import Engine, Request
from standin_http import Server, make_handler, stand_in_token_ids
from standin_profile import load_profile
from standin_vllm import arch_of, read_config

DEEPSEEK_ARCHS = ("DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM")


class SglEngine(Engine):
    """The stand-in engine with SGLang's accounting: a request's first token comes from its
    prefill (no verify), the rest from decode / verify steps."""

    def submit(self, prompt: str, n_tokens: int, on_step: Callable[[int], None] | None) -> Request:
        with self.lock:
            self.c["generation_tokens"] += 1
        if on_step is not None:
            on_step(1)
        if n_tokens <= 1:
            r = Request(n_tokens, random.Random(0), produced=n_tokens)
            r.done.set()
            return r
        return super().submit(prompt, n_tokens - 1, on_step)


def engine_args(args: argparse.Namespace) -> argparse.Namespace:
    """The attributes the shared engine reads, from SGLang's flags."""
    spec = None
    if args.speculative_algorithm:
        spec = {
            "method": args.speculative_algorithm.lower(),
            "model": args.draft,
            "num_speculative_tokens": args.speculative_num_steps or 3,
        }
    return argparse.Namespace(
        model_tag=args.model_path,
        model=args.model_path,
        served_model_name=[args.served_model_name] if args.served_model_name else None,
        speculative_config=spec,
        max_model_len=args.context_length,
        seed=args.random_seed,
        max_num_seqs=args.max_running_requests,
    )


def make_sgl_handler(eng: SglEngine, args: argparse.Namespace, version: str,
                     state: sgl.SglState | None, draft_tokens: int | None) -> type:  # fmt: skip
    base = make_handler(eng, [args.api_key] if args.api_key else [])

    class Handler(base):  # type: ignore[misc, valid-type]
        def do_GET(self) -> None:
            if not self._gate():
                return
            path = self.path.split("?", 1)[0]
            if path in ("/health", "/health_generate"):
                code = 503 if eng.faults.get("never_healthy") else 200
                self._send(code, "", "text/plain; charset=utf-8")
            elif path in ("/server_info", "/get_server_info"):
                self._send(200, sgl.server_info(args, version, state))
            elif path == "/metrics":
                if not args.enable_metrics:
                    self._send(404, {"detail": "Not Found"})
                else:
                    self._send(200, sgl.metrics_text(eng, state), "text/plain; version=0.0.4")
            elif path == "/v1/models":
                now = int(eng.started)
                self._send(200, {"object": "list", "data": [
                    {"id": n, "object": "model", "created": now, "owned_by": "sglang",
                     "root": args.model_path, "parent": None, "max_model_len": eng.max_model_len}
                    for n in eng.names]})  # fmt: skip
            elif path == "/version":
                self._send(200, {"version": version})
            else:
                super().do_GET()

        def do_POST(self) -> None:
            if self.path.split("?", 1)[0] != "/generate":
                super().do_POST()
                return
            if not self._gate():
                return
            n = int(self.headers.get("content-length") or 0)
            try:
                body = json.loads(self.rfile.read(n) or b"{}")
                if not isinstance(body, dict) or not isinstance(body.get("text"), str):
                    raise ValueError("text: a string is required")
            except ValueError as e:
                self._send(400, {"error": {"message": str(e), "code": 400}})
                return
            sp = body.get("sampling_params") or {}
            max_new = sp.get("max_new_tokens", 128) if isinstance(sp, dict) else 128
            if not isinstance(max_new, int) or max_new < 1:
                self._send(400, {"error": {"message": "max_new_tokens must be >= 1", "code": 400}})
                return
            temperature = float(sp.get("temperature", 1.0)) if isinstance(sp, dict) else 1.0
            prompt = body["text"]
            p_tok = max(1, len(prompt.encode()) // 4)
            words = eng.words_for(prompt, max_new, temperature, None)
            eng.account_request(p_tok)
            began = time.monotonic()
            req = eng.submit(prompt, max_new, None)
            req.done.wait()
            text = "".join(words)
            self._send(200, {
                "text": text,
                "output_ids": stand_in_token_ids(prompt + text, max_new),
                "meta_info": sgl.meta_info(p_tok, max_new, list(req.steps), draft_tokens,
                                           time.monotonic() - began)})  # fmt: skip

    return Handler


def serve(args: argparse.Namespace, version: str) -> int:
    prof = load_profile()
    faults: dict[str, object] = prof["faults"]  # type: ignore[assignment]
    version = str(prof.get("sglang_version") or version)
    prof["_version"] = version
    standin_log.access_log = sgl.access_log  # SGLang's uvicorn lines (server-spec.log)
    eng = SglEngine(engine_args(args), prof)
    sgl.log(
        "THIS IS THE SPECDEPLOY STAND-IN, NOT SGLang (no GPU, no weights). "
        "For tests and sandbox nodes only."
    )
    target_cfg = read_config(args.model_path)
    t_arch = arch_of(target_cfg) or "DeepseekV3ForCausalLM"
    if args.context_length is None and target_cfg:
        mpe = target_cfg.get("max_position_embeddings")
        if isinstance(mpe, int):
            eng.max_model_len = mpe
    draft_tokens = None
    state = None
    if args.speculative_algorithm:
        if args.speculative_algorithm not in ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"):
            print(f"ValueError: unknown speculative algorithm {args.speculative_algorithm!r}")
            return 1
        if not args.draft:
            if t_arch not in DEEPSEEK_ARCHS:
                print("ValueError: speculative_draft_model_path is required for EAGLE3", flush=True)
                return 1
        elif t_arch in DEEPSEEK_ARCHS:
            # server-spec.log: a warning only; the given drafter is used
            sgl.log("DeepSeek MTP does not require setting speculative_draft_model_path.")
        steps = args.speculative_num_steps or 3
        topk = args.speculative_eagle_topk or 1
        draft_tokens = args.speculative_num_draft_tokens or steps + 1
        if topk == 1 and draft_tokens != steps + 1:
            sgl.log(
                f"speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 "
                f"({steps + 1}) when speculative_eagle_topk == 1"
            )
            draft_tokens = steps + 1
        state = sgl.SglState(steps, draft_tokens)
    # SGLang resolves the backend before it prints its arguments: fa3 for MLA on Hopper
    # (server_args.py:4364-4365); the recorded run forced triton (server-spec.log)
    backend = args.attention_backend or "fa3"
    sgl.log(
        f"server_args=ServerArgs(model_path={args.model_path!r}, "
        f"served_model_name={args.served_model_name or args.model_path!r}, "
        f"host={args.host!r}, port={args.port}, tp_size={args.tp_size}, "
        f"context_length={args.context_length}, mem_fraction_static={args.mem_fraction_static}, "
        f"attention_backend={backend!r}, decode_attention_backend=None, "
        f"disable_custom_all_reduce={args.disable_custom_all_reduce}, "
        f"speculative_algorithm={args.speculative_algorithm!r}, "
        f"speculative_draft_model_path={args.draft!r}, "
        f"speculative_num_steps={args.speculative_num_steps}, "
        f"speculative_eagle_topk={args.speculative_eagle_topk}, "
        f"speculative_num_draft_tokens={draft_tokens}, enable_metrics={args.enable_metrics})"
    )
    delay = max(0.0, float(prof.get("startup_delay_s", 1.0)))  # type: ignore[arg-type]
    sgl.log("Init torch distributed begin.")
    sgl.log("Init torch distributed ends. elapsed=0.24 s, mem usage=0.09 GB")
    if faults.get("hang"):
        while True:
            time.sleep(3600)
    sgl.log("Load weight begin. avail mem=139.13 GB")
    time.sleep(delay * 0.5)
    sgl.log(f"Load weight end. elapsed={delay * 0.5:.2f} s, type={t_arch}, avail mem=138.91 GB")
    if state is not None:
        d_arch = arch_of(read_config(args.draft or "")) or "LlamaForCausalLMEagle3"
        sgl.log("Load weight begin. avail mem=138.91 GB")
        sgl.log(f"Load weight end. elapsed=0.03 s, type={d_arch}, avail mem=138.74 GB")
    graphs = ["target verify", "draft decode", "draft extend"] if state else ["target decode"]
    for g in graphs:
        sgl.log(f"Capture {g} CUDA graph begin. backend=full, bs=[1, 2, 4, 8, 16]")
        time.sleep(delay * 0.5 / len(graphs))
        sgl.log(f"Capture {g} CUDA graph end. elapsed={delay * 0.5 / len(graphs):.2f} s")
    sgl.log(
        f"max_total_num_tokens=10294927, max_running_requests={args.max_running_requests or 4096},"
        f" context_len={eng.max_model_len}"
    )
    try:
        httpd = Server(
            (args.host, args.port),
            make_sgl_handler(eng, args, version, state, draft_tokens),
        )
    except OSError as e:
        sgl.log(f"ERROR:    [Errno {e.errno}] error while attempting to bind on address "
                f"({args.host!r}, {args.port}): {e.strerror}")  # fmt: skip
        return 1
    eng.template = sgl.load_template(state is not None)
    eng.backend = backend
    eng.start()

    def on_term(signum: int, frame: object) -> None:
        sgl.log("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    pid = os.getpid()
    sgl.log(f"INFO:     Started server process [{pid}]")
    sgl.log("INFO:     Waiting for application startup.")
    sgl.log("The server is fired up and ready to roll!")
    sgl.log("INFO:     Application startup complete.")
    sgl.log(f"INFO:     Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")
    eng.healthy_at = time.time()
    threading.Thread(
        target=sgl.decode_logger, args=(eng, state, max(1, args.decode_log_interval)), daemon=True
    ).start()
    crash = faults.get("crash_after_healthy_s")
    if crash is not None:

        def crasher() -> None:
            time.sleep(float(crash))  # type: ignore[arg-type]
            sgl.log("Scheduler hit an exception: RuntimeError: CUDA error: an illegal memory "
                    "access was encountered")  # fmt: skip
            os._exit(1)

        threading.Thread(target=crasher, daemon=True).start()
    hang_after = faults.get("hang_after_healthy_s")
    if hang_after is not None:
        threading.Timer(float(hang_after), eng.hung.set).start()  # type: ignore[arg-type]
    httpd.serve_forever(poll_interval=0.2)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    version, root = sgl.installed_sglang()
    known = sgl.flags_of(root) if root is not None else None
    args = sgl.build_parser(known).parse_args(argv)
    return serve(args, version or sgl.DEFAULT_VERSION)


if __name__ == "__main__":
    sys.exit(main())
