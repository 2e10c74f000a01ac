#!/usr/bin/env python3
"""GPU tier driver: start real vLLM from the toolkit's rendered unit, check it, stop it.

Runs ON the GPU machine (stdlib only; the image's python3 with vLLM unpacked on PYTHONPATH).
For each ``--run TAG=UNIT[,clear]`` in order:

1. read ``UNITS/UNIT/vllm.service`` + ``vllm.env`` (rendered on the controller by
   tests/gpu/render_units.sh through the toolkit's own playbook), take ``ExecStart=`` and the
   environment exactly, substitute only the program (see unitexec.substitute_program);
   ``clear`` empties the unit's compile-cache directory first (a cold start);
2. start it (own process group, like systemd's control group), time it to ``/health`` 200;
3. ``python -m specdeploy.node.validation.check smoke`` (the toolkit's readiness check, with
--wait-ready);
4. save the real ``/v1/models``, ``/version``, a completion response, ``nvidia-smi`` while it
   runs; greedy outputs (token ids) of a fixed prompt set;
5. ``python -m specdeploy.node.validation.check acceptance`` (concurrency 1, no warm-up, so its
counter window
   is exactly the window of vLLM's ``SpecDecoding metrics:`` log lines it is compared with),
   then a concurrency-8 throughput run; save ``/metrics``;
6. stop it (SIGTERM to the group, SIGKILL after the unit's stop timeout, capped), wait until
   the GPU holds no process;
7. read the chosen attention backends, aux layers and start-up phases from the engine log
   (specdeploy.node.service.engine_log) and check them against ``UNITS/UNIT/expect.json``.

Finally greedy outputs are compared token by token between runs on the same target backend.
Writes ``OUT/results.json`` and ``OUT/gpu-tier.tgz`` (every run's files) and prints a table.

    python3 tests/gpu/driver.py --units .gpu-stage/units --out "$OUT" \
        --run nospec-fa=nospec-fa,clear --run spec-fa-cold=spec-fa,clear \
        --run spec-fa-warm=spec-fa [--deadline-s 540] \
        [--tensor-parallel-size 1 --pipeline-parallel-size 1]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

from unitexec import (  # noqa: E402
    flag_value,
    parse_env_file,
    parse_unit,
    substitute_program,
)

from specdeploy.node.service import engine_log  # noqa: E402

# Environment the driver adds when the unit does not set it (recorded in results): no
# telemetry, no hub access (nothing is reachable anyway), NVLink multicast off (device README).
ENV_DEFAULTS = {
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
CACHE_VARS = (
    "XDG_CACHE_HOME",
    "VLLM_CACHE_ROOT",
    "TORCHINDUCTOR_CACHE_DIR",
    "TRITON_CACHE_DIR",
    "FLASHINFER_WORKSPACE_BASE",
    "DG_JIT_CACHE_DIR",
)
GREEDY_PROMPTS = 6
GREEDY_TOKENS = 64
SMI_QUERY = (
    "index,name,uuid,pci.bus_id,driver_version,compute_cap,memory.total,memory.used,"
    "ecc.errors.uncorrected.volatile.total,retired_pages.pending"
)
T0 = time.monotonic()
DEADLINE = [1e9]  # seconds after T0 by which the driver must have finished (set in main)


def left(reserve: float = 0.0) -> float:
    """Seconds left before the deadline, minus ``reserve``, never below 5."""
    return max(5.0, DEADLINE[0] - (time.monotonic() - T0) - reserve)


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:7.1f}s] {msg}", flush=True)


def http(base: str, method: str, path: str, body: object = None, timeout: float = 30.0):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        base + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read().decode()


def sh(cmd: list[str], timeout: float = 30.0) -> tuple[int, str]:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout + p.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        return -1, repr(e)


def save(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def record_nvidia_smi(d: Path, running: bool) -> None:
    """The real output formats the toolkit parses (tests/fixtures/nvidia-smi/recorded-h200)."""
    cmds = {
        "query-compute-apps.csv": [
            "nvidia-smi",
            "--query-compute-apps=pid,process_name,used_memory",
            "--format=csv,noheader,nounits",
        ],
        "query-compute-apps-header.csv": [
            "nvidia-smi",
            "--query-compute-apps=pid,process_name,used_memory",
            "--format=csv",
        ],
    }
    if running:
        cmds["nvidia-smi.txt"] = ["nvidia-smi"]
        cmds["query-gpu.csv"] = [
            "nvidia-smi",
            f"--query-gpu={SMI_QUERY}",
            "--format=csv,noheader,nounits",
        ]
    for name, cmd in cmds.items():
        rc, out = sh(cmd)
        save(d / name, out if rc == 0 else f"# rc={rc}\n{out}")


def gpu_apps() -> list[str]:
    rc, out = sh(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader,nounits"])
    return [x for x in out.split() if x.strip()] if rc == 0 else ["?"]


def build_command(unit_dir: Path, python: str, pythonpath: str) -> dict:
    unit = parse_unit((unit_dir / "vllm.service").read_text())
    env_file = parse_env_file((unit_dir / "vllm.env").read_text())
    argv, note = substitute_program(unit.exec_start, python)
    env = dict(os.environ)
    env.update(env_file)  # EnvironmentFile= first, Environment= after (systemd's order)
    env.update(unit.environment)
    added = {}
    for k, v in ENV_DEFAULTS.items():
        if k not in env_file and k not in unit.environment:
            env[k] = v
            added[k] = v
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + (
            os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""
        )
        added["PYTHONPATH"] = env["PYTHONPATH"]
    return {
        "unit_exec_start": unit.exec_start,
        "argv": argv,
        "substitution": note,
        "environment_files": unit.environment_files,
        "unit_environment": unit.environment,
        "env_file": env_file,
        "env_added": added,
        "not_applied": {
            k: unit.settings.get(k)
            for k in ("User", "Group", "WorkingDirectory", "ExecStartPre")
            if unit.settings.get(k)
        }
        | ({"ExecStartPre": unit.exec_start_pre} if unit.exec_start_pre else {}),
        "stop_timeout_s": _seconds(unit.settings.get("TimeoutStopSec", ["30"])[-1]),
        "env": env,
    }


def _seconds(v: str) -> float:
    try:
        return float(v.rstrip("s"))
    except ValueError:
        return 30.0


class Log:
    def __init__(self, path: Path) -> None:
        self.path = path

    def text(self) -> str:
        try:
            return self.path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def size(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def spec_lines_after(self, offset: int) -> list[engine_log.SpecDecodingLine]:
        with open(self.path, "rb") as f:
            f.seek(offset)
            return engine_log.parse_spec_lines(f.read().decode(errors="replace"))

    def wait_spec_line(self, offset: int, timeout: float) -> bool:
        """Wait for a SpecDecoding line written after ``offset`` (vLLM's 10 s interval flush)."""
        t = time.monotonic()
        while time.monotonic() - t < timeout:
            if self.spec_lines_after(offset):
                return True
            time.sleep(0.25)
        return False


def completion(base: str, model: str, prompt: str, max_tokens: int, timeout: float = 60.0):
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "return_token_ids": True,
    }
    t = time.monotonic()
    try:
        _, txt = http(base, "POST", "/v1/completions", body, timeout)
        j = json.loads(txt)
        c = j["choices"][0]
        return {
            "ok": True,
            "s": round(time.monotonic() - t, 4),
            "text": c.get("text"),
            "token_ids": c.get("token_ids"),
            "usage": j.get("usage"),
        }, txt
    except (urllib.error.URLError, OSError, ValueError, KeyError) as e:
        detail = e.read().decode()[:2000] if isinstance(e, urllib.error.HTTPError) else ""
        return {"ok": False, "s": round(time.monotonic() - t, 4), "error": f"{e!r} {detail}"}, ""


