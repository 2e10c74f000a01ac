#!/usr/bin/env python3
"""Speed-up sweep and load-time runs on the moe-big target, from the toolkit's rendered units.

Runs ON the GPU machine (stdlib + the toolkit's node code; vLLM unpacked on PYTHONPATH), in the
background across several device calls (tests/gpu/moe_call.sh). For each ``--run`` in order:

``UNIT:sweep``   start the unit (as driver.py does: its ExecStart and environment, only the
                 program substituted), time it to /health, the toolkit's smoke check, then
                 ``specdeploy.node.validation.loadgen`` at every level (streamed requests, chat
                 endpoint
                 unless the server refuses it) with the spec-decode counters of ``/metrics``
                 read before and after each level (``specdeploy.node.validation.metrics``:
                 per-level mean
                 acceptance length and per-position acceptance); for a speculative unit also
                 the toolkit's ``check acceptance`` (c=1); save ``/metrics``; stop.
``UNIT:load:drop`` drop the page cache (``echo 3 > /proc/sys/vm/drop_caches``), start, time it
                 to /health, stop: start-to-ready and the engine log's load phases, cold.
``UNIT:load:warm`` drop the page cache, read the checkpoint ahead as a deploy does before the
                 stop (``specdeploy.node.service.prefetch``: posix_fadvise(WILLNEED), then read
                 through
                 on 8 threads until every byte is resident; timed), then start.
``UNIT:load:keep`` start with the page cache as the previous run left it (the model stays
                 resident between load runs; the code as a fresh install leaves it: warm).
``UNIT:load:evict`` evict only the Python code (every file under the import path and the
                 bytecode prefixes, posix_fadvise(DONTNEED)), keep the model resident: a
                 rollback to a release whose venv a 547 GB read-ahead pushed out.
Options after the cache mode, comma-separated (issue 27 item 2, the restart's fixed part):
``pyc=none``     no bytecode for anything but the standard library, none written: a release
                 venv as the deploy built it until 12-04 (``pip --no-compile``, read-only to
                 the service user). ``PYTHONPYCACHEPREFIX`` points at a prefix holding the
                 standard library's bytecode only (``--pyc-prefixes`` builds it).
``pyc=all``      the same with every import path compiled (``compileall``): a venv compiled at
                 install.
``seqs=N``       ``--max-num-seqs N`` appended (CUDA graph capture sizes up to 2N).
``importtime``   ``PYTHONPROFILEIMPORTTIME=1``: every import's time in the engine log.
A run named twice gets a repeat suffix (``nospec-load-drop-2``). Every start records when its
engine log first showed each startup phase (``phases_s``, 0.1 s resolution, from the spawn).

Writes OUT/results.json after every run (schema: docs/speedup-gpu.md) and OUT/runs/TAG/
(engine.log, metrics.txt, smoke.json, acceptance.json). A run that would end after
``--deadline-s`` is skipped; so is everything after the file ``--stop-file`` appears.

    python3 tests/gpu/moe_sweep.py --units units-moe --out /tmp/moe-out \\
        --run nospec:sweep --run spec-k3:sweep --run nospec:load:drop --deadline-s 900
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import driver  # noqa: E402  (tests/gpu/driver.py: unit parsing, start/stop, toolkit checks)

from specdeploy.node.service import engine_log, prefetch  # noqa: E402
from specdeploy.node.validation import loadgen, metrics  # noqa: E402
from specdeploy.node.validation.workload import Workload  # noqa: E402

REPO = driver.REPO
T0 = time.monotonic()
WEIGHTS_RE = re.compile(r"Loading weights took (?P<v>[0-9.]+) seconds")
ESTIMATE_S = {"sweep": 150.0, "load": 80.0, "ab": 90.0}  # skip a run when less than this is left
NO_DROP = [False]


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:7.1f}s] {msg}", flush=True)


def meminfo_cached_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("Cached:"):
                return round(int(line.split()[1]) / 2**20, 2)
    except OSError:
        pass
    return None


def drop_page_cache() -> dict:
    if NO_DROP[0]:  # CPU dry runs on a shared machine
        return {"dropped": False, "error": "--no-drop-caches"}
    before = meminfo_cached_gib()
    subprocess.run(["sync"], check=False)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        ok, err = True, None
    except OSError as e:
        ok, err = False, repr(e)
    return {
        "dropped": ok,
        "error": err,
        "cached_gib_before": before,
        "cached_gib_after": meminfo_cached_gib(),
    }


def model_files(dirs: list[str]) -> list[str]:
    out: list[str] = []
    for d in dirs:
        out += sorted(glob.glob(os.path.join(d, "*.safetensors")))
    return out


def read_through(files: list[str]) -> int:
    """Read every byte of files (into the page cache, or to time the disk); bytes read."""
    total = 0
    buf = bytearray(16 << 20)
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            while n := fh.readinto(buf):
                total += n
    return total


def cold_read(files: list[str]) -> dict:
    """Plain sequential read after a drop: the disk's own speed, for the extrapolation."""
    drop = drop_page_cache()
    t = time.monotonic()
    total = read_through(files)
    s = time.monotonic() - t
    return {"drop": drop, "bytes": total, "s": round(s, 2), "gb_per_s": round(total / s / 1e9, 2)}


