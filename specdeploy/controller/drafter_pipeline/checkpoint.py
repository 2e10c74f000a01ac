"""The drafter checkpoint vLLM loads: a llama-style EAGLE-3 config and its tensor names.

``LlamaForCausalLMEagle3`` (every vLLM the toolkit supports loads it; the GPU tier's drafter
uses it): one decoder layer ``midlayer.*`` (its q/k/v take 2 x hidden: the normed token
embedding next to the normed fc output), ``fc`` (3 x target hidden -> hidden), ``norm``,
``lm_head`` over the draft vocabulary and ``d2t`` (draft id -> target id offset). No
``embed_tokens``: vLLM shares the target's. The auxiliary layer ids go to the TOP-LEVEL key
``eagle_aux_hidden_state_layer_ids`` (the only place vLLM 0.15-0.20 reads them).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

ARCHITECTURE = "LlamaForCausalLMEagle3"


def drafter_config(
    target_text_cfg: dict[str, Any], aux_layer_ids: list[int], draft_vocab: int
) -> dict[str, Any]:
    h = int(target_text_cfg["hidden_size"])
    heads = max(1, h // 128)
    return {
        "architectures": [ARCHITECTURE],
        "model_type": "llama",
        "hidden_size": h,
        "intermediate_size": int(h * 2.75) // 256 * 256 or 256,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "head_dim": 128,
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": int(target_text_cfg.get("max_position_embeddings", 4096)),
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "vocab_size": int(target_text_cfg["vocab_size"]),
        "draft_vocab_size": draft_vocab,
        "target_hidden_size": h,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": target_text_cfg.get("bos_token_id"),
        "eos_token_id": target_text_cfg.get("eos_token_id"),
        "eagle_aux_hidden_state_layer_ids": list(aux_layer_ids),
        "eagle_config": {
            "use_aux_hidden_state": True,
            "eagle_aux_hidden_state_layer_ids": list(aux_layer_ids),
        },
    }


def tensor_shapes(dcfg: dict[str, Any]) -> dict[str, tuple[str, list[int]]]:
    """Every tensor of the checkpoint: name -> (safetensors dtype, shape)."""
    h, i = dcfg["hidden_size"], dcfg["intermediate_size"]
    nh, nkv, hd = dcfg["num_attention_heads"], dcfg["num_key_value_heads"], dcfg["head_dim"]
    dv, th = dcfg["draft_vocab_size"], dcfg["target_hidden_size"]
    return {
        "midlayer.input_layernorm.weight": ("BF16", [h]),
        "midlayer.hidden_norm.weight": ("BF16", [h]),
        "midlayer.post_attention_layernorm.weight": ("BF16", [h]),
        "midlayer.self_attn.q_proj.weight": ("BF16", [nh * hd, 2 * h]),
        "midlayer.self_attn.k_proj.weight": ("BF16", [nkv * hd, 2 * h]),
        "midlayer.self_attn.v_proj.weight": ("BF16", [nkv * hd, 2 * h]),
        "midlayer.self_attn.o_proj.weight": ("BF16", [h, nh * hd]),
        "midlayer.mlp.gate_proj.weight": ("BF16", [i, h]),
        "midlayer.mlp.up_proj.weight": ("BF16", [i, h]),
        "midlayer.mlp.down_proj.weight": ("BF16", [h, i]),
        "norm.weight": ("BF16", [h]),
        "fc.weight": ("BF16", [h, 3 * th]),
        "lm_head.weight": ("BF16", [dv, h]),
        "d2t": ("I64", [dv]),
    }


def parameter_count(dcfg: dict[str, Any]) -> int:
    """The drafter's trained parameters (every floating tensor of the export)."""
    total = 0
    for dtype, shape in tensor_shapes(dcfg).values():
        if dtype != "I64":
            n = 1
            for d in shape:
                n *= d
            total += n
    return total


