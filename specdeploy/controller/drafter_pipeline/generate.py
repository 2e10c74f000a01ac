"""Step 1: responses from the target, through the serving release's OpenAI API.

Each line of ``prompts_file`` is ``{"prompt": text}`` (sent to ``POST {serve_url}/v1/completions``)
or ``{"messages": [...]}`` (sent to ``/v1/chat/completions``: the server applies the served chat
template, as it does for chat traffic), with the served model, ``temperature``, ``max_tokens``
and ``return_token_ids``: vLLM then returns the prompt's and the response's token ids, so
extraction sees exactly the tokens the target read and produced. Train in the format of the
production traffic: on the GPU proof the same drafter accepted half as often when served
through a chat template its training data lacked (docs/drafter-gpu.md). Responses
are written per chunk of ``chunk_size`` prompts (``generate/chunk-NNNNN.jsonl``, atomically);
a rerun sends only the prompts of missing chunks.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from specdeploy.controller.drafter_pipeline.config import Config
from specdeploy.controller.drafter_pipeline.workdir import (
    Progress,
    StepState,
    atomic_write_bytes,
    chunk_name,
)
from specdeploy.node import jsontext

STEP = "generate"
SUFFIX = ".jsonl"
RETRIES = 3


class GenerateError(RuntimeError):
    pass


Prompt = str | list[dict[str, Any]]  # completion text, or chat messages


def read_prompts(cfg: Config) -> list[Prompt]:
    path = Path(cfg.prompts_file)
    prompts: list[Prompt] = []
    try:
        objects = jsontext.read_objects(path)
    except FileNotFoundError as exc:
        raise GenerateError(f"prompts_file {path} not found") from exc
    except ValueError as exc:
        raise GenerateError(str(exc)) from None
    for n, obj in objects:
        messages = obj.get("messages")
        if isinstance(obj.get("prompt"), str):
            prompts.append(obj["prompt"])
        elif (
            isinstance(messages, list)
            and messages
            and all(isinstance(m, dict) and "role" in m for m in messages)
        ):
            prompts.append(messages)
        else:
            raise GenerateError(
                f'{path}:{n}: expected {{"prompt": "..."}} or {{"messages": [{{"role": ...}}]}}'
            )
    if cfg.max_prompts:
        prompts = prompts[: cfg.max_prompts]
    if not prompts:
        raise GenerateError(f"{path}: no prompts")
    return prompts


def complete(cfg: Config, index: int, prompt: Prompt, timeout: float = 600.0) -> dict[str, Any]:
    chat = not isinstance(prompt, str)
    body: dict[str, Any] = {
        "model": cfg.served_model_name,
        ("messages" if chat else "prompt"): prompt,
        "max_tokens": cfg.max_tokens,
        "temperature": cfg.temperature,
        "return_token_ids": True,
    }
    headers = {"Content-Type": "application/json"}
    key = os.environ.get(cfg.api_key_env, "") if cfg.api_key_env else ""
    if key:
        headers["Authorization"] = f"Bearer {key}"
    url = cfg.serve_url.rstrip("/") + ("/v1/chat/completions" if chat else "/v1/completions")
    last = ""
    for attempt in range(RETRIES):
        req = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                obj = json.loads(resp.read())
            choice = obj["choices"][0]
            rec = {
                "index": index,
                "prompt": None if chat else prompt,
                "text": (choice["message"].get("content") if chat else choice.get("text")) or "",
                "finish_reason": choice.get("finish_reason"),
                "prompt_token_ids": choice.get("prompt_token_ids") or obj.get("prompt_token_ids"),
                "token_ids": choice.get("token_ids"),
                "usage": obj.get("usage"),
            }
            if chat:
                rec["messages"] = prompt
                if rec["prompt_token_ids"] is None or rec["token_ids"] is None:
                    # the templated prompt exists only on the server: without its token ids
                    # extraction could not rebuild what the target read
                    raise GenerateError(
                        f"prompt {index}: {url} returned no token ids for a chat prompt "
                        "(vLLM returns them with return_token_ids from 0.10.2 on)"
                    )
            return rec
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}: {exc.read().decode(errors='replace')[:300]}"
            if exc.code < 500:
                break
        except (urllib.error.URLError, OSError, ValueError, KeyError) as exc:
            last = repr(exc)
        time.sleep(min(0.5 * 2**attempt, 10))
    raise GenerateError(f"prompt {index}: {url} failed after {RETRIES} tries: {last}")


def run(cfg: Config, workdir: Path) -> dict[str, Any]:
    state = StepState(workdir, STEP)
    if state.done:
        return state.result
    prompts = read_prompts(cfg)
    state.begin(cfg.inputs_hash(STEP))
    n_chunks = (len(prompts) + cfg.chunk_size - 1) // cfg.chunk_size
    have = {i for i in range(n_chunks) if (state.dir / chunk_name(i, SUFFIX)).is_file()}
    done_prompts = sum(min(cfg.chunk_size, len(prompts) - i * cfg.chunk_size) for i in have)
    prog = Progress(STEP, len(prompts), "prompts", done=done_prompts)
    state.update(chunks=n_chunks, prompts=len(prompts))
    with ThreadPoolExecutor(max_workers=cfg.concurrency) as pool:
        for ci in range(n_chunks):
            if ci in have:
                continue
            lo = ci * cfg.chunk_size
            batch = prompts[lo : lo + cfg.chunk_size]
            recs = list(pool.map(lambda a: complete(cfg, a[0], a[1]), enumerate(batch, lo)))
            data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs)
            atomic_write_bytes(state.dir / chunk_name(ci, SUFFIX), data.encode())
            prog.advance(len(batch), f"chunk {ci + 1}/{n_chunks} written")
    result = summarize(state.dir, n_chunks)
    result["prompt_format"] = prompt_format(prompts)
    state.finish(result)
    return result


def prompt_format(prompts: list[Prompt]) -> str:
    """How the prompts reached the target: chat-template (messages: the served chat template
    applied), raw (completion text), or mixed (drafter_provenance.PROMPT_FORMATS)."""
    chat = sum(1 for p in prompts if not isinstance(p, str))
    if chat == len(prompts):
        return "chat-template"
    return "raw" if chat == 0 else "mixed"


def records(step_dir: Path) -> list[dict[str, Any]]:
    """Every response, in prompt order (all chunks)."""
    out: list[dict[str, Any]] = []
    for path in sorted(step_dir.glob("chunk-*" + SUFFIX)):
        out.extend(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines())
    return out


def summarize(step_dir: Path, n_chunks: int) -> dict[str, Any]:
    recs = records(step_dir)
    with_ids = [r for r in recs if r.get("token_ids") is not None]
    return {
        "chunks": n_chunks,
        "responses": len(recs),
        "response_token_ids_returned": len(with_ids),
        "completion_tokens": sum(
            ((r.get("usage") or {}).get("completion_tokens") or 0) for r in recs
        ),
        "prompt_tokens": sum(((r.get("usage") or {}).get("prompt_tokens") or 0) for r in recs),
    }
