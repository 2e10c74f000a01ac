"""The k advisor: on the stand-in's own model (its batching engine on the simulated clock) and
against the real H200 recordings (tests/fixtures/moe-speedup-h200)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import fit_profile
import pytest
import standin_engine
import standin_timing

from specdeploy.controller import advisor, history

ROOT = Path(__file__).resolve().parents[2]

RECORDED = ROOT / "tests" / "fixtures" / "moe-speedup-h200"
FIX = ROOT / "tests" / "fixtures" / "vllm-0.20.2"
LEVELS = (1, 2, 4, 8, 16, 32, 64)


def standin_tps(k: int, rates: list[float], c: int) -> float:
    """The stand-in's engine (default profile) on its simulated clock."""
    step = standin_engine.step_function({}, k, rates[:k])
    return standin_engine.closed_loop(step, k, rates[:k], c, 12 * c, n_tokens=64)


def test_on_the_standin_the_recommended_k_changes_with_the_level():
    rates = standin_timing.DEFAULT_ACCEPTANCE
    deployed = 3
    spec = {c: standin_tps(deployed, rates, c) for c in LEVELS}
    nospec = {c: standin_tps(0, rates, c) for c in LEVELS}
    # The stand-in's timing puts all of the speculative overhead on the drafter steps:
    # fixed share 0 is what its profile implies (the default 0.25 is the GPU's, below).
    adv = advisor.advise(
        rates[:deployed], spec, nospec, n_experts=64, top_k=8, k_max=5, fixed_share=0.0
    )
    table = advisor.render(adv)
    # What the stand-in's profile implies for the measured positions (k <= 3): its own
    # speed-ups, from separate simulated runs at each k.
    for c in LEVELS:
        truth = {k: standin_tps(k, rates, c) / nospec[c] for k in (1, 2, 3)}
        preds = {p.k: p.speed_up for p in adv.levels[c] if p.k <= 3}
        for k in (1, 2, 3):
            assert preds[k] == pytest.approx(truth[k], rel=0.05), (c, k, table)
        # The recommendation is the stand-in's best k (or off), up to near ties (< 3%).
        rec = adv.recommended(c)
        best = max(truth.values())
        if rec == 0:
            assert best < 1.03, (c, table)
        elif rec <= 3:
            assert truth[rec] >= best * 0.97 and truth[rec] > 0.97, (c, table)
    recs = [adv.recommended(c) for c in LEVELS]
    assert recs[0] == 0 and len(set(recs)) >= 3, table  # off at c=1, then k varies
    assert "off" in table and "~" in table and "*" in table
    default = advisor.advise(rates[:deployed], spec, nospec, n_experts=64, top_k=8, k_max=5)
    recs = [default.recommended(c) for c in LEVELS]
    assert recs[0] == 0 and len(set(recs)) >= 2, advisor.render(default)


def test_against_the_h200_recordings():
    """From each deployed k's run, predict the other k's recorded speed-ups."""
    nospec, spec, rates = fit_profile.load(RECORDED)
    errors = []
    for deployed in (1, 3, 5):
        adv = advisor.advise(rates[deployed], spec[deployed], nospec, n_experts=64, top_k=8)
        for k in (1, 3, 5):
            if k == deployed:
                continue
            for c, tps in spec[k].items():
                if c not in adv.levels:  # the deployed k's run did not measure this level
                    continue
                pred = adv.levels[c][k - 1]
                assert pred.extrapolated == (k > deployed)
                errors.append(abs(math.log(pred.speed_up / (tps / nospec[c]))))
    # Within the recordings' run-to-run spread (15-25% at low concurrency) on average.
    assert statistics.mean(errors) < 0.15 and max(errors) < 0.40
    assert advisor.FIXED_STEPS == 1.5
    adv = advisor.advise(rates[3], spec[3], nospec, n_experts=64, top_k=8)
    assert [p.speed_up for p in adv.levels[64] if p.measured] == pytest.approx(
        [spec[3][64] / nospec[64]]
    )


