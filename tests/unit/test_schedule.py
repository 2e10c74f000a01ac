"""The batch-size schedule (specdeploy.controller.schedule): derived from the advisor's model on
the recorded H200 sweep (tests/fixtures/vllm-0.20.2-moe), validated by vLLM's own rules."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from specdeploy.controller import advisor, schedule  # noqa: E402

MOE = ROOT / "tests" / "fixtures" / "vllm-0.20.2-moe"


def _recorded(deployed: int) -> advisor.Advice:
    runs = json.loads((MOE / "results.json").read_text())["runs"]

    def tps(tag: str) -> dict[int, float]:
        return {lv["concurrency"]: lv["output_tps"] for lv in runs[tag]["sweep"]["levels"]}

    rates = advisor.rates_from_metrics(
        str(MOE / "runs" / f"spec-k{deployed}" / "metrics.txt"), "moe-dsv3"
    )
    return advisor.advise(rates, tps(f"spec-k{deployed}"), tps("nospec"), n_experts=64, top_k=8)


@pytest.mark.parametrize("deployed", [1, 3, 5])
def test_derived_from_the_recorded_sweep_is_off_at_low_load_and_speculates_at_16(deployed):
    adv = _recorded(deployed)
    d = schedule.derive(adv, 256)
    # a valid vLLM schedule covering every batch size up to max_num_seqs
    assert schedule.validate([list(r) for r in d.schedule]) == d.schedule
    assert d.schedule[0][0] == 1 and d.schedule[-1][1] == 256
    # measured on the H200: every k loses at c = 1 and 4, every k pays at c = 16
    assert schedule.k_at(d.schedule, 1) == 0 and schedule.k_at(d.schedule, 4) == 0
    assert schedule.k_at(d.schedule, 16) > 0
    # at a measured level the schedule's k is the advisor's recommendation there
    for c in adv.levels:
        assert schedule.k_at(d.schedule, c) == adv.recommended(c) or (
            adv.levels[c][adv.recommended(c) - 1].speed_up < 1 + schedule.MARGIN
        )


def test_boundaries_fall_between_the_measured_levels_where_the_model_says():
    adv = _recorded(3)
    d = schedule.derive(adv, 64)
    first_on = next(s for s, _, k in d.schedule if k > 0)
    assert 4 < first_on < 16  # between the last losing and the first paying measured level
    # the model's own prediction crosses off + margin there
    k = schedule.k_at(d.schedule, first_on)
    assert adv.speed_up_at(first_on, k) >= 1 + schedule.MARGIN
    assert max(adv.speed_up_at(first_on - 1, kk) for kk in range(1, 6)) < 1 + schedule.MARGIN


def test_speed_up_at_a_measured_level_is_the_table_cell():
    adv = _recorded(3)
    for c, preds in adv.levels.items():
        for p in preds:
            assert adv.speed_up_at(c, p.k) == p.speed_up


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[[2, 8, 3]]", "must start at 1"),
        ("[[1, 8, 3], [8, 16, 2]]", "overlap at 8"),
        ("[[1, 8, -1]]", "must be >= 0"),
        ("[[1, 8, 0]]", "speculation off"),
        ("[[1, 8]]", "is not [start, end, k]"),
        ("[[1, 8, 2.5]]", "is not [start, end, k]"),
        ("[[9, 16, 3], [1, 8, 0]]", "sorted"),
        ("[]", "non-empty list"),
        ("nope", "want off, auto or a list"),
        ("[[4, 2, 1]]", "1 <= start <= end"),
    ],
)
def test_validate_refuses_what_vllm_refuses(value, message):
    with pytest.raises(schedule.ScheduleError, match=re.escape(message)):
        schedule.validate(value)


def test_k_at_follows_vllms_lookup():
    s = [(1, 4, 0), (5, 16, 3), (32, 128, 2)]
    # gap 17-31 carries 3 forward; beyond 128 the last k holds (vLLM's dense lookup)
    assert [schedule.k_at(s, b) for b in (1, 4, 5, 16, 17, 31, 32, 500)] == [0, 0, 3, 3, 3, 3, 2, 2]
    cfg = schedule.speculative_config({"method": "eagle3", "num_speculative_tokens": 9}, s)
    assert cfg["num_speculative_tokens"] == 3
    assert cfg["num_speculative_tokens_per_batch_size"] == [[1, 4, 0], [5, 16, 3], [32, 128, 2]]
    assert schedule.describe(s) == "batch 1-4 off, 5-16 k=3, 32-128 k=2"


def test_cli_prints_the_vllm_list_and_json(capsys):
    argv = [
        "--metrics", str(MOE / "runs" / "spec-k3" / "metrics.txt"), "--model", "moe-dsv3",
        "--spec-tps", "1=362,4=1184,16=4234,64=9732",
        "--baseline-tps", "1=551,4=1387,16=3176,64=8845",
        "--experts", "64", "--top-k", "8", "--max-num-seqs", "128",
    ]  # fmt: skip
    assert schedule.main(argv) == 0
    first = capsys.readouterr().out.splitlines()[0]
    parsed = schedule.validate(first)
    assert parsed[-1][1] == 128
    assert schedule.main([*argv, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["num_speculative_tokens"] == max(k for _, _, k in parsed)
    assert schedule.main([*argv[:-2], "--max-num-seqs", "0"]) == 2
    assert "max_num_seqs 0" in capsys.readouterr().err