def load_prompts() -> list[str]:
    path = REPO / "specdeploy" / "node" / "prompts" / "prompts.jsonl"
    out = []
    with open(path) as f:
        for line in f:
            if line.strip():
                out.append(json.loads(line)["prompt"])
    return out


def acceptance_argv(
    base: str, name: str, max_requests: int, time_budget_s: int, *extra: str, warmup: int = 0
) -> list[str]:
    """`specdeploy.node.validation.check acceptance` as every GPU-tier run calls it: 128 tokens a
    request,
    no warm-up unless asked; extra flags after."""
    return [
        "acceptance",
        "--base-url",
        base,
        "--served-model-name",
        name,
        "--warmup",
        str(warmup),
        "--max-requests",
        str(max_requests),
        "--time-budget",
        str(time_budget_s),
        "--max-tokens",
        "128",
        *extra,
    ]


def check_cli(args: list[str], out_json: Path, timeout: float, env: dict) -> dict:
    check = "specdeploy.node.validation.check"
    cmd = [sys.executable, "-m", check, *args, "--json", "--out", str(out_json)]
    t = time.monotonic()
    try:
        p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)
        rc, stderr = p.returncode, p.stderr[-3000:]
    except subprocess.TimeoutExpired as e:
        rc, stderr = 124, f"timeout after {timeout}s: {e}"
    res: dict = {"cmd": " ".join(cmd), "rc": rc, "s": round(time.monotonic() - t, 2)}
    if stderr.strip():
        res["stderr_tail"] = stderr
    try:
        res["result"] = json.loads(out_json.read_text())
    except (OSError, ValueError) as e:
        res["result_error"] = repr(e)
    return res