def test_moe_verification_cost_changes_the_advice():
    """The same measurements read as a dense target predict more for larger k at c=1: the
    distinct experts of k+1 tokens are what makes a long verification expensive."""
    nospec, spec, rates = fit_profile.load(RECORDED)
    moe = advisor.advise(rates[3], spec[3], nospec, n_experts=64, top_k=8, k_max=5)
    dense = advisor.advise(rates[3], spec[3], nospec, k_max=5)
    assert moe.levels[1][4].speed_up < dense.levels[1][4].speed_up
    assert "dense target assumed" in dense.notes[0]


def test_cli_from_metrics_and_throughput_files(tmp_path, capsys):
    spec = {"schema": "specdeploy.throughput/1", "speculative": True,
            "levels": {"1": {"output_tps": 420.0}, "16": {"output_tps": 4300.0}}}  # fmt: skip
    base = {"schema": "specdeploy.throughput/1", "speculative": False,
            "levels": {"1": {"output_tps": 500.0}, "16": {"output_tps": 3300.0}}}  # fmt: skip
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "base.json").write_text(json.dumps(base))
    argv = ["--metrics", str(FIX / "metrics-spec.txt"), "--model", "tiny-dsv3",
            "--spec-file", str(tmp_path / "spec.json"), "--experts", "64",
            "--top-k", "8"]  # fmt: skip
    assert advisor.main([*argv, "--baseline-file", str(tmp_path / "base.json"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["schema"] == "specdeploy.advice/1" and out["deployed_k"] == 3
    assert out["per_position_acceptance"] == pytest.approx(
        [138 / 172, 112 / 172, 94 / 172], abs=1e-3
    )
    assert [lv["concurrency"] for lv in out["levels"]] == [1, 16]
    # The measured k reproduces the measured speed-up.
    c16 = out["levels"][1]["predictions"][2]
    assert c16["measured"] and c16["speed_up"] == pytest.approx(4300 / 3300, abs=1e-3)
    # A baseline file measured with speculation is refused, and so is a missing baseline.
    assert advisor.main([*argv, "--baseline-file", str(tmp_path / "spec.json")]) == 2
    assert "measured with speculation on" in capsys.readouterr().err
    assert advisor.main(argv) == 2
    assert "give --baseline-file" in capsys.readouterr().err


def test_cli_baseline_from_the_history(tmp_path, capsys):
    db = tmp_path / "h.sqlite"
    conn = history.connect(db)
    history.record(conn, {
        "run_id": "b", "node": "n1", "release": "nospec", "started_at": "2026-12-01T00:00:00Z",
        "status": "pass", "served_model_name": "m", "labels": {"parallel": "tp=8,pp=1"},
        "acceptance": {"status": "ok", "mode": "no_spec_baseline"},
        "speed": {"speculative": False, "levels": [{"concurrency": 8, "output_tps": 1900.0}]},
    })  # fmt: skip
    conn.close()
    argv = ["--per-position", "0.8,0.6,0.45", "--spec-tps", "8=2400", "--history", str(db),
            "--node", "n1", "--model", "m", "--parallel", "tp=8,pp=1", "--experts", "64",
            "--top-k", "8"]  # fmt: skip
    assert advisor.main(argv) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[2].split()[0] == "8" and "1.26*" in out


def test_per_position_acceptance_unavailable(tmp_path, capsys):
    text = "\n".join(
        ln for ln in (FIX / "metrics-spec.txt").read_text().splitlines() if "per_pos" not in ln
    )
    m = tmp_path / "metrics.txt"
    m.write_text(text + "\n")
    rc = advisor.main(["--metrics", str(m), "--spec-tps", "1=400", "--baseline-tps", "1=500"])
    err = capsys.readouterr().err
    assert rc == 2 and "per-position acceptance unavailable" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--per-position", "0.8,x", "--spec-tps", "1=4", "--baseline-tps", "1=5"], "numbers"),
        (["--per-position", "1.5", "--spec-tps", "1=4", "--baseline-tps", "1=5"], "fractions"),
        (["--per-position", "0.8", "--spec-tps", "2=4", "--baseline-tps", "1=5"], "no level"),
        (["--per-position", "0.8", "--spec-tps", "1=-4", "--baseline-tps", "1=5"], "LEVEL=TPS"),
        (["--per-position", "0.8", "--spec-tps", "1=4", "--baseline-tps", "1=5",
          "--experts", "8"], "give both"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line(capsys, argv, message):
    assert advisor.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_against_the_toolkits_own_gpu_run():
    """The fresh recording of the toolkit's unit and load generator on the H200
    (tests/fixtures/vllm-0.20.2-moe): per-position acceptance from each run's /metrics text as
    `make advise` reads it, throughput per level from its sweep; each deployed k predicts the
    other k's measured speed-ups."""
    moe = ROOT / "tests" / "fixtures" / "vllm-0.20.2-moe"
    runs = json.loads((moe / "results.json").read_text())["runs"]

    def tps(tag: str) -> dict[int, float]:
        return {lv["concurrency"]: lv["output_tps"] for lv in runs[tag]["sweep"]["levels"]}

    nospec = tps("nospec")
    spec = {k: tps(f"spec-k{k}") for k in (1, 3, 5)}
    errors = []
    for deployed in (1, 3, 5):
        rates = advisor.rates_from_metrics(str(moe / "runs" / f"spec-k{deployed}" / "metrics.txt"),
                                           "moe-dsv3")  # fmt: skip
        assert len(rates) == deployed
        adv = advisor.advise(rates, spec[deployed], nospec, n_experts=64, top_k=8, k_max=5)
        assert adv.recommended(1) == 0  # speculation never pays at c=1 on this target
        for k in (1, 3, 5):
            if k != deployed:
                errors += [
                    abs(math.log(adv.levels[c][k - 1].speed_up / (spec[k][c] / nospec[c])))
                    for c in nospec
                ]
    assert statistics.mean(errors) < 0.11 and max(errors) < 0.25


def test_larger_k_is_not_under_predicted_on_the_toolkits_own_gpu_run():
    """Issue 26, item 8: from any deployed k, the predictions for larger k came out 13-25% low
    (the overhead's fixed part as a share of the deployed K's overhead: at K=1 it put 75% of it
    on a single drafter step). With the fixed part as 1.5 drafter steps, the mean signed error
    of the larger-k cells is within 5%; the old model's, reproduced with --fixed-share 0.25, is
    more than 10% low."""
    moe = ROOT / "tests" / "fixtures" / "vllm-0.20.2-moe"
    runs = json.loads((moe / "results.json").read_text())["runs"]

    def tps(tag: str) -> dict[int, float]:
        return {lv["concurrency"]: lv["output_tps"] for lv in runs[tag]["sweep"]["levels"]}

    nospec = tps("nospec")
    spec = {k: tps(f"spec-k{k}") for k in (1, 3, 5)}

    def signed(**kw) -> float:
        out = []
        for deployed in (1, 3):
            rates = advisor.rates_from_metrics(
                str(moe / "runs" / f"spec-k{deployed}" / "metrics.txt"), "moe-dsv3"
            )
            adv = advisor.advise(rates, spec[deployed], nospec, n_experts=64, top_k=8, **kw)
            for k in (3, 5):
                if k > deployed:
                    out += [
                        math.log(adv.levels[c][k - 1].speed_up / (spec[k][c] / nospec[c]))
                        for c in nospec
                    ]
        return statistics.mean(out)

    assert abs(signed()) < 0.05
    assert signed(fixed_share=0.25) < -0.10
