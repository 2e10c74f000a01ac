#!/usr/bin/env python3
"""The drafter trainer's rate on one GPU at Kimi-K2.5's dimensions (issue 27 item 5).

Runs ON the GPU machine (the image's torch; the toolkit's drafter_pipeline on PYTHONPATH). It
builds the pipeline's own EAGLE-3 drafter (torch_worker.Eagle3Drafter, the config of
checkpoint.drafter_config for hidden 7168 and vocabulary 163,840: about 2.1 B parameters) with
a random embedding, and times the trainer's own optimizer step (torch_worker.step_loss, AdamW,
clip, step) on synthetic sequences of the length the hand run's 828 GB implies (about 1,925
tokens). The states are random: the rate does not depend on their values.

    python3 tests/gpu/train_rate.py --json OUT.json [--seq-len 1925] [--batch 8] [--steps 6]

Prints sequences/s and tokens/s per GPU after warm-up steps, and the peak memory.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from specdeploy.controller.drafter_pipeline import checkpoint, torch_worker  # noqa: E402

KIMI_TEXT_CONFIG = {"hidden_size": 7168, "vocab_size": 163840, "max_position_embeddings": 8192}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--seq-len", type=int, default=1925)
    ap.add_argument("--batch", type=int, default=8, help="the pipeline's batch_sequences")
    ap.add_argument("--ttt-steps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6, help="timed optimizer steps")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--hidden", type=int, default=KIMI_TEXT_CONFIG["hidden_size"])
    ap.add_argument("--vocab", type=int, default=KIMI_TEXT_CONFIG["vocab_size"])
    a = ap.parse_args(argv)
    dev = a.device
    text_cfg = dict(KIMI_TEXT_CONFIG, hidden_size=a.hidden, vocab_size=a.vocab)
    dcfg = checkpoint.drafter_config(text_cfg, [2, 30, 57], a.vocab)
    h = dcfg["hidden_size"]
    torch.manual_seed(0)
    embed = torch.randn(dcfg["vocab_size"], h) * 0.02
    model = torch_worker.Eagle3Drafter(dcfg, embed).to(dev)
    params = [p for p in model.parameters() if p.requires_grad]
    n_params = sum(p.numel() for p in params)
    opt = torch.optim.AdamW(params, lr=3e-4, weight_decay=0.0)
    job = {"ttt_steps": a.ttt_steps}
    g = torch.Generator().manual_seed(1)

    def group() -> list[dict]:
        return [
            {
                "ids": torch.randint(0, dcfg["vocab_size"], (a.seq_len,), generator=g),
                "states": torch.randn(a.seq_len, 3 * h, generator=g).to(torch.bfloat16),
                "loss_start": a.seq_len // 4,
            }
            for _ in range(a.batch)
        ]

    def sync() -> None:
        if dev.startswith("cuda"):
            torch.cuda.synchronize()

    times = []
    for i in range(a.warmup + a.steps):
        data = group()  # built outside the timed step: the trainer streams it from disk
        sync()
        t = time.monotonic()
        loss = torch_worker.step_loss(model, data, job, dev, 0, 1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sync()
        dt = time.monotonic() - t
        print(f"step {i} {dt:.3f}s loss {loss.item():.3f}", flush=True)
        if i >= a.warmup:
            times.append(dt)
    med = statistics.median(times)
    out = {
        "schema": "specdeploy.gpu.train_rate/1",
        "device": torch.cuda.get_device_name(0) if dev.startswith("cuda") else dev,
        "torch": torch.__version__,
        "trainable_parameters": n_params,
        "drafter_config": {
            k: dcfg[k]
            for k in ("hidden_size", "intermediate_size", "num_attention_heads", "draft_vocab_size")
        },
        "seq_len": a.seq_len,
        "batch_sequences": a.batch,
        "ttt_steps": a.ttt_steps,
        "step_s": [round(x, 3) for x in times],
        "step_s_median": round(med, 3),
        "sequences_per_s": round(a.batch / med, 3),
        "tokens_per_s": round(a.batch * a.seq_len / med, 1),
        "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1)
        if dev.startswith("cuda")
        else None,
    }
    Path(a.json).write_text(json.dumps(out, indent=1))
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
