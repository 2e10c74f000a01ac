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
temperature 0), and each request sleeps ``tokens / tokens_per_s`` so throughput is a real
time measurement.

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
      "tokens_per_s": 400.0,           # decode speed without speculation
      "spec_step_cost": 1.25,          # cost of one draft+verify step in decode steps
      "tokens_per_s_spec": null,       # override: speed with speculation
      "max_request_s": 10.0,           # cap on one request's simulated time
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
import ast
import hashlib
import http
import importlib.metadata
import importlib.util
import json
import os
import random
import re
import signal
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class _Server(ThreadingHTTPServer):
    request_queue_size = 128
    daemon_threads = True


DEFAULT_VERSION = "0.20.2"
# SpeculativeConfig fields of vLLM 0.20.2 (read from the wheel's config/speculative.py).
SPEC_KEYS_0_20_2 = [
    "enforce_eager",
    "num_speculative_tokens",
    "model",
    "method",
    "draft_tensor_parallel_size",
    "tensor_parallel_size",
    "quantization",
    "moe_backend",
    "max_model_len",
    "revision",
    "code_revision",
    "disable_padded_drafter_batch",
    "use_local_argmax_reduction",
    "prompt_lookup_max",
    "prompt_lookup_min",
    "speculative_token_tree",
    "parallel_drafting",
    "target_model_config",
    "target_parallel_config",
    "draft_model_config",
    "draft_parallel_config",
    "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_cached_requests",
    "suffix_decoding_max_spec_factor",
    "suffix_decoding_min_token_prob",
    "draft_load_config",
    "rejection_sample_method",
    "synthetic_acceptance_rates",
    "synthetic_acceptance_length",
]
AUX_SUPPORTED_0_20_2 = [
    "llama",
    "qwen",
    "minicpm",
    "gpt_oss",
    "hunyuan_vl",
    "hunyuan_v1_dense",
    "afmoe",
    "nemotron_h",
    "deepseek_v2",
    "deepseek_v3",
    "kimi_k2",
    "kimi_k25",
    "minimax_m2",
    "gemma4",
]
MLA_BACKENDS = [
    "FLASH_ATTN_MLA",
    "FLASHMLA",
    "FLASHINFER_MLA",
    "TRITON_MLA",
    "CUTLASS_MLA",
    "FLASHMLA_SPARSE",
    "ROCM_AITER_MLA",
]
ATTN_BACKENDS = [*MLA_BACKENDS, "FLASH_ATTN", "TRITON_ATTN", "FLASHINFER", "FLEX_ATTENTION",
                                "TREE_ATTN", "ROCM_ATTN", "ROCM_AITER_FA", "TORCH_SDPA",
                                "CPU_ATTN", "NO_ATTENTION"]  # fmt: skip
PLATFORMS = {
    # platform: (auto MLA backend, potential MLA list, auto non-MLA backend, potential list, FA)
    "sm120": (
        "TRITON_MLA",
        ["TRITON_MLA"],
        "FLASH_ATTN",
        ["FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION"],
        2,
    ),
    "h200": (
        "FLASH_ATTN_MLA",
        ["FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA"],
        "FLASH_ATTN",
        ["FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION"],
        3,
    ),
}
MLA_MODEL_TYPES = ("deepseek", "kimi")
WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "with",
    "was",
    "on",
    "be",
    "by",
    "this",
    "are",
    "from",
    "at",
    "or",
    "an",
    "have",
    "not",
    "which",
    "one",
    "all",
    "were",
    "can",
    "but",
    "if",
    "more",
    "will",
    "their",
    "has",
    "there",
    "been",
    "when",
    "who",
    "they",
    "what",
    "so",
    "up",
    "out",
    "about",
    "into",
    "than",
    "them",
    "only",
    "some",
    "could",
    "time",
    "other",
    "new",
    "these",
    "two",
    "may",
    "first",
    "then",
    "do",
    "any",
    "like",
    "my",
    "now",
    "over",
    "such",
    "our",
    "man",
    "me",
    "even",
    "most",
    "made",
    "after",
    "also",
    "did",
    "many",
    "before",
    "must",
    "through",
    "years",
    "where",
    "much",
    "your",
    "way",
    "well",
    "down",
    "should",
    "because",
    "each",
    "just",
    "those",
    "people",
    "how",
    "too",
    "little",
    "state",
    "good",
    "very",
    "make",
    "world",
    "still",
    "own",
    "see",
    "men",
    "work",
    "long",
    "get",
    "here",
    "between",
    "both",
    "life",
    "being",
    "under",
    "never",
    "day",
    "same",
    "another",
    "know",
    "while",
    "last",
    "might",
    "us",
    "great",
    "old",
    "year",
    "off",
    "come",
    "since",
    "against",
    "go",
    "came",
    "right",
    "used",
    "take",
    "three",
    "sea",
    "light",
    "river",
    "house",
    "water",
    "under",
    "system",
]

