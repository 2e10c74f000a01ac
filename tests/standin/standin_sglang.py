"""STAND-IN view of SGLang 0.5.15 (NOT SGLang): its ``python -m sglang.launch_server`` flags, its
log lines, ``/metrics``, ``/server_info`` and ``/generate`` meta_info, fitted to the real
SGLang 0.5.15 run on an H200 (shared/gpu-recipe/sglang/recorded/run3-final, copied to
tests/fixtures/sglang-0.5.15-h200/). Where each behaviour comes from:

* flags: the wheel's ``sglang/srt/server_args.py`` (ServerArgs dataclass fields become
  ``--field-name`` plus ``Arg(aliases=...)``, ``arg_groups/arg_utils.py:171-216``; a few
  ``parser.add_argument("--...")``). With an SGLang installed next to the interpreter (the
  release venv) the flag set is read from it by AST, so a flag that SGLang version lacks is an
  argparse error, exit 2, as in the real launcher;
* log lines ``[YYYY-MM-DD HH:MM:SS] msg``, the start-up sequence, ``The server is fired up and
  ready to roll!``, the uvicorn access lines and ``SIGTERM received. ... Draining requests and
  shutting down...``: ``server-spec.log``;
* ``Decode batch, ... accept len: X, accept rate: Y, cuda graph: True, gen throughput
  (token/s): Z, #queue-req: 0`` every ``--decode-log-interval`` decode batches, with accept len
  = (correct drafts + verifies) / verifies over the window and accept rate = correct drafts /
  (verifies * (num_draft_tokens - 1)): ``server-spec.log`` lines, formula from
  ``managers/scheduler_components/metrics_reporter.py:727-748`` (0.5.15 wheel);
* ``/metrics``: the recorded ``metrics-spec.txt`` / ``metrics-nospec.txt`` with the counters
  ``sglang:generation_tokens_total`` (the first token of a request comes from its prefill, not
  from a verify), ``sglang:prompt_tokens_total``, ``sglang:num_requests_total``,
  ``sglang:spec_verify_calls_total`` and the gauges ``sglang:spec_accept_length`` /
  ``sglang:spec_accept_rate`` (last decode-log window), ``sglang:num_running_reqs`` live
  (``observability/metrics_collector.py:414-436,1434-1442,1635-1649``);
* ``/server_info``: ``internal_states[0].avg_spec_accept_length``, accumulated at each
  decode-log window (``managers/scheduler.py:3771-3778``), and the speculative settings
  (``results.json`` ``server_info``);
* ``/generate`` meta_info: ``spec_accept_length = completion_tokens / spec_verify_ct`` (so the
  prefill's token counts), ``spec_accept_rate = correct / (verify_ct * (num_draft_tokens-1))``,
  ``spec_correct_drafts_histogram`` (``managers/tokenizer_manager.py:2335-2375``; values in
  ``results.json``).
"""

from __future__ import annotations

import argparse
import ast
import http
import importlib.metadata
import importlib.util
import json
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import standin_log

if TYPE_CHECKING:
    from standin_engine import Engine

DEFAULT_VERSION = "0.5.15"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.15-h200"


# --------------------------------------------------------------------------- log lines
def log(msg: str) -> None:
    """SGLang's log format (``server-spec.log``): ``[2026-12-04 01:37:11] message``."""
    ts = time.strftime("%Y-%m-%d %H:%M:%S")
    with standin_log._print_lock:
        for line in msg.split("\n"):
            sys.stdout.write(f"[{ts}] {line}\n")
        sys.stdout.flush()


def access_log(client: str, method: str, path: str, code: int) -> None:
    try:
        phrase = http.HTTPStatus(code).phrase
    except ValueError:
        phrase = ""
    log(f'INFO:     {client} - "{method} {path} HTTP/1.1" {code} {phrase}')


