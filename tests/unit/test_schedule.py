"""The batch-size schedule (specdeploy.controller.schedule): derived from the advisor's model on
the recorded H200 sweep (tests/fixtures/vllm-0.20.2-moe), validated by vLLM's own rules."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from specdeploy.controller import advisor, schedule

ROOT = Path(__file__).resolve().parents[2]

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
    # beyond the largest measured level (64) the model is not extrapolated: that level's k
    assert schedule.k_at(d.schedule, 256) == schedule.k_at(d.schedule, 64)
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


# --------------------------------------------------------------------------- the knob


def _manifest():
    from specdeploy.node.patching.patches import Manifest

    return Manifest.load(None)


def _result(node: str, k: int, started: str, labels: dict[str, str] | None = None) -> dict:
    """A validation result as the deploy records it, with the recorded H200 sweep's figures."""
    runs = json.loads((MOE / "results.json").read_text())["runs"]
    base = {lv["concurrency"]: lv["output_tps"] for lv in runs["nospec"]["sweep"]["levels"]}
    rates = advisor.rates_from_metrics(str(MOE / "runs" / f"spec-k{k}" / "metrics.txt"), "moe-dsv3")
    levels = [
        {"concurrency": lv["concurrency"], "output_tps": lv["output_tps"],
         "baseline_tps": base[lv["concurrency"]]}
        for lv in runs[f"spec-k{k}"]["sweep"]["levels"]
    ]  # fmt: skip
    return {
        "run_id": f"{node}-k{k}-{started}", "node": node, "release": f"rel-k{k}",
        "served_model_name": "moe-dsv3", "started_at": started, "status": "fail",
        "labels": {"hardware": "NVIDIA H200", "parallel": "tp=1,pp=1", **(labels or {})},
        "acceptance": {"status": "ok", "per_position_acceptance": rates},
        "speed": {"speculative": True, "levels": levels},
    }  # fmt: skip


def test_the_first_version_with_dynamic_k_comes_from_the_manifest():
    versions = _manifest().versions()
    assert schedule.first_dynamic_version(versions) == "0.24.0"
    assert schedule.KEY not in versions["0.23.0"]["speculative_config_keys"]
    facts = versions["0.26.0"]["dynamic_k"]
    assert facts["rules"] == dict.fromkeys(facts["rules"], True)
    assert facts["k0_drafter_pass"] is True
    assert facts["data_parallel"].startswith("disabled")
    assert versions["0.24.0"]["dynamic_k"]["data_parallel"].startswith("no guard")


@pytest.mark.parametrize("version", ["0.20.2", "0.23.0"])
def test_a_schedule_on_a_version_without_dynamic_k_is_one_line_naming_the_first(version, capsys):
    from specdeploy.controller import inputs

    argv = ["--vllm-version", version, "--drafter-path", "/d",
            "--speculative-config-json", '{"method": "eagle3", "num_speculative_tokens": 3}',
            "--speculative-schedule-json", "[[1, 4, 0], [5, 256, 3]]"]  # fmt: skip
    assert inputs.main(argv) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    assert f"vLLM {version} does not have" in out[0] and "first version with it is 0.24.0" in out[0]
    # speculation off: the schedule does not matter
    assert inputs.main([*argv, "--no-speculation"]) == 0


def test_an_explicit_schedule_on_0_26_is_served_with_its_largest_k(capsys):
    from specdeploy.controller import inputs

    argv = ["--vllm-version", "0.26.0", "--drafter-path", "/d", "--json",
            "--speculative-config-json", '{"method": "eagle3", "num_speculative_tokens": 5}',
            "--speculative-schedule-json", "[[1, 4, 0], [5, 16, 3], [17, 256, 2]]"]  # fmt: skip
    assert inputs.main(argv) == 0
    sched = json.loads(capsys.readouterr().out)["vllm"]["schedule"]
    assert sched["mode"] == "explicit"
    assert sched["speculative_config"] == {
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": [[1, 4, 0], [5, 16, 3], [17, 256, 2]],
    }
    plain = [a for a in argv if a != "--json"]
    assert inputs.main([*plain[:-1], "[[1, 4, 0], [4, 256, 3]]"]) == 1
    assert "overlap at 4" in capsys.readouterr().out
    assert inputs.main([*plain, "--data-parallel-size", "2"]) == 1
    assert "ignores the schedule with data parallelism" in capsys.readouterr().out


def test_auto_derives_from_the_nodes_latest_static_sweep(tmp_path):
    from specdeploy.controller import history

    db = tmp_path / "history.sqlite"
    conn = history.connect(db)
    history.record(conn, _result("gpu1", 1, "2026-12-03T14:05:00Z"))
    history.record(conn, _result("gpu1", 3, "2026-12-03T14:09:00Z"))
    history.record(conn, _result("gpu2", 5, "2026-12-03T14:20:00Z"))  # another node
    # a run with a schedule in force is not a static sweep: auto skips it
    history.record(conn, _result("gpu1", 5, "2026-12-03T14:30:00Z", {"k_schedule": "[[1,4,0]]"}))
    conn.close()
    m = _manifest()
    kw = {"version": "0.26.0", "entry": m.entry("0.26.0"), "manifest_versions": m.versions(),
          "history_db": str(db), "node": "gpu1", "model": "moe-dsv3",
          "experts": 64, "top_k": 8}  # fmt: skip
    got = schedule.resolve("auto", **kw)
    assert got["mode"] == "auto" and got["source"]["run_id"] == "gpu1-k3-2026-12-03T14:09:00Z"
    expected = schedule.derive(_recorded(3), 256).schedule
    assert got["schedule"] == [list(r) for r in expected]
    assert "k=3 measured at c=1,4,16,64" in got["message"] and "NVIDIA H200" in got["message"]
    # the same history gives the same schedule (a second deploy plans the same release)
    assert schedule.resolve("auto", **kw) == got
    with pytest.raises(schedule.ScheduleError, match="no measured sweep with speculation of gpu3"):
        schedule.resolve("auto", **{**kw, "node": "gpu3"})


