#!/usr/bin/env python3
"""GPU proof of issue 17: a drafter trained by the pipeline, and the checks catching mismatches.

Runs ON the GPU machine, in stages (one device call each, see drafter_proof.sh):

``targets``   train two tiny DeepSeek-V3 targets into language models (train_target.py):
              A (6 layers, first half of the stdlib sources) and B (7 layers, second half, the
              same tokenizer): "another target" of the same hidden size and vocabulary.
``pipeline --only A``  serve A through the toolkit's rendered no-spec unit and run the drafter
              pipeline (python -m specdeploy.controller.drafter_pipeline) for A: generation
              through that server's OpenAI API, extraction and the convention check through
              vLLM 0.20.2, training, conversion, provenance.
``pipeline --only B``  the same for B, on A's responses (B's own hidden states).
``serve``     for three drafters - A's, A's with the aux layer ids shifted by one in its
              config.json, B's - first the toolkit's drafter check (what the deploy's preflight
              runs before any load), then the toolkit's rendered EAGLE-3 unit serving target A
              with that drafter: ``specdeploy.check acceptance`` with the role's gates, next to
              vLLM's own ``SpecDecoding metrics:`` lines of the same window, and /metrics.

    python3 tests/gpu/drafter_proof.py STAGE --out DIR [--deadline-s S]

Writes DIR/proof-<stage>.json and DIR/proof-<stage>.tgz (logs, /metrics, results).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import time
import urllib.error
from pathlib import Path

HERE = Path(__file__).resolve().parent
CODE = HERE.parents[1]  # the toolkit checkout (or its carried copy)
sys.path.insert(0, str(CODE))
sys.path.insert(0, str(HERE))

import driver  # noqa: E402
import yaml  # noqa: E402

from specdeploy.node.service import engine_log  # noqa: E402

W = Path("/tmp/gpu-tier/proof")
UNITS = Path(os.environ.get("PROOF_UNITS", str(CODE / "units")))
SERVED_DRAFTER = W / "served-drafter"  # the rendered spec unit's specdeploy_drafter_path
AUX = [1, 2, 3]
SHIFTED = [2, 3, 4]
PY = sys.executable
T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:7.1f}s] {msg}", flush=True)


def sh(cmd: list[str], logfile: Path, timeout: float, env: dict | None = None) -> int:
    logfile.parent.mkdir(parents=True, exist_ok=True)
    log("$ " + " ".join(cmd)[:300])
    with logfile.open("a") as fh:
        try:
            p = subprocess.run(
                cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout, env=env, cwd=CODE
            )
            rc = p.returncode
        except subprocess.TimeoutExpired:
            rc = 124
    tail = logfile.read_text(errors="replace").splitlines()[-6:]
    log(f"rc={rc}; " + " | ".join(t[:200] for t in tail))
    return rc


# --------------------------------------------------------------------------- targets


def stage_targets(out: Path, seconds_a: float, seconds_b: float) -> dict:
    res = {}
    for name, extra, secs in (
        ("target-A", ["--layers", "6", "--seed", "0", "--text-half", "0"], seconds_a),
        (
            "target-B",
            [
                "--layers",
                "7",
                "--seed",
                "1",
                "--text-half",
                "1",
                "--tokenizer-from",
                str(W / "target-A"),
            ],
            seconds_b,
        ),
    ):
        if secs <= 0:
            continue
        rc = sh(
            [PY, str(HERE / "train_target.py"), str(W / name), "--seconds", str(secs), *extra],
            out / f"{name}.log",
            secs + 240,
        )
        info = W / name / "train.json"
        res[name] = {"rc": rc, **(json.loads(info.read_text()) if info.is_file() else {})}
    return res


# --------------------------------------------------------------------------- pipeline


def prompts(path: Path, n: int, half: int, seed: int) -> None:
    """Code prompts: the first lines of functions from the stdlib half the target did not see."""
    std = sysconfig.get_paths()["stdlib"]
    files = sorted(glob.glob(os.path.join(std, "**", "*.py"), recursive=True))[half::2]
    rnd = random.Random(seed)
    out: list[str] = []
    rnd.shuffle(files)
    for f in files:
        try:
            lines = Path(f).read_text(encoding="utf-8", errors="ignore").splitlines()
        except OSError:
            continue
        for i, line in enumerate(lines):
            if line.lstrip().startswith("def ") and i + 3 < len(lines):
                out.append("\n".join(lines[i : i + 3]) + "\n")
                break
        if len(out) >= n:
            break
    path.write_text("".join(json.dumps({"prompt": p, "max_tokens": 128}) + "\n" for p in out))


def pipeline_config(name: str, target: str, served_name: str) -> Path:
    cfg = {
        "target_model_path": str(W / target),
        "served_model_name": served_name,
        "serve_url": "http://127.0.0.1:8011",
        "vllm_version": "0.20.2",
        "vllm_python": PY,
        "train_python": PY,
        "prompts_file": str(W / "train-prompts.jsonl"),
        "max_tokens": 192,
        "concurrency": 32,
        "chunk_size": 128,
        "aux_layer_ids": AUX,
        "workdir": str(W / f"work-{name}"),
        "output_dir": str(W / f"drafter-{name}"),
        "epochs": int(os.environ.get("PROOF_EPOCHS", "6")),
        "batch_sequences": 16,
        "learning_rate": 0.0006,
        "heldout_fraction": 0.05,
        "max_model_len": 1024,
        "gpu_memory_utilization": 0.5,
        "check_sequences": 4,
        "check_tokens": 96,
        "device": "cuda",
    }
    path = W / f"pipeline-{name}.yml"
    path.write_text(json.dumps(cfg, indent=1))
    return path


def pipeline(cfg: Path, out: Path, name: str, until: str | None = None) -> int:
    cmd = [PY, "-m", "specdeploy.controller.drafter_pipeline", "run", "--config", str(cfg)]
    if until:
        cmd += ["--until", until]
    env = dict(os.environ, PYTHONPATH=f"{CODE}:/tmp/site")
    # inside the call's limit; a killed run resumes in the next call (the pipeline's state)
    left = max(30.0, DEADLINE[0] - (time.monotonic() - T0) - 25)
    return sh(cmd, out / f"pipeline-{name}.log", left, env)


def start_unit(unit: str, run_dir: Path, cache_tag: str) -> tuple[subprocess.Popen, dict, dict]:
    c = driver.build_command(UNITS / unit, PY, "/tmp/site")
    env = c.pop("env")
    for var in driver.CACHE_VARS:  # per aux-layer set: a stale compiled graph must not serve
        if env.get(var):
            env[var] = env[var].replace(f"/cache/{unit}", f"/cache/{unit}-{cache_tag}")
            os.makedirs(env[var], exist_ok=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    p = driver.spawn_server(c["argv"], env, run_dir / "engine.log")
    return p, c, env


def wait_ready(p: subprocess.Popen, base: str, budget: float) -> float | None:
    ready = driver.wait_healthy(p, base, budget, every_s=0.5)
    return None if ready is None else round(ready, 1)


def stage_pipeline(out: Path, which: str) -> dict:
    """The pipeline for target A (generation through the rendered no-spec unit) or for B
    (A's responses, B's hidden states)."""
    res: dict = {}
    W.mkdir(parents=True, exist_ok=True)
    if which == "A":
        prompts(W / "train-prompts.jsonl", int(os.environ.get("PROOF_PROMPTS", "768")), 1, 0)
        cfg_a = pipeline_config("A", "target-A", "tiny-dsv3")
        run_dir = out / "runs" / "generate-server"
        p, _, _ = start_unit("drafter-nospec", run_dir, "gen")
        try:
            ready = wait_ready(p, "http://127.0.0.1:8011", 360)
            res["generate_server_start_s"] = ready
            log(f"generation server ready after {ready}s")
            res["generate_rc"] = pipeline(cfg_a, out, "A", "generate") if ready else None
        finally:
            res["generate_server_stop"] = driver.stop(p, 30)
            shutil.copy(run_dir / "engine.log", out / "generate-server-engine.log")
        res["pipeline_rc"] = pipeline(cfg_a, out, "A")
        ex_state = W / "work-A" / "extract" / "state.json"
        if res["pipeline_rc"] == 2 and not (
            ex_state.is_file() and json.loads(ex_state.read_text()).get("status") == "done"
        ):
            # vLLM's extract_hidden_states connector failed on this target: the serving
            # path's own proposer hook (the pipeline's other capture method) instead
            log("extraction through the connector failed; retrying with eagle3-hook")
            res["extract_fallback"] = "eagle3-hook"
            cfg = json.loads(cfg_a.read_text())
            cfg_a.write_text(json.dumps({**cfg, "extract_method": "eagle3-hook"}, indent=1))
            res["pipeline_rc"] = pipeline(cfg_a, out, "A")
    else:
        cfg_b = pipeline_config("B", "target-B", "tiny-dsv3")
        cfg_a = json.loads((W / "pipeline-A.yml").read_text())
        if cfg_a.get("extract_method"):
            cfg = json.loads(cfg_b.read_text())
            cfg_b.write_text(json.dumps({**cfg, "extract_method": cfg_a["extract_method"]}))
        wb = W / "work-B"
        if not (wb / "generate").exists():
            wb.mkdir(parents=True, exist_ok=True)
            shutil.copytree(W / "work-A" / "generate", wb / "generate")  # A's responses
        res["pipeline_rc"] = pipeline(cfg_b, out, "B")
    for step in ("generate", "extract", "convention", "train", "convert", "provenance"):
        st = W / f"work-{which}" / step / "state.json"
        if st.is_file():
            res.setdefault("state", {})[step] = json.loads(st.read_text())
    return res


def prompts_only_generation(cfg_path: Path, n: int) -> None:
    """The generate step's chunks from the prompts alone (no generation server in this call:
    the device time did not allow one); tokenized with the target's tokenizer."""
    from tokenizers import Tokenizer

    cfg = json.loads(cfg_path.read_text())
    tok = Tokenizer.from_file(str(Path(cfg["target_model_path"]) / "tokenizer.json"))
    lines = Path(cfg["prompts_file"]).read_text().splitlines()[:n]
    d = Path(cfg["workdir"]) / "generate"
    d.mkdir(parents=True, exist_ok=True)
    recs = []
    for i, line in enumerate(lines):
        prompt = json.loads(line)["prompt"]
        ids = tok.encode(prompt).ids
        recs.append(
            {
                "index": i,
                "prompt": prompt,
                "text": "",
                "prompt_token_ids": ids,
                "token_ids": [],
                "usage": {"prompt_tokens": len(ids), "completion_tokens": 0},
            }
        )
    (d / "chunk-00000.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (d / "state.json").write_text(
        json.dumps(
            {
                "step": "generate",
                "status": "done",
                "inputs": "prompts-only",
                "result": {"responses": len(recs), "note": "prompts only, no generation server"},
            }
        )
    )