# --------------------------------------------------------------------------- flags
# (flag, argparse kwargs) of the flags the toolkit and the GPU recipe pass, as SGLang 0.5.15
# defines them (server_args.py); the installed SGLang's own flag set, when there is one, is the
# authority for which flags exist.
FLAGS: list[tuple[tuple[str, ...], dict[str, object]]] = [
    (("--model-path", "--model"), {"dest": "model_path", "required": True}),
    (("--served-model-name",), {}),
    (("--host",), {"default": "127.0.0.1"}),
    (("--port",), {"type": int, "default": 30000}),
    (("--tp-size", "--tensor-parallel-size"), {"dest": "tp_size", "type": int, "default": 1}),
    (("--context-length",), {"type": int}),
    (("--mem-fraction-static",), {"type": float}),
    (("--enable-metrics",), {"action": "store_true"}),
    (("--trust-remote-code",), {"action": "store_true"}),
    (("--attention-backend",), {}),
    (("--disable-custom-all-reduce",), {"action": "store_true"}),
    (("--speculative-algorithm",), {}),
    (("--speculative-draft-model-path", "--speculative-draft-model"), {"dest": "draft"}),
    (("--speculative-num-steps",), {"type": int}),
    (("--speculative-eagle-topk",), {"type": int}),
    (("--speculative-num-draft-tokens",), {"type": int}),
    (("--max-running-requests",), {"type": int}),
    (("--random-seed",), {"type": int, "default": 0}),
    (("--decode-log-interval",), {"type": int, "default": 40}),
    (("--log-level",), {"default": "info"}),
    (("--skip-server-warmup",), {"action": "store_true"}),
    (("--disable-decode-cuda-graph",), {"action": "store_true"}),
    (("--cuda-graph-bs-decode",), {"nargs": "+", "type": int}),
    (("--grammar-backend",), {}),
    (("--sampling-backend",), {}),
    (("--moe-runner-backend",), {}),
    (("--disable-flashinfer-autotune",), {"action": "store_true"}),
    (("--api-key",), {}),
    (("--dtype",), {}),
    (("--kv-cache-dtype",), {}),
    (("--chunked-prefill-size",), {"type": int}),
]


def installed_sglang() -> tuple[str | None, Path | None]:
    """(version, package dir) of the SGLang installed next to this interpreter, if any."""
    try:
        version = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None, None
    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError):
        spec = None
    root = None
    if spec and spec.submodule_search_locations:
        root = Path(next(iter(spec.submodule_search_locations)))
    return version, root


