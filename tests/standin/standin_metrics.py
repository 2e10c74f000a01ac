"""STAND-IN /metrics: the REAL recorded vLLM 0.20.2 exposition text
(``tests/fixtures/vllm-0.20.2/metrics-{spec,nospec}.txt``) with the spec-decode counters, token
counters, running requests and ``model_name`` replaced by the engine's live values."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import standin_log

if TYPE_CHECKING:
    from standin_engine import Engine


def metrics_text(eng: Engine) -> str:
    """The recorded exposition text with live counters and the served name."""
    with eng.lock:
        c = dict(eng.c)
        per_pos = list(eng.per_pos)
    name = eng.names[0].replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    out: list[str] = []
    created = repr(float(eng.started))
    per_pos_done = {"total": False, "created": False}
    values = {
        "vllm:spec_decode_num_drafts_total": c["drafts"],
        "vllm:spec_decode_num_draft_tokens_total": c["draft_tokens"],
        "vllm:spec_decode_num_accepted_tokens_total": c["accepted"],
        "vllm:prompt_tokens_total": c["prompt_tokens"],
        "vllm:generation_tokens_total": c["generation_tokens"],
    }
    for line in eng.template.splitlines():
        if line.startswith("#") or not line.strip():
            out.append(line)
            continue
        mname = line.split("{", 1)[0].split(" ", 1)[0]
        labels = line[len(mname) :].rsplit(" ", 1)[0] if "{" in line else ""
        labels = re.sub(r'model_name="[^"]*"', f'model_name="{name}"', labels)
        if mname.startswith("vllm:spec_decode_num_accepted_tokens_per_pos_"):
            kind = "total" if mname.endswith("_total") else "created"
            if not per_pos_done[kind]:
                per_pos_done[kind] = True
                for i in range(eng.k):
                    lab = re.sub(r'position="\d+"', f'position="{i}"', labels)
                    v = float(per_pos[i]) if kind == "total" else created
                    out.append(f"{mname}{lab} {v}")
            continue
        if mname in values:
            out.append(f"{mname}{labels} {float(values[mname])}")
        elif mname == "vllm:request_success_total" and 'finished_reason="length"' in labels:
            out.append(f"{mname}{labels} {float(c['requests'])}")
        elif mname.startswith("vllm:") and mname.endswith("_created"):
            out.append(f"{mname}{labels} {created}")
        elif mname == "vllm:num_requests_running":
            out.append(f"{mname}{labels} {float(eng.running)}")
        else:
            out.append((mname + labels + " " + line.rsplit(" ", 1)[1]) if labels else line)
    return "\n".join(out) + "\n"


def load_template(spec: bool) -> str:
    name = "metrics-spec.txt" if spec else "metrics-nospec.txt"
    here = Path(__file__).resolve().parent
    dirs = [
        os.environ.get("SPECDEPLOY_STANDIN_FIXTURES"),
        here.parent / "fixtures" / "vllm-0.20.2",
        here / "recorded",
    ]
    for d in dirs:
        if d and (Path(d) / name).is_file():
            return (Path(d) / name).read_text(encoding="utf-8")
    standin_log.log(
        "WARNING", "standin.py:0", f"recorded {name} not found; using a minimal template"
    )
    base = (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="x"} 0.0\n'
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.\n"
        "# TYPE vllm:generation_tokens_total counter\n"
        'vllm:generation_tokens_total{engine="0",model_name="x"} 0.0\n'
    )
    if not spec:
        return base
    return base + "".join(
        f'# HELP {n} {h}\n# TYPE {n} counter\n{n}{{engine="0",model_name="x"{p}}} 0.0\n'
        for n, h, p in (
            ("vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts.", ""),
            ("vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens.", ""),
            ("vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.", ""),
            (
                "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                "Accepted tokens per draft position.",
                ',position="0"',
            ),
        )
    )
