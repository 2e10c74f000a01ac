#!/usr/bin/env python3
"""Collect what the moe-big device calls returned (tests/gpu/moe_call.sh) on the controller.

    python3 tests/gpu/moe_collect.py /work/.device/N/moe-wait.tgz [--fixtures DIR] [--json PATH]

* unpacks the archive (the last call's: each call packs everything so far) into
  ``tests/fixtures/vllm-0.20.2-moe/`` (results.json as the device wrote it, models.json,
  sweep.log, runs/TAG/{engine.log, metrics.txt, smoke.json, acceptance.json});
* writes ``docs/speedup-gpu.json`` (schema ``specdeploy.gpu.speedup/1``, documented in
  docs/speedup-gpu.md): per k and concurrency level the loadgen figures, the per-level
  acceptance from /metrics deltas, and the speed-up against no speculation with its range;
  and per start the load phases (docs/load-times.md); a start the machine was given back
  during (no results entry) is read from its partial engine log, marked ``incomplete``;
* prints the Markdown tables of both documents.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tarfile
import tempfile
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "vllm-0.20.2-moe"
KEEP = ("engine.log", "metrics.txt", "smoke.json", "acceptance.json")
TS = re.compile(r"(?P<ts>\d\d-\d\d \d\d:\d\d:\d\d) \[")
PHASES = {  # engine-log line -> phase mark (first occurrence)
    "engine_core_init": "Initializing a V1 LLM engine",
    "load_start": "Starting to load model",
    "weights_done": "Loading weights took",
    "model_loaded": "Model loading took",
    "engine_ready": "init engine (profile, create kv cache, warmup model) took",
    "api_listening": "Starting vLLM server on",
}
WEIGHTS_RE = re.compile(r"Loading weights took (?P<v>[0-9.]+) seconds")
MODEL_LOADING_RE = re.compile(r"Model loading took [0-9.]+ GiB(?: memory)? and (?P<v>[0-9.]+) s")


def phase_marks(log: str) -> dict[str, float]:
    """Seconds from the first timestamped line to each phase mark (1 s resolution)."""
    first = None
    marks: dict[str, float] = {}
    for line in log.splitlines():
        m = TS.search(line)
        if not m:
            continue
        t = datetime.strptime(m.group("ts"), "%m-%d %H:%M:%S")
        if first is None:
            first = t
        for key, needle in PHASES.items():
            if key not in marks and needle in line:
                marks[key] = (t - first).total_seconds()
    return marks


def load_row(tag: str, run: dict | None, log: str) -> dict:
    weights = [float(m.group("v")) for m in WEIGHTS_RE.finditer(log)]
    ml = MODEL_LOADING_RE.search(log)
    row: dict = {
        "tag": tag,
        "unit": (run or {}).get("unit", tag.split("-load-")[0]),
        "page_cache": (run or {}).get("page_cache"),
        "server_start_s": (run or {}).get("server_start_s"),
        "weights_s": weights[0] if weights else None,
        "drafter_weights_s": weights[1] if len(weights) > 1 else None,
        "model_loading_s": float(ml.group("v")) if ml else None,
        "startup": ((run or {}).get("engine_log") or {}).get("startup"),
        "log_marks_s": phase_marks(log),
        "incomplete": run is None,
    }
    marks = row["log_marks_s"]
    if row["server_start_s"] is not None and "api_listening" in marks:
        # process start -> first log line: Python and vLLM imports, argument parsing
        row["before_first_log_line_s"] = round(row["server_start_s"] - marks["api_listening"], 1)
    return row


def speedups(runs: dict) -> dict:
    if "sweep" not in runs.get("nospec", {}):  # a load-time recording has no sweeps
        return {}
    base = {lv["concurrency"]: lv for lv in runs["nospec"]["sweep"]["levels"] if "error" not in lv}
    out: dict = {}
    for tag, r in sorted(runs.items()):
        if not tag.startswith("spec-k") or "sweep" not in r:
            continue
        k = int(tag.removeprefix("spec-k"))
        per: dict = {}
        for lv in r["sweep"]["levels"]:
            c = lv["concurrency"]
            b = base.get(c)
            if "error" in lv or b is None:
                continue
            per[str(c)] = {
                "speedup": round(lv["output_tps"] / b["output_tps"], 3),
                # the worst and best pairing of this level's repeats
                "range": [
                    round(min(lv["repeats_tps"]) / max(b["repeats_tps"]), 3),
                    round(max(lv["repeats_tps"]) / min(b["repeats_tps"]), 3),
                ],
            }
        out[str(k)] = per
    return out


def build_json(
    res: dict, logs: dict[str, str], source: str = "tests/fixtures/vllm-0.20.2-moe/results.json"
) -> dict:
    runs = res["runs"]
    s = res["settings"]
    sweeps: dict = {}
    for tag, r in runs.items():
        if "sweep" not in r:
            continue
        k = 0 if tag == "nospec" else int(tag.removeprefix("spec-k"))
        sweeps[str(k)] = {
            "tag": tag,
            "server_start_s": r.get("server_start_s"),
            "endpoint": r["sweep"]["endpoint"],
            "levels": {str(lv["concurrency"]): lv for lv in r["sweep"]["levels"]},
            "acceptance_whole_sweep": r["sweep"]["acceptance_whole_sweep"],
            "toolkit_acceptance_check": (
                ((r.get("acceptance_check") or {}).get("result") or {}).get("acceptance")
            ),
            "vllm_log_spec_total": r.get("vllm_log_spec_total"),
        }
    loads = [load_row(tag, runs.get(tag), log) for tag, log in logs.items()]
    out = {
        "schema": "specdeploy.gpu.speedup/1",
        "recorded": res["started"],
        "source": source,
        "hardware": "1x NVIDIA H200 (lent), vLLM 0.20.2, torch 2.11.0+cu130",
        "models": res.get("models"),
        "workload": {
            "endpoint": next(iter(sweeps.values()))["endpoint"] if sweeps else None,
            "prompts": "specdeploy/node/prompts/prompts.jsonl (20, as user messages)",
            "max_tokens": s["max_tokens"],
            "temperature": 0.0,
            "ignore_eos": True,
            "levels": s["levels"],
            "repeats": {"c<=4": s["repeats_low"], "c>4": s["repeats_high"]},
            "min_window_s": {"c<=4": s["window_low_s"], "c>4": s["window_high_s"]},
        },
        "sweeps": sweeps,
        "speedup": speedups(runs),
        "starts": loads,
    }
    if "cold_read" in res:  # moe_sweep.py --cold-read: the disk's own sequential rate
        out["cold_read"] = res["cold_read"]
    return out


def fmt(x: float | None, nd: int = 0) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def tables(d: dict) -> str:
    out: list[str] = []
    ks = sorted(d["sweeps"], key=int)
    if not ks:
        return load_table(d, out)
    levels = [str(c) for c in d["workload"]["levels"]]
    out.append("| c | " + " | ".join(f"k={k}" if k != "0" else "no spec" for k in ks) + " |")
    out.append("|---" * (len(ks) + 1) + "|")
    for c in levels:
        cells = []
        for k in ks:
            lv = d["sweeps"][k]["levels"].get(c, {})
            tps = lv.get("output_tps")
            sp = lv.get("spread")
            cells.append("-" if tps is None else f"{tps:.0f} (±{sp:.0%} spread)")
        out.append(f"| {c} | " + " | ".join(cells) + " |")
    out.append("")
    spk = [k for k in ks if k != "0"]
    out.append("| c | " + " | ".join(f"k={k}" for k in spk) + " |")
    out.append("|---" * (len(spk) + 1) + "|")
    for c in levels:
        cells = []
        for k in spk:
            s = d["speedup"].get(k, {}).get(c)
            cells.append(
                "-"
                if not s
                else f"**{s['speedup']:.2f}x** ({s['range'][0]:.2f}-{s['range'][1]:.2f})"
            )
        out.append(f"| {c} | " + " | ".join(cells) + " |")
    out.append("")
    out.append("| k | c | MAL | per-position acceptance | TTFT p50/p99 ms | ITL p50/p99 ms |")
    out.append("|---|---|---|---|---|---|")
    for k in ks:
        for c in levels:
            lv = d["sweeps"][k]["levels"].get(c)
            if not lv or "error" in lv:
                continue
            acc = lv.get("acceptance") or {}
            pos = acc.get("per_position")
            out.append(
                f"| {k} | {c} | {fmt(acc.get('mean_acceptance_length'), 2)} | "
                f"{', '.join(f'{p:.2f}' for p in pos) if pos else '-'} | "
                f"{lv['ttft_p50_s'] * 1e3:.0f} / {lv['ttft_p99_s'] * 1e3:.0f} | "
                f"{lv['itl_p50_s'] * 1e3:.1f} / {lv['itl_p99_s'] * 1e3:.1f} |"
            )
    out.append("")
    return load_table(d, out)


def load_table(d: dict, out: list[str]) -> str:
    out.append(
        "| start | page cache | read-ahead s | start-to-ready s | weights s | model loading s "
        "| torch.compile s | init engine s | before first log line s |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|")
    for row in d["starts"]:
        pc = row.get("page_cache") or {}
        st = row.get("startup") or {}
        mode = pc.get("mode", "dropped" if "drop" in row["tag"] else "?")
        if pc.get("prefetch"):  # recorded before the mode key was kept: the read-ahead ran
            mode = "read ahead (specdeploy.node.service.prefetch)"
        out.append(
            f"| {row['tag']}{' (incomplete)' if row['incomplete'] else ''} | {mode} | "
            f"{fmt(pc.get('resident_s'), 1)} | {fmt(row['server_start_s'], 1)} | "
            f"{fmt(row['weights_s'], 2)} | {fmt(row['model_loading_s'], 2)} | "
            f"{fmt(st.get('torch_compile_s'), 1)} | {fmt(st.get('init_engine_s'), 1)} | "
            f"{fmt(row.get('before_first_log_line_s'), 0)} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("archive", help="moe-STEP.tgz of the last call")
    ap.add_argument("--fixtures", default=str(FIXTURES))
    ap.add_argument("--json", default=str(REPO / "docs" / "speedup-gpu.json"))
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            with tarfile.open(a.archive) as tf:
                tf.extractall(tmp, filter="data")
        except (OSError, tarfile.TarError) as e:
            print(f"moe_collect: {a.archive}: {e}", file=sys.stderr)
            return 2
        src = Path(tmp)
        res = json.loads((src / "results.json").read_text())
        fx = Path(a.fixtures)
        if fx.exists():
            shutil.rmtree(fx)
        (fx / "runs").mkdir(parents=True)
        for name in ("results.json", "models.json", "sweep.log"):
            if (src / name).exists():
                shutil.copy(src / name, fx / name)
        logs: dict[str, str] = {}
        for rd in sorted((src / "runs").iterdir()):
            (fx / "runs" / rd.name).mkdir()
            for name in KEEP:
                if (rd / name).exists():
                    shutil.copy(rd / name, fx / "runs" / rd.name / name)
            if (rd / "engine.log").exists():
                logs[rd.name] = (rd / "engine.log").read_text(errors="replace")
    fx_rel = Path(a.fixtures).resolve()
    source = str(fx_rel.relative_to(REPO) if fx_rel.is_relative_to(REPO) else fx_rel)
    d = build_json(res, logs, f"{source}/results.json")
    Path(a.json).write_text(json.dumps(d, indent=1) + "\n")
    print(tables(d))
    return 0


if __name__ == "__main__":
    sys.exit(main())