def stage_convention(out: Path) -> dict:
    """17.3 on real vLLM 0.20.2: extraction through the connector and the serving capture
    through the proposer hook agree (C); a pipeline extracting one layer off (D,
    extract_layer_shift 1) is stopped by the convention check naming the offset; then, if
    time is left, C trains, converts and writes its provenance."""
    res: dict = {}
    prompts(W / "train-prompts.jsonl", 64, 1, 0)
    cfg_c = pipeline_config("C", "target-A", "tiny-dsv3")
    cfg = json.loads(cfg_c.read_text())
    cfg.update({"epochs": 20, "batch_sequences": 8, "heldout_fraction": 0.1, "chunk_size": 64})
    cfg_c.write_text(json.dumps(cfg, indent=1))
    prompts_only_generation(cfg_c, 64)
    res["C_convention_rc"] = pipeline(cfg_c, out, "C", "convention")
    cfg_d = W / "pipeline-D.yml"
    cfg_d.write_text(
        json.dumps(
            {
                **cfg,
                "workdir": str(W / "work-D"),
                "extract_layer_shift": 1,
                "output_dir": str(W / "drafter-D"),
            },
            indent=1,
        )
    )
    wd = W / "work-D"
    if not (wd / "generate").exists():
        shutil.copytree(W / "work-C" / "generate", wd / "generate")
    served0 = W / "work-C" / "convention" / "served-0.safetensors"
    if served0.is_file():  # the same check tokens: the serving capture of layers 1-3 is reused
        (wd / "convention").mkdir(parents=True, exist_ok=True)
        shutil.copy(served0, wd / "convention" / "served-0.safetensors")
    res["D_convention_rc"] = pipeline(cfg_d, out, "D", "convention")
    if time.monotonic() - T0 < DEADLINE[0] - 90:
        res["C_rest_rc"] = pipeline(cfg_c, out, "C")
        d = W / "drafter-C"
        if (d / "model.safetensors").is_file():
            res["C_drafter_check"] = drafter_check(d)
    for name in ("C", "D"):
        for step in ("generate", "extract", "convention", "train", "convert", "provenance"):
            st = W / f"work-{name}" / step / "state.json"
            if st.is_file():
                res.setdefault(f"state_{name}", {})[step] = json.loads(st.read_text())
    return res