def clear_cache(env: dict, scratch: str) -> list[str]:
    cleared = []
    for var in CACHE_VARS:
        d = env.get(var)
        if not d:
            continue
        real = os.path.realpath(d)
        if not real.startswith(os.path.realpath(scratch) + os.sep):
            raise SystemExit(f"refusing to clear {var}={d}: not under --scratch {scratch}")
        if os.path.isdir(real):
            shutil.rmtree(real)
        os.makedirs(real, exist_ok=True)
        cleared.append(real)
    return cleared


def spawn_server(argv: list[str], env: dict, log_path: Path) -> subprocess.Popen:
    """Start a server process in its own session (stop() takes its group), output to log_path."""
    return subprocess.Popen(
        argv,
        stdout=open(log_path, "w"),  # the child keeps it open
        stderr=subprocess.STDOUT,
        env=env,
        cwd="/tmp",
        start_new_session=True,
    )


def wait_healthy(
    p: subprocess.Popen, base: str, budget: float, every_s: float = 0.25
) -> float | None:
    """Seconds from now until GET /health answers 200; None if p exits or budget runs out."""
    t0 = time.monotonic()
    while p.poll() is None and time.monotonic() - t0 < budget:
        try:
            if http(base, "GET", "/health", timeout=2)[0] == 200:
                return time.monotonic() - t0
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(every_s)
    return None


def stop(p: subprocess.Popen, timeout: float) -> dict:
    t = time.monotonic()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    # the whole group (EngineCore, workers) must be gone before the GPU is free
    while time.monotonic() - t < timeout + 10:
        try:
            os.killpg(p.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.25)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    t_gpu = time.monotonic()
    while gpu_apps() and time.monotonic() - t_gpu < 20:
        time.sleep(0.5)
    return {
        "rc": p.poll(),
        "stop_s": round(time.monotonic() - t, 2),
        "gpu_apps_after_stop": gpu_apps(),
    }