# vLLM's format string, verbatim (v1/spec_decode/metrics.py, SpecDecodingLogging.log).
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


# --------------------------------------------------------------------------- arguments


def _max_model_len(v: str) -> int:
    m = re.fullmatch(r"(\d+)([kKmM]?)", v.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"invalid max model len {v!r}")
    n = int(m[1])
    return n * {"": 1, "k": 1000, "K": 1024, "m": 1000000, "M": 1048576}[m[2]]


def _json_obj(v: str) -> dict[str, object]:
    try:
        d = json.loads(v)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"invalid JSON {v!r}: {e}") from None
    if not isinstance(d, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {v!r}")
    return d


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vllm", description="vLLM CLI (STAND-IN)")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", prog="vllm serve", usage="vllm serve [model_tag] [options]")
    s.add_argument("model_tag", nargs="?", default=None)
    s.add_argument("--model", default=None)
    s.add_argument("--served-model-name", nargs="+", default=None)
    s.add_argument("--host", default=None)
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    s.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    s.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    s.add_argument("--speculative-config", "-sc", type=_json_obj, default=None)
    s.add_argument("--max-model-len", type=_max_model_len, default=None)
    s.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    s.add_argument("--enforce-eager", action="store_true")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--attention-backend", choices=ATTN_BACKENDS, default=None)
    s.add_argument("--disable-custom-all-reduce", action="store_true")
    s.add_argument("--trust-remote-code", action="store_true")
    s.add_argument("--api-key", nargs="+", default=None)
    s.add_argument("--max-num-seqs", type=int, default=None)
    s.add_argument("--max-num-batched-tokens", type=int, default=None)
    s.add_argument(
        "--kv-cache-dtype",
        default="auto",
        choices=["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"],
    )
    s.add_argument("--dtype", default="auto")
    s.add_argument("--tokenizer", default=None)
    s.add_argument("--block-size", type=int, default=None)
    s.add_argument("--disable-log-stats", action="store_true")
    s.add_argument("--uvicorn-log-level", default="info")
    s.add_argument("--enable-expert-parallel", action="store_true")
    return p


# --------------------------------------------------------------------------- profile


def load_profile() -> dict[str, object]:
    path = os.environ.get("SPECDEPLOY_STANDIN_PROFILE")
    prof: dict[str, object] = {}
    if path:
        with open(path, encoding="utf-8") as f:
            prof = json.load(f)
        if not isinstance(prof, dict):
            raise SystemExit(f"stand-in profile {path}: not a JSON object")
    faults = dict(prof.get("faults") or {})  # type: ignore[call-overload]
    for k in (
        "never_healthy",
        "crash_after_healthy_s",
        "hang",
        "hang_after_healthy_s",
        "wrong_text",
    ):
        if k in prof and k not in faults:
            faults[k] = prof[k]
    prof["faults"] = faults
    return prof


# --------------------------------------------------------------------------- installed vLLM


def installed_vllm() -> tuple[str | None, Path | None]:
    try:
        version = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None, None
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        spec = None
    root = None
    if spec and spec.submodule_search_locations:
        root = Path(next(iter(spec.submodule_search_locations)))
    return version, root


def _class_node(path: Path, name: str) -> ast.ClassDef | None:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    for n in ast.walk(tree):
        if isinstance(n, ast.ClassDef) and n.name == name:
            return n
    return None


