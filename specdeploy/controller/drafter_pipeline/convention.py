"""Step 3: the hidden states the pipeline trains on vs. those serving hands the drafter.

On ``check_sequences`` extracted sequences (first ``check_tokens`` tokens each), the serving
release's vLLM is started as it will serve (EAGLE-3, a drafter whose config names the served
``aux_layer_ids``) and a hook records the proposer's ``target_hidden_states`` at the prefill
(vllm_worker.py, ``eagle3-hook``). Per auxiliary slot the relative L2 difference
``|train - served| / |served|`` over all compared tokens must be <= ``check_tolerance``.
On a mismatch the serving capture is repeated with the layer ids shifted by -1 and +1 and the
step stops naming the offset the training states match, e.g. "training states match layer
3's input, vLLM feeds layer 2's (offset +1)". The comparison itself is stdlib (stfile.py).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from specdeploy.controller.drafter_pipeline import extract
from specdeploy.controller.drafter_pipeline.checkpoint import drafter_config, write_bootstrap
from specdeploy.controller.drafter_pipeline.config import Config
from specdeploy.controller.drafter_pipeline.launch import run_worker
from specdeploy.controller.drafter_pipeline.stfile import SafetensorsFile
from specdeploy.controller.drafter_pipeline.workdir import StepState, atomic_write_json

STEP = "convention"


class ConventionMismatch(RuntimeError):
    """The training states are not what serving feeds (the message names the offset)."""


def training_rows(workdir: Path, n_seq: int, n_tok: int) -> list[tuple[list[int], Any]]:
    """(token ids, (file, first row, rows)) of the first sequences of the extraction."""
    out: list[tuple[list[int], Any]] = []
    for path in sorted((workdir / extract.STEP).glob("chunk-*" + extract.SUFFIX)):
        f = SafetensorsFile(path)
        ids = f.ints("input_ids")
        offs = f.ints("seq_offsets")
        for s in range(len(offs) - 1):
            lo, hi = offs[s], min(offs[s + 1], offs[s] + n_tok)
            out.append((ids[lo:hi], (f, lo, hi - lo)))
            if len(out) == n_seq:
                return out
    return out


def slot_vectors(f: SafetensorsFile, first: int, count: int) -> list[list[float]]:
    """Per aux slot, the flattened states of rows [first, first + count)."""
    _, layers, hidden = f.shape("hidden_states")
    flat = f.rows("hidden_states", first, count)
    return [
        [flat[(t * layers + j) * hidden + k] for t in range(count) for k in range(hidden)]
        for j in range(layers)
    ]


def rel_diff(a: list[float], b: list[float]) -> float:
    num = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=True)))
    den = math.sqrt(sum(y * y for y in b)) or 1.0
    return num / den


def compare(train: list[tuple[list[int], Any]], served_path: Path) -> list[float]:
    """Relative L2 difference per aux slot, over every compared token of every sequence."""
    served = SafetensorsFile(served_path)
    s_ids = served.ints("input_ids")
    s_offs = served.ints("seq_offsets")
    diffs: list[list[float]] = []
    acc_num: list[float] = []
    acc_den: list[float] = []
    for s, (ids, (f, lo, n)) in enumerate(train):
        so = s_offs[s]
        if s_ids[so : so + n] != ids:
            raise ConventionMismatch(
                f"sequence {s}: the serving capture saw other tokens than the training data"
            )
        a = slot_vectors(f, lo, n)
        b = slot_vectors(served, so, n)
        if not acc_num:
            acc_num, acc_den = [0.0] * len(a), [0.0] * len(a)
        for j in range(len(a)):
            acc_num[j] += sum((x - y) ** 2 for x, y in zip(a[j], b[j], strict=True))
            acc_den[j] += sum(y * y for y in b[j])
    diffs.append([math.sqrt(n / (d or 1.0)) for n, d in zip(acc_num, acc_den, strict=True)])
    return diffs[0]


def capture(
    cfg: Config, state: StepState, layer_ids: list[int], check_input: Path, tag: str
) -> Path:
    """The serving path's states for ``layer_ids`` (a bootstrap drafter naming them)."""
    out = state.dir / f"served-{tag}.safetensors"
    if out.is_file():
        return out
    tcfg = extract.text_config(extract.target_config(cfg))
    boot = state.dir / f"bootstrap-{tag}"
    write_bootstrap(boot, drafter_config(tcfg, layer_ids, int(tcfg["vocab_size"])))
    job = extract.job(
        cfg,
        layer_ids,
        [{"index": 0, "input": str(check_input), "output": str(out)}],
        method="eagle3-hook",
        drafter_dir=str(boot),
    )
    job_path = state.dir / f"job-{tag}.json"
    atomic_write_json(job_path, job)
    print(f"[drafter] {STEP}: serving capture of layers {layer_ids} ({tag})", flush=True)
    run_worker(
        cfg.vllm_python,
        "specdeploy.controller.drafter_pipeline.vllm_worker",
        [str(job_path)],
        state.dir / "worker.log",
        lambda _i, _n: None,
    )
    return out


