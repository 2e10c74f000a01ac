#!/usr/bin/env python3
"""Controller side: the drafter proof's returned files -> fixtures and the table in docs/.

    python3 tests/gpu/drafter_collect.py CALLDIR...

Each CALLDIR holds what one device call returned (proof-*.json, proof-*.tgz). The tarballs are
unpacked into tests/fixtures/vllm-0.20.2-drafter-proof/<stage>/ (engine logs, /metrics,
acceptance results, pipeline logs, the drafters' config.json and specdeploy-drafter.json);
docs/drafter-gpu.json gets the numbers; the table is printed (docs/drafter-gpu.md quotes it).
"""

from __future__ import annotations

import json
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures" / "vllm-0.20.2-drafter-proof"


def fmt(x: object) -> str:
    if isinstance(x, float):
        return f"{x:.3f}"
    if isinstance(x, list):
        return " ".join(fmt(v) for v in x)
    return "-" if x is None else str(x)


def gate_cell(run: dict) -> str:
    """Each gate check of the toolkit's acceptance result: name status (value)."""
    gates = ((run.get("acceptance") or {}).get("result") or {}).get("gates") or {}
    cells = [
        f"{c['name']} {c['status']}" + (f" ({fmt(c['value'])})" if c.get("value") else "")
        for c in gates.get("checks") or []
        if c["name"] != "speculation_on"
    ]
    return f"exit {gates.get('exit_code')}: " + "; ".join(cells) if gates else "-"


def print_serve_table(serve: dict) -> None:
    checks = serve.get("drafter_check") or {}
    print(
        "| drafter | drafter check (before the load) | served aux layers (engine log) |"
        " per-position acceptance: toolkit / vLLM log | mean acceptance length: toolkit /"
        " vLLM log | gates |"
    )
    print("|---|---|---|---|---|---|")
    for tag, s in (serve.get("summary") or {}).items():
        run = serve["runs"][tag]
        chk = checks.get(tag) or {}
        errs = "; ".join(f["code"] for f in chk.get("errors") or []) or "pass"
        print(
            f"| {tag} | rc {chk.get('rc')}: {errs} | {fmt(run.get('engine_aux_layers'))} | "
            f"{fmt(s.get('pos_toolkit'))} / {fmt(s.get('pos_vllm_log'))} | "
            f"{fmt(s.get('mal_toolkit'))} / {fmt(s.get('mal_vllm_log'))} | {gate_cell(run)} |"
        )


def main(argv: list[str]) -> int:
    results: dict = {}
    for d in map(Path, argv):
        for j in sorted(d.glob("proof-*.json")):
            stage = j.stem.removeprefix("proof-")
            results[stage] = json.loads(j.read_text())
            tgz = j.with_suffix(".tgz")
            if tgz.is_file():
                dest = FIX / stage
                dest.mkdir(parents=True, exist_ok=True)
                with tarfile.open(tgz) as tf:
                    tf.extractall(dest, filter="data")
    (REPO / "docs" / "drafter-gpu.json").write_text(json.dumps(results, indent=1, default=str))
    for stage in sorted(k for k in results if k.startswith("serve")):
        print(f"\n{stage}:")
        print_serve_table(results[stage])
    for name in ("pipeline-A", "pipeline-B"):
        st = (results.get(name) or {}).get("state") or {}
        conv = (st.get("convention") or {}).get("result") or {}
        held = ((st.get("convert") or {}).get("result") or {}).get("heldout") or {}
        ex = (st.get("extract") or {}).get("result") or {}
        print(
            f"{name}: extract {ex.get('tokens')} tokens ({ex.get('method')}), convention "
            f"{conv.get('rel_diff_per_slot')}, held-out {held.get('per_position_acceptance')}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