def run_one(tag: str, unit_name: str, clear: bool, a: argparse.Namespace, state: dict) -> dict:
    rd = Path(a.out) / "runs" / tag
    rd.mkdir(parents=True, exist_ok=True)
    unit_dir = Path(a.units) / unit_name
    expect = json.loads((unit_dir / "expect.json").read_text())
    r: dict = {"tag": tag, "unit": unit_name, "expect": expect, "cold_cache": clear}
    c = build_command(unit_dir, a.python, a.pythonpath)
    env = c.pop("env")
    r["command"] = c
    argv = c["argv"]
    port = flag_value(argv, "--port") or "8000"
    host = flag_value(argv, "--host") or "127.0.0.1"
    name = flag_value(argv, "--served-model-name") or expect.get("served_model_name")
    tp = int(flag_value(argv, "--tensor-parallel-size") or flag_value(argv, "-tp") or 1)
    pp = int(flag_value(argv, "--pipeline-parallel-size") or flag_value(argv, "-pp") or 1)
    r["parallel"] = {"tensor": tp, "pipeline": pp}
    if (tp, pp) != (a.tensor_parallel_size, a.pipeline_parallel_size):
        r["error"] = (
            f"unit renders TP={tp} PP={pp}, driver asked for "
            f"TP={a.tensor_parallel_size} PP={a.pipeline_parallel_size}"
        )
        return r
    if state["gpus"] < tp * pp:
        r["error"] = f"TP*PP={tp * pp} needs more GPUs than the {state['gpus']} visible"
        return r
    base = f"http://{host}:{port}"
    if clear:
        r["cleared"] = clear_cache(env, a.scratch)
    if gpu_apps():
        r["gpu_busy_before_start"] = gpu_apps()
    logf = Log(rd / "engine.log")
    log(f"[{tag}] start: {' '.join(argv)[:400]}")
    t_start = time.monotonic()
    p = spawn_server(argv, env, logf.path)
    # readiness: our own fine-grained /health poll for the start-up time, and the toolkit's
    # smoke check (--wait-ready) as the gate
    ready_at: list[float] = []

    def poll() -> None:
        if wait_healthy(p, base, a.start_timeout_s - (time.monotonic() - t_start)) is not None:
            ready_at.append(time.monotonic() - t_start)

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    th.join(min(a.start_timeout_s + 5, left(45)))
    r["ready"] = bool(ready_at)
    r["server_start_s"] = round(ready_at[0], 2) if ready_at else None
    log(f"[{tag}] ready={r['ready']} start={r['server_start_s']}s rc={p.poll()}")
    chk_env = dict(os.environ, PYTHONPATH=str(REPO))
    try:
        if ready_at:
            r["smoke"] = check_cli(
                ["smoke", "--base-url", base, "--served-model-name", name, "--wait-ready", "60"],
                rd / "smoke.json",
                min(120, left(40)),
                chk_env,
            )
            for path in ("/v1/models", "/version", "/health"):
                try:
                    _st, txt = http(base, "GET", path, timeout=10)
                    save(rd / ("http" + path.replace("/", "_") + ".json"), txt)
                except (urllib.error.URLError, OSError) as e:
                    r.setdefault("http_errors", {})[path] = repr(e)
            record_nvidia_smi(rd / "nvidia-smi", running=True)
            prompts = load_prompts()[:GREEDY_PROMPTS]
            seq = []
            for i, pr in enumerate(prompts):
                res, raw = completion(base, name, pr, GREEDY_TOKENS)
                if i == 0 and raw:
                    save(rd / "http_v1_completions.json", raw)
                seq.append(res)
            conc: list = [None] * len(prompts)

            def one(i: int) -> None:
                conc[i] = completion(base, name, prompts[i], GREEDY_TOKENS)[0]

            ts = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
            for t in ts:
                t.start()
            for t in ts:
                t.join(120)
            r["greedy"] = {"sequential": seq, "concurrent": conc}
            spec = expect.get("spec", False)
            if spec:
                # let vLLM's stats logger flush the interval holding the requests above
                off0 = logf.size()
                r["pre_flush_seen"] = logf.wait_spec_line(off0, 12)
            off = logf.size()
            acc_args = acceptance_argv(base, name, 20, 90)
            if not spec:
                acc_args.append("--no-spec-baseline")
            elif state.get("baseline_file"):
                acc_args += ["--baseline-file", state["baseline_file"]]
            r["acceptance"] = check_cli(
                acc_args, rd / "acceptance.json", min(150, left(50)), chk_env
            )
            if spec:
                off_end = logf.size()
                r["post_flush_seen"] = logf.wait_spec_line(off_end, 12)
                lines = logf.spec_lines_after(off)
                r["vllm_log_spec_lines"] = [x.__dict__ for x in lines]
                r["vllm_log_spec_total"] = engine_log.combine_spec_lines(lines)
            elif r["acceptance"].get("rc") == 0:
                state["baseline_file"] = str(rd / "acceptance.json")
            conc_args = acceptance_argv(base, name, 16, 60, "--concurrency", "8", warmup=1)
            if not spec:
                conc_args.append("--no-spec-baseline")
            r["acceptance_c8"] = check_cli(
                conc_args, rd / "acceptance-c8.json", min(100, left(30)), chk_env
            )
            try:
                save(rd / "metrics.txt", http(base, "GET", "/metrics", timeout=30)[1])
            except (urllib.error.URLError, OSError) as e:
                r["metrics_error"] = repr(e)
    finally:
        r["stop"] = stop(p, min(c["stop_timeout_s"], 30))
        log(f"[{tag}] stopped {r['stop']}")
    text = logf.text()
    s = engine_log.parse(text)
    r["engine_log"] = {
        "backends": [b.__dict__ for b in s.backends],
        "refusals": [x.__dict__ for x in s.refusals],
        "aux_layers": s.aux_layers,
        "flash_attn_version": s.flash_attn_version,
        "moe_backends": s.moe_backends,
        "startup": s.startup,
        "compile_cache_hits": s.compile_cache_hits,
    }
    tgt, dft = engine_log.target_and_drafter(s.backends)
    r["target_backend"], r["drafter_backend"] = tgt, dft
    problems = []
    if expect.get("target_backend") and tgt != expect["target_backend"]:
        problems.append(f"target backend {tgt}, expected {expect['target_backend']}")
    if expect.get("drafter_backend") and dft != expect["drafter_backend"]:
        problems.append(f"drafter backend {dft}, expected {expect['drafter_backend']}")
    if expect.get("aux_layers") and list(s.aux_layers or ()) != expect["aux_layers"]:
        problems.append(f"aux layers {s.aux_layers}, expected {expect['aux_layers']}")
    want_refusal = expect.get("expect_refusal")
    if want_refusal:
        got = [x for x in s.refusals if want_refusal in " ".join(x.reasons)]
        r["refused_as_expected"] = bool(got) and not r["ready"]
        if not r["refused_as_expected"]:
            problems.append(f"expected vLLM to refuse the start with {want_refusal!r}")
    elif not r["ready"]:
        tail = text.splitlines()[-30:]
        problems.append("not ready; log tail: " + " | ".join(x[:300] for x in tail))
    r["problems"] = problems
    return r


