"""The drafter pipeline on the controller (issue 17.5): config, resume, disk space, the
convention check's comparison, provenance and the deploy's refusal of its output.

What runs here for real: the orchestrator (stdlib), generation through the OpenAI API of the
vLLM STAND-IN (the one allowed stand-in; the same HTTP surface as vLLM 0.20.2), safetensors
files in the format the workers write, the drafter check on the pipeline's output. What needs
a GPU and the release's vLLM, and is covered only by tests/gpu/drafter_proof.sh: the capture
worker (vllm_worker.py: extraction and the serving capture). Training (torch_worker.py) runs
here when a Python with torch exists (tests/unit/test_drafter_training.py).
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import Standin

from specdeploy.controller import drafter_provenance as prov
from specdeploy.controller.drafter_pipeline import (
    checkpoint,
    convention,
    extract,
    generate,
    pipeline,
    stfile,
)
from specdeploy.controller.drafter_pipeline.config import ConfigError, parse
from specdeploy.controller.drafter_pipeline.launch import WorkerError
from specdeploy.controller.drafter_pipeline.workdir import (
    StaleStepError,
    StepState,
    chunk_name,
)

REPO = Path(__file__).resolve().parents[2]

KIMI = REPO / "tests" / "fixtures" / "drafters" / "kimi-k2.5"
H, LAYERS = 16, 5  # the tiny target of these tests: hidden 16, 5 layers


def tiny_target(tmp_path: Path) -> Path:
    d = tmp_path / "target"
    d.mkdir(exist_ok=True)
    cfg = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "hidden_size": H,
        "vocab_size": 64,
        "num_hidden_layers": LAYERS,
        "torch_dtype": "bfloat16",
        "max_position_embeddings": 4096,
    }
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def knobs(tmp_path: Path, **over: object) -> dict[str, object]:
    prompts = tmp_path / "prompts.jsonl"
    if not prompts.exists():
        prompts.write_text(
            "".join(json.dumps({"prompt": f"def f{i}(x):\n    return"}) + "\n" for i in range(12))
        )
    base: dict[str, object] = {
        "target_model_path": str(tiny_target(tmp_path)),
        "served_model_name": "tiny-dsv3",
        "serve_url": "http://127.0.0.1:9",
        "vllm_version": "0.20.2",
        "vllm_python": str(tmp_path / "no-vllm" / "python"),
        "train_python": str(tmp_path / "no-torch" / "python"),
        "prompts_file": str(prompts),
        "aux_layer_ids": [1, 2, 3],
        "workdir": str(tmp_path / "work"),
        "output_dir": str(tmp_path / "drafter-out"),
        "chunk_size": 3,
        "concurrency": 1,
        "max_tokens": 40,
        "check_tolerance": 0.02,
    }
    base.update(over)
    return base


def write_config(tmp_path: Path, name: str = "cfg.yml", **over: object) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(knobs(tmp_path, **over)))  # JSON is YAML
    return p


def cli(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specdeploy.controller.drafter_pipeline", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        **kw,  # type: ignore[arg-type]
    )


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"aux_layer_ids": [1, 2]}, "aux_layer_ids"),
        ({"epochs": "five"}, "epochs: expected an integer"),
        ({"device": "tpu"}, "device: 'tpu' is not one of"),
        ({"served_model_name": None}, "served_model_name is required"),
        ({"no_such_knob": 1}, "unknown key no_such_knob"),
        ({"serve_url": "127.0.0.1:8000"}, "serve_url"),
    ],
)
def test_bad_config_is_one_line_naming_the_key(tmp_path: Path, change, needle) -> None:
    raw = knobs(tmp_path, **change)
    raw = {k: v for k, v in raw.items() if v is not None}
    with pytest.raises(ConfigError, match=needle):
        parse(raw)
    cfg_file = tmp_path / "bad.yml"
    cfg_file.write_text(json.dumps(raw))
    p = cli("run", "--config", str(cfg_file))
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and needle.split(":")[0] in p.stderr


def test_the_inventory_example_is_valid() -> None:
    from specdeploy.controller.drafter_pipeline.config import load

    cfg = load(REPO / "inventory" / "production" / "drafter-pipeline.yml")
    assert cfg.aux_layer_ids == [1, 29, 57] and cfg.extract_method == "auto"


# --------------------------------------------------------------------------- generate


def wait_for(path: Path, budget: float = 60.0) -> None:
    t0 = time.monotonic()
    while not path.exists():
        if time.monotonic() - t0 > budget:
            raise AssertionError(f"{path} did not appear in {budget}s")
        time.sleep(0.05)


def test_generation_killed_mid_step_resumes_and_equals_an_uninterrupted_run(
    tmp_path: Path,
) -> None:
    # 40 tokens at 100 tokens/s: 0.4 s a request, 1.2 s a chunk of 3, 4 chunks
    with Standin(profile={"tokens_per_s": 100.0}, spec_tokens=None) as s:
        cfg = write_config(tmp_path, serve_url=s.base_url)
        gen_dir = tmp_path / "work" / "generate"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "specdeploy.controller.drafter_pipeline",
                "run",
                "--config",
                str(cfg),
                "--until",
                "generate",
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        wait_for(gen_dir / chunk_name(1, ".jsonl"))
        os.kill(proc.pid, signal.SIGKILL)  # the process this test started, by its pid
        proc.wait(10)
        first = sorted(gen_dir.glob("chunk-*.jsonl"))
        assert 2 <= len(first) < 4
        assert not StepState(tmp_path / "work", "generate").done
        mtimes = {p.name: p.stat().st_mtime_ns for p in first}

        resumed = cli("run", "--config", str(cfg), "--until", "generate")
        assert resumed.returncode == 0, resumed.stderr
        assert f"{3 * len(first)} resumed" in resumed.stdout
        assert {p.name: p.stat().st_mtime_ns for p in first} == mtimes  # not redone
        assert StepState(tmp_path / "work", "generate").done

        clean = write_config(
            tmp_path, "clean.yml", serve_url=s.base_url, workdir=str(tmp_path / "w2")
        )
        whole = cli("run", "--config", str(clean), "--until", "generate")
        assert whole.returncode == 0, whole.stderr
    a = generate.records(gen_dir)
    b = generate.records(tmp_path / "w2" / "generate")
    assert [r["index"] for r in a] == list(range(12))
    assert [(r["prompt"], r["text"]) for r in a] == [(r["prompt"], r["text"]) for r in b]
    assert all(r["text"] for r in a)
    again = cli("run", "--config", str(cfg), "--until", "generate")
    assert "generate: done earlier, skipped" in again.stdout


def test_chat_prompts_go_through_the_chat_endpoint_with_their_token_ids(tmp_path: Path) -> None:
    # chat traffic is served through the chat template: its training data must be too
    prompts = tmp_path / "prompts.jsonl"
    chat = [{"role": "user", "content": f"write f{i}"} for i in range(2)]
    prompts.write_text(
        json.dumps({"messages": [chat[0]]})
        + "\n"
        + json.dumps({"prompt": "def g(x):\n    return"})
        + "\n"
        + json.dumps({"messages": [chat[1]]})
        + "\n"
    )
    with Standin(profile={"tokens_per_s": 2000.0}, spec_tokens=None) as s:
        cfg = write_config(tmp_path, serve_url=s.base_url, max_tokens=8)
        p = cli("run", "--config", str(cfg), "--until", "generate")
        assert p.returncode == 0, p.stderr
    recs = generate.records(tmp_path / "work" / "generate")
    assert [r.get("messages") for r in recs] == [[chat[0]], None, [chat[1]]]
    assert [r["prompt"] for r in recs] == [None, "def g(x):\n    return", None]
    for r in recs:
        assert r["text"] and len(r["token_ids"]) == 8 and r["prompt_token_ids"]


def test_a_prompt_line_of_neither_kind_is_one_line(tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"messages": "hi"}) + "\n")
    p = cli("run", "--config", str(write_config(tmp_path)))
    assert p.returncode == 2
    assert p.stderr.strip().endswith(
        f'{prompts}:1: expected {{"prompt": "..."}} or {{"messages": [{{"role": ...}}]}}'
    )


def test_changed_settings_are_refused_instead_of_mixed(tmp_path: Path) -> None:
    st = StepState(tmp_path / "work", "generate")
    st.begin("aaaa")
    with pytest.raises(StaleStepError, match=r"remove .*generate"):
        StepState(tmp_path / "work", "generate").begin("bbbb")


def test_unreachable_server_is_one_line_exit_2(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, serve_url="http://127.0.0.1:9", max_prompts=1)
    p = cli("run", "--config", str(cfg))
    assert p.returncode == 2
    assert "prompt 0: http://127.0.0.1:9/v1/completions failed" in p.stderr


# --------------------------------------------------------------------------- extract


def fake_generation(workdir: Path, chunks: int, per_chunk: int, tokens: int) -> None:
    """Generation chunks as the step writes them (with vLLM's token ids)."""
    d = workdir / "generate"
    d.mkdir(parents=True)
    for c in range(chunks):
        recs = [
            {
                "index": c * per_chunk + i,
                "prompt": "p",
                "text": "t",
                "prompt_token_ids": list(range(4)),
                "token_ids": list(range(tokens - 4)),
                "usage": {"prompt_tokens": 4, "completion_tokens": tokens - 4},
            }
            for i in range(per_chunk)
        ]
        (d / chunk_name(c, ".jsonl")).write_text("".join(json.dumps(r) + "\n" for r in recs))
    st = StepState(workdir, "generate")
    st.begin("x")
    st.finish({"responses": chunks * per_chunk})


def bf16(values: list[float]) -> bytes:
    f32 = struct.pack(f"<{len(values)}f", *values)
    return b"".join(f32[i + 2 : i + 4] for i in range(0, len(f32), 4))


def layer_input(layer: int, token: int, k: int) -> float:
    """The tiny target's 'input of layer i' at a token: distinct per layer, exact in bf16."""
    return float((layer + 1) * 8 + (token * 3 + k) % 7 - 3)


def states_chunk(path: Path, seqs: list[list[int]], layers: list[int], starts=None) -> None:
    vals: list[float] = []
    for ids in seqs:
        for t in ids:
            for layer in layers:
                vals += [layer_input(layer, t, k) for k in range(H)]
    offs = [0]
    for ids in seqs:
        offs.append(offs[-1] + len(ids))
    n = offs[-1]
    flat_ids = [t for ids in seqs for t in ids]
    stfile.write(
        path,
        {
            "hidden_states": ("BF16", [n, len(layers), H], bf16(vals)),
            "input_ids": ("I64", [n], struct.pack(f"<{n}q", *flat_ids)),
            "seq_offsets": ("I64", [len(offs)], struct.pack(f"<{len(offs)}q", *offs)),
            "loss_start": (
                "I64",
                [len(seqs)],
                struct.pack(f"<{len(seqs)}q", *(starts or [2] * len(seqs))),
            ),
            "record_index": ("I64", [len(seqs)], struct.pack(f"<{len(seqs)}q", *range(len(seqs)))),
        },
    )


def test_disk_space_is_refused_before_extraction_naming_need_and_free(tmp_path: Path) -> None:
    cfg_file = write_config(
        tmp_path, target_model_path=str(KIMI), free_space_margin_gb=1e9, max_model_len=8192
    )
    fake_generation(tmp_path / "work", chunks=2, per_chunk=3, tokens=1000)
    p = cli("run", "--config", str(cfg_file))
    assert p.returncode == 2
    line = p.stderr.strip()
    assert len(line.splitlines()) == 1
    # 6 sequences x 1000 tokens x 3 layers x Kimi's 7168 hidden x 2 bytes (bf16)
    assert "extract needs 0.3 GB (6,000 tokens x 3 layers x 7168 hidden x 2 bytes)" in line
    # the check covers the whole run: Kimi's drafter (2.11 B parameters, the lm_head over the
    # 163,840-token vocabulary 1.17 B of them) is trained and exported after the states
    whole = "+ train and convert 54.9 GB (2.11 B drafter parameters: checkpoint x 2 + export)"
    assert whole in line
    assert "GB free under" in line and str(tmp_path / "work" / "extract") in line
    assert not list((tmp_path / "work" / "extract").glob("chunk-*"))


def test_hand_run_scale_estimate() -> None:
    """The hand run: 828 GB of states for Kimi-K2.5 (3 layers x 7168 x bf16)."""
    need = extract.Need(tokens=19_253_000, layers=3, hidden=7168, dtype_bytes=2)
    assert round(need.bytes / 1e9) == 828


def test_extraction_resumes_with_only_the_missing_chunks(tmp_path: Path) -> None:
    cfg = parse(knobs(tmp_path))
    work = tmp_path / "work"
    fake_generation(work, chunks=2, per_chunk=2, tokens=6)
    ex = work / "extract"
    ex.mkdir()
    states_chunk(ex / chunk_name(0, ".safetensors"), [[1, 2, 3, 4, 5, 6]] * 2, [1, 2, 3])
    with pytest.raises(WorkerError, match="no such Python"):
        extract.run(cfg, work)
    job = json.loads((ex / "job.json").read_text())
    assert [c["index"] for c in job["chunks"]] == [1]  # chunk 0 is not redone
    assert job["aux_layer_ids"] == [1, 2, 3] and job["method"] == "connector"
    states_chunk(ex / chunk_name(1, ".safetensors"), [[1, 2, 3, 4, 5, 6]] * 2, [1, 2, 3])
    res = extract.run(cfg, work)  # nothing left: no worker started
    assert res["tokens"] == 24 and res["sequences"] == 4 and res["layer_ids"] == [1, 2, 3]


def test_capture_method_by_version(tmp_path: Path) -> None:
    assert extract.capture_method(parse(knobs(tmp_path, vllm_version="0.16.0"))) == "eagle3-hook"
    assert extract.capture_method(parse(knobs(tmp_path, vllm_version="0.17.0"))) == "connector"


# --------------------------------------------------------------------------- convention


def convention_setup(tmp_path: Path, train_layers: list[int]):
    cfg = parse(knobs(tmp_path, check_sequences=2, check_tokens=5))
    work = tmp_path / "work"
    seqs = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14, 15, 16, 17, 18]]
    (work / "extract").mkdir(parents=True)
    states_chunk(work / "extract" / chunk_name(0, ".safetensors"), seqs, train_layers)
    st = StepState(work, "extract")
    st.begin(cfg.inputs_hash("extract"))
    st.finish({"tokens": 14, "sequences": 2})
    # what the serving capture would record (the hook's files): inputs of the layers it feeds
    conv = work / "convention"
    conv.mkdir()
    short = [s[:5] for s in seqs]
    for tag, shift in (("0", 0), ("-1", -1), ("+1", 1)):
        states_chunk(conv / f"served-{tag}.safetensors", short, [i + shift for i in [1, 2, 3]])
    return cfg, work


