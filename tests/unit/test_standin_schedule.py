"""The stand-in honours a batch-size schedule (num_speculative_tokens_per_batch_size): its
engine picks k per step from the running batch, as vLLM >= 0.24.0's scheduler does; checked on
its own simulated clock, and its validation is vLLM 0.26.0's own file from the real wheel."""

from __future__ import annotations

import pytest
import standin_engine
import standin_timing
import standin_vllm

from specdeploy.controller import advisor, schedule, wheels

LEVELS = (1, 2, 4, 8, 16, 32, 64)
RATES = standin_timing.DEFAULT_ACCEPTANCE


def tps(c: int, k: int = 0, sched: list[list[int]] | None = None) -> float:
    if sched is not None:
        step = standin_engine.step_function_k({}, RATES)
        lookup = standin_engine.schedule_lookup(sched, 256)
        kmax = max(e[2] for e in sched)
        return standin_engine.closed_loop(
            step, kmax, RATES[:kmax], c, 12 * c, n_tokens=64, k_for=lookup
        )
    step = standin_engine.step_function({}, k, RATES[:k])
    return standin_engine.closed_loop(step, k, RATES[:k], c, 12 * c, n_tokens=64)


def test_a_schedule_derived_from_a_static_sweep_does_not_lose_at_any_level():
    nospec = {c: tps(c) for c in LEVELS}
    static = {c: tps(c, 3) for c in LEVELS}
    assert static[1] / nospec[1] < 0.9  # the static k=3 loses at c=1 on the fitted profile
    adv = advisor.advise(RATES[:3], static, nospec, n_experts=64, top_k=8, fixed_share=0.0)
    sched = [list(r) for r in schedule.derive(adv, 256).schedule]
    assert sched[0][2] == 0  # off at batch 1
    for c in LEVELS:
        su = tps(c, sched=sched) / nospec[c]
        assert su >= 0.97, (c, su, sched)
        if c >= 16:  # where speculation pays, the schedule is within 3% of the best static k
            best = max(tps(c, k) / nospec[c] for k in (1, 2, 3))
            assert su >= best * 0.97, (c, su, best, sched)


def test_the_k_per_step_follows_the_running_batch():
    sched = [[1, 2, 0], [3, 8, 3], [9, 256, 1]]
    look = standin_engine.schedule_lookup(sched, 64)
    assert [look(b) for b in (1, 2, 3, 8, 9, 64, 500)] == [0, 0, 3, 3, 1, 1, 1]
    # gaps carry the previous k forward, as vLLM's dense lookup does
    gap = standin_engine.schedule_lookup([[1, 4, 0], [10, 20, 2]], 32)
    assert [gap(b) for b in (4, 5, 9, 10, 21, 32)] == [0, 0, 0, 2, 2, 2]
    b = standin_engine.Batcher(standin_engine.step_function_k({}, RATES), 3, RATES[:3], look)
    b.running = [standin_engine.Request(50, __import__("random").Random(i)) for i in range(2)]
    _, out = b.step()
    assert b.last_k == 0 and all(gained == 1 and acc == 0 for _, gained, acc in out)


def test_a_k0_step_costs_the_drafter_pass_only():
    t = standin_timing.DEFAULT
    assert t.spec_step_s(1, 0) == pytest.approx(t.nospec_step_s(1) + t.k0_s)
    assert t.spec_step_s(1, 0) / t.nospec_step_s(1) < 1.03


def test_validation_is_vllm_0_26s_own(tmp_path):
    member = "vllm/v1/spec_decode/dynamic/utils.py"
    target = tmp_path / member
    target.parent.mkdir(parents=True)
    target.write_bytes(wheels.read_member("0.26.0", member))
    root = tmp_path / "vllm"
    assert standin_vllm.validate_schedule(root, [[1, 4, 0], [5, 256, 3]]) is None
    assert "must start at 1" in standin_vllm.validate_schedule(root, [[2, 4, 1]])
    assert "non-overlapping" in standin_vllm.validate_schedule(root, [[1, 4, 1], [4, 8, 2]])
    # the toolkit's own validation refuses what the wheel refuses
    for bad in ([[2, 4, 1]], [[1, 4, 1], [4, 8, 2]], [[1, 4, -1]]):
        assert standin_vllm.validate_schedule(root, bad)
        with pytest.raises(schedule.ScheduleError):
            schedule.validate(bad)