def code_dirs(pythonpath: str) -> list[str]:
    """Every directory the server imports Python from: the unpacked vLLM and the image's own."""
    import site
    import sysconfig

    dirs = [d for d in pythonpath.split(os.pathsep) if d]
    dirs += [*site.getsitepackages(), sysconfig.get_paths()["stdlib"]]
    dirs += list(PYC_PREFIXES.values())
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


def code_files(dirs: list[str]) -> list[str]:
    out = []
    for d in dirs:
        for root, _, names in os.walk(d):
            out += [os.path.join(root, n) for n in names if n.endswith((".py", ".pyc", ".so"))]
    return out


def evict(files: list[str]) -> dict:
    """Drop these files' clean pages from the page cache (the model's stay resident)."""
    t = time.monotonic()
    n = size = 0
    for f in files:
        try:
            fd = os.open(f, os.O_RDONLY)
        except OSError:
            continue
        try:
            size += os.fstat(fd).st_size
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            n += 1
        finally:
            os.close(fd)
    return {"files": n, "bytes": size, "s": round(time.monotonic() - t, 2)}


PYC_PREFIXES = {"none": "/tmp/pyc-stdlib", "all": "/tmp/pyc-all"}


def build_pyc_prefixes(pythonpath: str) -> dict:
    """Compile bytecode into two prefixes: the standard library only, and everything; timed
    (the second is what compiling a release venv at install costs, on this machine's cores)."""
    import sysconfig

    stdlib = sysconfig.get_paths()["stdlib"]
    out = {}
    everything = [d for d in code_dirs(pythonpath) if d not in PYC_PREFIXES.values()]
    for name, dirs in (("none", [stdlib]), ("all", everything)):
        t = time.monotonic()
        env = dict(os.environ, PYTHONPYCACHEPREFIX=PYC_PREFIXES[name])
        p = subprocess.run(
            [sys.executable, "-m", "compileall", "-q", "-j", "0", *dirs],
            env=env,
            capture_output=True,
            text=True,
        )
        out[name] = {
            "dirs": dirs,
            "rc": p.returncode,
            "s": round(time.monotonic() - t, 1),
            "errors_tail": (p.stdout + p.stderr)[-600:],
            "bytes": sum(f.stat().st_size for f in Path(PYC_PREFIXES[name]).rglob("*.pyc")),
        }
        log(f"pyc prefix {name}: {out[name]['s']}s rc {p.returncode}")
    return out


# Startup phases as the engine log shows them: the first match of each, from the spawn.
PHASES = (
    ("first_line", None),
    ("args", "non-default args"),
    ("engine_core_init", "Initializing a V1 LLM engine"),
    ("load_start", "Starting to load model"),
    ("model_loaded", "Model loading took"),
    ("graphs_done", "Graph capturing finished"),
    ("init_engine_done", "init engine (profile"),
    ("server_listening", "Starting vLLM server"),
)


