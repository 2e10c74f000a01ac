"""The stand-in's SGLang dialect (tests/standin/sglang_standin.py), checked against what real
SGLang 0.5.15 recorded on the H200 (tests/fixtures/sglang-0.5.15-h200/, from
shared/gpu-recipe/sglang/recorded/run3-final) and against the SGLang source's definitions."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest
import standin_sglang as sgl
from harness import PYTHON, STANDIN, STANDIN_SGLANG, Standin

from specdeploy.controller import engines
from specdeploy.node.validation import metrics

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(120)
FIX = ROOT / "tests" / "fixtures" / "sglang-0.5.15-h200"


def get_json(url: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=30) as r:
        return json.loads(r.read())


def get_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def test_sglang_endpoints_meta_info_server_info_and_metrics_agree():
    prof = {"acceptance": [0.8, 0.65, 0.55]}
    with Standin(profile=prof, dialect="sglang", extra_args=["--decode-log-interval", "1"]) as s:
        models = get_json(s.base_url + "/v1/models")
        assert models["data"][0]["id"] == "tiny-dsv3" and models["data"][0]["owned_by"] == "sglang"
        for path in ("/health", "/health_generate"):
            with urllib.request.urlopen(s.base_url + path, timeout=5) as r:
                assert r.status == 200
        # /generate meta_info as tokenizer_manager.py builds it (values in results.json)
        out = get_json(s.base_url + "/generate",
                       {"text": "The capital of France is",
                        "sampling_params": {"max_new_tokens": 64, "temperature": 0}})  # fmt: skip
        meta = out["meta_info"]
        assert meta["completion_tokens"] == 64 and len(out["output_ids"]) == 64
        vct, hist = meta["spec_verify_ct"], meta["spec_correct_drafts_histogram"]
        assert meta["spec_accept_length"] == pytest.approx(64 / vct)
        assert sum(hist) == vct and len(hist) == 4
        assert meta["spec_num_correct_drafts"] == sum(i * h for i, h in enumerate(hist))
        assert meta["spec_num_proposed_drafts"] == vct * 3
        for i in range(4):
            get_json(s.base_url + "/v1/completions",
                     {"model": "tiny-dsv3", "prompt": f"p{i}", "max_tokens": 128,
                      "temperature": 0})  # fmt: skip
        text = get_text(s.base_url + "/metrics")
        m = {x.name: x.value for x in metrics.parse_exposition(text) if "{" not in x.name}
        gen, verify = m["sglang:generation_tokens_total"], m["sglang:spec_verify_calls_total"]
        reqs = m["sglang:num_requests_total"]
        assert gen == 64 + 4 * 128 and reqs == 5
        # (tokens - the prefill's token per request) / verifies: vLLM's 1 + accepted / drafts
        counters_len = (gen - reqs) / verify
        assert 2.0 < counters_len < 3.3  # acceptance [0.8, 0.65, 0.55]: 3.0 expected
        # /server_info accumulates at each decode-log window (interval 1: every step)
        deadline = time.monotonic() + 10
        while True:
            info = get_json(s.base_url + "/server_info")
            avg = info["internal_states"][0].get("avg_spec_accept_length")
            if (
                avg is not None and avg == pytest.approx(counters_len)
            ) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert avg == pytest.approx(counters_len)
        assert (
            info["speculative_algorithm"] == "EAGLE3" and info["speculative_num_draft_tokens"] == 4
        )
        log = s.log_text()
    assert "The server is fired up and ready to roll!" in log
    assert "NOT SGLang" in log
    lines = [ln for ln in log.splitlines() if "Decode batch" in ln]
    found = [engines.ACCEPT_LOG.search(ln) for ln in lines]
    assert lines and all(found)
    # accept rate = (accept len - 1) / steps, as on the H200 (topk 1). Both are printed with two
    # decimals: the rate's rounding (0.005) plus the length's over 3 steps (0.005 / 3) may part
    # them by up to 0.0067 (len 2.875 -> "2.88", rate 0.625 -> "0.62" failed at 0.006 once).
    for f in found:
        assert float(f["rate"]) == pytest.approx((float(f["len"]) - 1) / 3, abs=0.0068)


def test_metric_names_and_labels_are_the_recorded_ones():
    """Every series the stand-in exposes is in the real SGLang recording, and the reverse."""
    with Standin(dialect="sglang") as s:
        text = get_text(s.base_url + "/metrics")
    live = {(x.name, tuple(sorted(set(x.labels) - {"model_name"})))
            for x in metrics.parse_exposition(text)}  # fmt: skip
    rec = {(x.name, tuple(sorted(set(x.labels) - {"model_name"})))
           for x in metrics.parse_exposition((FIX / "metrics-spec.txt").read_text())}  # fmt: skip
    assert live == rec


def test_without_speculation_no_spec_series_and_no_accept_len():
    with Standin(
        dialect="sglang", spec_tokens=None, extra_args=["--decode-log-interval", "1"]
    ) as s:
        get_json(s.base_url + "/v1/completions", {"prompt": "x", "max_tokens": 32})
        text = get_text(s.base_url + "/metrics")
        info = get_json(s.base_url + "/server_info")
        time.sleep(0.3)
        log = s.log_text()
    assert "sglang:spec_verify_calls_total" not in text
    assert "avg_spec_accept_length" not in info["internal_states"][0]
    assert "Decode batch" in log and "accept len" not in log


def test_launch_form_selects_the_dialect_and_unknown_flags_exit_2(tmp_path):
    # `vllm_standin.py --model-path ...` is the SGLang launch form: SGLang's argparse error
    r = subprocess.run([PYTHON, str(STANDIN), "--model-path", "/m", "--max-num-seqs", "8"],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 2 and "unrecognized arguments: --max-num-seqs" in r.stderr
    assert "launch_server" in r.stderr
    # EAGLE3 without a drafter on a llama target (SGLang allows it on DeepSeek only: MTP)
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    r = subprocess.run([PYTHON, str(STANDIN_SGLANG), "--model-path", str(tmp_path),
                        "--speculative-algorithm", "EAGLE3", "--port", "1"],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 1 and "speculative_draft_model_path is required" in r.stdout


def _sglang_wheel() -> Path | None:
    for d in (Path.home() / ".cache" / "specdeploy" / "wheelhouse",):
        found = sorted(d.glob("sglang-0.5.1[5-7]-*.whl")) if d.is_dir() else []
        if found:
            return found[0]
    return None


def test_flags_read_from_the_real_sglang_source(tmp_path):
    """The flag set comes from the wheel's server_args.py (dataclass fields + aliases)."""
    whl = _sglang_wheel()
    if whl is None:
        pytest.skip("no sglang 0.5.15-0.5.17 wheel in ~/.cache/specdeploy/wheelhouse (make setup)")
    with zipfile.ZipFile(whl) as z:
        z.extract("sglang/srt/server_args.py", tmp_path)
    flags = sgl.flags_of(tmp_path / "sglang")
    assert flags is not None
    for f in ("--model-path", "--model", "--tp-size", "--tensor-parallel-size",
              "--speculative-algorithm", "--speculative-draft-model-path",
              "--speculative-num-steps", "--speculative-eagle-topk",
              "--speculative-num-draft-tokens", "--attention-backend",
              "--disable-custom-all-reduce", "--enable-metrics", "--mem-fraction-static",
              "--context-length", "--served-model-name"):  # fmt: skip
        assert f in flags, f
    assert "--max-num-seqs" not in flags and "--speculative-config" not in flags
    # every flag the stand-in knows exists in the real SGLang
    ours = {n for names, _ in sgl.FLAGS for n in names}
    assert ours <= flags, sorted(ours - flags)