def flags_of(root: Path) -> set[str] | None:
    """The ``--flags`` of the SGLang at ``root`` read by AST from ``srt/server_args.py``: one per
    ``ServerArgs`` field (``--`` + name with ``-``, or ``Arg(cli_name=...)``, plus
    ``Arg(aliases=[...])``; ``Arg(no_cli=True)`` has none) and every ``"--..."`` string given to
    ``add_argument``. None when the file is not there or not parseable."""
    try:
        tree = ast.parse((root / "srt" / "server_args.py").read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "ServerArgs":
            for item in node.body:
                if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
                    continue
                kw = {}
                for call in ast.walk(item.annotation):
                    if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "Arg":
                        kw = {k.arg: k.value for k in call.keywords}
                if isinstance(kw.get("no_cli"), ast.Constant) and kw["no_cli"].value is True:
                    continue
                name = kw.get("cli_name")
                cli = (
                    name.value
                    if isinstance(name, ast.Constant) and isinstance(name.value, str)
                    else "--" + item.target.id.replace("_", "-")
                )
                out.add(cli)
                aliases = kw.get("aliases")
                if isinstance(aliases, ast.List):
                    out |= {
                        e.value
                        for e in aliases.elts
                        if isinstance(e, ast.Constant) and isinstance(e.value, str)
                    }
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            out |= {
                a.value
                for a in node.args
                if isinstance(a, ast.Constant)
                and isinstance(a.value, str)
                and a.value.startswith("--")
            }
    return out or None


def build_parser(known: set[str] | None) -> argparse.ArgumentParser:
    """launch_server's parser: only the flags this SGLang has (``known``; None: all of FLAGS)."""
    ap = argparse.ArgumentParser(prog="launch_server.py")
    for names, kw in FLAGS:
        have = [n for n in names if known is None or n in known]
        if have:
            ap.add_argument(*have, **kw)  # type: ignore[arg-type]
    return ap


# --------------------------------------------------------------------------- /metrics
def load_template(spec: bool) -> str:
    name = "metrics-spec.txt" if spec else "metrics-nospec.txt"
    return (FIXTURES / name).read_text(encoding="utf-8")


class SglState:
    """SGLang's own acceptance bookkeeping: the decode-log window (gauges, the log line) and the
    totals /server_info reports, accumulated at each window as SGLang does."""

    def __init__(self, num_steps: int, num_draft_tokens: int) -> None:
        self.num_steps = num_steps
        self.num_draft_tokens = num_draft_tokens
        self.accept_length = 0.0
        self.accept_rate = 0.0
        self.total_accept_tokens = 0
        self.total_forward_ct = 0

    def window(self, correct: int, verifies: int) -> tuple[float, float]:
        """One decode-log window: (accept len, accept rate), metrics_reporter.py:727-748."""
        if verifies <= 0:
            return self.accept_length, self.accept_rate
        self.accept_length = (correct + verifies) / verifies
        per_round = self.num_draft_tokens - 1 if self.num_draft_tokens else self.num_steps
        self.accept_rate = correct / (verifies * per_round) if per_round else 0.0
        self.total_accept_tokens += correct + verifies
        self.total_forward_ct += verifies
        return self.accept_length, self.accept_rate


def metrics_text(eng: Engine, state: SglState | None) -> str:
    with eng.lock:
        c = dict(eng.c)
    name = eng.names[0].replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    live = {
        "sglang:generation_tokens_total": c["generation_tokens"],
        "sglang:prompt_tokens_total": c["prompt_tokens"],
        "sglang:num_requests_total": c["requests"],
        "sglang:spec_verify_calls_total": c["drafts"],
        "sglang:num_running_reqs": eng.running,
    }
    if state is not None:
        live["sglang:spec_accept_length"] = state.accept_length
        live["sglang:spec_accept_rate"] = state.accept_rate
        live["sglang:spec_num_steps"] = state.num_steps
        live["sglang:spec_num_draft_tokens"] = state.num_draft_tokens
    out = []
    for line in eng.template.splitlines():
        if line.startswith("#") or not line.strip():
            out.append(line)
            continue
        mname = line.split("{", 1)[0].split(" ", 1)[0]
        labels = line[len(mname) :].rsplit(" ", 1)[0] if "{" in line else ""
        labels = re.sub(r'model_name="[^"]*"', f'model_name="{name}"', labels)
        value = live.get(mname)
        out.append(
            f"{mname}{labels} {float(value) if value is not None else line.rsplit(' ', 1)[1]}"
        )
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- decode log
def decode_logger(eng: Engine, state: SglState | None, every: int) -> None:
    """``Decode batch, ...`` every ``every`` engine steps (``--decode-log-interval``)."""
    last_steps = 0
    prev = dict(eng.c)
    last_t = time.monotonic()
    while True:
        time.sleep(0.05)
        with eng.lock:
            cur = dict(eng.c)
            running = eng.running
        if cur["steps"] - last_steps < every:
            continue
        last_steps = cur["steps"] - (cur["steps"] - last_steps) % every
        now = time.monotonic()
        gen = cur["generation_tokens"] - prev["generation_tokens"]
        msg = f"Decode batch, #running-req: {running}, #token: {gen}, token usage: 0.00, "
        if state is not None:
            length, rate = state.window(
                int(cur["accepted"] - prev["accepted"]), int(cur["drafts"] - prev["drafts"])
            )
            msg += f"accept len: {length:.2f}, accept rate: {rate:.2f}, "
        msg += (
            f"cuda graph: True, gen throughput (token/s): {gen / max(now - last_t, 1e-9):.2f}, "
            "#queue-req: 0"
        )
        log(msg)
        prev, last_t = cur, now


# --------------------------------------------------------------------------- /generate
def meta_info(
    prompt_tokens: int, completion_tokens: int, steps: list[int], num_draft_tokens: int | None,
    e2e_s: float,
) -> dict[str, object]:  # fmt: skip
    """A /generate response's meta_info as tokenizer_manager.py:2335-2375 builds it."""
    meta: dict[str, object] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
    }
    verify_ct = len(steps)
    if num_draft_tokens and verify_ct > 0:
        proposed = verify_ct * (num_draft_tokens - 1)
        correct = sum(steps)
        meta["spec_verify_ct"] = verify_ct
        meta["spec_accept_length"] = completion_tokens / verify_ct
        meta["spec_accept_rate"] = correct / proposed if proposed else 0.0
        meta["spec_num_correct_drafts"] = correct
        meta["spec_num_proposed_drafts"] = proposed
        hist = [0] * num_draft_tokens
        for a in steps:
            hist[min(a, num_draft_tokens - 1)] += 1
        meta["spec_correct_drafts_histogram"] = hist
    meta["e2e_latency"] = e2e_s
    meta["finish_reason"] = {"type": "length", "length": completion_tokens}
    return meta


def server_info(
    args: argparse.Namespace, version: str, state: SglState | None
) -> dict[str, object]:
    internal: dict[str, object] = {
        "effective_max_running_requests_per_dp": args.max_running_requests or 4096,
    }
    if state is not None and state.total_forward_ct > 0:
        internal["avg_spec_accept_length"] = state.total_accept_tokens / state.total_forward_ct
    return {
        "model_path": args.model_path,
        "served_model_name": args.served_model_name or args.model_path,
        "tp_size": args.tp_size,
        "attention_backend": args.attention_backend,
        "speculative_algorithm": args.speculative_algorithm,
        "speculative_draft_model_path": args.draft,
        "speculative_num_steps": args.speculative_num_steps,
        "speculative_eagle_topk": args.speculative_eagle_topk,
        "speculative_num_draft_tokens": args.speculative_num_draft_tokens,
        "disable_custom_all_reduce": args.disable_custom_all_reduce,
        "internal_states": [internal],
        "version": version,
    }


def json_dumps(obj: object) -> str:
    return json.dumps(obj)
