"""EAGLE-3 drafter training in plain PyTorch (run with the training venv's Python).

    TRAIN_PYTHON -m specdeploy.controller.drafter_pipeline.torch_worker JOB.json

Why not speculators here: speculators 0.9.0 (the release that fits vLLM 0.20.2; the manifest
records the pairs) reads its training data through its own hidden-states connector
(``hs-connectors``) or online from a running vLLM, in its own file format, and pulls in
datasets/openai/pydantic-settings, none of which is on the GPU machine or the controller;
this trainer reads the pipeline's extraction chunks directly. It implements exactly the
drafter vLLM serves (``LlamaForCausalLMEagle3``, vllm/model_executor/models/llama_eagle3.py):
fc(3 x target hidden) -> hidden_norm (residual before the norm), the normed token embedding
next to it as the 2 x hidden attention input, one llama decoder layer, final norm, lm_head;
the target's embedding, frozen and not exported (vLLM shares the target's). Training-time test
over ``ttt_steps`` drafting steps: step k at position t sees the step-1 keys of positions
<= t and its own earlier steps' keys at t, as vLLM's KV cache holds them while drafting.

Modes (job["mode"]): ``train`` (resumable: a checkpoint after every optimizer step interval
and each epoch, atomically; a rerun continues at the saved step with the same data order),
``export`` (bf16 safetensors with vLLM's names, and the held-out acceptance per position).
Prints ``CHUNK <epoch> <sequences>`` per optimizer step.

Several processes (``train_processes`` > 1): the pipeline starts this module under
``torchrun --standalone --nproc_per_node N`` and training is DistributedDataParallel (gloo on
CPU, nccl on CUDA, one GPU per local rank). The batch order is the one-process order; each
optimizer step's ``batch_sequences`` are dealt out over the ranks (rank r takes every N-th)
and each rank's loss is normalised by the token counts of the WHOLE step (all-reduced first),
so DDP's gradient average is the one-process gradient: the same training, up to floating-point
summation order. Rank 0 writes the checkpoint; every rank resumes from it (and a checkpoint of
either kind resumes under either process count). speculators 0.9.0's own distributed setup
(``speculators.train.utils.maybe_setup_distributed``) is not used: it needs an accelerator
(raises without one, so no CPU/gloo), wraps the model in FSDP2 with bf16 parameters and reads
its own data format; its torchrun contract is followed (``LOCAL_RANK``/``WORLD_SIZE`` set
means distributed).

The hidden states stream from the extraction chunks: only the three small per-sequence tensors
of each chunk are read up front; a batch's rows are read from the memory-mapped file when the
batch is built (``Sequences``), so the states never have to fit in memory.
"""

from __future__ import annotations

import ctypes
import inspect
import json
import math
import os
import random
import signal
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import distributed as dist
from torch import nn

from specdeploy.controller.drafter_pipeline import checkpoint
from specdeploy.controller.drafter_pipeline.split import is_heldout


class RMSNorm(nn.Module):
    def __init__(self, n: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float()).to(x.dtype)