def test_recorded_log_lines_parse_as_the_stand_in_writes_them():
    rec = (FIX / "server-spec-accept-lines.log").read_text().splitlines()
    st = sgl.SglState(3, 4)
    length, rate = st.window(correct=12, verifies=5)  # the first recorded line: 3.40 / 0.80
    assert (f"accept len: {length:.2f}, accept rate: {rate:.2f}") in rec[0]


def test_bad_requests_are_400_not_500():
    with Standin(dialect="sglang") as s:
        for body in ({"text": 5}, {"text": "x", "sampling_params": {"max_new_tokens": 0}}):
            req = urllib.request.Request(s.base_url + "/generate", data=json.dumps(body).encode())
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(req, timeout=5)
            assert e.value.code == 400


def _run_check(tmp_path: Path, base_url: str, *extra: str) -> tuple[int, dict]:
    from specdeploy.node.validation import check

    out = tmp_path / f"result-{time.monotonic_ns()}.json"
    rc = check.main(["all", "--base-url", base_url, "--served-model-name", "tiny-dsv3",
                     "--out", str(out), "--node", "n", "--release", "r1",
                     "--max-requests", "8", "--max-tokens", "64", "--warmup", "1",
                     "--time-budget", "30", *extra])  # fmt: skip
    return rc, json.loads(out.read_text()) if out.exists() else {}


def test_the_checker_reads_acceptance_from_sglangs_own_counters(tmp_path):
    """The real checker against the SGLang dialect: mean acceptance length from SGLang's
    counters in vLLM's definition, per position unavailable, a per-position gate refused."""
    with Standin(profile={"acceptance": [0.8, 0.65, 0.55]}, dialect="sglang") as s:
        rc, res = _run_check(tmp_path, s.base_url, "--speed-up-waiver", "figures only")
        assert rc == 0, res.get("reasons")
        acc = res["acceptance"]
        assert acc["status"] == "ok" and acc["mode"] == "spec"
        # profile 0.8/0.65/0.55 -> 1 + 0.8 + 0.65 + 0.55 = 3.0 (vLLM's definition)
        assert acc["mean_acceptance_length"] == pytest.approx(3.0, abs=0.3)
        assert acc["draft_acceptance_rate"] == pytest.approx(2 / 3, abs=0.1)
        assert acc["per_position_acceptance"] is None
        gates = tmp_path / "gates.json"
        gates.write_text(json.dumps({"min_mean_acceptance_length": 1.5,
                                     "per_position_floors": [0.5]}))  # fmt: skip
        rc, res = _run_check(tmp_path, s.base_url, "--speed-up-waiver", "x",
                             "--gates", str(gates))  # fmt: skip
    assert rc != 0
    assert "per-position acceptance unavailable" in json.dumps(res)


def test_recorded_sglang_metrics_in_vllms_terms():
    snap = metrics.snapshot((FIX / "metrics-spec.txt").read_text(), "tiny-dsv3")
    zero = metrics.SpecSnapshot("tiny-dsv3", True, 0, 0, 0, (),
                                {k: metrics.EngineCounters() for k in snap.engines})  # fmt: skip
    d = metrics.delta(zero, snap, 1.0)
    # (generated 6144 - 72 requests) / 1922 verifies; SGLang's /server_info said 3.204
    assert d.mean_acceptance_length == pytest.approx((6144 - 72) / 1922)
    assert abs(d.mean_acceptance_length - 3.204) < 0.05
    assert d.per_position_rate is None and not d.per_position_available
    assert not metrics.snapshot((FIX / "metrics-nospec.txt").read_text(), "tiny-dsv3").present
