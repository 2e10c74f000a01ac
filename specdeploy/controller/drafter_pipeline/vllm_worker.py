"""Hidden-state capture through the serving release's own vLLM (run with its venv's python).

    VLLM_PYTHON -m specdeploy.controller.drafter_pipeline.vllm_worker JOB.json

Two ways, both through the target's own EAGLE-3 capture (``set_aux_hidden_state_layers`` and
the ``hidden_states + residual`` append before layer i in the model's forward):

* ``connector`` (vLLM >= 0.17: ``SpeculativeConfig.method = "extract_hidden_states"``): the
  engine stacks the aux states of every prompt token and ``ExampleHiddenStatesConnector``
  writes them per request (what speculators' data generation uses); batched, for extraction.
* ``eagle3-hook``: the engine serves EAGLE-3 with a drafter directory (its config names the
  layers) and a hook on the proposer's ``propose`` records ``target_hidden_states`` at the
  prefill: exactly the tensor the serving path hands the drafter (before its ``fc``). One
  request at a time; for the convention check (and for 0.15/0.16, which lack the method).

Writes safetensors: ``hidden_states`` [tokens, layers, hidden] (model dtype), ``input_ids``,
``seq_offsets`` [sequences + 1], ``loss_start`` (first response token of each sequence),
``record_index``. Prints ``CHUNK <index> <tokens>`` after each chunk file (renamed into place).
Needs vLLM, torch and safetensors: GPU machines only.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any


def sequences(records: list[dict[str, Any]], tokenizer: Any, max_len: int) -> list[tuple]:
    """(record index, token ids, response start) per record, truncated to max_len."""
    out = []
    for r in records:
        p_ids, r_ids = r.get("prompt_token_ids"), r.get("token_ids")
        if p_ids is None:
            p_ids = tokenizer.encode(r["prompt"])
        if r_ids is None:
            r_ids = tokenizer.encode(r["text"], add_special_tokens=False)
        ids = (list(p_ids) + list(r_ids))[:max_len]
        out.append((r["index"], ids, min(len(p_ids), len(ids))))
    return out


def save_chunk(path: Path, seqs: list[tuple], states: list[Any]) -> int:
    import torch
    from safetensors.torch import save_file

    offsets = [0]
    for _, ids, _ in seqs:
        offsets.append(offsets[-1] + len(ids))
    tensors = {
        "hidden_states": torch.cat(states, 0).contiguous(),
        "input_ids": torch.tensor([t for _, ids, _ in seqs for t in ids], dtype=torch.int64),
        "seq_offsets": torch.tensor(offsets, dtype=torch.int64),
        "loss_start": torch.tensor([s for _, _, s in seqs], dtype=torch.int64),
        "record_index": torch.tensor([i for i, _, _ in seqs], dtype=torch.int64),
    }
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    tmp.replace(path)
    return offsets[-1]


def pending_chunks(job: dict[str, Any], tokenizer: Any, new_tokens: int) -> Any:
    """(chunk, output path, sequences) of each chunk not written yet (a resumed run skips the
    rest); sequences leave room for ``new_tokens`` generated tokens."""
    for chunk in job["chunks"]:
        out_path = Path(chunk["output"])
        if out_path.is_file():
            continue
        recs = [json.loads(x) for x in Path(chunk["input"]).read_text().splitlines() if x]
        yield chunk, out_path, sequences(recs, tokenizer, job["max_model_len"] - new_tokens)


def engine(job: dict[str, Any], speculative_config: dict[str, Any], **extra: Any) -> Any:
    from vllm import LLM

    return LLM(
        model=job["model"],
        tokenizer=job["model"],
        speculative_config=speculative_config,
        max_model_len=job["max_model_len"],
        # whole prompts per step: a request split over steps would be saved half-computed
        max_num_batched_tokens=max(job["max_model_len"], 8192),
        enable_chunked_prefill=False,
        gpu_memory_utilization=job["gpu_memory_utilization"],
        tensor_parallel_size=job["tensor_parallel_size"],
        trust_remote_code=job["trust_remote_code"],
        enforce_eager=True,
        enable_prefix_caching=False,  # a cached prefix is not recomputed: no states for it
        seed=0,
        **extra,
    )


def run_connector(job: dict[str, Any]) -> None:
    from safetensors.torch import load_file
    from vllm import SamplingParams

    store = tempfile.mkdtemp(prefix="hs-", dir=job.get("scratch") or None)
    llm = engine(
        job,
        {
            "method": "extract_hidden_states",
            "num_speculative_tokens": 1,
            "draft_model_config": {
                "hf_config": {"eagle_aux_hidden_state_layer_ids": job["aux_layer_ids"]}
            },
        },
        kv_transfer_config={
            "kv_connector": "ExampleHiddenStatesConnector",
            "kv_role": "kv_producer",
            "kv_connector_extra_config": {"shared_storage_path": store},
        },
    )
    sp = SamplingParams(max_tokens=1, temperature=0.0)
    for chunk, out_path, seqs in pending_chunks(job, llm.get_tokenizer(), 1):
        outs = llm.generate([{"prompt_token_ids": ids} for _, ids, _ in seqs], sp, use_tqdm=False)
        states = []
        for (_, ids, _), o in zip(seqs, outs, strict=True):
            params = o.kv_transfer_params or {}
            path = params.get("hidden_states_path") or os.path.join(
                store, f"{o.request_id}.safetensors"
            )
            t = load_file(path)
            hs = t["hidden_states"]
            if hs.shape[0] != len(ids) or t["token_ids"].tolist() != ids:
                raise SystemExit(f"connector file {path}: tokens do not match the request")
            states.append(hs)
            os.unlink(path)
        n = save_chunk(out_path, seqs, states)
        print(f"CHUNK {chunk['index']} {n}", flush=True)


def install_hook(recorded: list[Any]) -> None:
    """Record what the proposer is handed at each call (target ids, hidden states)."""
    try:
        from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer as proposer
    except ImportError:  # 0.15-0.17: the method lives on EagleProposer
        from vllm.v1.spec_decode.eagle import EagleProposer as proposer

    original = proposer.propose

    def propose(self: Any, *args: Any, **kwargs: Any) -> Any:
        ids = kwargs["target_token_ids"] if "target_token_ids" in kwargs else args[0]
        hs = kwargs["target_hidden_states"] if "target_hidden_states" in kwargs else args[2]
        recorded.append((ids.detach().cpu().clone(), hs.detach().cpu().clone()))
        return original(self, *args, **kwargs)

    proposer.propose = propose


def run_hook(job: dict[str, Any]) -> None:
    from vllm import SamplingParams

    recorded: list[Any] = []
    install_hook(recorded)
    llm = engine(
        job,
        {"method": "eagle3", "model": job["drafter_dir"], "num_speculative_tokens": 1},
        max_num_seqs=1,
    )
    sp = SamplingParams(max_tokens=2, temperature=0.0)
    n_layers = len(job["aux_layer_ids"])
    for chunk, out_path, seqs in pending_chunks(job, llm.get_tokenizer(), 2):
        states = []
        for _, ids, _ in seqs:
            recorded.clear()
            llm.generate([{"prompt_token_ids": ids}], sp, use_tqdm=False)
            first = next((r for r in recorded if r[0].shape[0] >= len(ids)), None)
            if first is None:
                raise SystemExit(f"the proposer never saw the {len(ids)}-token prefill")
            r_ids, hs = first
            if r_ids[: len(ids)].tolist() != ids:
                raise SystemExit("the proposer's target_token_ids are not the request's tokens")
            states.append(hs[: len(ids)].reshape(len(ids), n_layers, -1))
        n = save_chunk(out_path, seqs, states)
        print(f"CHUNK {chunk['index']} {n}", flush=True)


def main(argv: list[str]) -> int:
    job = json.loads(Path(argv[0]).read_text())
    if job["method"] == "eagle3-hook":
        # the engine core in this process, so the hook above reaches the proposer
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        run_hook(job)
    else:
        run_connector(job)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
