"""Step 2: hidden states at the auxiliary layers, through the serving release's vLLM.

Before anything runs, the space the states need is estimated (tokens x layers x hidden x
dtype bytes, for the chunks not yet extracted) and compared with the free space under the
work directory; too little is refused in one line. The worker (vllm_worker.py, the release's
Python) then writes ``extract/chunk-NNNNN.safetensors`` per generation chunk, atomically; a
rerun extracts only missing chunks.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdeploy.controller.drafter_pipeline import checkpoint, generate
from specdeploy.controller.drafter_pipeline.config import Config
from specdeploy.controller.drafter_pipeline.launch import run_worker
from specdeploy.controller.drafter_pipeline.stfile import SafetensorsFile
from specdeploy.controller.drafter_pipeline.workdir import (
    Progress,
    StepState,
    atomic_write_json,
    chunk_name,
)
from specdeploy.node.patching.patches import Manifest, version_key

STEP = "extract"
SUFFIX = ".safetensors"
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
# vLLM's SpeculativeConfig method "extract_hidden_states", for versions not in the manifest.
CONNECTOR_FROM = "0.17.0"


class DiskSpaceError(RuntimeError):
    pass


@dataclass
class Need:
    tokens: int
    layers: int
    hidden: int
    dtype_bytes: int
    # What the train and convert steps write after the states (checkpoint.training_bytes),
    # so that the one check before extraction covers the whole run.
    later_bytes: int = 0
    drafter_params: int = 0

    @property
    def bytes(self) -> int:
        return self.tokens * self.layers * self.hidden * self.dtype_bytes


def target_config(cfg: Config) -> dict[str, Any]:
    data = json.loads((Path(cfg.target_model_path) / "config.json").read_text())
    return data


def text_config(tcfg: dict[str, Any]) -> dict[str, Any]:
    tc = tcfg.get("text_config")
    return tc if isinstance(tc, dict) else tcfg


def record_tokens(rec: dict[str, Any], max_len: int) -> int:
    if rec.get("prompt_token_ids") is not None and rec.get("token_ids") is not None:
        n = len(rec["prompt_token_ids"]) + len(rec["token_ids"])
    else:
        usage = rec.get("usage") or {}
        n = int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)
    return min(n, max_len)


def estimate(cfg: Config, recs: list[dict[str, Any]]) -> Need:
    tc = text_config(target_config(cfg))
    dtype = str(tc.get("torch_dtype") or tc.get("dtype") or "bfloat16")
    dcfg = checkpoint.drafter_config(tc, cfg.aux_layer_ids, int(tc["vocab_size"]))
    return Need(
        tokens=sum(record_tokens(r, cfg.max_model_len - 1) for r in recs),
        layers=len(cfg.aux_layer_ids),
        hidden=int(tc["hidden_size"]),
        dtype_bytes=DTYPE_BYTES.get(dtype, 2),
        later_bytes=checkpoint.training_bytes(dcfg),
        drafter_params=checkpoint.parameter_count(dcfg),
    )


def check_space(need: Need, where: Path, margin_gb: float) -> None:
    probe = where
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    want = need.bytes + need.later_bytes + int(margin_gb * 1e9)
    if free < want:
        raise DiskSpaceError(
            f"the run needs {want / 1e9:.1f} GB: extract needs {need.bytes / 1e9:.1f} GB "
            f"({need.tokens:,} tokens x {need.layers} layers x {need.hidden} hidden x "
            f"{need.dtype_bytes} bytes) + train and convert {need.later_bytes / 1e9:.1f} GB "
            f"({need.drafter_params / 1e9:.2f} B drafter parameters: checkpoint x 2 + export) "
            f"+ {margin_gb:g} GB margin, only {free / 1e9:.1f} GB free under {where}"
        )


def capture_method(cfg: Config) -> str:
    """auto: the manifest's drafter_training.pipeline_capture of the serving vLLM (read off
    its wheel: the extract_hidden_states method exists from 0.17.0 on)."""
    if cfg.extract_method != "auto":
        return str(cfg.extract_method)
    entry = Manifest.load(None).versions().get(cfg.vllm_version) or {}
    known = (entry.get("drafter_training") or {}).get("pipeline_capture")
    if known:
        return str(known)
    new = version_key(cfg.vllm_version) >= version_key(CONNECTOR_FROM)
    return "connector" if new else "eagle3-hook"


def job(cfg: Config, layer_ids: list[int], chunks: list[dict[str, Any]], **extra: Any) -> dict:
    return {
        "model": cfg.target_model_path,
        "aux_layer_ids": layer_ids,
        "chunks": chunks,
        "max_model_len": cfg.max_model_len,
        "gpu_memory_utilization": cfg.gpu_memory_utilization,
        "tensor_parallel_size": cfg.tensor_parallel_size,
        "trust_remote_code": cfg.trust_remote_code,
        **extra,
    }


def run(cfg: Config, workdir: Path, bootstrap_drafter: Path | None = None) -> dict[str, Any]:
    state = StepState(workdir, STEP)
    if state.done:
        return state.result
    gen_dir = workdir / generate.STEP
    inputs = sorted(gen_dir.glob("chunk-*" + generate.SUFFIX))
    state.begin(cfg.inputs_hash(STEP))
    todo: list[dict[str, Any]] = []
    todo_recs: list[dict[str, Any]] = []
    per_chunk: dict[int, int] = {}
    for path in inputs:
        index = int(path.stem.split("-")[1])
        recs = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x]
        per_chunk[index] = len(recs)
        out = state.dir / chunk_name(index, SUFFIX)
        if not out.is_file():
            todo.append({"index": index, "input": str(path), "output": str(out)})
            todo_recs.extend(recs)
    total = sum(per_chunk.values())
    done = total - len(todo_recs)
    need = estimate(cfg, todo_recs)
    check_space(need, state.dir, cfg.free_space_margin_gb)
    layer_ids = [i + cfg.extract_layer_shift for i in cfg.aux_layer_ids]
    method = capture_method(cfg)
    state.update(estimate_bytes=need.bytes, method=method, layer_ids=layer_ids)
    if todo:
        prog = Progress(STEP, total, "sequences", done=done)
        extra: dict[str, Any] = {"method": method, "scratch": str(state.dir)}
        if method == "eagle3-hook":
            if bootstrap_drafter is None:
                raise RuntimeError("eagle3-hook extraction needs a bootstrap drafter directory")
            extra["drafter_dir"] = str(bootstrap_drafter)
        job_path = state.dir / "job.json"
        atomic_write_json(job_path, job(cfg, layer_ids, todo, **extra))

        def on_chunk(index: int, tokens: int) -> None:
            prog.advance(per_chunk[index], f"chunk {index} ({tokens} tokens)")

        run_worker(
            cfg.vllm_python,
            "specdeploy.controller.drafter_pipeline.vllm_worker",
            [str(job_path)],
            state.dir / "worker.log",
            on_chunk,
        )
    missing = [c["index"] for c in todo if not Path(c["output"]).is_file()]
    if missing:
        raise RuntimeError(f"extract: the worker finished without chunks {missing}")
    result = summarize(state.dir, layer_ids, method)
    state.finish(result)
    return result


def summarize(step_dir: Path, layer_ids: list[int], method: str) -> dict[str, Any]:
    tokens = sequences = nbytes = 0
    for path in sorted(step_dir.glob("chunk-*" + SUFFIX)):
        f = SafetensorsFile(path)
        tokens += f.shape("hidden_states")[0]
        sequences += f.shape("loss_start")[0]
        nbytes += path.stat().st_size
    return {
        "tokens": tokens,
        "sequences": sequences,
        "bytes": nbytes,
        "layer_ids": layer_ids,
        "method": method,
    }
