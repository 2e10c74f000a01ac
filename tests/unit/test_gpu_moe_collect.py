"""tests/gpu/moe_collect.py on the recorded H200 sweep (tests/fixtures/vllm-0.20.2-moe): the
published docs/speedup-gpu.json is what the recording gives, and its figures are the ratios
and phases an operator would compute by hand from the raw results and engine logs."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import moe_collect

ROOT = Path(__file__).resolve().parents[2]

FIX = ROOT / "tests" / "fixtures" / "vllm-0.20.2-moe"


def recorded() -> tuple[dict, dict[str, str]]:
    res = json.loads((FIX / "results.json").read_text())
    logs = {d.name: (d / "engine.log").read_text() for d in sorted((FIX / "runs").iterdir())}
    return res, logs


def test_published_json_is_derived_from_the_recording() -> None:
    res, logs = recorded()
    published = json.loads((ROOT / "docs" / "speedup-gpu.json").read_text())
    assert moe_collect.build_json(res, logs) == published


def test_speedup_is_the_ratio_of_the_median_repeats_with_their_range() -> None:
    res, logs = recorded()
    d = moe_collect.build_json(res, logs)
    spec = {lv["concurrency"]: lv for lv in res["runs"]["spec-k3"]["sweep"]["levels"]}
    base = {lv["concurrency"]: lv for lv in res["runs"]["nospec"]["sweep"]["levels"]}
    for c in (1, 4, 16, 64):
        s, b = spec[c]["repeats_tps"], base[c]["repeats_tps"]
        cell = d["speedup"]["3"][str(c)]
        assert cell["speedup"] == round(statistics.median(s) / statistics.median(b), 3)
        assert cell["range"] == [round(min(s) / max(b), 3), round(max(s) / min(b), 3)]
    assert set(d["speedup"]) == {"1", "3", "5"}
    assert d["sweeps"]["0"]["levels"]["1"]["acceptance"] == {"present": False}
    assert len(d["sweeps"]["5"]["levels"]["16"]["acceptance"]["per_position"]) == 5


def test_load_rows_read_the_weights_phase_from_each_engine_log() -> None:
    res, logs = recorded()
    rows = {r["tag"]: r for r in moe_collect.build_json(res, logs)["starts"]}
    cold, warm = rows["nospec-load-drop"], rows["nospec-load-warm"]
    assert cold["page_cache"]["dropped"] is True and warm["page_cache"]["mode"] == "read-ahead"
    assert cold["weights_s"] > warm["weights_s"]  # as recorded: 15.18 s vs 3.38 s
    assert f"Loading weights took {cold['weights_s']:.2f} seconds" in logs["nospec-load-drop"]
    # a start cut off by the end of the lease: no results entry, its log still has the weights
    fsf = rows["nospec-fastsafetensors-load-drop"]
    assert fsf["incomplete"] and fsf["server_start_s"] is None and fsf["weights_s"] is not None
    assert rows["spec-k3"]["drafter_weights_s"] is not None


LOADS = ROOT / "tests" / "fixtures" / "vllm-0.20.2-loads"


def test_the_load_time_table_is_derived_from_its_recording() -> None:
    """docs/load-times.json (the 45 GB loader table of docs/load-times.md) is what the
    recording gives; the read-ahead rows went through the toolkit's own prefetch and waited
    until every byte was resident; only the read-ahead removes the disk from the weights."""
    res = json.loads((LOADS / "results.json").read_text())
    logs = {d.name: (d / "engine.log").read_text() for d in sorted((LOADS / "runs").iterdir())}
    d = moe_collect.build_json(res, logs, "tests/fixtures/vllm-0.20.2-loads/results.json")
    assert d == json.loads((ROOT / "docs" / "load-times.json").read_text())
    rows = {r["tag"]: r for r in d["starts"]}
    warm = rows["nospec-load-warm-2"]["page_cache"]
    assert warm["prefetch"] and warm["resident_bytes"] == warm["bytes"] > 45e9
    assert not warm["timed_out"]
    cold = [rows[t]["weights_s"] for t in ("nospec-load-drop", "nospec-load-drop-2")]
    assert rows["nospec-load-warm-2"]["weights_s"] * 3 < min(cold)
    for loader in ("prefetch", "eager", "multithread", "runai"):
        row = rows[f"nospec-{loader}-load-drop"]
        assert row["page_cache"]["dropped"] and row["model_loading_s"] > 20


def test_phase_marks_are_seconds_from_the_first_log_line() -> None:
    log = (
        "(APIServer pid=1) INFO 12-03 14:15:25 [utils.py:1] non-default args: {}\n"
        "progress bar without a timestamp\n"
        "(EngineCore pid=2) INFO 12-03 14:15:47 [core.py:109] Initializing a V1 LLM engine\n"
        "(EngineCore pid=2) INFO 12-03 14:15:56 [loader.py:1] Loading weights took 3.38 seconds\n"
        "(APIServer pid=1) INFO 12-03 14:16:14 [api_server.py:602] Starting vLLM server on http://x\n"
    )
    assert moe_collect.phase_marks(log) == {
        "engine_core_init": 22.0,
        "weights_done": 31.0,
        "api_listening": 49.0,
    }
