"""The stand-in's batching and step-time model, on its own simulated clock (no wall clock, no
server): what the recorded GPU curves say must hold for the fitted default, and the profiles
the speed tests use do what they are named for."""

from __future__ import annotations

import json
from pathlib import Path

import fit_profile
import pytest
import standin_engine
import standin_timing
from standin_timing import DEFAULT, distinct_experts

ROOT = Path(__file__).resolve().parents[2]

RECORDED = ROOT / "tests" / "fixtures" / "moe-speedup-h200"
PROFILES = ROOT / "tests" / "standin" / "profiles"


def speed_up_closed_loop(prof: dict, k: int, rates: list[float], c: int) -> float:
    spec = standin_engine.step_function(prof, k, rates)
    base = standin_engine.step_function(prof, 0, [])
    n = max(64, 4 * c)
    return standin_engine.closed_loop(spec, k, rates, c, n) / standin_engine.closed_loop(
        base, 0, [], c, n
    )


def test_distinct_experts_of_a_verification():
    # 64 routed experts, top-8: one token reads 8, a k=3 verification of one request 26.5,
    # a batch of 64 tokens practically all of them.
    assert distinct_experts(64, 8, 1) == pytest.approx(8.0)
    assert distinct_experts(64, 8, 4) == pytest.approx(26.5, abs=0.05)
    assert distinct_experts(64, 8, 64) == pytest.approx(64.0, abs=0.02)
    assert distinct_experts(0, 8, 10) == 0.0


def test_default_is_the_fit_of_the_recordings():
    fitted, err = fit_profile.fit(RECORDED)
    for key, value in fitted.to_dict().items():
        assert getattr(DEFAULT, key) == pytest.approx(value, rel=0.02, abs=1e-6), key
    assert err < 0.4


def test_default_reproduces_the_recorded_curve():
    nospec, spec, rates = fit_profile.load(RECORDED)
    for c, tps in nospec.items():  # throughput depends on concurrency like the GPU's
        assert DEFAULT.output_tps(c) == pytest.approx(tps, rel=0.15)
    # k=3 (mean acceptance length 2.9): loses at c=1-2, pays from c=8 on (recorded 1.24-1.50).
    su3 = {c: DEFAULT.speed_up(c, 3, rates[3]) for c in (1, 2, 4, 8, 16, 32, 64)}
    assert su3[1] < 0.9 and su3[2] < 0.9
    assert all(su3[c] > 1.2 for c in (8, 16, 32, 64))
    for c, tps in spec[3].items():
        assert su3[c] == pytest.approx(tps / nospec[c], rel=0.25)
    # The low-acceptance drafter (recorded 0.32x/0.33x/0.48x/0.58x at c=1/4/16/64, k=3, not
    # part of the fit): slower everywhere.
    low = [0.051, 0.004, 0.001]
    assert [round(DEFAULT.speed_up(c, 3, low), 1) for c in (1, 4, 16, 64)] == [0.3, 0.4, 0.5, 0.5]


def test_the_batching_engine_matches_the_model():
    """The Batcher run closed-loop on its simulated clock (what the server does in real time)
    gives the modelled steady-state throughput."""
    prof: dict = {}
    rates = [0.8, 0.62, 0.46]
    for c in (1, 4, 16):
        for k, r in ((0, []), (3, rates)):
            step = standin_engine.step_function(prof, k, r)
            tps = standin_engine.closed_loop(step, k, r, c, 40 * c)
            assert tps == pytest.approx(DEFAULT.output_tps(c, k, r), rel=0.05)


def test_fast_at_c1_slow_at_c16_profile():
    prof = json.loads((PROFILES / "fast-c1-slow-c16.json").read_text())
    rates = prof["acceptance"]
    assert speed_up_closed_loop(prof, 3, rates, 1) > 1.4
    assert speed_up_closed_loop(prof, 3, rates, 16) < 0.7


def test_tokens_per_s_scales_the_curve_not_its_shape():
    t = standin_timing.from_profile({"tokens_per_s": 4000.0})
    assert t.output_tps(1) == pytest.approx(4000.0)
    for c in (1, 16):
        assert t.speed_up(c, 3, [0.8, 0.6, 0.4]) == pytest.approx(
            DEFAULT.speed_up(c, 3, [0.8, 0.6, 0.4])
        )
    with pytest.raises(ValueError, match="unknown timing keys"):
        standin_timing.from_profile({"timing": {"expert_ms": 1}})


def test_legacy_profile_keeps_the_per_request_model():
    prof = json.loads((PROFILES / "pass.json").read_text())
    rates = prof["acceptance"]
    # Each request decodes at tokens_per_s whatever the concurrency; spec step = 1.25 steps.
    for c in (1, 16):
        base = standin_engine.closed_loop(standin_engine.step_function(prof, 0, []), 0, [], c, 64)
        assert base == pytest.approx(400.0 * c, rel=1e-6)
        assert speed_up_closed_loop(prof, 3, rates, c) == pytest.approx(3.0 / 1.25, rel=0.08)


def test_a_step_produces_one_plus_accepted_tokens_and_never_overshoots():
    b = standin_engine.Batcher(lambda n: 0.001, 3, [0.9, 0.8, 0.7])
    reqs = [
        standin_engine.Request(n, standin_engine.random.Random(i)) for i, n in enumerate((5, 17))
    ]
    b.running.extend(reqs)
    total = 0
    while b.running:
        _, out = b.step()
        for _r, gained, acc in out:
            assert gained == acc + 1 and 0 <= acc <= 3
            total += gained
    assert [r.produced for r in reqs] == [5, 17] and total == 22