def training_bytes(dcfg: dict[str, Any]) -> int:
    """Disk the train and convert steps write: the resumable checkpoint (fp32 parameters and
    AdamW's two moments, 12 bytes a parameter) twice, since it is replaced atomically (old and
    new coexist for a moment), plus the bf16 export."""
    n = parameter_count(dcfg)
    return 2 * 12 * n + 2 * n


# The trainer's GPU memory, fitted on the H200 (2026-12-04, tests/fixtures/vllm-0.20.2-restart/
# train-rate-b*.json: Kimi's drafter shape, 1,925-token sequences, 3 test steps, peaks of
# 65.1 GiB with 2 sequences and 90.7 GiB with 4; 8 ran out of 139.8 GiB). Per parameter: fp32
# weights, gradients and AdamW's two moments (16 bytes) and autocast's bf16 copy (2); the frozen
# fp32 embedding; per sequence, the logits of every test step over the draft vocabulary, with
# their fp32 copies for the loss and the backward: 14.5 bytes a logit.
BYTES_PER_PARAMETER = 18
BYTES_PER_LOGIT = 14.5
# What of the device's memory the estimate may use: the CUDA context, the allocator's
# fragmentation and the estimate's own error.
GPU_MEMORY_SHARE = 0.92


def training_gpu_bytes(dcfg: dict[str, Any], seq_len: int, sequences: int, ttt_steps: int) -> int:
    """Peak GPU memory of one training process for `sequences` sequences of `seq_len` tokens."""
    fixed = BYTES_PER_PARAMETER * parameter_count(dcfg) + 4 * (
        int(dcfg["vocab_size"]) * int(dcfg["hidden_size"])
    )
    per_sequence = BYTES_PER_LOGIT * seq_len * int(dcfg["draft_vocab_size"]) * ttt_steps
    return int(fixed + sequences * per_sequence)


def gpu_memory_refusal(
    dcfg: dict[str, Any],
    seq_len: int,
    batch_sequences: int,
    processes: int,
    ttt_steps: int,
    device_bytes: int,
    device: str = "the GPU",
) -> str | None:
    """One line when batch_sequences cannot fit each process's GPU, None when it can. The
    train step asks before it builds the model: an out-of-memory error in the first step is a
    traceback; this names the knob (the extraction's output stays, the run resumes at train)."""
    per_process = -(-batch_sequences // max(1, processes))
    budget = GPU_MEMORY_SHARE * device_bytes
    need = training_gpu_bytes(dcfg, seq_len, per_process, ttt_steps)
    if need <= budget:
        return None
    fits = 0
    while training_gpu_bytes(dcfg, seq_len, fits + 1, ttt_steps) <= budget:
        fits += 1
    advice = (
        f"set batch_sequences to at most {fits * max(1, processes)}"
        if fits
        else "not even one sequence fits: a smaller draft vocabulary or shorter sequences"
    )
    return (
        f"batch_sequences={batch_sequences} ({per_process} a process) needs about "
        f"{need / 2**30:.1f} GiB on {device} for sequences of up to {seq_len} tokens, which has "
        f"{device_bytes / 2**30:.1f} GiB: {advice}"
    )


def write_config(out: Path, dcfg: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(dcfg, indent=1) + "\n")


def write_bootstrap(out: Path, dcfg: dict[str, Any]) -> None:
    """A loadable drafter of zeros (norm weights one): what the convention check's serving
    capture starts vLLM with. Its drafts are worthless; the target's states are not."""
    write_config(out, dcfg)
    shapes = tensor_shapes(dcfg)
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    off = 0
    for name, (dtype, shape) in shapes.items():
        n = {"BF16": 2, "I64": 8}[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    one_bf16 = b"\x80\x3f"
    with (out / "model.safetensors").open("wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        for name, (_, shape) in shapes.items():
            lo, hi = header[name]["data_offsets"]
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                fh.write(one_bf16 * shape[0])
            else:
                size = hi - lo
                while size:
                    step = min(size, 1 << 24)
                    fh.write(b"\0" * step)
                    size -= step