def test_convention_check_passes_when_training_states_are_the_served_ones(tmp_path) -> None:
    cfg, work = convention_setup(tmp_path, [1, 2, 3])
    res = convention.run(cfg, work)
    assert res["match"] is True and res["rel_diff_per_slot"]["0"] == [0.0, 0.0, 0.0]


def test_convention_check_names_the_offset_of_layer_outputs(tmp_path: Path) -> None:
    """Trained on the OUTPUT of layers 1, 2, 3 (= inputs of 2, 3, 4), as speculators 0.3/0.4's
    custom worker captured them; vLLM feeds the inputs of 1, 2, 3."""
    cfg, work = convention_setup(tmp_path, [2, 3, 4])
    with pytest.raises(convention.ConventionMismatch) as exc:
        convention.run(cfg, work)
    msg = str(exc.value)
    assert "slot 0: training states match layer 2's input, vLLM feeds layer 1's (offset +1)" in msg
    assert "slot 2: training states match layer 4's input, vLLM feeds layer 3's (offset +1)" in msg
    st = StepState(work, "convention")
    assert st.data["status"] == "failed" and st.result["rel_diff_per_slot"]["0"][0] > 0.02


def test_convention_mismatch_stops_the_run_with_exit_1(tmp_path: Path) -> None:
    _, work = convention_setup(tmp_path, [2, 3, 4])
    StepState(work, "generate").begin("x")
    StepState(work, "generate").finish({})
    cfg_file = write_config(tmp_path, check_sequences=2, check_tokens=5)
    p = cli("run", "--config", str(cfg_file))
    assert p.returncode == 1
    assert "training states match layer 3's input, vLLM feeds layer 2's (offset +1)" in p.stderr
    assert not (tmp_path / "work" / "train").exists()  # training never started


