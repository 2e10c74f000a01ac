"""Metrics parsing and arithmetic on REAL vLLM 0.20.2 /metrics text (tests/fixtures/vllm-0.20.2)."""

from __future__ import annotations

import math
import re

import pytest
from recorded_metrics import FIX, NOSPEC, RANDOM, SPEC

from specdeploy.node.validation import metrics

MODEL = "tiny-dsv3"


def spec_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("vllm:spec_decode")]


def relabel_engine(text: str, engine: str, scale: float = 1.0) -> str:
    """A second engine: the real spec-decode series with engine="N" and scaled values."""
    out = []
    for ln in spec_lines(text):
        name_labels, value = ln.rsplit(" ", 1)
        name_labels = name_labels.replace('engine="0"', f'engine="{engine}"')
        v = float(value) if "_created" in name_labels else float(value) * scale
        out.append(f"{name_labels} {v}")
    return "\n".join(out) + "\n"


def test_real_spec_counters():
    s = metrics.snapshot(SPEC, MODEL)
    assert s.present
    assert (s.num_drafts, s.num_draft_tokens, s.num_accepted_tokens) == (172, 516, 344)
    assert s.accepted_per_pos == (138, 112, 94)
    assert list(s.engines) == ["0"]
    assert s.engines["0"].created == pytest.approx(1.796235557652282e09)


def test_derived_figures_use_vllm_formulas():
    zero = metrics.snapshot(SPEC.replace(MODEL, "other"), MODEL)  # absent -> zero counters
    assert not zero.present
    d = metrics.delta(zero, metrics.snapshot(SPEC, MODEL), elapsed_s=10.0)
    assert d.mean_acceptance_length == pytest.approx(1 + 344 / 172)
    assert d.draft_acceptance_rate == pytest.approx(344 / 516)
    assert d.per_position_rate == pytest.approx([138 / 172, 112 / 172, 94 / 172])
    assert d.accepted_throughput == pytest.approx(34.4)


def test_log_line_equals_vllms_own_for_the_same_counters():
    """vLLM logged one SpecDecoding line covering every request of the run (counters from 0),
    so the final /metrics counters are exactly what that line was computed from."""
    log = (FIX / "server-spec.log").read_text()
    lines = [ln for ln in log.splitlines() if "SpecDecoding metrics:" in ln]
    assert len(lines) == 1
    real = metrics.parse_vllm_log_line(lines[0])
    assert real is not None
    s = metrics.snapshot(SPEC, MODEL)
    assert (real["accepted"], real["drafted"]) == (s.num_accepted_tokens, s.num_draft_tokens)
    # vLLM's interval length is not logged; recover it from its drafted throughput.
    elapsed = s.num_draft_tokens / real["drafted_throughput"]
    d = metrics.SpecDelta(
        s.num_drafts, s.num_draft_tokens, s.num_accepted_tokens, s.accepted_per_pos, elapsed
    )
    ours = metrics.format_vllm_log_line(d)
    assert ours == real["message"]
    assert ours.startswith("SpecDecoding metrics: Mean acceptance length: 3.00,")
    assert "Per-position acceptance rate: 0.802, 0.651, 0.547" in ours


def test_nospec_has_no_spec_counters():
    assert not spec_lines(NOSPEC)
    s = metrics.snapshot(NOSPEC, MODEL)
    assert not s.present and s.num_drafts == 0 and s.accepted_per_pos == ()


def test_random_drafter_zero_accepted():
    s = metrics.snapshot(RANDOM, MODEL)
    assert s.num_drafts == 504 and s.num_draft_tokens == 1512 and s.num_accepted_tokens == 0
    zero = metrics.snapshot(NOSPEC, MODEL)
    d = metrics.delta(zero, s, elapsed_s=1)
    assert d.mean_acceptance_length == 1.0
    assert d.draft_acceptance_rate == 0.0
    assert d.per_position_rate == [0.0, 0.0, 0.0]


def test_multiple_engines_are_summed():
    two = SPEC + relabel_engine(SPEC, "1", scale=0.5)
    s = metrics.snapshot(two, MODEL)
    assert sorted(s.engines) == ["0", "1"]
    assert s.num_drafts == 172 + 86
    assert s.num_accepted_tokens == 344 + 172
    assert s.accepted_per_pos == (138 + 69, 112 + 56, 94 + 47)


def test_labels_in_any_order_and_whitespace():
    def shuffle(m: re.Match[str]) -> str:
        labels = m.group(1).split(",")
        return "{ " + " , ".join(reversed(labels)) + " }"

    shuffled = re.sub(r"\{([^}]*)\}", shuffle, SPEC)
    assert 'position="0" , model_name="tiny-dsv3" , engine="0"' in shuffled
    a, b = metrics.snapshot(SPEC, MODEL), metrics.snapshot(shuffled, MODEL)
    assert (a.num_drafts, a.num_accepted_tokens, a.accepted_per_pos) == (
        b.num_drafts,
        b.num_accepted_tokens,
        b.accepted_per_pos,
    )