def name_offset(cfg: Config, diffs_by_shift: dict[int, list[float]]) -> str:
    served = cfg.aux_layer_ids
    parts = []
    for j, layer in enumerate(served):
        best = min(diffs_by_shift, key=lambda d: diffs_by_shift[d][j])
        if diffs_by_shift[best][j] <= cfg.check_tolerance and best != 0:
            parts.append(
                f"slot {j}: training states match layer {layer + best}'s input, vLLM feeds "
                f"layer {layer}'s (offset {best:+d})"
            )
        elif diffs_by_shift[0][j] > cfg.check_tolerance:
            parts.append(
                f"slot {j} (layer {layer}): training states match no layer input within "
                f"{cfg.check_tolerance} (relative difference {diffs_by_shift[0][j]:.3f} at "
                "offset 0)"
            )
    return "; ".join(parts)


def run(cfg: Config, workdir: Path) -> dict[str, Any]:
    state = StepState(workdir, STEP)
    if state.done:
        return state.result
    state.begin(cfg.inputs_hash("extract"))
    train = training_rows(workdir, cfg.check_sequences, cfg.check_tokens)
    if not train:
        raise ConventionMismatch("no extracted sequences to compare")
    check_input = state.dir / "check-input.jsonl"
    check_input.write_text(
        "".join(
            json.dumps({"index": i, "prompt_token_ids": ids, "token_ids": []}) + "\n"
            for i, (ids, _) in enumerate(train)
        )
    )
    diffs = {0: compare(train, capture(cfg, state, cfg.aux_layer_ids, check_input, "0"))}
    result: dict[str, Any] = {
        "served_layer_ids": cfg.aux_layer_ids,
        "sequences": len(train),
        "tokens": sum(n for _, (_, _, n) in train),
        "tolerance": cfg.check_tolerance,
        "rel_diff_per_slot": {"0": diffs[0]},
    }
    print(f"[drafter] {STEP}: relative difference per slot {diffs[0]}", flush=True)
    if all(d <= cfg.check_tolerance for d in diffs[0]):
        result["match"] = True
        state.finish(result)
        return result
    n_layers = int(extract.text_config(extract.target_config(cfg))["num_hidden_layers"])
    for shift in (-1, 1):
        ids = [i + shift for i in cfg.aux_layer_ids]
        if min(ids) >= 1 and max(ids) <= n_layers - 1:  # vLLM 0.18+ refuses layer id 0
            diffs[shift] = compare(train, capture(cfg, state, ids, check_input, f"{shift:+d}"))
            result["rel_diff_per_slot"][f"{shift:+d}"] = diffs[shift]
    result["match"] = False
    result["finding"] = name_offset(cfg, diffs)
    state.update(status="failed", result=result)
    raise ConventionMismatch(result["finding"] or "training states differ from the served ones")