def test_states_one_layer_early_are_named_without_a_layer_0_capture(tmp_path: Path) -> None:
    """Trained on the inputs of 0, 1, 2 for served 1, 2, 3: the -1 capture would need layer 0,
    which vLLM 0.18+ refuses, so it is not attempted; the finding says no input matched."""
    cfg, work = convention_setup(tmp_path, [0, 1, 2])
    (work / "convention" / "served--1.safetensors").unlink()
    with pytest.raises(convention.ConventionMismatch) as exc:
        convention.run(cfg, work)
    assert "slot 0 (layer 1): training states match no layer input within 0.02" in str(exc.value)
    assert not (work / "convention" / "served--1.safetensors").exists()


# --------------------------------------------------------------------------- provenance


def finished_pipeline(tmp_path: Path, target: Path) -> tuple[object, Path]:
    """Steps 1-5 done (their state files), the converted drafter in the format vLLM loads."""
    cfg = parse(knobs(tmp_path, target_model_path=str(target)))
    work = tmp_path / "work"
    tcfg = extract.text_config(json.loads((target / "config.json").read_text()))
    drafter = work / "convert" / "drafter"
    checkpoint.write_bootstrap(drafter, checkpoint.drafter_config(tcfg, [1, 2, 3], 64))
    for step, result in (
        ("generate", {"responses": 12, "completion_tokens": 480}),
        ("extract", {"tokens": 600, "sequences": 12, "bytes": 60000, "method": "connector"}),
        ("convention", {"match": True}),
        ("train", {"epochs": 1}),
        (
            "convert",
            {"drafter_dir": str(drafter), "heldout": {"per_position_acceptance": [0.5, 0.3]}},
        ),
    ):
        st = StepState(work, step)
        st.begin("x")
        st.finish(result)
    return cfg, work