def spec_rules(root: Path | None) -> tuple[list[str], list[str], str]:
    """(allowed SpeculativeConfig keys, eagle3 target allowlist, its variable name)."""
    default = (SPEC_KEYS_0_20_2, AUX_SUPPORTED_0_20_2, "aux_hidden_states_supported")
    if root is None:
        return default
    cls = _class_node(root / "config" / "speculative.py", "SpeculativeConfig")
    if cls is None:
        return default
    # The keys pydantic accepts, read by the preflight's own extractor (one reading of
    # SpeculativeConfig: the stand-in refuses exactly what the deploy refuses).
    from specdeploy.node.speckeys import extract_fields

    try:
        keys = extract_fields(ast.unparse(cls))["keys"]
    except ValueError:
        keys = []
    allow: list[str] = []
    var = "aux_hidden_states_supported"
    for n in ast.walk(cls):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.List):
            names = [t.id for t in n.targets if isinstance(t, ast.Name)]
            if names and names[0] in ("eagle3_target_supported", "aux_hidden_states_supported"):
                var = names[0]
                allow += [
                    e.value
                    for e in n.value.elts
                    if isinstance(e, ast.Constant) and isinstance(e.value, str)
                ]
    return keys or SPEC_KEYS_0_20_2, allow, var


def supports_eagle3(root: Path, arch: str) -> bool | None:
    files = {
        "DeepseekV3ForCausalLM": ("deepseek_v2.py", "DeepseekV3ForCausalLM"),
        "DeepseekV2ForCausalLM": ("deepseek_v2.py", "DeepseekV2ForCausalLM"),
        "KimiK25ForConditionalGeneration": ("kimi_k25.py", "KimiK25ForConditionalGeneration"),
    }
    if arch not in files:
        return None
    fname, cname = files[arch]
    path = root / "model_executor" / "models" / fname
    seen: set[str] = set()
    while cname and cname not in seen:
        seen.add(cname)
        cls = _class_node(path, cname)
        if cls is None:
            return None
        names = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in cls.bases]
        if "SupportsEagle3" in names:
            return True
        # DeepseekV3ForCausalLM derives from DeepseekV2ForCausalLM in the same file.
        cname = next((n for n in names if n.endswith("ForCausalLM")), "")
    return False


def read_config(path: str | None) -> dict[str, object] | None:
    if not path:
        return None
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            d = json.load(f)
        return d if isinstance(d, dict) else None
    except (OSError, ValueError):
        return None


def model_type_of(cfg: dict[str, object] | None) -> str | None:
    if not cfg:
        return None
    tc = cfg.get("text_config")
    if isinstance(tc, dict) and isinstance(tc.get("model_type"), str):
        return str(tc["model_type"])
    mt = cfg.get("model_type")
    return mt if isinstance(mt, str) else None


def arch_of(cfg: dict[str, object] | None) -> str | None:
    if not cfg:
        return None
    a = cfg.get("architectures")
    return str(a[0]) if isinstance(a, list) and a else None


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


# --------------------------------------------------------------------------- engine