# --------------------------------------------------------------------------- serve


def drafter_check(drafter: Path) -> dict:
    p = subprocess.run(
        [
            PY,
            "-m",
            "specdeploy.controller.drafter",
            "--target",
            str(W / "target-A"),
            "--drafter",
            str(drafter),
            "--vllm-version",
            "0.20.2",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=CODE,
        env=dict(os.environ, PYTHONPATH=str(CODE)),
    )
    try:
        obj = json.loads(p.stdout)
    except ValueError:
        obj = {"stdout": p.stdout, "stderr": p.stderr}
    errors = [f for f in obj.get("findings", []) if f.get("level") == "error"]
    return {"rc": p.returncode, "errors": errors, "findings": obj.get("findings")}


def gates_file(out: Path) -> Path:
    """The deploy's gates: specdeploy_gates of the role defaults (one source)."""
    defaults = yaml.safe_load((CODE / "roles/specdeploy/defaults/main.yml").read_text())
    path = out / "gates.json"
    path.write_text(json.dumps(defaults["specdeploy_gates"]))
    return path


def serve_one(tag: str, drafter: Path, aux: list[int], out: Path, gates: Path) -> dict:
    r: dict = {"tag": tag, "drafter": str(drafter), "aux_layer_ids": aux}
    if SERVED_DRAFTER.is_symlink() or SERVED_DRAFTER.exists():
        SERVED_DRAFTER.unlink()
    SERVED_DRAFTER.symlink_to(drafter)
    run_dir = out / "runs" / tag
    p, c, _ = start_unit("drafter-spec", run_dir, "aux" + "-".join(map(str, aux)))
    r["command"] = {k: c[k] for k in ("argv", "substitution", "env_added")}
    base = "http://127.0.0.1:8011"
    logf = driver.Log(run_dir / "engine.log")
    try:
        r["server_start_s"] = wait_ready(p, base, 360)
        if r["server_start_s"] is None:
            r["error"] = "not ready: " + " | ".join(logf.text().splitlines()[-20:])
            return r
        off = logf.size()
        r["acceptance"] = driver.check_cli(
            driver.acceptance_argv(
                base,
                "tiny-dsv3",
                24,
                90,
                "--prompts",
                str(W / "eval-prompts.jsonl"),
                # the targets are raw-text language models and the drafters were trained on
                # their completions of raw prompts: a chat template would change the text
                # (PROOF_ENDPOINT=chat repeats the first run, which had it)
                "--endpoint",
                os.environ.get("PROOF_ENDPOINT", "completions"),
                "--gates",
                str(gates),
            ),
            run_dir / "acceptance.json",
            150,
            dict(os.environ, PYTHONPATH=str(CODE)),
        )
        r["post_flush_seen"] = logf.wait_spec_line(logf.size(), 12)
        lines = logf.spec_lines_after(off)
        r["vllm_log_spec_lines"] = [x.__dict__ for x in lines]
        r["vllm_log_spec_total"] = engine_log.combine_spec_lines(lines)
        try:
            (run_dir / "metrics.txt").write_text(
                driver.http(base, "GET", "/metrics", timeout=30)[1]
            )
        except (urllib.error.URLError, OSError) as e:
            r["metrics_error"] = repr(e)
    finally:
        r["stop"] = driver.stop(p, 30)
        s = engine_log.parse(logf.text())
        r["engine_aux_layers"] = s.aux_layers
        r["backends"] = [b.__dict__ for b in s.backends]
    return r


def stage_serve(out: Path) -> dict:
    res: dict = {"runs": {}, "drafter_check": {}}
    prompts(W / "eval-prompts.jsonl", 24, 1, 99)  # other prompts than the training ones
    shifted = W / "drafter-A-shifted"
    if shifted.exists():
        shutil.rmtree(shifted)
    shutil.copytree(W / "drafter-A", shifted)
    cfg = json.loads((shifted / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = SHIFTED
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = SHIFTED
    (shifted / "config.json").write_text(json.dumps(cfg, indent=1))
    gates = gates_file(out)
    plan = [
        ("trained-A", W / "drafter-A", AUX),
        ("other-target-B", W / "drafter-B", AUX),
        ("shifted-A", shifted, SHIFTED),
    ]
    for tag, d, _aux in plan:
        if not (d / "model.safetensors").is_file():
            res["runs"][tag] = {"skipped": f"{d} missing"}
            continue
        res["drafter_check"][tag] = drafter_check(d)
        log(f"[{tag}] drafter check rc={res['drafter_check'][tag]['rc']}")
    for tag, d, aux in plan:
        if "skipped" in res["runs"].get(tag, {}):
            continue
        if time.monotonic() - T0 > DEADLINE[0] - 130:
            res["runs"][tag] = {"skipped": "deadline"}
            continue
        try:
            res["runs"][tag] = serve_one(tag, d, aux, out, gates)
        except Exception as e:  # one run's failure must not lose the others
            res["runs"][tag] = {"error": repr(e)}
        log(f"[{tag}] {summary(res['runs'][tag])}")
        (out / "proof-serve.json").write_text(json.dumps(res, indent=1, default=str))
    return res


def summary(r: dict) -> dict:
    acc = ((r.get("acceptance") or {}).get("result") or {}).get("acceptance") or {}
    gates = ((r.get("acceptance") or {}).get("result") or {}).get("gates") or {}
    lt = r.get("vllm_log_spec_total") or {}
    return {
        "start_s": r.get("server_start_s"),
        "mal_toolkit": acc.get("mean_acceptance_length"),
        "pos_toolkit": acc.get("per_position_acceptance"),
        "mal_vllm_log": lt.get("mean_acceptance_length"),
        "pos_vllm_log": lt.get("per_position"),
        "gate_passed": gates.get("passed"),
        "gate_reasons": gates.get("reasons"),
        "check_rc": (r.get("acceptance") or {}).get("rc"),
        "error": r.get("error"),
    }


DEADLINE = [540.0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("stage", choices=["targets", "pipeline", "serve", "convention"])
    ap.add_argument("--only", choices=["A", "B"], default="A", help="pipeline: which target")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/proof-out"))
    ap.add_argument("--deadline-s", type=float, default=540.0)
    ap.add_argument("--seconds-a", type=float, default=100.0)
    ap.add_argument("--seconds-b", type=float, default=70.0)
    a = ap.parse_args()
    DEADLINE[0] = a.deadline_s
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    W.mkdir(parents=True, exist_ok=True)
    stages = {
        "targets": lambda: stage_targets(out, a.seconds_a, a.seconds_b),
        "pipeline": lambda: stage_pipeline(out, a.only),
        "convention": lambda: stage_convention(out),
        "serve": lambda: stage_serve(out),
    }
    res = stages[a.stage]()
    if a.stage == "serve":
        res["summary"] = {t: summary(r) for t, r in res["runs"].items()}
    res["total_s"] = round(time.monotonic() - T0, 1)
    tag = a.stage + (f"-{a.only}" if a.stage == "pipeline" else "")
    if a.stage == "serve" and os.environ.get("PROOF_ENDPOINT", "completions") != "completions":
        tag += "-" + os.environ["PROOF_ENDPOINT"]
    (out / f"proof-{tag}.json").write_text(json.dumps(res, indent=1, default=str))
    with tarfile.open(out / f"proof-{tag}.tgz", "w:gz") as tf:
        for p in sorted(out.iterdir()):
            if p.suffix in (".log", ".json") or p.is_dir():
                tf.add(p, arcname=p.name)
        for name in ("A", "B", "C", "D"):
            for f in glob.glob(str(W / f"work-{name}" / "*" / "*.log")):
                tf.add(f, arcname=f"work-{name}/" + "/".join(Path(f).parts[-2:]))
            for f in ("config.json", "specdeploy-drafter.json"):
                if (W / f"drafter-{name}" / f).is_file():
                    tf.add(W / f"drafter-{name}" / f, arcname=f"drafter-{name}/{f}")
    if (out / "runs").exists():
        shutil.rmtree(out / "runs")
    print(json.dumps(res.get("summary", res), default=str)[:6000], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
