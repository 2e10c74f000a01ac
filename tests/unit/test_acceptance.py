"""Acceptance-run logic with a scripted client (real /metrics texts), and the prompt set."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from specdeploy.node import acceptance  # noqa: E402
from specdeploy.node.smoke import Client, HttpError  # noqa: E402

FIX = ROOT / "tests" / "fixtures" / "vllm-0.20.2"
SPEC = (FIX / "metrics-spec.txt").read_text()
NOSPEC = (FIX / "metrics-nospec.txt").read_text()
RANDOM = (FIX / "metrics-spec-random-drafter.txt").read_text()


class ScriptedClient(Client):
    """Serves /metrics texts in order and canned completions (no network)."""

    def __init__(self, metrics_texts: list[str], tokens: int = 64, fail_after: int | None = None):
        super().__init__("http://127.0.0.1:9")
        self.metrics_texts = list(metrics_texts)
        self.tokens = tokens
        self.calls = 0
        self.fail_after = fail_after

    def text(self, path: str, timeout: float) -> str:
        assert path == "/metrics"
        return self.metrics_texts.pop(0)

    def completion(self, model, prompt, max_tokens, timeout, **kw):
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise HttpError("timeout", f"POST /v1/completions: no answer within {timeout:g}s")
        return {
            "choices": [{"text": " x" * max_tokens}],
            "usage": {"completion_tokens": min(max_tokens, self.tokens)},
        }


def cfg(**kw) -> acceptance.AcceptanceConfig:
    base = dict(
        served_model_name="tiny-dsv3",
        prompts=acceptance.load_prompts(),
        max_requests=4,
        time_budget_s=30,
        warmup=0,
    )
    base.update(kw)
    return acceptance.AcceptanceConfig(**base)


def test_deltas_from_real_texts():
    res = acceptance.run_acceptance(ScriptedClient([NOSPEC, SPEC]), cfg())
    # NOSPEC has no spec series -> "spec off" before anything is sent.
    assert res.status == "spec_off" and "no spec-decode counters" in res.message
    zero = (
        SPEC.replace("} 172.0", "} 0.0")
        .replace("} 516.0", "} 0.0")
        .replace("} 344.0", "} 0.0")
        .replace("} 138.0", "} 0.0")
        .replace("} 112.0", "} 0.0")
        .replace("} 94.0", "} 0.0")
    )
    res = acceptance.run_acceptance(ScriptedClient([zero, SPEC]), cfg())
    assert res.status == "ok", res.message
    d = res.to_dict()
    assert d["mean_acceptance_length"] == pytest.approx(3.0)
    assert d["per_position_acceptance"] == pytest.approx([138 / 172, 112 / 172, 94 / 172])
    assert d["requests"] == 4 and d["completion_tokens"] == 4 * 64
    assert d["vllm_log_line"].startswith("SpecDecoding metrics: Mean acceptance length: 3.00")


def test_counter_reset_is_reported_not_computed():
    res = acceptance.run_acceptance(ScriptedClient([SPEC, RANDOM]), cfg())
    assert res.status == "counter_reset"
    assert "went down" in res.message
    assert res.total is None and res.to_dict()["mean_acceptance_length"] is None


def test_zero_drafts_means_speculation_off():
    res = acceptance.run_acceptance(ScriptedClient([SPEC, SPEC]), cfg())
    assert res.status == "spec_off"
    assert "no drafts during 4 requests" in res.message


def test_request_failure_is_could_not_measure():
    res = acceptance.run_acceptance(ScriptedClient([SPEC, SPEC], fail_after=2), cfg())
    assert res.status == "error" and "no answer" in res.message


def test_model_name_mismatch_names_the_models_seen():
    res = acceptance.run_acceptance(ScriptedClient([SPEC, SPEC]), cfg(served_model_name="kimi"))
    assert res.status == "spec_off" and "tiny-dsv3" in res.message


def test_request_count_bound_and_prompt_cycling():
    c = ScriptedClient([NOSPEC, NOSPEC])
    res = acceptance.run_acceptance(c, cfg(no_spec_baseline=True, max_requests=25))
    assert res.status == "ok" and c.calls == 25


def test_spread():
    s = acceptance.Spread.of([3.0, 1.0, 2.0, 10.0])
    assert (s.median, s.min, s.max) == (2.5, 1.0, 10.0)
    assert s.q1 <= s.median <= s.q3
    one = acceptance.Spread.of([5.0])
    assert one.median == one.q1 == one.q3 == 5.0
    assert s.scaled(0.5).max == 5.0


def test_baseline_from_result(tmp_path):
    p = tmp_path / "b.json"
    p.write_text(
        json.dumps({"acceptance": {"status": "ok", "output_tokens_per_s": {"median": 61.5}}})
    )
    assert acceptance.baseline_from_result(p) == 61.5
    p.write_text(json.dumps({"acceptance": {"status": "error", "output_tokens_per_s": None}}))
    with pytest.raises(ValueError):
        acceptance.baseline_from_result(p)


def test_shipped_prompt_set():
    prompts = acceptance.load_prompts()
    assert 16 <= len(prompts) <= 24
    kinds = {p.kind for p in prompts}
    assert kinds == {"chat", "code", "maths", "long-form"}
    assert len({p.id for p in prompts}) == len(prompts)
    assert all(p.prompt.strip() and p.max_tokens > 0 for p in prompts)


def test_bad_prompt_file(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"id": "a"}\n')
    with pytest.raises(ValueError, match="bad prompt line"):
        acceptance.load_prompts(p)