class PhaseWatch:
    """Polls the engine log every 0.1 s and notes when each phase's line first appears."""

    def __init__(self, path: Path, t0: float) -> None:
        import threading

        self.path, self.t0, self.seen = path, t0, {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            self.scan()
            time.sleep(0.1)

    def scan(self) -> None:
        try:
            text = self.path.read_text(errors="replace")
        except OSError:
            return
        now = round(time.monotonic() - self.t0, 1)
        for name, needle in PHASES:
            if name not in self.seen and (text.strip() if needle is None else needle in text):
                self.seen[name] = now

    def done(self) -> dict:
        self.stop.set()
        self.thread.join(2)
        return dict(self.seen)


def spec_snapshot(base: str, name: str) -> metrics.SpecSnapshot | None:
    try:
        return metrics.snapshot(driver.http(base, "GET", "/metrics", timeout=30)[1], name)
    except (urllib.error.URLError, OSError, metrics.MetricsError):
        return None


def acceptance_between(a: metrics.SpecSnapshot | None, b: metrics.SpecSnapshot | None) -> dict:
    if a is None or b is None or not b.present:
        return {"present": False}
    try:
        d = metrics.delta(a, b, elapsed_s=0.0)
    except metrics.CounterReset as e:
        return {"present": True, "error": f"counter reset: {e.details}"}
    return {
        "present": True,
        "num_drafts": d.num_drafts,
        "num_draft_tokens": d.num_draft_tokens,
        "num_accepted_tokens": d.num_accepted_tokens,
        "mean_acceptance_length": d.mean_acceptance_length,
        "draft_acceptance_rate": d.draft_acceptance_rate,
        "per_position": d.per_position_rate,
    }


def choose_endpoint(base: str, name: str, prompts: list[list[dict]]) -> tuple[str, str | None]:
    """chat when the server applies a chat template, else completions (with the reason)."""
    url = base + loadgen.ENDPOINTS["chat"]
    body = loadgen._request_body(
        "chat", name, prompts[0], {"max_tokens": 4, "temperature": 0.0, "ignore_eos": True}
    )
    try:
        loadgen.stream_one(url, body, "chat", {"Content-Type": "application/json"}, 60)
        return "chat", None
    except loadgen.LoadgenError as e:
        return "completions", str(e)


def sweep(base: str, name: str, a: argparse.Namespace, state: dict, rd: Path) -> dict:
    out: dict = {}
    prompts = loadgen.load_prompts_file(loadgen.default_prompts_file())
    if "endpoint" not in state:
        state["endpoint"], state["endpoint_fallback"] = choose_endpoint(base, name, prompts)
        log(f"endpoint {state['endpoint']} ({state['endpoint_fallback']})")
    out["endpoint"] = state["endpoint"]
    out["endpoint_fallback"] = state["endpoint_fallback"]
    levels = []
    first = True
    s_start = spec_snapshot(base, name)
    for c in a.levels:
        low = c <= 4
        before = spec_snapshot(base, name)
        t = time.monotonic()
        try:
            workload = Workload(
                levels=(c,),
                max_tokens=a.max_tokens,
                repeats=a.repeats_low if low else a.repeats_high,
                min_window_s=a.window_low_s if low else a.window_high_s,
                endpoint=state["endpoint"],
                warmup=2 if first else 0,
            )
            (res,) = loadgen.measure_levels(base, name, workload, prompts=prompts)
        except loadgen.LoadgenError as e:
            levels.append({"concurrency": c, "error": str(e)})
            log(f"  c={c}: ERROR {e}")
            continue
        first = False
        row = loadgen.to_dict(res)
        row["measure_s"] = round(time.monotonic() - t, 2)
        row["acceptance"] = acceptance_between(before, spec_snapshot(base, name))
        levels.append(row)
        acc = row["acceptance"]
        log(
            f"  c={c}: {res.output_tps:.0f} tok/s {res.repeats_tps} spread {res.spread:.1%} "
            f"ttft {res.ttft_p50_s * 1e3:.0f}/{res.ttft_p99_s * 1e3:.0f} ms "
            f"itl {res.itl_p50_s * 1e3:.1f}/{res.itl_p99_s * 1e3:.1f} ms "
            f"MAL {acc.get('mean_acceptance_length')} pos {acc.get('per_position')}"
        )
    out["levels"] = levels
    out["acceptance_whole_sweep"] = acceptance_between(s_start, spec_snapshot(base, name))
    return out


def prefill_rate(base: str, name: str, n: int, words: int = 1500, concurrency: int = 16) -> dict:
    """Prompt tokens per second of the target alone: n long prompts, one output token each,
    `concurrency` at a time (the drafter pipeline's extraction is a prefill of every sample)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(i: int) -> int:
        text = " ".join(f"w{(i * 7919 + j * 104729) % 5000}" for j in range(words))
        body = {"model": name, "prompt": text, "max_tokens": 1, "temperature": 0}
        _, out = driver.http(base, "POST", "/v1/completions", body, timeout=300)
        return int(json.loads(out)["usage"]["prompt_tokens"])

    one(n)  # warm-up: the first batch shape
    t = time.monotonic()
    with ThreadPoolExecutor(concurrency) as ex:
        toks = list(ex.map(one, range(n)))
    s = time.monotonic() - t
    r = {
        "requests": n,
        "concurrency": concurrency,
        "prompt_tokens": sum(toks),
        "s": round(s, 2),
        "prompt_tps": round(sum(toks) / s, 1),
    }
    log(f"  prefill {r}")
    return r


def ab_c1(base: str, name: str, a: argparse.Namespace) -> dict:
    """c=1 through the chat and the completions endpoint (issue 26 item 6: the per-step gap
    between the toolkit's unit and the moe-speedup recipe's server)."""
    prompts = loadgen.load_prompts_file(loadgen.default_prompts_file())
    out: dict = {}
    for endpoint in ("chat", "completions"):
        before = spec_snapshot(base, name)
        try:
            workload = Workload(
                levels=(1,),
                max_tokens=a.max_tokens,
                repeats=a.repeats_low,
                min_window_s=a.window_low_s,
                endpoint=endpoint,
                warmup=2,
            )
            (res,) = loadgen.measure_levels(base, name, workload, prompts=prompts)
        except loadgen.LoadgenError as e:
            out[endpoint] = {"error": str(e)}
            log(f"  ab {endpoint}: ERROR {e}")
            continue
        row = loadgen.to_dict(res)
        row["acceptance"] = acceptance_between(before, spec_snapshot(base, name))
        out[endpoint] = row
        mal = row["acceptance"].get("mean_acceptance_length")
        log(
            f"  ab {endpoint} c=1: {res.output_tps:.0f} tok/s {res.repeats_tps} "
            f"itl {res.itl_p50_s * 1e3:.2f} ms MAL {mal}"
        )
    return out


def run_one(tag: str, unit: str, kind: str, cache: str, a: argparse.Namespace, state: dict):
    rd = Path(a.out) / "runs" / tag
    rd.mkdir(parents=True, exist_ok=True)
    unit_dir = Path(a.units) / unit
    expect = json.loads((unit_dir / "expect.json").read_text())
    c = driver.build_command(unit_dir, a.python, a.pythonpath)
    env = c.pop("env")
    r: dict = {"tag": tag, "unit": unit, "kind": kind, "cache": cache, "expect": expect}
    argv = c["argv"]
    opts = dict(state.get("opts", {}).get(tag, {}))
    r["options"] = opts
    if opts.get("seqs"):
        argv = c["argv"] = [*argv, "--max-num-seqs", opts["seqs"]]
    if opts.get("pyc"):
        env.update(PYTHONDONTWRITEBYTECODE="1", PYTHONPYCACHEPREFIX=PYC_PREFIXES[opts["pyc"]])
    if opts.get("importtime"):
        env["PYTHONPROFILEIMPORTTIME"] = "1"
    r["command"] = c
    r["env_options"] = {
        k: env[k]
        for k in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX", "PYTHONPROFILEIMPORTTIME")
        if k in env
    }
    port = driver.flag_value(argv, "--port") or "8000"
    host = driver.flag_value(argv, "--host") or "127.0.0.1"
    name = driver.flag_value(argv, "--served-model-name") or expect["served_model_name"]
    base = f"http://{host}:{port}"
    model = argv[argv.index("serve") + 1]  # vllm serve MODEL ...
    if kind == "load" and cache == "drop":
        r["page_cache"] = {"mode": "dropped", **drop_page_cache()}
    elif kind == "load" and cache == "warm":
        drop = drop_page_cache()
        dirs = [Path(model)] + ([Path(a.drafter)] if expect.get("spec") else [])
        ahead = prefetch.run("always", dirs, 0, Path("/proc/meminfo"), a.start_timeout_s)
        r["page_cache"] = {
            **prefetch.report(ahead),
            "prefetch_mode": ahead.mode,
            "mode": "read-ahead (specdeploy.node.service.prefetch)",
            "drop": drop,
            "resident_s": ahead.seconds,
            "cached_gib_after": meminfo_cached_gib(),
        }
    elif kind == "load" and cache == "evict":
        r["page_cache"] = {
            "mode": "code evicted, model as left",
            "evict": evict(code_files(code_dirs(a.pythonpath))),
            "cached_gib": meminfo_cached_gib(),
        }
    else:
        r["page_cache"] = {
            "mode": "as left by the previous run",
            "cached_gib": meminfo_cached_gib(),
        }
    log(f"[{tag}] page cache {r['page_cache']}")
    if driver.gpu_apps():
        r["gpu_busy_before_start"] = driver.gpu_apps()
    logf = driver.Log(rd / "engine.log")
    log(f"[{tag}] start: {' '.join(argv)[:300]}")
    t_start = time.monotonic()
    p = driver.spawn_server(argv, env, logf.path)
    watch = PhaseWatch(logf.path, t_start)
    ready = driver.wait_healthy(p, base, a.start_timeout_s, every_s=0.2)
    if ready is not None:
        ready = time.monotonic() - t_start  # from before the spawn, as the driver counts
    watch.scan()
    r["phases_s"] = watch.done()
    r["ready"] = ready is not None
    r["server_start_s"] = round(ready, 2) if ready is not None else None
    log(f"[{tag}] ready={r['ready']} start={r['server_start_s']}s rc={p.poll()}")
    chk_env = dict(os.environ, PYTHONPATH=str(REPO))
    try:
        if ready is not None and kind == "sweep":
            r["smoke"] = driver.check_cli(
                ["smoke", "--base-url", base, "--served-model-name", name, "--wait-ready", "60"],
                rd / "smoke.json",
                120,
                chk_env,
            )
            off = logf.size()
            r["sweep"] = sweep(base, name, a, state, rd)
            if expect.get("spec"):
                r["acceptance_check"] = driver.check_cli(
                    driver.acceptance_argv(base, name, 12, 30),
                    rd / "acceptance.json",
                    90,
                    chk_env,
                )
                lines = logf.spec_lines_after(off)
                r["vllm_log_spec_total"] = engine_log.combine_spec_lines(lines)
        if ready is not None and kind == "ab":
            r["ab"] = ab_c1(base, name, a)
        if ready is not None and opts.get("prefill"):
            r["prefill"] = prefill_rate(base, name, int(opts["prefill"]))
        if ready is not None and kind in ("sweep", "ab"):
            try:
                driver.save(rd / "metrics.txt", driver.http(base, "GET", "/metrics", timeout=30)[1])
            except (urllib.error.URLError, OSError) as e:
                r["metrics_error"] = repr(e)
    finally:
        r["stop"] = driver.stop(p, min(c["stop_timeout_s"], 30))
        log(f"[{tag}] stopped {r['stop']}")
    text = logf.text()
    s = engine_log.parse(text)
    weights = [float(m.group("v")) for m in WEIGHTS_RE.finditer(text)]
    r["engine_log"] = {
        "startup": s.startup,
        # the target's "Loading weights took" (a speculative start logs the drafter's second)
        "weights_s": weights[0] if weights else None,
        "weights_s_all": weights,
        "backends": [b.__dict__ for b in s.backends],
        "aux_layers": s.aux_layers,
        "moe_backends": s.moe_backends,
        "compile_cache_hits": s.compile_cache_hits,
        "load_lines": [
            ln[:300]
            for ln in logf.text().splitlines()
            if any(
                k in ln
                for k in (
                    "Loading weights took",
                    "Model loading took",
                    "init engine",
                    "Prefetch",
                    "Filesystem type",
                    "fastsafetensors",
                    "GDS",
                    "Streamer",
                    "Multi-thread",
                    "Loading safetensors",
                )
            )
            and "%|" not in ln
        ][:20],
    }
    tgt, dft = engine_log.target_and_drafter(s.backends)
    problems = []
    if expect.get("target_backend") and tgt != expect["target_backend"]:
        problems.append(f"target backend {tgt}, expected {expect['target_backend']}")
    if expect.get("drafter_backend") and dft != expect["drafter_backend"]:
        problems.append(f"drafter backend {dft}, expected {expect['drafter_backend']}")
    if expect.get("aux_layers") and list(s.aux_layers or ()) != expect["aux_layers"]:
        problems.append(f"aux layers {s.aux_layers}, expected {expect['aux_layers']}")
    if not r["ready"]:
        tail = text.splitlines()[-25:]
        problems.append("not ready; log tail: " + " | ".join(x[:300] for x in tail))
    r["problems"] = problems
    return r


RUN_OPTIONS = {"pyc": ("none", "all"), "seqs": None, "importtime": None, "prefill": None}


def parse_run(spec: str) -> tuple[str, str, str, str, dict]:
    parts = spec.split(":")
    unit, kind = parts[0], parts[1] if len(parts) > 1 else "sweep"
    cache = parts[2] if len(parts) > 2 else ("asis" if kind == "sweep" else "drop")
    opts: dict = {}
    for o in parts[3].split(",") if len(parts) > 3 and parts[3] else []:
        k, _, v = o.partition("=")
        if k not in RUN_OPTIONS or (RUN_OPTIONS[k] and v not in RUN_OPTIONS[k]):
            raise SystemExit(f"--run {spec}: unknown option {o!r}")
        opts[k] = v or "1"
    caches = ("asis", "drop", "warm", "keep", "evict")
    if kind not in ESTIMATE_S or cache not in caches:
        raise SystemExit(
            f"--run {spec}: expected UNIT[:sweep|:ab|:load[:{'|'.join(caches)}[:OPT,...]]]"
        )
    suffix = "".join(f"-{k}{'' if v == '1' else v}" for k, v in opts.items())
    tag = (
        unit if kind == "sweep" else f"{unit}-ab" if kind == "ab" else f"{unit}-load-{cache}"
    ) + suffix
    return tag, unit, kind, cache, opts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--units", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--run", action="append", required=True, metavar="UNIT[:KIND[:CACHE]]")
    ap.add_argument("--drafter", default="/tmp/gpu-tier/models/drafter")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--pythonpath", default="/tmp/site")
    ap.add_argument("--levels", type=loadgen._levels, default=[1, 4, 16, 64])
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--repeats-low", type=int, default=3, help="repeats at c <= 4")
    ap.add_argument("--repeats-high", type=int, default=3, help="repeats at c > 4")
    ap.add_argument("--window-low-s", type=float, default=4.0)
    ap.add_argument("--window-high-s", type=float, default=3.0)
    ap.add_argument("--start-timeout-s", type=float, default=360)
    ap.add_argument("--deadline-s", type=float, default=1500)
    ap.add_argument("--stop-file", default="/tmp/moe-stop")
    ap.add_argument("--cold-read", action="store_true", help="time a plain cold read first")
    ap.add_argument("--no-drop-caches", action="store_true", help="dry runs: never drop")
    ap.add_argument("--pyc-prefixes", action="store_true", help="build the pyc= prefixes first")
    a = ap.parse_args(argv)
    NO_DROP[0] = a.no_drop_caches
    runs = []
    parsed = [parse_run(spec) for spec in a.run]
    state: dict = {"opts": {}}
    for i, (tag, unit, kind, cache, opts) in enumerate(parsed):
        n = sum(1 for earlier in parsed[:i] if earlier[0] == tag)
        tag = f"{tag}-{n + 1}" if n else tag
        state["opts"][tag] = opts
        runs.append((tag, unit, kind, cache))
    Path(a.out).mkdir(parents=True, exist_ok=True)
    results: dict = {
        "schema": "specdeploy.gpu.moe_sweep/1",
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settings": {k: v for k, v in vars(a).items() if k != "run"},
        "plan": a.run,
        "runs": {},
    }
    rp = Path(a.out) / "results.json"
    if a.pyc_prefixes:
        results["pyc_prefixes"] = build_pyc_prefixes(a.pythonpath)
        rp.write_text(json.dumps(results, indent=1, default=str))
    try:
        models = json.loads(Path(a.drafter).parent.joinpath("models.json").read_text())
        results["models"] = models
    except (OSError, ValueError) as e:
        results["models_error"] = repr(e)
    if a.cold_read:
        target = str(Path(a.drafter).parent / "target")
        results["cold_read"] = cold_read(model_files([target]))
        log(f"cold read {results['cold_read']}")
    for tag, unit, kind, cache in runs:
        left = a.deadline_s - (time.monotonic() - T0)
        if os.path.exists(a.stop_file) or left < ESTIMATE_S[kind]:
            results["runs"][tag] = {"tag": tag, "skipped": f"{left:.0f}s left / stop file"}
            log(f"[{tag}] skipped ({left:.0f}s left)")
            continue
        try:
            results["runs"][tag] = run_one(tag, unit, kind, cache, a, state)
        except Exception as e:  # one run's failure must not lose the others
            results["runs"][tag] = {"tag": tag, "error": repr(e)}
            log(f"[{tag}] ERROR {e!r}")
        results["elapsed_s"] = round(time.monotonic() - T0, 1)
        rp.write_text(json.dumps(results, indent=1, default=str))
    results["done"] = True
    rp.write_text(json.dumps(results, indent=1, default=str))
    log("plan done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
