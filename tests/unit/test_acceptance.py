"""Acceptance-run logic with a scripted client (real /metrics texts), and the prompt set."""

from __future__ import annotations

import dataclasses
import json

import pytest
from recorded_metrics import NOSPEC, RANDOM, SPEC

from specdeploy.node.validation import acceptance
from specdeploy.node.validation.smoke import Client, HttpError
from specdeploy.node.validation.workload import Workload


class ScriptedClient(Client):
    """Serves /metrics texts in order and canned completions (no network)."""

    def __init__(self, metrics_texts: list[str], tokens: int = 64, fail_after: int | None = None):
        super().__init__("http://127.0.0.1:9")
        self.metrics_texts = list(metrics_texts)
        self.tokens = tokens
        self.calls = 0
        self.fail_after = fail_after
        self.bodies: list[dict] = []

    def text(self, path: str, timeout: float) -> str:
        assert path == "/metrics"
        return self.metrics_texts.pop(0)

    def json(self, method, path, body, timeout):
        assert (method, path) == ("POST", "/v1/chat/completions")
        self.bodies.append(body)
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise HttpError("timeout", f"POST {path}: no answer within {timeout:g}s")
        max_tokens = body["max_tokens"]
        return {
            "choices": [{"message": {"role": "assistant", "content": " x" * max_tokens}}],
            "usage": {"completion_tokens": min(max_tokens, self.tokens)},
        }


# The Workload's fields a test sets (``prompts`` is the config's: the prompt set, already read)
WORKLOAD_FIELDS = {f.name for f in dataclasses.fields(Workload)} - {"prompts"}


def cfg(**kw) -> acceptance.AcceptanceConfig:
    base = dict(
        served_model_name="tiny-dsv3",
        prompts=acceptance.load_prompts(),
        max_requests=4,
        time_budget_s=30,
        warmup=0,
        per_kind=False,
    )
    base.update(kw)
    workload = Workload(**{k: base.pop(k) for k in WORKLOAD_FIELDS & set(base)})
    return acceptance.AcceptanceConfig(**base, workload=workload)


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


def test_chat_workload_sampled_and_acceptance_per_prompt_kind(tmp_path):
    """The operator's JSONL of chat messages; one /metrics window per kind gives each kind's
    acceptance (the counters carry no kind label)."""
    f = tmp_path / "prompts.jsonl"
    f.write_text(
        json.dumps({"kind": "code", "messages": [{"role": "user", "content": "sort a list"}]})
        + "\n"
        + json.dumps({"kind": "chat", "messages": [{"role": "user", "content": "hello"}]})
        + "\n"
    )
    zero = SPEC.replace("} 172.0", "} 0.0").replace("} 344.0", "} 0.0").replace("} 516.0", "} 0.0")
    zero = zero.replace("} 138.0", "} 0.0").replace("} 112.0", "} 0.0").replace("} 94.0", "} 0.0")
    more = SPEC.replace("} 172.0", "} 272.0").replace("} 344.0", "} 394.0")
    more = more.replace("} 516.0", "} 816.0").replace("} 138.0", "} 168.0")
    # repeat: zero -> SPEC; kind "chat": SPEC -> more; kind "code": more -> more (no drafts)
    c = ScriptedClient([zero, SPEC, SPEC, more, more, more])
    conf = cfg(prompts=acceptance.load_prompts(f), per_kind=True, temperature=0.7, top_p=0.9)
    res = acceptance.run_acceptance(c, conf)
    assert res.status == "ok", res.message
    kinds = res.to_dict()["by_kind"]
    assert sorted(kinds) == ["chat", "code"]
    assert kinds["chat"]["mean_acceptance_length"] == pytest.approx(1 + 50 / 100)
    assert kinds["chat"]["requests"] == conf.per_kind_requests
    assert kinds["code"]["mean_acceptance_length"] is None  # no drafts in its window
    sent = c.bodies[0]
    assert sent["messages"][0]["content"] in ("sort a list", "hello")
    assert (sent["temperature"], sent["top_p"], sent["ignore_eos"]) == (0.7, 0.9, True)


def test_shipped_transcripts_become_chat_messages():
    p = acceptance.load_prompts()[0]
    assert p.prompt.startswith("User: ")
    msgs = p.as_messages()
    assert msgs[0]["role"] == "user" and not msgs[0]["content"].startswith("User:")
    assert not msgs[0]["content"].endswith("Assistant:")


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
    p.write_text('{"kind": "chat", "messages": [{"content": "no role"}]}\n')
    with pytest.raises(ValueError, match=r"p.jsonl:1: bad prompt line \(messages"):
        acceptance.load_prompts(p)
