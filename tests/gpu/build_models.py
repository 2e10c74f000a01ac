#!/usr/bin/env python3
"""Build the GPU tier's tiny models: a DeepSeek-V3-architecture target and an EAGLE-3 drafter.

Runs on the GPU machine's image (torch, transformers >= 5, safetensors, tokenizers), CPU only,
deterministic (fixed seeds). Usage::

    python3 tests/gpu/build_models.py OUTDIR [--shape tiny|moe-big] [--drafter bigram|random]
                                             [--aux 1,2,3]

writes OUTDIR/target (config, safetensors, tokenizer with a chat template), OUTDIR/drafter
(llama_eagle3 format) and OUTDIR/models.json (what was built, sha256 of the drafter's weights,
the tokenizer and, for the tiny shape, the target's weights).

Target: random bf16 ``DeepseekV3ForCausalLM``, 4 layers, hidden 1024, 8 heads, the real
DeepSeek MLA head dimensions (qk_nope 128, qk_rope 64, v_head 128, kv_lora_rank 512) with a
smaller q_lora_rank (384), MoE with 8 routed experts (top-2) and 1 shared from layer 1 on,
vocab 32000, max_position_embeddings 32768 (so the toolkit's default --max-model-len 32768
applies unchanged). Tokenizer: byte-level BPE (vocab 32000) trained on the image's Python
standard library sources.

Drafter ``bigram`` (default): the target's layer outputs are scaled down and its embeddings up,
so the target's greedy next token is close to a bigram function of the current token,
argmax(lm_head . rmsnorm(embed(t))). The drafter is set by hand to compute exactly that
function: q/k are constant biases, v copies the normed token embedding, o_proj is the
identity, the hidden-state path and the MLP are zeroed, lm_head holds the target's rows for the
draft vocabulary. Its acceptance is well above zero but below 100% (the target is not exactly
bigram). ``random``: random weights, acceptance about zero.

Shape ``moe-big`` (the speed-up and load-time measurements, docs/speedup-gpu.md): the same
construction at DeepSeek-V3's width, memory-bound like the real model at small batch: hidden
7168, 6 layers (first dense, intermediate 4096), 64 routed experts top-8 + 1 shared,
moe_intermediate 1536, 32 heads, q_lora_rank 1536, about 22 GB in 5 GB shards (a real
checkpoint is sharded too, which the loaders' parallelism depends on). Built on the GPU (about a
minute). Its layer and expert outputs are scaled by 0.005 by default: with the tiny shape's 0.05
the wide layers move the residual stream too far from the bigram function and a bigram drafter
accepts almost nothing (recorded in ../shared/gpu-recipe/moe-speedup). The drafter then needs
H / 128 = 56 heads so that its value projection can copy the embedding (nkv * 128 == H).

Shape ``moe256`` (issue 26, docs/speedup-moe256-gpu.md): moe-big's construction as sparse in
experts as DeepSeek-V3: 256 routed experts top-8 + 1 shared, moe_intermediate 768 (narrowed so
that it fits the disk), 5 layers (first dense), about 36 GB. Per token at c=1 it reads about
2.4 GB of weights (moe-big: about 4.3 GB); at c=64 nearly every expert is touched.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import hashlib
import json
import os
import shutil
import sysconfig
import time
from dataclasses import dataclass

import torch
from safetensors import safe_open
from safetensors.torch import save_file

V = 32000
MAX_POS = 32768
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
# A plain role-prefixed template, so that /v1/chat/completions works (the load generator's
# default endpoint); the bigram drafter does not care what the prompt looks like.
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    intermediate: int
    moe_intermediate: int
    heads: int
    routed_experts: int
    experts_per_token: int
    q_lora_rank: int
    scale: float  # default layer/expert output scale (see the module docstring)
    on_gpu: bool  # build on CUDA (the big shape) or CPU
    max_shard_size: str


SHAPES = {
    "tiny": Shape(1024, 4, 2048, 256, 8, 8, 2, 384, 0.05, False, "5GB"),
    "moe-big": Shape(7168, 6, 4096, 1536, 32, 64, 8, 1536, 0.005, True, "5GB"),
    # As sparse as DeepSeek-V3 (256 routed, top-8: 1/32 of the experts per token); the experts
    # narrowed to 768 so that 4 MoE layers fit the GPU machine's 64 GB disk (about 36 GB).
    "moe256": Shape(7168, 5, 4096, 768, 32, 256, 8, 1536, 0.005, True, "5GB"),
}


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def stdlib_sources(max_bytes: int, half: int | None = None) -> list[str]:
    """The Python standard library's sources, in path order, until max_bytes characters;
    half 0 or 1: every other file only (two disjoint halves)."""
    std = sysconfig.get_paths()["stdlib"]
    files = sorted(glob.glob(os.path.join(std, "**", "*.py"), recursive=True))
    if half is not None:
        files = files[half::2]
    texts, total = [], 0
    for f in files:
        try:
            with open(f, encoding="utf-8", errors="ignore") as fh:
                t = fh.read()
        except OSError:
            continue
        texts.append(t)
        total += len(t)
        if total > max_bytes:
            break
    return texts


def build_tokenizer(out: str, max_bytes: int = 12_000_000) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    texts = stdlib_sources(max_bytes)
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=V,
        min_frequency=2,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "pad_token": "<pad>",
                "model_max_length": MAX_POS,
                "chat_template": CHAT_TEMPLATE,
                "add_bos_token": False,
                "add_eos_token": False,
                "clean_up_tokenization_spaces": False,
            },
            f,
            indent=1,
        )
    with open(os.path.join(out, "special_tokens_map.json"), "w") as f:
        json.dump(
            {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"},
            f,
            indent=1,
        )
    return tok.get_vocab_size()


def build_target(
    tdir: str, shape: Shape, layer_out_scale: float, embed_scale: float, expert_out_scale: float
) -> None:
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    torch.manual_seed(0)
    cfg = DeepseekV3Config(
        vocab_size=V,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        moe_intermediate_size=shape.moe_intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.heads,
        n_shared_experts=1,
        n_routed_experts=shape.routed_experts,
        num_experts_per_tok=shape.experts_per_token,
        routed_scaling_factor=1.0,
        n_group=1,
        topk_group=1,
        first_k_dense_replace=1,
        norm_topk_prob=True,
        kv_lora_rank=512,
        q_lora_rank=shape.q_lora_rank,
        qk_rope_head_dim=64,
        v_head_dim=128,
        qk_nope_head_dim=128,
        max_position_embeddings=MAX_POS,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        architectures=["DeepseekV3ForCausalLM"],
    )
    if shape.on_gpu:  # 22 GB of random init: seconds on the GPU, minutes on the CPU
        torch.set_default_dtype(torch.bfloat16)
        with torch.device("cuda"):
            model = DeepseekV3ForCausalLM(cfg)
        torch.set_default_dtype(torch.float32)
    else:
        model = DeepseekV3ForCausalLM(cfg).to(torch.bfloat16)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith(("o_proj.weight", "down_proj.weight")):
                p.mul_(layer_out_scale)
            if n.endswith("experts.down_proj"):  # fused routed experts (transformers 5.x name)
                p.mul_(expert_out_scale)
            if n.endswith("embed_tokens.weight"):
                p.mul_(embed_scale)
            if "e_score_correction_bias" in n:
                p.zero_()
    model.save_pretrained(tdir, safe_serialization=True, max_shard_size=shape.max_shard_size)
    del model
    if shape.on_gpu:
        torch.cuda.empty_cache()
    cpath = os.path.join(tdir, "config.json")
    with open(cpath) as f:
        cj = json.load(f)
    # DeepSeek-V3 router keys vLLM reads (it falls back to other defaults otherwise)
    cj.update({"topk_method": "noaux_tc", "scoring_func": "sigmoid", "moe_layer_freq": 1})
    with open(cpath, "w") as f:
        json.dump(cj, f, indent=1)


def target_tensors(tdir: str, names: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """Only ``names`` from the target's shards (the big target does not fit a CPU dict twice)."""
    out: dict[str, torch.Tensor] = {}
    for fn in sorted(glob.glob(os.path.join(tdir, "*.safetensors"))):
        with safe_open(fn, "pt") as fh:
            for k in names:
                if k in fh.keys():  # noqa: SIM118 (safe_open handles have keys(), no __contains__)
                    out[k] = fh.get_tensor(k)
    missing = set(names) - set(out)
    if missing:
        raise SystemExit(f"target shards in {tdir} lack {sorted(missing)}")
    return out


