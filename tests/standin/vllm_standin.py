#!/usr/bin/env python3
"""STAND-IN for the vLLM GPU inference server. NOT vLLM. For tests and sandbox nodes only.

It is invoked exactly like vLLM (``python3 vllm_standin.py serve MODEL_PATH [flags]``) and
answers the HTTP surface the toolkit uses the way real vLLM 0.20.2 does (``/health``,
``/v1/models``, ``/version``, ``/metrics``, ``POST /v1/completions``,
``POST /v1/chat/completions``, 401 ``{"error": "Unauthorized"}`` on ``/v1/*`` when an API key
is set). ``/metrics`` is the REAL recorded vLLM 0.20.2 exposition text
(``tests/fixtures/vllm-0.20.2/metrics-{spec,nospec}.txt``) with the spec-decode counters,
token counters and ``model_name`` replaced by live values. It logs vLLM-format lines to
stdout, including the attention backend line and periodic ``SpecDecoding metrics:`` lines.
No GPU, no model weights: text is derived from a hash of the prompt (deterministic at
temperature 0); an engine thread batches the running requests step by step with step times
from a model of the GPU (``standin_timing``: fitted to real vLLM 0.20.2 on an H200 with a
DeepSeek-V3-shaped MoE target), so throughput depends on concurrency and the speculative step
cost on batch size and k, and throughput is a real time measurement. ``stream: true`` answers
with server-sent events, one chunk per engine step.

Split by job: ``standin_http`` (routes, streaming), ``standin_engine`` (batching, counters),
``standin_timing`` (step-time model), ``standin_metrics`` (/metrics text), ``standin_log``
(vLLM's log lines), ``standin_vllm`` (flags and vLLM's rules), ``standin_profile`` (the profile);
``fit_profile.py`` fits the timing model to recordings.

Like real vLLM:
* unknown flags: argparse error, exit 2; bad ``--speculative-config``: ValueError, exit 1.
  The allowed keys are read (by AST, without importing) from the vLLM installed next to this
  interpreter when there is one (a release venv), else vLLM 0.20.2's list.
* EAGLE-3 on a target whose ``model_type`` is not in the installed vLLM's allowlist is
  refused with vLLM's message; a target model class without ``SupportsEagle3`` in the
  installed vLLM fails with "Model does not support EAGLE3 interface ...". So the sandbox
  really depends on the patches being applied.
* ``--attention-backend TRITON_MLA`` (any MLA backend) with a non-MLA (llama-style) drafter
  exits with the measured ``ValueError: Selected backend AttentionBackendEnum.TRITON_MLA is
  not valid for this configuration. Reason: ['non-MLA not supported']``.
* The port is bound before the "engine" is ready: connections are accepted by the kernel and
  requests hang until start-up finishes (``startup_delay_s``).
* Without ``--speculative-config`` /metrics has no spec-decode series.

Behaviour profile: JSON file named by $SPECDEPLOY_STANDIN_PROFILE (all keys optional)::

    {
      "startup_delay_s": 1.0,          # load time before the server answers
      "acceptance": [0.8, 0.65, 0.55], # per-position acceptance rate (accepted_i / drafts)
      "tokens_per_s": null,            # one request's decode speed without speculation: scales
                                       # the timing model (default: the fitted H200, ~510)
      "timing": {},                    # standin_timing.Timing fields over the fitted DEFAULT:
                                       # dense_s, expert_s, token_s, draft_s, draft_token_s,
                                       # n_experts (0: dense target), top_k
      "spec_step_cost": null,          # LEGACY: per-request model, a speculative step costs
                                       # this many decode steps at tokens_per_s (any concurrency)
      "tokens_per_s_spec": null,       # LEGACY override: speed with speculation
      "max_request_s": null,           # accepted for old profiles; no effect (was a cap)
      "platform": "sm120",             # sm120 -> TRITON_MLA; "h200" -> FLASH_ATTN_MLA
      "vllm_version": null,            # default: the installed vllm's version, else 0.20.2
      "log_stats_interval_s": 10.0,    # also $VLLM_LOG_STATS_INTERVAL
      "check_installed_vllm": true,    # allowlist / SupportsEagle3 checks (see above)
      "refuse_spec": true,             # the TRITON_MLA + non-MLA drafter failure
      "faults": {
        "never_healthy": false,        # serves, but /health 503 and generation 500
        "crash_after_healthy_s": null, # exit 1 that many seconds after becoming healthy
        "hang": false,                 # port open, never answers
        "hang_after_healthy_s": null,  # stops answering that many seconds after healthy
        "wrong_text": false            # "random" (non-deterministic) or "empty"
      }
    }

Fault keys may also be given at the top level. Fixtures dir: $SPECDEPLOY_STANDIN_FIXTURES,
else ``../fixtures/vllm-0.20.2`` next to this file, else a minimal built-in template.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time

import standin_log
import standin_metrics
from standin_engine import Engine
from standin_http import ROUTES, Server, make_handler
from standin_log import PID, _print_lock, fail_engine, log, log_raw
from standin_profile import load_profile
from standin_vllm import (
    DEFAULT_VERSION,
    MLA_BACKENDS,
    MLA_MODEL_TYPES,
    PLATFORMS,
    arch_of,
    build_parser,
    installed_vllm,
    model_type_of,
    read_config,
    spec_rules,
    supports_eagle3,
    validate_schedule,
)


def serve(args: argparse.Namespace) -> int:
    prof = load_profile()
    faults: dict[str, object] = prof["faults"]  # type: ignore[assignment]
    inst_version, vllm_root = installed_vllm()
    version = str(prof.get("vllm_version") or inst_version or DEFAULT_VERSION)
    prof["_version"] = version
    eng = Engine(args, prof)
    model = eng.model
    standin_log.banner(version, model)
    log(
        "WARNING",
        "standin.py:1",
        "THIS IS THE SPECDEPLOY STAND-IN, NOT vLLM (no GPU, "
        "no weights). For tests and sandbox nodes only.",
    )
    defaults = vars(build_parser().parse_args(["serve"]))
    nondefault = {k: v for k, v in vars(args).items() if k != "command" and v != defaults.get(k)}
    log("INFO", "utils.py:233", f"non-default args: {nondefault}")
    api_keys = list(args.api_key or [])
    if not api_keys and os.environ.get("VLLM_API_KEY"):
        api_keys = [os.environ["VLLM_API_KEY"]]

    target_cfg = read_config(model)
    t_arch = arch_of(target_cfg) or "DeepseekV3ForCausalLM"
    t_type = model_type_of(target_cfg)
    target_mla = (t_type or "deepseek_v3").startswith(MLA_MODEL_TYPES)
    if (
        t_type
        and target_cfg
        and isinstance(target_cfg.get("max_position_embeddings"), int)
        and not args.max_model_len
    ):
        eng.max_model_len = int(target_cfg["max_position_embeddings"])  # type: ignore[arg-type]
    log("INFO", "model.py:555", f"Resolved architecture: {t_arch}")
    log("INFO", "model.py:1680", f"Using max model len {eng.max_model_len}")

    drafter_cfg = None
    check_inst = prof.get("check_installed_vllm", True) and vllm_root is not None
    if eng.spec is not None:
        keys, allow, allow_var = spec_rules(vllm_root)
        extra = [k for k in eng.spec if k not in keys]
        if extra:
            msg = (
                f"{len(extra)} validation error{'s' if len(extra) > 1 else ''} for "
                "SpeculativeConfig\n"
                + "\n".join(
                    f"{k}\n  Extra inputs are not permitted [type=extra_forbidden, "
                    f"input_value={eng.spec[k]!r}, input_type={type(eng.spec[k]).__name__}]"
                    for k in extra
                )
            )
            log("ERROR", "arg_utils.py:1", msg)
            print(f"pydantic_core._pydantic_core.ValidationError: {msg}", flush=True)
            return 1
        nst = eng.spec.get("num_speculative_tokens")
        if nst is None:
            print(
                "ValueError: num_speculative_tokens must be provided with speculative model "
                "unless the draft model config contains an n_predict parameter.",
                flush=True,
            )
            return 1
        if not isinstance(nst, int) or nst <= 0:
            print(
                f"ValueError: Expected num_speculative_tokens to be greater than zero ({nst}).",
                flush=True,
            )
            return 1
        sched = eng.spec.get("num_speculative_tokens_per_batch_size")
        if sched is not None:
            # vLLM's own validation, loaded from the installed wheel's file (pure Python)
            problem = validate_schedule(vllm_root, sched)
            if problem:
                print(f"ValueError: {problem}", flush=True)
                return 1
        if "tensor_parallel_size" in eng.spec:
            print(
                "ValueError: 'tensor_parallel_size' is not a valid argument in the "
                "speculative_config. Please pass 'draft_tensor_parallel_size' instead.",
                flush=True,
            )
            return 1
        dtp = eng.spec.get("draft_tensor_parallel_size")
        if dtp is not None and dtp not in (1, args.tensor_parallel_size):
            print(
                f"ValueError: draft_tensor_parallel_size={dtp} cannot be other value than 1 "
                f"or target model tensor_parallel_size={args.tensor_parallel_size}",
                flush=True,
            )
            return 1
        method = eng.spec.get("method")
        if method == "eagle3" and t_type and allow and not any(s in t_type for s in allow):
            label = "Eagle3" if allow_var == "eagle3_target_supported" else method
            print(
                f"ValueError: {label} is only supported for {allow} models. Got "
                f"self.target_model_config.hf_text_config.model_type={t_type!r}",
                flush=True,
            )
            return 1
        drafter_cfg = read_config(str(eng.spec.get("model") or ""))
        if eng.spec.get("model") and drafter_cfg is None:
            log(
                "WARNING",
                "standin.py:2",
                f"drafter {eng.spec.get('model')!r} has no readable "
                "config.json; assuming a llama-style EAGLE-3 drafter",
            )
        log(
            "INFO",
            "model.py:555",
            f"Resolved architecture: {arch_of(drafter_cfg) or 'LlamaForCausalLMEagle3'}",
        )

    sc = (
        f"SpeculativeConfig(method={eng.spec.get('method')!r}, model={eng.spec.get('model')!r}"
        f", num_spec_tokens={eng.k})"
        if eng.spec
        else "None"
    )
    log(
        "INFO",
        "core.py:109",
        (
            f"Initializing a V1 LLM engine (v{version}) with config: model={model!r}, "
            f"speculative_config={sc}, tokenizer={model!r}, "
            f"trust_remote_code={args.trust_remote_code}, dtype=torch.bfloat16, "
            f"max_seq_len={eng.max_model_len}, tensor_parallel_size={args.tensor_parallel_size}, "
            f"pipeline_parallel_size={args.pipeline_parallel_size}, "
            f"data_parallel_size={args.data_parallel_size}, "
            f"disable_custom_all_reduce={args.disable_custom_all_reduce}, "
            f"enforce_eager={args.enforce_eager}, kv_cache_dtype={args.kv_cache_dtype}, "
            f"seed={args.seed}, served_model_name={eng.names[0]}"
        ),
        proc="EngineCore",
    )

    # Bind now: from here on the port accepts connections but nothing answers yet.
    host = args.host or "0.0.0.0"
    try:
        httpd = Server((host, args.port), make_handler(eng, api_keys))
    except OSError as e:
        log(
            "ERROR",
            "api_server.py:1",
            f"OSError: [Errno {e.errno}] error while attempting to "
            f"bind on address ({host!r}, {args.port}): {e.strerror}",
        )
        return 1
    httpd.daemon_threads = True

    def finish() -> None:
        with _print_lock:
            sys.stdout.write(
                f"(APIServer pid={PID}) INFO:     Shutting down\n"
                f"(APIServer pid={PID}) INFO:     Finished server process "
                f"[{PID}]\n"
            )
            sys.stdout.flush()
        os._exit(0)

    drain_s = int(getattr(args, "shutdown_timeout", 0) or 0)

    def drain() -> None:
        """vLLM's drain (entrypoints/launcher.py, --shutdown-timeout N): the requests in
        flight run to their end for up to N s, then the server exits. New requests meanwhile
        get 503 (the stand-in's choice: a balancer has taken the node out before SIGTERM)."""
        deadline = time.monotonic() + drain_s
        while (eng.running or eng.in_flight) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = max(eng.running, eng.in_flight)
        log("INFO", "launcher.py:124", "[shutdown] API server: engine client stopped")
        if left:
            log("WARNING", "launcher.py:124", f"[shutdown] {left} request(s) aborted at timeout")
        finish()

    def on_term(signum: int, frame: object) -> None:
        if eng.draining.is_set():
            return
        eng.draining.set()
        log("INFO", "launcher.py:99", "[shutdown] API server: shutdown triggered")
        mode = "drain" if drain_s > 0 else "abort"
        log(
            "INFO",
            "launcher.py:116",
            f"[shutdown] API server: stopping engine client mode={mode} timeout={drain_s}s",
        )
        if drain_s <= 0:
            finish()
        threading.Thread(target=drain, name="drain", daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    platform = str(prof.get("platform", "sm120"))
    auto_mla, pot_mla, auto_attn, pot_attn, fa_ver = PLATFORMS.get(platform, PLATFORMS["sm120"])
    if isinstance(prof.get("attention_backend"), str):
        auto_mla = str(prof["attention_backend"])
    log("INFO", "gpu_model_runner.py:4777", f"Starting to load model {model}...", proc="EngineCore")
    if args.attention_backend:
        eng.backend = args.attention_backend
        log(
            "INFO",
            "cuda.py:308",
            f"Using AttentionBackendEnum.{eng.backend} backend.",
            proc="EngineCore",
        )
    else:
        eng.backend = auto_mla if target_mla else auto_attn
        pot = pot_mla if target_mla else pot_attn
        log(
            "INFO",
            "cuda.py:368",
            f"Using {eng.backend} attention backend out of potential backends: {pot}.",
            proc="EngineCore",
        )
    # The start's phases in vLLM 0.20.2's words (tests/fixtures/vllm-0.20.2-gpu-tier/runs/
    # */engine.log): weights (shard progress), torch.compile, CUDA graph capture; the start-up
    # delay is shared among them as a real start spends it (about 60/25/15 %).
    delay = max(0.0, float(prof.get("startup_delay_s", 1.0)))  # type: ignore[arg-type]
    weights_s, compile_s, graphs_s = delay * 0.6, delay * 0.25, delay * 0.15
    shards = 4

    def shard_progress(done: int) -> None:
        log_raw(
            f"Loading safetensors checkpoint shards: {100 * done // shards:3d}% Completed"
            f" | {done}/{shards} [00:00<00:00, 1.00it/s]",
            proc="EngineCore",
        )

    shard_progress(0)
    if faults.get("hang"):
        while True:  # port open (bound, listening), never answers
            time.sleep(3600)
    for done in range(1, shards + 1):
        time.sleep(weights_s / shards)
        shard_progress(done)
    log(
        "INFO",
        "default_loader.py:384",
        f"Loading weights took {weights_s:.2f} seconds",
        proc="EngineCore",
    )
    if eng.spec is not None:
        log("INFO", "gpu_model_runner.py:4801", "Loading drafter model...", proc="EngineCore")
        d_arch = arch_of(drafter_cfg) or "LlamaForCausalLMEagle3"
        drafter_mla = "deepseek" in d_arch.lower() or "kimi" in d_arch.lower()
        if args.attention_backend:
            if (
                args.attention_backend in MLA_BACKENDS
                and not drafter_mla
                and prof.get("refuse_spec", True)
            ):
                fail_engine(
                    f"Selected backend AttentionBackendEnum.{args.attention_backend} is "
                    "not valid for this configuration. Reason: ['non-MLA not supported']"
                )
        else:
            log(
                "INFO",
                "cuda.py:368",
                f"Using {auto_attn} attention backend out of potential backends: {pot_attn}.",
                proc="EngineCore",
            )
            if auto_attn == "FLASH_ATTN":
                log(
                    "INFO",
                    "flash_attn.py:646",
                    f"Using FlashAttention version {fa_ver}",
                    proc="EngineCore",
                )
        if check_inst and eng.spec.get("method") == "eagle3" and vllm_root is not None:
            sup = supports_eagle3(vllm_root, t_arch)
            if sup is False:
                fail_engine(
                    "Model does not support EAGLE3 interface but "
                    "aux_hidden_state_outputs was requested",
                    exc="RuntimeError",
                )
    log(
        "INFO",
        "gpu_model_runner.py:4879",
        f"Model loading took 0.29 GiB memory and {weights_s:.6f} seconds",
        proc="EngineCore",
    )
    cache = os.environ.get("VLLM_CACHE_ROOT", "/tmp/vllm-cache")
    log(
        "INFO",
        "backends.py:1069",
        f"Using cache directory: {cache}/torch_compile_cache/standin/rank_0_0/backbone"
        " for vLLM's torch.compile",
        proc="EngineCore",
    )
    time.sleep(compile_s)
    log(
        "INFO",
        "backends.py:391",
        f"Compiling a graph for compile range (1, 8192) takes {compile_s:.2f} s",
        proc="EngineCore",
    )
    log(
        "INFO", "monitor.py:53", f"torch.compile took {compile_s:.2f} s in total", proc="EngineCore"
    )
    log(
        "INFO",
        "gpu_model_runner.py:5963",
        "Profiling CUDA graph memory: PIECEWISE=49 (largest=512), FULL=49 (largest=512)",
        proc="EngineCore",
    )
    time.sleep(graphs_s)
    log_raw(
        "Capturing CUDA graphs (decode, FULL): 100%|██████████| 49/49 [00:00<00:00, 58.31it/s]",
        proc="EngineCore",
    )
    log(
        "INFO",
        "gpu_model_runner.py:6133",
        f"Graph capturing finished in {graphs_s:.0f} secs, took 0.48 GiB",
        proc="EngineCore",
    )
    log(
        "INFO",
        "core.py:299",
        f"init engine (profile, create kv cache, warmup model) took {compile_s + graphs_s:.2f} s"
        f" (compilation: {compile_s:.2f} s)",
        proc="EngineCore",
    )

    eng.template = standin_metrics.load_template(eng.spec is not None)
    eng.start()
    log("INFO", "api_server.py:598", "Supported tasks: ['generate']")
    log("INFO", "api_server.py:602", f"Starting vLLM server on http://{host}:{args.port}")
    log("INFO", "launcher.py:37", "Available routes are:")
    for r, m in ROUTES:
        log("INFO", "launcher.py:46", f"Route: {r}, Methods: {m}")
    with _print_lock:
        sys.stdout.write(
            f"(APIServer pid={PID}) INFO:     Started server process [{PID}]\n"
            f"(APIServer pid={PID}) INFO:     Waiting for application startup.\n"
            f"(APIServer pid={PID}) INFO:     Application startup complete.\n"
        )
        sys.stdout.flush()
    eng.healthy_at = time.time()
    interval = float(
        os.environ.get("VLLM_LOG_STATS_INTERVAL") or prof.get("log_stats_interval_s", 10.0)
    )  # type: ignore[arg-type]
    if not args.disable_log_stats:
        threading.Thread(target=standin_log.stats_logger, args=(eng, interval), daemon=True).start()
    crash = faults.get("crash_after_healthy_s")
    if crash is not None:

        def crasher() -> None:
            time.sleep(float(crash))  # type: ignore[arg-type]
            log("ERROR", "core.py:1136", "EngineCore encountered a fatal error.", proc="EngineCore")
            log(
                "ERROR",
                "async_llm.py:1",
                "AsyncLLM output_handler failed.\n"
                "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
                "See stack trace (above) for the root cause.",
            )
            os._exit(1)

        threading.Thread(target=crasher, daemon=True).start()
    hang_after = faults.get("hang_after_healthy_s")
    if hang_after is not None:
        threading.Timer(float(hang_after), eng.hung.set).start()  # type: ignore[arg-type]
    httpd.serve_forever(poll_interval=0.2)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0].startswith("--model"):
        # launched the way `python -m sglang.launch_server --model-path M` is: SGLang's dialect
        import sglang_standin

        return sglang_standin.main(argv)
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