def drafter_check(target: Path, drafter: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "specdeploy.controller.drafter",
            "--target",
            str(target),
            "--drafter",
            str(drafter),
            "--vllm-version",
            "0.20.2",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )


def test_output_carries_provenance_the_deploy_accepts_and_refuses(tmp_path: Path) -> None:
    target = tiny_target(tmp_path)
    cfg, work = finished_pipeline(tmp_path, target)
    res = pipeline.run_provenance(cfg, work)  # type: ignore[arg-type]
    out = Path(res["output_dir"])
    p = prov.read(out)
    assert p is not None and p.aux_layer_ids == [1, 2, 3] and p.aux_offset == "input-of-layer"
    assert p.target_config_sha256 == prov.target_config_sha256(
        json.loads((target / "config.json").read_text())
    )
    assert p.data["tokens"] == 600 and p.heldout["per_position_acceptance"] == [0.5, 0.3]
    assert p.vllm_version == "0.20.2"
    ok = drafter_check(target, out)
    assert ok.returncode == 0, ok.stdout
    assert "trained for this target on layers [1, 2, 3]" in ok.stdout

    shifted = json.loads((out / "config.json").read_text())
    shifted["eagle_aux_hidden_state_layer_ids"] = [2, 3, 4]
    (out / "config.json").write_text(json.dumps(shifted))
    bad = drafter_check(target, out)
    assert bad.returncode == 1
    assert [ln for ln in bad.stdout.splitlines() if "ERROR" in ln] == [
        "  ERROR   provenance.aux_layer_ids: provenance aux_layer_ids [1, 2, 3] differ from the "
        "layers vLLM 0.20.2 will feed this drafter [2, 3, 4]: it would draft from states it was "
        "not trained on"
    ]
    (out / "config.json").write_text(
        json.dumps({**shifted, "eagle_aux_hidden_state_layer_ids": [1, 2, 3]})
    )

    other = tmp_path / "other-target"
    other.mkdir()
    ocfg = json.loads((target / "config.json").read_text())
    ocfg["rope_theta"] = 50000.0  # another model of the same shape
    (other / "config.json").write_text(json.dumps(ocfg))
    refused = drafter_check(other, out)
    assert refused.returncode == 1
    assert "provenance.target_config_sha256" in refused.stdout