class Engine:
    def __init__(self, args: argparse.Namespace, prof: dict[str, object]) -> None:
        self.args = args
        self.prof = prof
        self.faults: dict[str, object] = prof["faults"]  # type: ignore[assignment]
        self.model = args.model_tag or args.model or "facebook/opt-125m"
        self.names: list[str] = args.served_model_name or [self.model]
        self.spec = args.speculative_config
        self.k = int(self.spec.get("num_speculative_tokens", 0)) if self.spec else 0
        acc = prof.get("acceptance", [0.8, 0.65, 0.55])
        assert isinstance(acc, list)
        rates = [float(x) for x in acc][: self.k]
        while len(rates) < self.k:
            rates.append((rates[-1] * 0.8) if rates else 0.5)
        self.rates = rates
        self.tps = float(prof.get("tokens_per_s", 400.0))  # type: ignore[arg-type]
        self.step_cost = float(prof.get("spec_step_cost", 1.25))  # type: ignore[arg-type]
        tps_spec = prof.get("tokens_per_s_spec")
        self.tps_spec = float(tps_spec) if tps_spec else None  # type: ignore[arg-type]
        self.max_request_s = float(prof.get("max_request_s", 10.0))  # type: ignore[arg-type]
        self.started = time.time()
        self.healthy_at: float | None = None
        self.lock = threading.Lock()
        self.c = {
            "drafts": 0,
            "draft_tokens": 0,
            "accepted": 0,
            "prompt_tokens": 0,
            "generation_tokens": 0,
            "requests": 0,
        }
        self.per_pos = [0] * self.k
        self.running = 0
        self.hung = threading.Event()
        self.backend = "TRITON_MLA"
        self.max_model_len = args.max_model_len or 4096
        self.template = ""

    # ---- simulation
    def simulate(self, prompt: str, n_tokens: int) -> tuple[float, list[int]]:
        """(seconds, accepted lengths of each step) for one greedy request."""
        if not self.spec:
            return min(n_tokens / self.tps, self.max_request_s), []
        rng = random.Random(hashlib.sha256(f"{self.args.seed}|{prompt}".encode()).digest())
        steps: list[int] = []
        produced = 0
        while produced < n_tokens:
            u = rng.random()
            n_acc = sum(1 for r in self.rates if u < r)
            steps.append(n_acc)
            produced += n_acc + 1
        secs = n_tokens / self.tps_spec if self.tps_spec else len(steps) * self.step_cost / self.tps
        return min(secs, self.max_request_s), steps

    def account(self, prompt_tokens: int, gen_tokens: int, steps: list[int]) -> None:
        with self.lock:
            self.c["prompt_tokens"] += prompt_tokens
            self.c["generation_tokens"] += gen_tokens
            self.c["requests"] += 1
            for n_acc in steps:
                self.c["drafts"] += 1
                self.c["draft_tokens"] += self.k
                self.c["accepted"] += n_acc
                for i in range(n_acc):
                    self.per_pos[i] += 1

    def text_for(self, prompt: str, n_tokens: int, temperature: float, seed: int | None) -> str:
        wrong = self.faults.get("wrong_text")
        if wrong == "empty":
            return ""
        if temperature > 0 or wrong:
            rng = random.Random(None if seed is None or wrong else f"{seed}|{prompt}")
        else:
            rng = random.Random(hashlib.sha256(f"{self.backend}|{prompt}".encode()).digest())
        return "".join(" " + rng.choice(WORDS) for _ in range(n_tokens))

    # ---- metrics
    def metrics_text(self) -> str:
        with self.lock:
            c = dict(self.c)
            per_pos = list(self.per_pos)
        name = self.names[0].replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        out: list[str] = []
        created = repr(float(self.started))
        per_pos_done = {"total": False, "created": False}
        values = {
            "vllm:spec_decode_num_drafts_total": c["drafts"],
            "vllm:spec_decode_num_draft_tokens_total": c["draft_tokens"],
            "vllm:spec_decode_num_accepted_tokens_total": c["accepted"],
            "vllm:prompt_tokens_total": c["prompt_tokens"],
            "vllm:generation_tokens_total": c["generation_tokens"],
        }
        for line in self.template.splitlines():
            if line.startswith("#") or not line.strip():
                out.append(line)
                continue
            mname = line.split("{", 1)[0].split(" ", 1)[0]
            labels = line[len(mname) :].rsplit(" ", 1)[0] if "{" in line else ""
            labels = re.sub(r'model_name="[^"]*"', f'model_name="{name}"', labels)
            if mname.startswith("vllm:spec_decode_num_accepted_tokens_per_pos_"):
                kind = "total" if mname.endswith("_total") else "created"
                if not per_pos_done[kind]:
                    per_pos_done[kind] = True
                    for i in range(self.k):
                        lab = re.sub(r'position="\d+"', f'position="{i}"', labels)
                        v = float(per_pos[i]) if kind == "total" else created
                        out.append(f"{mname}{lab} {v}")
                continue
            if mname in values:
                out.append(f"{mname}{labels} {float(values[mname])}")
            elif mname == "vllm:request_success_total" and 'finished_reason="length"' in labels:
                out.append(f"{mname}{labels} {float(c['requests'])}")
            elif mname.startswith("vllm:") and mname.endswith("_created"):
                out.append(f"{mname}{labels} {created}")
            elif mname == "vllm:num_requests_running":
                out.append(f"{mname}{labels} {float(self.running)}")
            else:
                out.append((mname + labels + " " + line.rsplit(" ", 1)[1]) if labels else line)
        return "\n".join(out) + "\n"