def test_escaped_label_values_and_model_filter():
    odd = 'we"ird\\name\nx'
    esc = odd.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    other = relabel_engine(SPEC, "0").replace(f'model_name="{MODEL}"', f'model_name="{esc}"')
    text = SPEC + other.replace('engine="0"', 'engine="0"')
    s = metrics.snapshot(text, odd)
    assert s.present and s.num_drafts == 172
    assert MODEL in s.other_models
    # The real model is not mixed with the other one.
    assert metrics.snapshot(text, MODEL).num_drafts == 172
    # model_name=None takes every model.
    assert metrics.snapshot(text, None).num_drafts == 344


def test_created_series_are_not_counted():
    samples = metrics.parse_exposition(SPEC)
    created = [s for s in samples if s.name == "vllm:spec_decode_num_drafts_created"]
    assert created and created[0].value > 1e9
    assert metrics.snapshot(SPEC, MODEL).num_drafts == 172


def test_special_values_comments_timestamps():
    text = (
        "# HELP x a thing\n# TYPE x gauge\n"
        'x{le="+Inf"} +Inf\nx{le="1"} -Inf\ny NaN\nz 3 1700000000000\n\n# EOF\n'
    )
    s = metrics.parse_exposition(text)
    assert math.isinf(s[0].value) and s[0].labels == {"le": "+Inf"}
    assert s[1].value == -math.inf
    assert math.isnan(s[2].value)
    assert s[3].value == 3 and s[3].timestamp_ms == 1700000000000


def test_real_texts_parse_completely():
    for text in (SPEC, NOSPEC, RANDOM):
        samples = metrics.parse_exposition(text)
        n_lines = sum(1 for ln in text.splitlines() if ln.strip() and not ln.startswith("#"))
        assert len(samples) == n_lines


@pytest.mark.parametrize(
    "bad", ['x{a="1" 2', "x{a=1} 2", "x", 'x{a="1"} notanumber', "9x 1", 'x{a="1",a="2"} 1']
)
def test_malformed_lines_raise(bad):
    with pytest.raises(metrics.MetricsParseError):
        metrics.parse_exposition(bad)


def test_missing_counter_is_an_error():
    partial = "\n".join(
        ln
        for ln in SPEC.splitlines()
        if not ln.startswith("vllm:spec_decode_num_accepted_tokens_total")
    )
    with pytest.raises(metrics.MetricsError, match="num_accepted_tokens_total"):
        metrics.snapshot(partial, MODEL)


def test_zero_drafts_gives_no_figures_not_nonsense():
    s = metrics.snapshot(SPEC, MODEL)
    d = metrics.delta(s, s, elapsed_s=5)
    assert d.num_drafts == 0
    assert d.mean_acceptance_length is None
    assert d.draft_acceptance_rate is None
    assert d.per_position_rate is None
    assert metrics.format_vllm_log_line(d) is None


def test_counter_reset_detected():
    before = metrics.snapshot(SPEC, MODEL)
    after = metrics.snapshot(RANDOM, MODEL)  # drafts went up, accepted went down
    with pytest.raises(metrics.CounterReset) as e:
        metrics.delta(before, after)
    assert "num_accepted_tokens" in str(e.value)


def test_counter_reset_detected_by_created_timestamp():
    before = metrics.snapshot(SPEC, MODEL)
    grown = SPEC.replace("} 172.0", "} 500.0").replace(
        "1.796235557652282e+09", "1.8e+09"
    )  # counted past the old value after a restart
    after = metrics.snapshot(grown, MODEL)
    assert after.num_drafts == 500
    with pytest.raises(metrics.CounterReset, match="re-created"):
        metrics.delta(before, after)


def test_engine_disappearing_is_a_reset():
    two = metrics.snapshot(SPEC + relabel_engine(SPEC, "1"), MODEL)
    one = metrics.snapshot(SPEC, MODEL)
    with pytest.raises(metrics.CounterReset, match="disappeared"):
        metrics.delta(two, one)


def test_spec_counters_disappearing_is_a_reset():
    with pytest.raises(metrics.CounterReset):
        metrics.delta(metrics.snapshot(SPEC, MODEL), metrics.snapshot(NOSPEC, MODEL))


def test_sum_deltas():
    a = metrics.SpecDelta(10, 30, 15, (8, 5, 2), 1.0)
    b = metrics.SpecDelta(10, 30, 3, (2, 1), 2.0)
    t = metrics.sum_deltas([a, b])
    assert (t.num_drafts, t.num_accepted_tokens, t.accepted_per_pos, t.elapsed_s) == (
        20,
        18,
        (10, 6, 2),
        3.0,
    )
    assert t.mean_acceptance_length == pytest.approx(1.9)
