#!/usr/bin/env python3
"""Train the GPU tier's tiny DeepSeek-V3 target into a real (small) language model.

Runs on the GPU machine (the image's torch + transformers). The architecture is
build_models.py's (MLA with DeepSeek's head dims, MoE 8 routed top-2 + 1 shared, vocab 32000,
the byte-level BPE tokenizer trained on the stdlib) with normal initialisation (no bigram
scaling) and ``--layers`` decoder layers; it is then trained for ``--seconds`` on the Python
standard library's sources (next-token prediction, bf16, AdamW), so its hidden states carry
information an EAGLE-3 drafter can learn from. ``--text-half`` picks the first or second half
of the files (two targets trained on different text), ``--seed`` the initialisation.

    python3 tests/gpu/train_target.py OUTDIR [--layers 6] [--seconds 90] [--seed 0]
        [--text-half 0] [--tokenizer-from DIR]

Writes OUTDIR (config.json with vLLM's router keys, model.safetensors, tokenizer files) and
OUTDIR/train.json (steps, tokens, loss curve).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shutil
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_models


def corpus(half: int, max_bytes: int = 24_000_000) -> str:
    return "\n\n".join(build_models.stdlib_sources(max_bytes, half))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=90.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--text-half", type=int, default=0, choices=[0, 1])
    ap.add_argument("--tokenizer-from", help="copy the tokenizer from this model dir")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--device", default="cuda", help="cpu for a dry run")
    ap.add_argument("--corpus-bytes", type=int, default=24_000_000)
    a = ap.parse_args()
    t0 = time.time()
    out = Path(a.outdir)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    if a.tokenizer_from:
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            shutil.copy(Path(a.tokenizer_from) / name, out / name)
    else:
        build_models.build_tokenizer(str(out))
    shape = dataclasses.replace(build_models.SHAPES["tiny"], layers=a.layers)
    build_models.build_target(str(out), shape, 1.0, 1.0, 1.0)  # plain init, vLLM's router keys
    cfg_text = (out / "config.json").read_text()
    from tokenizers import Tokenizer
    from transformers import DeepseekV3ForCausalLM

    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    ids = torch.tensor(tok.encode(corpus(a.text_half, a.corpus_bytes)).ids, dtype=torch.long)
    print(f"corpus: {ids.numel()} tokens (half {a.text_half}), {time.time() - t0:.0f}s", flush=True)
    torch.manual_seed(a.seed)
    dev = a.device
    model = DeepseekV3ForCausalLM.from_pretrained(str(out), torch_dtype=torch.float32).to(dev)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.01)
    g = torch.Generator().manual_seed(a.seed + 1)
    data = ids.to(dev)
    step, losses, t_train = 0, [], time.time()
    warm = 30
    while time.time() - t_train < a.seconds:
        starts = torch.randint(0, data.numel() - a.seq - 1, (a.batch,), generator=g).to(dev)
        x = torch.stack([data[s : s + a.seq] for s in starts.tolist()])
        frac = min(1.0, (time.time() - t_train) / a.seconds)
        lr = a.lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for group in opt.param_groups:
            group["lr"] = lr
        with torch.autocast(dev, dtype=torch.bfloat16, enabled=dev == "cuda"):
            loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 25 == 0:
            losses.append((step, round(loss.item(), 4)))
            print(f"step {step} loss {loss.item():.3f} lr {lr:.2e}", flush=True)
    model.eval()
    samples = {}
    with torch.no_grad():
        for prompt in ("def main():\n    ", "import os\n\n\nclass "):
            x = torch.tensor([tok.encode(prompt).ids], device=dev)
            y = model.generate(x, max_new_tokens=40, do_sample=False)
            samples[prompt] = tok.decode(y[0, x.shape[1] :].tolist())
    model = model.to(torch.bfloat16)
    model.save_pretrained(str(out), safe_serialization=True)
    (out / "config.json").write_text(cfg_text)  # the config vLLM reads (router keys kept)
    info = {
        "layers": a.layers,
        "seed": a.seed,
        "text_half": a.text_half,
        "steps": step,
        "tokens_seen": step * a.batch * a.seq,
        "train_s": round(time.time() - t_train, 1),
        "final_loss": losses[-1][1] if losses else None,
        "loss_curve": losses,
        "greedy_samples": samples,
        "total_s": round(time.time() - t0, 1),
        "torch": torch.__version__,
    }
    (out / "train.json").write_text(json.dumps(info, indent=1))
    print(json.dumps({k: v for k, v in info.items() if k != "loss_curve"}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