def load_template(spec: bool) -> str:
    name = "metrics-spec.txt" if spec else "metrics-nospec.txt"
    here = Path(__file__).resolve().parent
    dirs = [
        os.environ.get("SPECDEPLOY_STANDIN_FIXTURES"),
        here.parent / "fixtures" / "vllm-0.20.2",
        here / "recorded",
    ]
    for d in dirs:
        if d and (Path(d) / name).is_file():
            return (Path(d) / name).read_text(encoding="utf-8")
    log("WARNING", "standin.py:0", f"recorded {name} not found; using a minimal template")
    base = (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="x"} 0.0\n'
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.\n"
        "# TYPE vllm:generation_tokens_total counter\n"
        'vllm:generation_tokens_total{engine="0",model_name="x"} 0.0\n'
    )
    if not spec:
        return base
    return base + "".join(
        f'# HELP {n} {h}\n# TYPE {n} counter\n{n}{{engine="0",model_name="x"{p}}} 0.0\n'
        for n, h, p in (
            ("vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts.", ""),
            ("vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens.", ""),
            ("vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.", ""),
            (
                "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                "Accepted tokens per draft position.",
                ',position="0"',
            ),
        )
    )


# --------------------------------------------------------------------------- HTTP


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
            access_log(
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
                self._send(200, eng.metrics_text(), "text/plain; version=0.0.4; charset=utf-8")
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
            if not self._gate():
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
            secs, steps = eng.simulate(prompt, max_tokens)
            with eng.lock:
                eng.running += 1
            try:
                time.sleep(secs)
            finally:
                with eng.lock:
                    eng.running -= 1
            seed = body.get("seed") if isinstance(body.get("seed"), int) else None
            text = eng.text_for(prompt, max_tokens, temperature, seed)
            eng.account(p_tok, max_tokens, steps)
            usage = {
                "prompt_tokens": p_tok,
                "total_tokens": p_tok + max_tokens,
                "completion_tokens": max_tokens,
                "prompt_tokens_details": None,
            }
            created = int(time.time())
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
                                "token_ids": None,
                            }
                        ],
                        "service_tier": None,
                        "system_fingerprint": None,
                        "usage": usage,
                        "prompt_logprobs": None,
                        "prompt_token_ids": None,
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
                                "token_ids": None,
                                "prompt_logprobs": None,
                                "prompt_token_ids": None,
                            }
                        ],
                        "service_tier": None,
                        "system_fingerprint": None,
                        "usage": usage,
                        "kv_transfer_params": None,
                    },
                )

    return Handler


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


def serve(args: argparse.Namespace) -> int:
    prof = load_profile()
    faults: dict[str, object] = prof["faults"]  # type: ignore[assignment]
    inst_version, vllm_root = installed_vllm()
    version = str(prof.get("vllm_version") or inst_version or DEFAULT_VERSION)
    prof["_version"] = version
    eng = Engine(args, prof)
    model = eng.model
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
        httpd = _Server((host, args.port), make_handler(eng, api_keys))
    except OSError as e:
        log(
            "ERROR",
            "api_server.py:1",
            f"OSError: [Errno {e.errno}] error while attempting to "
            f"bind on address ({host!r}, {args.port}): {e.strerror}",
        )
        return 1
    httpd.daemon_threads = True

    def on_term(signum: int, frame: object) -> None:
        with _print_lock:
            sys.stdout.write(
                f"(APIServer pid={PID}) INFO:     Shutting down\n"
                f"(APIServer pid={PID}) INFO:     Finished server process "
                f"[{PID}]\n"
            )
            sys.stdout.flush()
        os._exit(0)

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

    eng.template = load_template(eng.spec is not None)
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
        threading.Thread(target=stats_logger, args=(eng, interval), daemon=True).start()
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
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