def rope(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """Neox-style rotary embedding (llama's rotate-half), x: (B, heads, T, d), pos: (B, T)."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    ang = pos.float()[:, None, :, None] * inv  # (B, 1, T, d/2)
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x.float()[..., : d // 2], x.float()[..., d // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).to(x.dtype)


class Eagle3Drafter(nn.Module):
    def __init__(self, dcfg: dict[str, Any], embed: torch.Tensor) -> None:
        super().__init__()
        h, i = dcfg["hidden_size"], dcfg["intermediate_size"]
        self.nh, self.nkv, self.hd = (
            dcfg["num_attention_heads"],
            dcfg["num_key_value_heads"],
            dcfg["head_dim"],
        )
        eps = dcfg["rms_norm_eps"]
        self.theta = float(dcfg.get("rope_theta", 10000.0))
        self.fc = nn.Linear(3 * dcfg["target_hidden_size"], h, bias=False)
        self.input_layernorm = RMSNorm(h, eps)
        self.hidden_norm = RMSNorm(h, eps)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.norm = RMSNorm(h, eps)
        self.q_proj = nn.Linear(2 * h, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(2 * h, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(2 * h, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, h, bias=False)
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)
        self.lm_head = nn.Linear(h, dcfg["draft_vocab_size"], bias=False)
        self.register_buffer("embed", embed, persistent=False)

    def qkv(self, tokens: torch.Tensor, hidden: torch.Tensor, pos: torch.Tensor):
        b, t = tokens.shape
        e = self.input_layernorm(F.embedding(tokens, self.embed).to(hidden.dtype))
        residual = hidden  # norm_before_residual false: the residual is the un-normed input
        z = torch.cat([e, self.hidden_norm(hidden)], -1)
        q = self.q_proj(z).view(b, t, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(z).view(b, t, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(z).view(b, t, self.nkv, self.hd).transpose(1, 2)
        q, k = rope(q, pos, self.theta), rope(k, pos, self.theta)
        rep = self.nh // self.nkv
        if rep > 1:
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        return q, k, v, residual

    def finish(self, attn: torch.Tensor, residual: torch.Tensor):
        b, _, t, _ = attn.shape
        a = self.o_proj(attn.transpose(1, 2).reshape(b, t, self.nh * self.hd))
        residual = a + residual
        y = self.post_attention_layernorm(residual)
        m = self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))
        prenorm = m + residual
        return self.lm_head(self.norm(prenorm)), prenorm

    def forward(self, ids: torch.Tensor, states: torch.Tensor, steps: int) -> list[torch.Tensor]:
        return self.unroll(ids, states, steps)  # DDP hooks the backward of forward() calls

    def unroll(self, ids: torch.Tensor, states: torch.Tensor, steps: int) -> list[torch.Tensor]:
        """Logits of drafting steps 1..steps at every anchor t, teacher-forced tokens.

        ids (B, T) the sequence, states (B, T, 3 x target hidden). Step k at anchor t reads
        token ids[t + k] at position t + k - 1 and predicts ids[t + k + 1].
        """
        b, t = ids.shape
        pos0 = torch.arange(t, device=ids.device)[None].expand(b, t)
        hidden = self.fc(states)
        causal = torch.ones(t, t, dtype=torch.bool, device=ids.device).tril()
        out, keys, vals = [], [], []
        k1 = v1 = None
        for k in range(1, steps + 1):
            tok = torch.roll(ids, -k, 1)  # ids[t + k] (wrapped tail masked by the labels)
            q, kk, vv, residual = self.qkv(tok, hidden, pos0 + (k - 1))
            scale = 1.0 / math.sqrt(self.hd)
            if k == 1:
                k1, v1 = kk, vv
                s1 = (q @ k1.transpose(-1, -2)) * scale
                s1 = s1.masked_fill(~causal, float("-inf"))
                p = torch.softmax(s1.float(), -1).to(q.dtype)
                attn = p @ v1
            else:
                keys.append(kk)
                vals.append(vv)
                s1 = ((q @ k1.transpose(-1, -2)) * scale).masked_fill(~causal, float("-inf"))
                diag = [((q * km).sum(-1, keepdim=True)) * scale for km in keys]
                p = torch.softmax(torch.cat([s1, *diag], -1).float(), -1).to(q.dtype)
                attn = p[..., :t] @ v1
                for m, vm in enumerate(vals):
                    attn = attn + p[..., t + m : t + m + 1] * vm
            logits, hidden = self.finish(attn, residual)
            out.append(logits)
        return out


class Sequences:
    """The extraction chunks' sequences, read from disk per batch.

    Up front: each chunk's ``seq_offsets``, ``record_index`` and ``loss_start`` (a few ints a
    sequence). ``get(i)`` reads sequence i's ids and hidden-state rows through safetensors'
    memory map (``safe_open`` + ``get_slice``): only the rows asked for are read.
    """

    def __init__(self, paths: list[str], keep: Any = None) -> None:
        self.files: list[Any] = []
        self.index: list[tuple[int, int, int, int, int]] = []  # file, lo, hi, record, loss_start
        for p in paths:
            fh = safe_open(p, framework="pt")
            offs = fh.get_tensor("seq_offsets").tolist()
            recs = fh.get_tensor("record_index").tolist()
            starts = fh.get_tensor("loss_start").tolist()
            f = len(self.files)
            self.files.append(fh)
            for s in range(len(offs) - 1):
                if keep is None or keep(int(recs[s])):
                    self.index.append((f, offs[s], offs[s + 1], int(recs[s]), int(starts[s])))

    def __len__(self) -> int:
        return len(self.index)

    def get(self, i: int) -> dict[str, Any]:
        f, lo, hi, record, loss_start = self.index[i]
        fh = self.files[f]
        return {
            "record": record,
            "ids": fh.get_slice("input_ids")[lo:hi],
            "states": fh.get_slice("hidden_states")[lo:hi].flatten(1),
            "loss_start": loss_start,
        }


def batch(seqs: list[dict[str, Any]], device: str):
    n = max(s["ids"].shape[0] for s in seqs)
    ids = torch.zeros(len(seqs), n, dtype=torch.long)
    states = torch.zeros(len(seqs), n, seqs[0]["states"].shape[1])
    valid = torch.zeros(len(seqs), n, dtype=torch.bool)
    resp = torch.zeros(len(seqs), n, dtype=torch.bool)
    for i, s in enumerate(seqs):
        m = s["ids"].shape[0]
        ids[i, :m] = s["ids"]
        states[i, :m] = s["states"].float()
        valid[i, :m] = True
        resp[i, s["loss_start"] : m] = True
    return ids.to(device), states.to(device), valid.to(device), resp.to(device)


def step_labels(ids: torch.Tensor, valid: torch.Tensor, k: int):
    """Labels of drafting step k at anchor t: ids[t + k + 1], where it exists."""
    lab = torch.roll(ids, -(k + 1), 1)
    ok = torch.roll(valid, -(k + 1), 1) & valid
    ok[:, ids.shape[1] - (k + 1) :] = False
    return lab, ok


def build(job: dict[str, Any], device: str) -> Eagle3Drafter:
    dcfg = job["drafter_config"]
    tdir = Path(job["target_model_path"])
    embed = None
    for f in sorted(tdir.glob("*.safetensors")):
        w = load_file(str(f))
        for name in ("model.embed_tokens.weight", "language_model.model.embed_tokens.weight"):
            if name in w:
                embed = w[name].float()
        lm = w.get("lm_head.weight")
        if embed is not None:
            break
    if embed is None:
        raise SystemExit(f"{tdir}: no embed_tokens weight found")
    torch.manual_seed(job["seed"])
    model = Eagle3Drafter(dcfg, embed)
    with torch.no_grad():
        for lin in (model.fc, model.q_proj, model.k_proj, model.v_proj, model.o_proj):
            nn.init.normal_(lin.weight, std=0.02)
        for lin in (model.gate_proj, model.up_proj, model.down_proj):
            nn.init.normal_(lin.weight, std=0.02)
        if lm is not None and lm.shape[0] == dcfg["draft_vocab_size"]:
            model.lm_head.weight.copy_(lm.float())  # start from the target's head
    if job.get("init_drafter"):
        w = load_file(str(Path(job["init_drafter"]) / "model.safetensors"))
        own = export_names(model)
        with torch.no_grad():
            for name, param in own.items():
                if name in w and w[name].shape == param.shape:
                    param.copy_(w[name].float())
    return model.to(device)


def export_names(model: Eagle3Drafter) -> dict[str, torch.Tensor]:
    m = model
    return {
        "midlayer.input_layernorm.weight": m.input_layernorm.weight,
        "midlayer.hidden_norm.weight": m.hidden_norm.weight,
        "midlayer.post_attention_layernorm.weight": m.post_attention_layernorm.weight,
        "midlayer.self_attn.q_proj.weight": m.q_proj.weight,
        "midlayer.self_attn.k_proj.weight": m.k_proj.weight,
        "midlayer.self_attn.v_proj.weight": m.v_proj.weight,
        "midlayer.self_attn.o_proj.weight": m.o_proj.weight,
        "midlayer.mlp.gate_proj.weight": m.gate_proj.weight,
        "midlayer.mlp.up_proj.weight": m.up_proj.weight,
        "midlayer.mlp.down_proj.weight": m.down_proj.weight,
        "norm.weight": m.norm.weight,
        "fc.weight": m.fc.weight,
        "lm_head.weight": m.lm_head.weight,
    }


def save_atomic(obj: Any, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    tmp.replace(path)


def die_with_parent() -> None:
    """torchrun starts each rank in a session of its own: a rank must not outlive the torchrun
    that started it (killed with the pipeline, it would go on writing the checkpoint that the
    resumed run reads). Linux's PR_SET_PDEATHSIG; elsewhere nothing."""
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def setup_distributed(device: str) -> tuple[int, int, str]:
    """(rank, world size, this rank's device): torchrun sets ``LOCAL_RANK`` and ``WORLD_SIZE``."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if "LOCAL_RANK" not in os.environ or world == 1:
        return 0, 1, device
    die_with_parent()
    local = int(os.environ["LOCAL_RANK"])
    if device == "cuda":
        torch.cuda.set_device(local)
        dist.init_process_group("nccl")
        return dist.get_rank(), world, f"cuda:{local}"
    dist.init_process_group("gloo")
    return dist.get_rank(), world, device


def step_loss(
    model: nn.Module,
    group: list[dict[str, Any]],
    job: dict[str, Any],
    device: str,
    rank: int,
    world: int,
) -> torch.Tensor:
    """This rank's share of one optimizer step's loss, scaled so that the average over the
    ranks (DDP's gradient average) is the one-process loss of the whole group: per drafting
    step k, the weighted sum of token cross-entropies over the label count of the group."""
    steps = job["ttt_steps"]
    weights = [0.8**k for k in range(steps)]
    mine = group[rank::world]
    empty = not mine
    ids, states, valid, _ = batch(mine or group[:1], device)
    counts = torch.zeros(steps, dtype=torch.float64)
    oks = []
    for k in range(1, steps + 1):
        lab, ok = step_labels(ids, valid, k)
        if empty:
            ok = torch.zeros_like(ok)
        oks.append((lab, ok))
        counts[k - 1] = float(ok.sum().item())
    if world > 1:
        dist.all_reduce(counts)
    if device.startswith("cuda"):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            outs = model(ids, states, steps)
    else:
        outs = model(ids, states, steps)
    loss = torch.zeros((), device=device)
    for k, logits in enumerate(outs, 1):
        lab, ok = oks[k - 1]
        n = counts[k - 1].item()
        if n > 0:
            ce = F.cross_entropy(logits[ok].float(), lab[ok], reduction="sum")
            loss = loss + weights[k - 1] * ce / n
        else:
            loss = loss + 0.0 * logits.float().sum()  # every parameter joins DDP's reduction
    if empty:
        loss = loss + 0.0 * sum(o.float().sum() for o in outs)
    return loss * world


def train(job: dict[str, Any]) -> None:
    rank, world, device = setup_distributed(job["device"])
    seqs = Sequences(
        job["chunks"], lambda r: not is_heldout(r, job["heldout_fraction"], job["seed"])
    )
    if not len(seqs):
        raise SystemExit("no training sequences (all held out?)")
    bs = job["batch_sequences"]
    if device.startswith("cuda"):
        refused = checkpoint.gpu_memory_refusal(
            job["drafter_config"],
            max(hi - lo for _, lo, hi, _, _ in seqs.index),
            bs,
            world,
            job["ttt_steps"],
            torch.cuda.get_device_properties(device).total_memory,
            device,
        )
        if refused:
            raise SystemExit(refused)
    model = build(job, device)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=job["learning_rate"], weight_decay=0.0)
    steps_per_epoch = (len(seqs) + bs - 1) // bs
    ckpt = Path(job["checkpoint"])
    start_epoch, start_step = 0, 0
    if ckpt.is_file():
        saved = torch.load(ckpt, map_location=device, weights_only=False)
        model.load_state_dict(saved["model"], strict=False)
        opt.load_state_dict(saved["opt"])
        start_epoch, start_step = saved["epoch"], saved["step"]
        if rank == 0:
            print(f"resumed at epoch {start_epoch} step {start_step}", flush=True)
    net: nn.Module = model
    if world > 1:
        ids = [int(device.split(":")[1])] if device.startswith("cuda") else None
        # the frozen embedding (a buffer, the same on every rank) is not re-sent every step;
        # torch 2.13 renamed the switch
        ddp = nn.parallel.DistributedDataParallel
        sync = (
            "forward_sync_buffers"
            if "forward_sync_buffers" in inspect.signature(ddp.__init__).parameters
            else "broadcast_buffers"
        )
        net = ddp(model, device_ids=ids, **{sync: False})
        if rank == 0:
            print(f"distributed: {world} processes, {dist.get_backend()}", flush=True)
    every = max(1, job.get("checkpoint_every", 20))
    for epoch in range(start_epoch, job["epochs"]):
        order = list(range(len(seqs)))
        random.Random(job["seed"] * 1000 + epoch).shuffle(order)
        first = start_step if epoch == start_epoch else 0
        for st in range(first, steps_per_epoch):
            group = [seqs.get(i) for i in order[st * bs : (st + 1) * bs]]
            loss = step_loss(net, group, job, device, rank, world)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            done = st + 1
            if world > 1:
                lsum = loss.detach().float().reshape(1).cpu()
                dist.all_reduce(lsum)
                shown = lsum.item() / world
            else:
                shown = loss.item()
            # The step's line before its checkpoint: a run killed between the two repeats the
            # step and says so twice, never a checkpointed step that no line reported.
            if rank == 0:
                print(f"CHUNK {epoch} {len(group)} loss={shown:.4f}", flush=True)
            if rank == 0 and (done % every == 0 or done == steps_per_epoch):
                nxt = (epoch + 1, 0) if done == steps_per_epoch else (epoch, done)
                save_atomic(
                    {
                        "model": model.state_dict(),
                        "opt": opt.state_dict(),
                        "epoch": nxt[0],
                        "step": nxt[1],
                    },
                    ckpt,
                )
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


@torch.no_grad()
def heldout_acceptance(job: dict[str, Any], model: Eagle3Drafter) -> dict[str, Any]:
    k_max = job["num_speculative_tokens"]
    seqs = Sequences(job["chunks"], lambda r: is_heldout(r, job["heldout_fraction"], job["seed"]))
    if not len(seqs):
        return {"sequences": 0}
    hits = torch.zeros(k_max)
    anchors = 0
    device = job["device"]
    for i in range(0, len(seqs), 8):
        ids, states, valid, resp = batch(
            [seqs.get(j) for j in range(i, min(i + 8, len(seqs)))], device
        )
        outs = model.unroll(ids, states, k_max)
        chain = None
        # anchors: the next token ids[t + 1] is a response token and k_max labels exist
        _, ok_last = step_labels(ids, valid, k_max)
        use = ok_last & torch.roll(resp, -1, 1)
        for k, logits in enumerate(outs, 1):
            lab, _ = step_labels(ids, valid, k)
            right = logits.argmax(-1) == lab
            chain = right if chain is None else chain & right
            hits[k - 1] += (chain & use).sum().item()
        anchors += int(use.sum().item())
    rate = (hits / max(1, anchors)).tolist()
    return {
        "sequences": len(seqs),
        "anchors": anchors,
        "per_position_acceptance": [round(x, 4) for x in rate],
        "mean_acceptance_length": round(1 + sum(rate), 4),
    }


def export(job: dict[str, Any]) -> None:
    device = job["device"]
    model = build(job, device)
    saved = torch.load(job["checkpoint"], map_location=device, weights_only=False)
    model.load_state_dict(saved["model"], strict=False)
    model.eval()
    acc = heldout_acceptance(job, model)
    out = Path(job["export_dir"])
    out.mkdir(parents=True, exist_ok=True)
    tensors = {
        n: p.detach().to(torch.bfloat16).cpu().contiguous() for n, p in export_names(model).items()
    }
    tensors["d2t"] = torch.zeros(job["drafter_config"]["draft_vocab_size"], dtype=torch.int64)
    tmp = out / "model.safetensors.tmp"
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    tmp.replace(out / "model.safetensors")
    Path(job["heldout_out"]).write_text(json.dumps(acc, indent=1))
    print(f"heldout {json.dumps(acc)}", flush=True)


def main(argv: list[str]) -> int:
    job = json.loads(Path(argv[0]).read_text())
    if job["device"] == "cuda" and not torch.cuda.is_available():
        raise SystemExit("device cuda asked for, but torch sees no GPU")
    (train if job["mode"] == "train" else export)(job)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
