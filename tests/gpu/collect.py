#!/usr/bin/env python3
"""Collect what the GPU tier's calls brought back into the fixtures and docs (controller side).

    python3 tests/gpu/collect.py CALLDIR... [--fixtures tests/fixtures/vllm-0.20.2-gpu-tier]
        [--json docs/gpu-results.json]

Each CALLDIR is a call's files folder (results.json + gpu-tier.tgz [+ models.json]). Run
folders are unpacked into FIXTURES/runs/<tag>/, all runs are merged into FIXTURES/results.json
(greedy outputs compared token by token again across calls, same target backend only), and a
compact summary (the numbers docs/gpu-results.md quotes) goes to --json. Prints a Markdown
table.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from driver import compare, summary_row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("calls", nargs="+")
    ap.add_argument("--fixtures", default="tests/fixtures/vllm-0.20.2-gpu-tier")
    ap.add_argument("--json", default="docs/gpu-results.json")
    ap.add_argument("--first-call", type=int, default=3, help="tier call number of CALLDIR 1")
    a = ap.parse_args(argv)
    fx = Path(a.fixtures)
    (fx / "runs").mkdir(parents=True, exist_ok=True)
    merged: dict = {"calls": [], "runs": {}}
    for i, c in enumerate(a.calls, start=a.first_call):
        cd = Path(c)
        res = json.loads((cd / "results.json").read_text())
        merged["calls"].append(
            {
                "call": i,
                "started": res.get("started"),
                "total_s": res.get("total_s"),
                "runs": list(res["runs"]),
                "nvidia_smi_L": res.get("nvidia_smi_L"),
            }
        )
        for tag, r in res["runs"].items():
            r["call"] = i
            merged["runs"][tag] = r
        with tempfile.TemporaryDirectory() as td, tarfile.open(cd / "gpu-tier.tgz") as tf:
            tf.extractall(td, filter="data")
            for rd in (Path(td) / "runs").iterdir():
                dest = fx / "runs" / rd.name
                if dest.exists():
                    shutil.rmtree(dest)
                shutil.copytree(rd, dest)
        if (cd / "models.json").exists():
            shutil.copy(cd / "models.json", fx / "models.json")
    runs = merged["runs"]
    tags = [t for t, r in runs.items() if r.get("greedy")]
    cmp: dict = {}
    for i, x in enumerate(tags):
        for y in tags[i + 1 :]:
            rx, ry = runs[x], runs[y]
            key = f"{x}__vs__{y}"
            same = rx.get("target_backend") == ry.get("target_backend")
            cmp[key] = {
                "same_backend": same,
                "sequential": compare(rx["greedy"]["sequential"], ry["greedy"]["sequential"]),
                "concurrent": compare(rx["greedy"]["concurrent"], ry["greedy"]["concurrent"]),
            }
    for t in tags:
        g = runs[t]["greedy"]
        cmp[f"{t}__seq_vs_conc"] = {
            "same_backend": True,
            "sequential": compare(g["sequential"], g["concurrent"]),
        }
    merged["greedy_compare"] = cmp
    merged["summary"] = [summary_row(r) for r in runs.values()]
    (fx / "results.json").write_text(json.dumps(merged, indent=1, default=str))

    def eq(v: dict) -> str:
        seq = [c.get("ids_equal") for c in v["sequential"]]
        return f"{sum(bool(s) for s in seq)}/{len(seq)}"

    doc = {
        "runs": merged["summary"],
        "startup": {
            t: {
                "server_start_s": r.get("server_start_s"),
                "cold_cache": r.get("cold_cache"),
                **(r.get("engine_log") or {}).get("startup", {}),
            }
            for t, r in runs.items()
        },
        "greedy_identical_prompts": {k: eq(v) for k, v in cmp.items()},
        "refusals": {
            t: (r.get("engine_log") or {}).get("refusals")
            for t, r in runs.items()
            if (r.get("engine_log") or {}).get("refusals")
        },
    }
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print(
        "| run | call | start s | target | drafter | tok/s c1 | tok/s c8 | MAL toolkit | "
        "MAL vLLM log | per-pos toolkit | per-pos vLLM log |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")

    def f(v: object, n: int = 1) -> str:
        if isinstance(v, float):
            return f"{v:.{n}f}"
        if isinstance(v, list):
            return ", ".join(f"{x:.3f}" for x in v)
        return "" if v is None else str(v)

    for row in merged["summary"]:
        print(
            f"| {row['tag']} | {runs[row['tag']]['call']} | {f(row['start_s'])} | "
            f"{f(row['target'])} | {f(row['drafter'])} | {f(row['tps_c1'], 0)} | "
            f"{f(row['tps_c8'], 0)} | {f(row['mal_toolkit'], 3)} | "
            f"{f(row['mal_vllm_log'], 3)} | {f(row['pos_toolkit'])} | "
            f"{f(row['pos_vllm_log'])} |"
        )
    for k, v in doc["greedy_identical_prompts"].items():
        print(f"greedy {k} (same backend: {cmp[k]['same_backend']}): {v} identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
