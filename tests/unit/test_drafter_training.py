"""The pipeline's training and conversion steps with real torch on CPU (issue 17.5).

Needs a Python with torch and safetensors: $SPECDEPLOY_DRAFTER_TORCH_PYTHON, else
``$SPECDEPLOY_CACHE/venvs/drafter-torch/bin/python`` (``make drafter-venv`` builds it from the
pinned CPU wheel); without one these tests are skipped and say so. The hidden states are
synthetic (a tiny deterministic "target": each sequence follows x[t+1] = (5 x[t] + 3) mod V,
its states are rows of the target's embedding), written in the extraction step's format; the
real extraction needs vLLM on a GPU (tests/gpu/drafter_proof.sh).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specdeploy.controller import drafter_provenance as prov
from specdeploy.controller.drafter_pipeline.config import parse
from specdeploy.controller.drafter_pipeline.extract import summarize
from specdeploy.controller.drafter_pipeline.workdir import StepState

REPO = Path(__file__).resolve().parents[2]

CACHE = Path(os.environ.get("SPECDEPLOY_CACHE", Path.home() / ".cache" / "specdeploy"))
TORCH_PYTHON = os.environ.get(
    "SPECDEPLOY_DRAFTER_TORCH_PYTHON", str(CACHE / "venvs" / "drafter-torch" / "bin" / "python")
)


def has_torch() -> bool:
    if not Path(TORCH_PYTHON).exists():
        return False
    p = subprocess.run(
        [TORCH_PYTHON, "-c", "import torch, safetensors"], capture_output=True, check=False
    )
    return p.returncode == 0


pytestmark = pytest.mark.skipif(
    not has_torch(), reason=f"no torch at {TORCH_PYTHON} (make drafter-venv builds it)"
)

MAKE_DATA = r"""
import json, sys, torch
from pathlib import Path
from safetensors.torch import save_file
V, H = 256, 32
root = Path(sys.argv[1]); t = root / "target"; t.mkdir(parents=True, exist_ok=True)
(t / "config.json").write_text(json.dumps({"architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3", "hidden_size": H, "vocab_size": V, "num_hidden_layers": 4,
    "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}))
g = torch.Generator().manual_seed(0)
emb = torch.randn(V, H, generator=g)
save_file({"model.embed_tokens.weight": emb.to(torch.bfloat16),
           "lm_head.weight": torch.randn(V, H, generator=g).to(torch.bfloat16)},
          str(t / "model.safetensors"))
ex = root / "work" / "extract"; ex.mkdir(parents=True, exist_ok=True)
for c in range(2):
    ids, offs, states, rec = [], [0], [], []
    for s in range(16):
        x = [(c * 97 + s * 13) % V]
        for _ in range(31): x.append((5 * x[-1] + 3) % V)
        ids += x; offs.append(len(ids)); rec.append(c * 16 + s)
        states.append(torch.stack([emb[torch.tensor(x)] * (j + 1) for j in range(3)], 1))
    save_file({"hidden_states": torch.cat(states).to(torch.bfloat16),
               "input_ids": torch.tensor(ids), "seq_offsets": torch.tensor(offs),
               "loss_start": torch.tensor([4] * 16), "record_index": torch.tensor(rec)},
              str(ex / f"chunk-{c:05d}.safetensors"))
"""


def prepare(root: Path) -> Path:
    subprocess.run([TORCH_PYTHON, "-c", MAKE_DATA, str(root)], check=True)
    knobs = {
        "target_model_path": str(root / "target"),
        "served_model_name": "tiny",
        "serve_url": "http://127.0.0.1:9",
        "vllm_version": "0.20.2",
        "vllm_python": "/nonexistent/python",
        "train_python": TORCH_PYTHON,
        "prompts_file": str(root / "prompts.jsonl"),
        "aux_layer_ids": [1, 2, 3],
        "workdir": str(root / "work"),
        "output_dir": str(root / "out"),
        "epochs": 3,
        "batch_sequences": 2,
        "learning_rate": 0.003,
        "heldout_fraction": 0.2,
        "checkpoint_every": 2,
        "device": "cpu",
    }
    cfg_path = root / "cfg.yml"
    cfg_path.write_text(json.dumps(knobs))
    cfg = parse(knobs)
    work = root / "work"
    for step, result in (("generate", {"responses": 32}), ("convention", {"match": True})):
        st = StepState(work, step)
        st.begin("x")
        st.finish(result)
    st = StepState(work, "extract")
    st.begin(cfg.inputs_hash("extract"))
    st.finish(summarize(work / "extract", [1, 2, 3], "synthetic"))
    return cfg_path


# One BLAS/OpenMP thread, fixed: byte-identical weights need the same reduction order in both
# runs, and MKL's default dynamic threading picks fewer threads on a loaded machine (CI runs
# four test sessions on two cores; a resumed drafter once differed there).
DETERMINISTIC_ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MKL_DYNAMIC="FALSE")


def pipeline_cmd(cfg: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "specdeploy.controller.drafter_pipeline",
        "run",
        "--config",
        str(cfg),
    ]


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One uninterrupted one-process run of the whole pipeline: (its root, its stdout)."""
    b = tmp_path_factory.mktemp("whole")
    cfg_b = prepare(b)
    run = subprocess.run(
        pipeline_cmd(cfg_b), cwd=REPO, capture_output=True, text=True, env=DETERMINISTIC_ENV
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return b, run.stdout


def kill_after_checkpoint(cmd: list[str], root: Path) -> int:
    """Start the pipeline, SIGKILL its process group once the first training checkpoint is
    written (a crash, or an operator's kill); the CHUNK lines the worker finished before."""
    # its own process group: the kill takes the worker with it, as a crash or an operator's
    # Ctrl-C would (a surviving worker would race the resumed run)
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=DETERMINISTIC_ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    ckpt = root / "work" / "train" / "checkpoint.pt"
    t0 = time.monotonic()
    while not ckpt.exists() and time.monotonic() - t0 < 300 and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "training finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)  # the pipeline this test started and its worker
    proc.wait(10)
    assert not StepState(root / "work", "train").done
    return (root / "work" / "train" / "worker.log").read_text().count("CHUNK ")


def training_processes(job: Path) -> list[int]:
    """Processes still running with this job file on their command line."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if str(job).encode() in cmd:
            pids.append(int(proc.name))
    return pids


COMPARE = r"""
import json, sys, torch
a = torch.load(sys.argv[1], weights_only=False)
b = torch.load(sys.argv[2], weights_only=False)
diff = max((a["model"][k].float() - b["model"][k].float()).abs().max().item() for k in a["model"])
print(json.dumps({"max_abs_diff": diff, "epochs": [a["epoch"], b["epoch"]]}))
"""

# DDP against one process: the same batches, the same loss (see torch_worker.step_loss); only
# the order of float32 summation differs (each rank sums its share, gloo adds the shares). On
# this data that moves a weight by under 1e-6 after 42 optimizer steps; one optimizer step of
# AdamW at this learning rate moves weights by about 3e-3, so a skipped, repeated or
# half-applied step lies far outside.
DDP_TOLERANCE = 1e-5


def test_training_under_torchrun_with_two_processes_matches_one_and_resumes(
    tmp_path: Path, whole: tuple[Path, str]
) -> None:
    b, _ = whole
    cfg = prepare(tmp_path)
    knobs = json.loads(cfg.read_text())
    knobs["train_processes"] = 2
    cfg.write_text(json.dumps(knobs))
    until_train = [*pipeline_cmd(cfg), "--until", "train"]
    job = tmp_path / "work" / "train" / "job.json"
    ckpt = tmp_path / "work" / "train" / "checkpoint.pt"
    done_before = kill_after_checkpoint(until_train, tmp_path)
    # torchrun starts each rank in a session of its own; they must die with torchrun
    t0 = time.monotonic()
    while training_processes(job) and time.monotonic() - t0 < 20:
        time.sleep(0.1)
    assert training_processes(job) == [], "a training rank outlived the killed run"
    log = (tmp_path / "work" / "train" / "worker.log").read_text()
    assert "distributed: 2 processes, gloo" in log

    resumed = subprocess.run(
        until_train, cwd=REPO, capture_output=True, text=True, env=DETERMINISTIC_ENV
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    log = (tmp_path / "work" / "train" / "worker.log").read_text()
    assert "resumed at epoch 0 step" in log
    assert done_before >= 1
    # the resumed run did only the steps after the checkpoint; the two runs did them all
    steps_total = (b / "work" / "train" / "worker.log").read_text().count("CHUNK ")
    assert log.count("CHUNK ") >= steps_total
    assert resumed.stdout.count("[drafter] train:") < steps_total
    cmp = subprocess.run(
        [TORCH_PYTHON, "-c", COMPARE, str(ckpt), str(b / "work" / "train" / "checkpoint.pt")],
        capture_output=True,
        text=True,
        check=True,
    )
    res = json.loads(cmp.stdout)
    assert res["epochs"] == [3, 3]
    assert res["max_abs_diff"] <= DDP_TOLERANCE, res


def test_training_killed_mid_step_resumes_to_the_same_drafter(
    tmp_path: Path, whole: tuple[Path, str]
) -> None:
    a = tmp_path / "a"
    b, whole_stdout = whole
    cfg_a = prepare(a)

    done_before = kill_after_checkpoint(pipeline_cmd(cfg_a), a)

    resumed = subprocess.run(
        pipeline_cmd(cfg_a), cwd=REPO, capture_output=True, text=True, env=DETERMINISTIC_ENV
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    log = (a / "work" / "train" / "worker.log").read_text()
    assert "resumed at epoch 0 step" in log
    steps_total = whole_stdout.count("[drafter] train:")
    # the resumed run did only the steps after the checkpoint
    assert resumed.stdout.count("[drafter] train:") < steps_total
    assert done_before >= 1  # the checkpoint exists: at least one chunk was finished
    # the same drafter as the uninterrupted run, byte for byte
    assert (a / "out" / "model.safetensors").read_bytes() == (
        b / "out" / "model.safetensors"
    ).read_bytes()
    p = prov.read(a / "out")
    assert p is not None and p.epochs == 3
    acc = p.heldout["per_position_acceptance"]
    assert len(acc) == 3 and p.heldout["sequences"] > 0
    # learned: chance is 1/256 = 0.004 (the next token is a function of the current one)
    assert acc[0] > 0.1, p.heldout
    check = subprocess.run(
        [
            sys.executable,
            "-m",
            "specdeploy.controller.drafter",
            "--target",
            str(a / "target"),
            "--drafter",
            str(a / "out"),
            "--vllm-version",
            "0.20.2",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout
    # the same drafter exported for SGLang: its aux ids one lower (SGLang's DeepseekV3 feeds
    # the drafter the output of layer i - 1 for id i), the same weights; the check passes it
    # for SGLang and refuses it for vLLM, and the vLLM export the other way round
    sglang = a / "out-sglang"
    sg_cfg = json.loads((sglang / "config.json").read_text())
    assert sg_cfg["specdeploy_engine"] == "sglang"
    assert sg_cfg["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2], sg_cfg
    weights = (sglang / "model.safetensors").read_bytes()
    assert weights == (a / "out" / "model.safetensors").read_bytes()

    def check_for(engine: str, drafter: Path) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "specdeploy.controller.drafter", "--target",
                str(a / "target"), "--drafter", str(drafter), "--vllm-version", "0.20.2",
                "--engine", engine]  # fmt: skip
        return subprocess.run(argv, cwd=REPO, capture_output=True, text=True)

    assert check_for("sglang", sglang).returncode == 0
    refused = check_for("vllm", sglang)
    assert refused.returncode == 1 and "exported for sglang" in refused.stdout, refused.stdout
    assert check_for("sglang", a / "out").returncode == 1
