"""Step 4 (train) and step 5 (convert): the torch worker trains on the extraction chunks and
exports the checkpoint in the format the serving vLLM loads, with the held-out acceptance.

Training resumes from ``train/checkpoint.pt`` (the worker's own, written atomically every
few optimizer steps); progress is one line per optimizer step with an ETA.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from specdeploy.controller.drafter_pipeline import extract
from specdeploy.controller.drafter_pipeline.checkpoint import drafter_config, write_config
from specdeploy.controller.drafter_pipeline.config import Config
from specdeploy.controller.drafter_pipeline.launch import run_worker
from specdeploy.controller.drafter_pipeline.split import is_heldout
from specdeploy.controller.drafter_pipeline.stfile import SafetensorsFile
from specdeploy.controller.drafter_pipeline.workdir import Progress, StepState, atomic_write_json

TRAIN, CONVERT = "train", "convert"
MODULE = "specdeploy.controller.drafter_pipeline.torch_worker"
TORCHRUN = "torch.distributed.run"


def served_config(cfg: Config) -> dict[str, Any]:
    tcfg = extract.text_config(extract.target_config(cfg))
    return drafter_config(tcfg, cfg.aux_layer_ids, int(tcfg["vocab_size"]))


def job(cfg: Config, workdir: Path, mode: str) -> dict[str, Any]:
    chunks = sorted(str(p) for p in (workdir / extract.STEP).glob("chunk-*" + extract.SUFFIX))
    return {
        "mode": mode,
        "target_model_path": cfg.target_model_path,
        "drafter_config": served_config(cfg),
        "chunks": chunks,
        "heldout_fraction": cfg.heldout_fraction,
        "epochs": cfg.epochs,
        "learning_rate": cfg.learning_rate,
        "batch_sequences": cfg.batch_sequences,
        "ttt_steps": cfg.ttt_steps,
        "checkpoint_every": cfg.checkpoint_every,
        "num_speculative_tokens": cfg.num_speculative_tokens,
        "init_drafter": cfg.init_drafter,
        "device": cfg.device,
        "seed": cfg.seed,
        "checkpoint": str(workdir / TRAIN / "checkpoint.pt"),
        "export_dir": str(workdir / CONVERT / "drafter"),
        "heldout_out": str(workdir / CONVERT / "heldout.json"),
    }


def launch_args(processes: int, job_path: str) -> tuple[str, list[str], dict[str, str]]:
    """The worker module, its arguments and environment: the torch worker itself for one
    process, else torchrun (``python -m torch.distributed.run``) on this machine only: its
    rendezvous and the gloo/NCCL bootstrap stay on the loopback interface."""
    if processes == 1:
        return MODULE, [job_path], {}
    args = ["--standalone", "--nproc_per_node", str(processes), "-m", MODULE, job_path]
    env = {k: os.environ.get(k, "lo") for k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")}
    env["MASTER_ADDR"] = "127.0.0.1"
    return TORCHRUN, args, env


def run_train(cfg: Config, workdir: Path) -> dict[str, Any]:
    state = StepState(workdir, TRAIN)
    if state.done:
        return state.result
    state.begin(cfg.inputs_hash(TRAIN) + cfg.inputs_hash(extract.STEP))
    n_train = sum(
        not is_heldout(r, cfg.heldout_fraction, cfg.seed)
        for p in sorted((workdir / extract.STEP).glob("chunk-*" + extract.SUFFIX))
        for r in SafetensorsFile(p).ints("record_index")
    )
    prog = Progress(TRAIN, n_train * cfg.epochs, "sequences")
    j = job(cfg, workdir, "train")
    atomic_write_json(state.dir / "job.json", j)

    def on_step(epoch: int, n: int) -> None:
        prog.advance(n, f"epoch {epoch + 1}/{cfg.epochs}")

    module, args, env = launch_args(cfg.train_processes, str(state.dir / "job.json"))
    run_worker(cfg.train_python, module, args, state.dir / "worker.log", on_step, env)
    result = {
        "epochs": cfg.epochs,
        "trainer": "specdeploy-torch (torch_worker.py)",
        "processes": cfg.train_processes,
    }
    state.finish(result)
    return result


def run_convert(cfg: Config, workdir: Path) -> dict[str, Any]:
    state = StepState(workdir, CONVERT)
    if state.done:
        return state.result
    state.begin(cfg.inputs_hash(TRAIN) + cfg.inputs_hash(extract.STEP))
    j = job(cfg, workdir, "export")
    atomic_write_json(state.dir / "job.json", j)
    print(f"[drafter] {CONVERT}: exporting and measuring the held-out acceptance", flush=True)
    run_worker(
        cfg.train_python,
        MODULE,
        [str(state.dir / "job.json")],
        state.dir / "worker.log",
        lambda _e, _n: None,
    )
    write_config(Path(j["export_dir"]), j["drafter_config"])
    heldout = json.loads(Path(j["heldout_out"]).read_text())
    result = {"drafter_dir": j["export_dir"], "heldout": heldout}
    state.finish(result)
    return result