def test_bootstrap_checkpoint_is_what_the_drafter_check_reads(tmp_path: Path) -> None:
    tcfg = json.loads((tiny_target(tmp_path) / "config.json").read_text())
    d = tmp_path / "boot"
    dcfg = checkpoint.drafter_config(tcfg, [1, 2, 3], 48)
    checkpoint.write_bootstrap(d, dcfg)
    f = stfile.SafetensorsFile(d / "model.safetensors")
    for name, (dtype, shape) in checkpoint.tensor_shapes(dcfg).items():
        assert f.shape(name) == shape and f.dtype(name) == dtype
    assert f.rows("midlayer.hidden_norm.weight", 0, H) == [1.0] * H
    res = drafter_check(tmp_path / "target", d)
    assert "d2t present" in res.stdout and "target layers [1, 2, 3] feed the drafter" in res.stdout


def test_the_vllm_workers_chunk_loop_skips_written_chunks_and_keeps_room(tmp_path: Path) -> None:
    # vllm_worker.py runs only on a GPU; its chunk bookkeeping does not need vLLM
    from specdeploy.controller.drafter_pipeline import vllm_worker

    chunks = []
    for i in range(3):
        inp = tmp_path / f"in-{i}.jsonl"
        recs = [
            {"index": 2 * i + j, "prompt_token_ids": [1] * 6, "token_ids": [2] * 6} for j in (0, 1)
        ]
        inp.write_text("".join(json.dumps(r) + "\n" for r in recs))
        chunks.append({"index": i, "input": str(inp), "output": str(tmp_path / f"out-{i}.st")})
    (tmp_path / "out-1.st").write_bytes(b"done")  # finished before a crash
    got = list(vllm_worker.pending_chunks({"chunks": chunks, "max_model_len": 10}, None, 2))
    assert [c["index"] for c, _, _ in got] == [0, 2]
    # 12 tokens truncated to 10 - 2 (room for the tokens the engine generates); prompt 6
    assert [seqs for _, _, seqs in got][1] == [(4, [1] * 6 + [2] * 2, 6), (5, [1] * 6 + [2] * 2, 6)]