def compare(a: list, b: list) -> list[dict]:
    out = []
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if not (x and y and x.get("ok") and y.get("ok")):
            out.append({"prompt": i, "comparable": False})
            continue
        ta, tb = x.get("token_ids") or [], y.get("token_ids") or []
        div = next((k for k, (u, v) in enumerate(zip(ta, tb, strict=False)) if u != v), None)
        out.append(
            {
                "prompt": i,
                "ids_equal": ta == tb,
                "text_equal": x["text"] == y["text"],
                "first_divergence": div,
                "len": [len(ta), len(tb)],
            }
        )
    return out


def summary_row(r: dict) -> dict:
    acc = ((r.get("acceptance") or {}).get("result") or {}).get("acceptance") or {}
    acc8 = ((r.get("acceptance_c8") or {}).get("result") or {}).get("acceptance") or {}
    smoke = ((r.get("smoke") or {}).get("result") or {}).get("status")
    tps = (acc.get("output_tokens_per_s") or {}).get("median")
    tps8 = (acc8.get("output_tokens_per_s") or {}).get("median")
    lt = r.get("vllm_log_spec_total") or {}
    return {
        "tag": r["tag"],
        "ready": r.get("ready"),
        "start_s": r.get("server_start_s"),
        "target": r.get("target_backend"),
        "drafter": r.get("drafter_backend"),
        "smoke": smoke,
        "tps_c1": tps,
        "tps_c8": tps8,
        "mal_toolkit": acc.get("mean_acceptance_length"),
        "mal_vllm_log": lt.get("mean_acceptance_length"),
        "pos_toolkit": acc.get("per_position_acceptance"),
        "pos_vllm_log": lt.get("per_position"),
        "problems": r.get("problems") or r.get("error"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--units", required=True, help="folder of rendered units (one per subdir)")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpu-tier-out"))
    ap.add_argument("--run", action="append", required=True, metavar="TAG=UNIT[,clear]")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--pythonpath", default="/tmp/site")
    ap.add_argument("--scratch", default="/tmp/gpu-tier", help="only caches under it are cleared")
    ap.add_argument("--deadline-s", type=float, default=540)
    ap.add_argument("--start-timeout-s", type=float, default=300)
    ap.add_argument("--tensor-parallel-size", type=int, default=1)
    ap.add_argument("--pipeline-parallel-size", type=int, default=1)
    ap.add_argument("--estimate-s", type=float, default=120, help="skip a run when less is left")
    a = ap.parse_args(argv)
    DEADLINE[0] = a.deadline_s
    Path(a.out).mkdir(parents=True, exist_ok=True)
    rc, out = sh(["nvidia-smi", "-L"])
    state: dict = {"gpus": out.count("GPU ") if rc == 0 else 0}
    results: dict = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpus": state["gpus"],
        "nvidia_smi_L": out.strip(),
        "runs": {},
    }
    rp = Path(a.out) / "results.json"
    for spec in a.run:
        tag, _, rest = spec.partition("=")
        unit, _, flags = rest.partition(",")
        left = a.deadline_s - (time.monotonic() - T0)
        if left < a.estimate_s:
            results["runs"][tag] = {"tag": tag, "skipped": f"only {left:.0f}s left"}
            log(f"[{tag}] skipped: only {left:.0f}s left")
            continue
        try:
            results["runs"][tag] = run_one(tag, unit, flags == "clear", a, state)
        except Exception as e:  # one run's failure must not lose the others
            results["runs"][tag] = {"tag": tag, "error": repr(e)}
            log(f"[{tag}] ERROR {e!r}")
        rp.write_text(json.dumps(results, indent=1, default=str))
    runs = results["runs"]
    cmp: dict = {}
    tags = [t for t, r in runs.items() if r.get("greedy")]
    for i, x in enumerate(tags):
        for y in tags[i + 1 :]:
            rx, ry = runs[x], runs[y]
            if rx.get("target_backend") != ry.get("target_backend"):
                continue
            cmp[f"{x}__vs__{y}"] = {
                "sequential": compare(rx["greedy"]["sequential"], ry["greedy"]["sequential"]),
                "concurrent": compare(rx["greedy"]["concurrent"], ry["greedy"]["concurrent"]),
            }
    for t in tags:
        g = runs[t]["greedy"]
        cmp[f"{t}__seq_vs_conc"] = {"sequential": compare(g["sequential"], g["concurrent"])}
    results["greedy_compare"] = cmp
    results["summary"] = [summary_row(r) for r in runs.values() if "skipped" not in r]
    results["total_s"] = round(time.monotonic() - T0, 1)
    rp.write_text(json.dumps(results, indent=1, default=str))
    with tarfile.open(Path(a.out) / "gpu-tier.tgz", "w:gz") as tf:
        tf.add(Path(a.out) / "runs", arcname="runs")
        tf.add(rp, arcname="results.json")
    shutil.rmtree(Path(a.out) / "runs")
    for row in results["summary"]:
        print(json.dumps(row, default=str), flush=True)
    for k, v in cmp.items():
        eq = [c.get("ids_equal") for c in v["sequential"]]
        print(f"greedy {k}: ids_equal={eq}", flush=True)
    bad = any(r.get("problems") or r.get("error") for r in runs.values())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