# --------------------------------------------------------------------------- the load mix


def test_one_k_for_a_load_mix_and_what_dynamic_k_would_gain():
    adv = _recorded(3)
    # equal shares (the default): losing 15-35% at c=1 and 4 outweighs the gain at 16 and 64
    mix = advisor.load_mix(adv)
    assert mix.k == 0 and mix.mean_speed_up == 1.0
    assert set(mix.shares) == {1, 4, 16, 64} and sum(mix.shares.values()) == pytest.approx(1)
    # the schedule gains where speculation pays, nothing where it is off anyway
    assert mix.best_per_level[1] == (0, 1.0) and mix.best_per_level[16][0] > 0
    assert mix.schedule_mean > 1.05
    # a day-heavy mix: one k pays; dynamic k then gains at low load (off there)
    day = advisor.load_mix(adv, {1: 0.1, 4: 0.1, 16: 0.4, 64: 0.4})
    assert day.k > 0 and day.mean_speed_up > 1.0
    assert day.per_level[1] < 0.8 and day.best_per_level[1] == (0, 1.0)
    assert day.schedule_mean > day.mean_speed_up
    for c in day.shares:  # the schedule is never predicted below the one k
        assert day.best_per_level[c][1] >= day.per_level[c]
    with pytest.raises(advisor.AdviceInputError, match=r"levels \[8\] were not measured"):
        advisor.load_mix(adv, {1: 0.5, 8: 0.5})
    with pytest.raises(advisor.AdviceInputError, match="positive sum"):
        advisor.load_mix(adv, {1: float("nan")})


def test_advisor_cli_prints_the_mix(capsys):
    argv = [
        "--metrics", str(MOE / "runs" / "spec-k3" / "metrics.txt"), "--model", "moe-dsv3",
        "--spec-tps", "1=362,4=1184,16=4234,64=9732",
        "--baseline-tps", "1=551,4=1387,16=3176,64=8845", "--experts", "64", "--top-k", "8",
    ]  # fmt: skip
    assert advisor.main([*argv, "--load-profile", '{"16": 1, "64": 1}']) == 0
    out = capsys.readouterr().out
    assert "load profile (share of time): c=16 50%, c=64 50%" in out
    assert re.search(r"one k for this mix \(a vLLM without dynamic k\): k=\d", out)
    assert advisor.main([*argv, "--load-profile", "1=x"]) == 2
    assert "--load-profile '1=x'" in capsys.readouterr().err
    assert advisor.main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["load_mix"]["k"] == 0


def test_the_acceptance_check_runs_where_the_schedule_drafts_its_largest_k(capsys):
    assert schedule.acceptance_concurrency([(1, 5, 0), (6, 20, 4), (21, 256, 2)]) == 6
    assert schedule.acceptance_concurrency([(1, 256, 3)]) == 1
    assert schedule.main(["acceptance-concurrency", "[[1, 5, 0], [6, 256, 4]]"]) == 0
    assert capsys.readouterr().out.strip() == "6"
    assert schedule.main(["acceptance-concurrency", '""']) == 0  # a static k: 1
    assert capsys.readouterr().out.strip() == "1"
    assert schedule.main(["acceptance-concurrency", "[[2, 5, 0]]"]) == 2


MOE256 = ROOT / "tests" / "fixtures" / "vllm-0.20.2-moe256"


def test_between_two_measured_levels_only_their_ks_and_one_switch():
    """The 256-expert H200 sweep (vLLM 0.20.2, deployed k=3): choosing among every k at every
    batch size from the model gave [[1,13,0],[14,31,2],[32,32,3],[33,38,2],[39,63,1],[64,..,3]]
    (k=1 at 39-63, where k=3 measured best at both 32 and 64). A batch size between two
    measured levels gets one of those two levels' ks, switching once."""
    runs = json.loads((MOE256 / "results.json").read_text())["runs"]

    def tps(tag: str) -> dict[int, float]:
        return {lv["concurrency"]: lv["output_tps"] for lv in runs[tag]["sweep"]["levels"]}

    rates = advisor.rates_from_metrics(str(MOE256 / "runs" / "spec-k3" / "metrics.txt"), "moe-dsv3")
    adv = advisor.advise(rates, tps("spec-k3"), tps("nospec"), n_experts=256, top_k=8, k_max=5)
    d = schedule.derive(adv, 1024)
    levels = sorted(adv.levels)
    at = {c: schedule.k_at(d.schedule, c) for c in range(1, 1025)}
    for low, high in itertools.pairwise(levels):
        between = [at[c] for c in range(low, high + 1)]
        assert set(between) <= {at[low], at[high]}, (low, high, between)
        switches = sum(1 for a, b in itertools.pairwise(between) if a != b)
        assert switches <= 1, (low, high, between)
    # k=3 was measured best at 32 and 64 (1.32x, 1.72x): one range from 32 on
    assert at[32] == at[64] == 3 and d.schedule[-1] == (32, 1024, 3), d.schedule
    assert at[1] == at[8] == 0  # everything lost at c <= 8
