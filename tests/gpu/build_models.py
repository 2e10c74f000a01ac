#!/usr/bin/env python3
"""Build the GPU tier's tiny models: a DeepSeek-V3-architecture target and an EAGLE-3 drafter.

Runs on the GPU machine's image (torch, transformers >= 5, safetensors, tokenizers), CPU only,
deterministic (fixed seeds). Usage::

    python3 tests/gpu/build_models.py OUTDIR [--drafter bigram|random] [--aux 1,2,3]

writes OUTDIR/target (config, safetensors, tokenizer), OUTDIR/drafter (llama_eagle3 format)
and OUTDIR/models.json (what was built, sha256 of each weight file).

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
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import shutil
import sysconfig
import time

import torch
from safetensors.torch import load_file, save_file

V, H = 32000, 1024
N_LAYERS = 4
MAX_POS = 32768
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def build_tokenizer(out: str, max_bytes: int = 12_000_000) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    std = sysconfig.get_paths()["stdlib"]
    files = sorted(glob.glob(os.path.join(std, "**", "*.py"), recursive=True))
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


def build_target(tdir: str, layer_out_scale: float, embed_scale: float, expert_out_scale: float):
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    torch.manual_seed(0)
    cfg = DeepseekV3Config(
        vocab_size=V,
        hidden_size=H,
        intermediate_size=2048,
        moe_intermediate_size=256,
        num_hidden_layers=N_LAYERS,
        num_attention_heads=8,
        num_key_value_heads=8,
        n_shared_experts=1,
        n_routed_experts=8,
        num_experts_per_tok=2,
        routed_scaling_factor=1.0,
        n_group=1,
        topk_group=1,
        first_k_dense_replace=1,
        norm_topk_prob=True,
        kv_lora_rank=512,
        q_lora_rank=384,
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
    model.save_pretrained(tdir, safe_serialization=True)
    cpath = os.path.join(tdir, "config.json")
    with open(cpath) as f:
        cj = json.load(f)
    # DeepSeek-V3 router keys vLLM reads (it falls back to other defaults otherwise)
    cj.update({"topk_method": "noaux_tc", "scoring_func": "sigmoid", "moe_layer_freq": 1})
    with open(cpath, "w") as f:
        json.dump(cj, f, indent=1)


def build_drafter(tdir: str, ddir: str, mode: str, draft_vocab: int, aux: list[int]) -> dict:
    torch.manual_seed(1)
    nh, nkv, hd, inter = 8, 8, 128, 2816
    bf = torch.bfloat16

    def rnd(*s):
        return (torch.randn(*s) * 0.02).to(bf)

    info: dict = {"mode": mode}
    tw = load_file(os.path.join(tdir, "model.safetensors"))
    if mode == "bigram":
        emb = tw["model.embed_tokens.weight"].float()
        lm = tw["lm_head.weight"].float()
        en = emb * torch.rsqrt(emb.pow(2).mean(-1, keepdim=True) + 1e-6)
        f = torch.cat([(en[i : i + 4096] @ lm.T).argmax(-1) for i in range(0, V, 4096)])
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
    ap.add_argument("--drafter", choices=["bigram", "random"], default="bigram")
    ap.add_argument("--aux", default="1,2,3", help="eagle_aux_hidden_state_layer_ids")
    ap.add_argument("--draft-vocab", type=int, default=24000)
    ap.add_argument("--layer-out-scale", type=float, default=0.05)
    ap.add_argument("--embed-scale", type=float, default=10.0)
    ap.add_argument("--expert-out-scale", type=float, default=0.05)
    a = ap.parse_args()
    t0 = time.time()
    tdir, ddir = os.path.join(a.outdir, "target"), os.path.join(a.outdir, "drafter")
    if os.path.isdir(a.outdir):
        shutil.rmtree(a.outdir)
    os.makedirs(tdir)
    vocab = build_tokenizer(tdir)
    t_tok = time.time() - t0
    build_target(tdir, a.layer_out_scale, a.embed_scale, a.expert_out_scale)
    info = build_drafter(tdir, ddir, a.drafter, a.draft_vocab, [int(x) for x in a.aux.split(",")])
    summary = {
        "target": tdir,
        "drafter": ddir,
        "tokenizer_vocab": vocab,
        "scales": {
            "layer_out": a.layer_out_scale,
            "embed": a.embed_scale,
            "expert_out": a.expert_out_scale,
        },
        "drafter_info": info,
        "sha256": {
            p: sha256(os.path.join(a.outdir, p))
            for p in (
                "target/model.safetensors",
                "drafter/model.safetensors",
                "target/tokenizer.json",
            )
        },
        "tokenizer_s": round(t_tok, 1),
        "total_s": round(time.time() - t0, 1),
        "torch": torch.__version__,
    }
    with open(os.path.join(a.outdir, "models.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