KIMI_TEXT = {"hidden_size": 7168, "vocab_size": 163840, "max_position_embeddings": 8192}
KIMI_DRAFTER = checkpoint.drafter_config(KIMI_TEXT, [2, 30, 57], 163840)
H200_BYTES = int(139.8 * 2**30)


def test_gpu_memory_estimate_reproduces_the_h200_measurements() -> None:
    # tests/fixtures/vllm-0.20.2-restart/train-rate-b*.json: fitted on 2 and 4, then 1 and 3
    runs = sorted((REPO / "tests/fixtures/vllm-0.20.2-restart").glob("train-rate-b*.json"))
    assert len(runs) == 4, runs
    for path in runs:
        run = json.loads(path.read_text())
        assert run["trainable_parameters"] == checkpoint.parameter_count(KIMI_DRAFTER)
        est = checkpoint.training_gpu_bytes(
            KIMI_DRAFTER, run["seq_len"], run["batch_sequences"], run["ttt_steps"]
        )
        measured = run["peak_memory_gib"] * 2**30
        assert abs(est - measured) / measured < 0.02, (path.name, est / 2**30)
    # and the out-of-memory of 8 sequences on the H200's 139.8 GiB
    assert checkpoint.training_gpu_bytes(KIMI_DRAFTER, 1925, 8, 3) > H200_BYTES


def test_a_batch_that_cannot_fit_the_gpu_is_one_line_naming_the_knob() -> None:
    said = checkpoint.gpu_memory_refusal(KIMI_DRAFTER, 1925, 8, 1, 3, H200_BYTES, "cuda:0")
    assert said is not None and "\n" not in said
    assert said.startswith("batch_sequences=8 (8 a process) needs about 1")
    assert "cuda:0" in said and "set batch_sequences to at most 6" in said, said
    # the same batch over two GPUs is 4 a process: fits
    assert checkpoint.gpu_memory_refusal(KIMI_DRAFTER, 1925, 8, 2, 3, H200_BYTES) is None
    # an RTX PRO 6000 (96 GB): 3 a process by the estimate (2 measured to fit on the H200)
    rtx = 96 * 10**9
    said = checkpoint.gpu_memory_refusal(KIMI_DRAFTER, 1925, 4, 1, 3, rtx)
    assert said is not None and "at most 3" in said, said
    # nothing fits: said so, not "at most 0"
    said = checkpoint.gpu_memory_refusal(KIMI_DRAFTER, 1925, 1, 1, 3, 40 * 2**30)
    assert said is not None and "not even one sequence fits" in said, said