def build_drafter(
    tdir: str, ddir: str, shape: Shape, mode: str, draft_vocab: int, aux: list[int]
) -> dict:
    torch.manual_seed(1)
    H = shape.hidden
    hd, inter = 128, 2816
    nh = nkv = H // hd  # the bigram construction needs nkv * hd == H (v copies the embedding)
    bf = torch.bfloat16
    dev = "cuda" if shape.on_gpu else "cpu"

    def rnd(*s):
        return (torch.randn(*s) * 0.02).to(bf)

    info: dict = {"mode": mode}
    tw = target_tensors(tdir, ("model.embed_tokens.weight", "lm_head.weight"))
    if mode == "bigram":
        emb = tw["model.embed_tokens.weight"].float().to(dev)
        lm = tw["lm_head.weight"].float().to(dev)
        en = emb * torch.rsqrt(emb.pow(2).mean(-1, keepdim=True) + 1e-6)
        f = torch.cat([(en[i : i + 4096] @ lm.T).argmax(-1) for i in range(0, V, 4096)]).cpu()
        img = torch.unique(torch.cat([torch.arange(4), f]))
        rest = torch.tensor(sorted(set(range(V)) - set(img.tolist())))
        extra = rest[torch.randperm(len(rest))[: max(0, draft_vocab - len(img))]]
        sel = torch.sort(torch.cat([img, extra])[:draft_vocab]).values
        info["bigram_image_size"] = len(img)
    else:
        sel = torch.cat(
            [torch.arange(4), 4 + torch.sort(torch.randperm(V - 4)[: draft_vocab - 4]).values]
        )
    assert sel.numel() == draft_vocab and torch.unique(sel).numel() == draft_vocab
    w = {
        "midlayer.input_layernorm.weight": torch.ones(H, dtype=bf),
        "midlayer.hidden_norm.weight": torch.ones(H, dtype=bf),
        "midlayer.post_attention_layernorm.weight": torch.ones(H, dtype=bf),
        "midlayer.self_attn.q_proj.weight": rnd(nh * hd, 2 * H),
        "midlayer.self_attn.k_proj.weight": rnd(nkv * hd, 2 * H),
        "midlayer.self_attn.v_proj.weight": rnd(nkv * hd, 2 * H),
        "midlayer.self_attn.o_proj.weight": rnd(H, nh * hd),
        "midlayer.mlp.gate_proj.weight": rnd(inter, H),
        "midlayer.mlp.up_proj.weight": rnd(inter, H),
        "midlayer.mlp.down_proj.weight": rnd(H, inter),
        "norm.weight": torch.ones(H, dtype=bf),
        "fc.weight": rnd(H, 3 * H),
        "lm_head.weight": rnd(draft_vocab, H),
        "d2t": (sel - torch.arange(draft_vocab)).to(torch.int64),  # draft id -> target id offset
        "t2d": torch.zeros(V, dtype=torch.bool).index_fill_(0, sel, True),
    }
    extra_cfg: dict = {}
    if mode == "bigram":
        qk = 14.0
        c = torch.zeros(hd)
        c[: hd // 2] = qk  # one component of every (neox) RoPE pair: each position attends itself
        w["midlayer.self_attn.q_proj.weight"] = torch.zeros(nh * hd, 2 * H, dtype=bf)
        w["midlayer.self_attn.k_proj.weight"] = torch.zeros(nkv * hd, 2 * H, dtype=bf)
        w["midlayer.self_attn.q_proj.bias"] = c.repeat(nh).to(bf)
        w["midlayer.self_attn.k_proj.bias"] = c.repeat(nkv).to(bf)
        vw = torch.zeros(nkv * hd, 2 * H)
        vw[:, :H] = torch.eye(H)  # v = the normed-embedding half of the input
        w["midlayer.self_attn.v_proj.weight"] = vw.to(bf)
        w["midlayer.self_attn.v_proj.bias"] = torch.zeros(nkv * hd, dtype=bf)
        w["midlayer.self_attn.o_proj.weight"] = torch.eye(H, dtype=bf)
        w["midlayer.self_attn.o_proj.bias"] = torch.zeros(H, dtype=bf)
        w["midlayer.hidden_norm.weight"] = torch.zeros(H, dtype=bf)  # ignore the hidden states
        w["midlayer.mlp.down_proj.weight"] = torch.zeros(H, inter, dtype=bf)
        w["lm_head.weight"] = tw["lm_head.weight"][sel].to(bf)
        extra_cfg = {"attention_bias": True, "norm_before_residual": True}
    os.makedirs(ddir, exist_ok=True)
    save_file(
        {k: v.contiguous() for k, v in w.items()},
        os.path.join(ddir, "model.safetensors"),
        metadata={"format": "pt"},
    )
    dcfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": H,
        "intermediate_size": inter,
        "num_attention_heads": nh,
        "num_key_value_heads": nkv,
        "head_dim": hd,
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": MAX_POS,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "vocab_size": V,
        "draft_vocab_size": draft_vocab,
        "target_hidden_size": H,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 3,
        # top level: the place vLLM reads; the default (2, n//2, n-3) repeats layers for n=4
        "eagle_aux_hidden_state_layer_ids": aux,
        "eagle_config": {"use_aux_hidden_state": True, "eagle_aux_hidden_state_layer_ids": aux},
    }
    dcfg.update(extra_cfg)
    with open(os.path.join(ddir, "config.json"), "w") as f:
        json.dump(dcfg, f, indent=1)
    info.update({"draft_vocab": draft_vocab, "aux_layers": aux})
    return info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    ap.add_argument("--drafter", choices=["bigram", "random"], default="bigram")
    ap.add_argument("--aux", default="1,2,3", help="eagle_aux_hidden_state_layer_ids")
    ap.add_argument("--draft-vocab", type=int, default=24000)
    ap.add_argument("--layer-out-scale", type=float, help="default: the shape's scale")
    ap.add_argument("--embed-scale", type=float, default=10.0)
    ap.add_argument("--expert-out-scale", type=float, help="default: the shape's scale")
    ap.add_argument("--layers", type=int, help="default: the shape's (load-time runs: more bytes)")
    a = ap.parse_args()
    shape = SHAPES[a.shape]
    if a.layers:
        shape = dataclasses.replace(shape, layers=a.layers)
    layer_out = shape.scale if a.layer_out_scale is None else a.layer_out_scale
    expert_out = shape.scale if a.expert_out_scale is None else a.expert_out_scale
    t0 = time.time()
    tdir, ddir = os.path.join(a.outdir, "target"), os.path.join(a.outdir, "drafter")
    if os.path.isdir(a.outdir):
        shutil.rmtree(a.outdir)
    os.makedirs(tdir)
    vocab = build_tokenizer(tdir)
    t_tok = time.time() - t0
    build_target(tdir, shape, layer_out, a.embed_scale, expert_out)
    t_target = time.time() - t0 - t_tok
    aux = [int(x) for x in a.aux.split(",")]
    info = build_drafter(tdir, ddir, shape, a.drafter, a.draft_vocab, aux)
    hashed = ["drafter/model.safetensors", "target/tokenizer.json", "target/config.json"]
    if not shape.on_gpu:  # hashing 22 GB would take longer than building it
        hashed += sorted(
            os.path.relpath(p, a.outdir) for p in glob.glob(os.path.join(tdir, "*.safetensors"))
        )
    summary = {
        "shape": a.shape,
        "shape_params": shape.__dict__,
        "target_bytes": sum(
            os.path.getsize(p) for p in glob.glob(os.path.join(tdir, "*.safetensors"))
        ),
        "target": tdir,
        "drafter": ddir,
        "tokenizer_vocab": vocab,
        "scales": {
            "layer_out": layer_out,
            "embed": a.embed_scale,
            "expert_out": expert_out,
        },
        "drafter_info": info,
        "sha256": {p: sha256(os.path.join(a.outdir, p)) for p in hashed},
        "tokenizer_s": round(t_tok, 1),
        "target_s": round(t_target, 1),
        "total_s": round(time.time() - t0, 1),
        "torch": torch.__version__,
    }
    with open(os.path.join(a.outdir, "models.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
