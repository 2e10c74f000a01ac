"""make compare-engines' comparison (specdeploy.controller.compare_engines): per level both
engines' figures from the controller's history, the winner at the operator's load mix, and
one-line errors before any node is touched."""

from __future__ import annotations

import json
import math

import pytest

from specdeploy.controller import compare_engines, history

VLLM = "0.26.0-aaaaaaaaaaaa"
SGLANG = "sglang-0.5.15-0.26.0-bbbbbbbbbbbb"


def result(release: str, tps: dict[int, float], base: dict[int, float], at: str, **acc) -> dict:
    return {
        "run_id": f"{release}-{at}",
        "node": "node1",
        "release": release,
        "started_at": at,
        "status": "pass",
        "labels": {"speculative": "true"},
        "acceptance": {"status": "ok", "mode": "spec", **acc},
        "speed": {
            "speculative": True,
            "levels": [
                {
                    "concurrency": c,
                    "output_tps": t,
                    "baseline_tps": base[c],
                    "speed_up": t / base[c],
                    "ttft_p50_s": 0.05,
                    "itl_p50_s": 0.01,
                    "requests": 8,
                    "status": "pass",
                }
                for c, t in tps.items()
            ],
        },
    }


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "history.sqlite"
    conn = history.connect(path)
    # an older vLLM run, superseded by the later one
    history.record(
        conn, result(VLLM, {1: 50.0, 16: 500.0}, {1: 60.0, 16: 400.0}, "2026-12-01T00:00:00Z")
    )
    spec = {"per_position_acceptance": [0.7, 0.5, 0.3], "mean_acceptance_length": 2.5}
    at = "2026-12-02T00:00:00Z"
    history.record(conn, result(VLLM, {1: 100.0, 16: 900.0}, {1: 110.0, 16: 700.0}, at, **spec))
    at = "2026-12-03T00:00:00Z"
    sg = {"mean_acceptance_length": 2.4}
    history.record(conn, result(SGLANG, {1: 120.0, 16: 800.0}, {1: 100.0, 16: 750.0}, at, **sg))
    return str(path)


def table(db, *extra, capsys) -> tuple[int, str, str]:
    rc = compare_engines.main(
        ["table", "--db", db, "--node", "node1", "--release", VLLM, "--release", SGLANG, *extra]
    )
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_both_engines_per_level_and_the_winner_at_equal_shares(db, capsys):
    rc, out, _ = table(db, capsys=capsys)
    assert rc == 0
    lines = out.splitlines()
    # the latest validation of each release, its engine named, acceptance and k
    assert lines[0].startswith(f"vllm: release {VLLM} (pass, validated 2026-12-02")
    assert "mean acceptance length 2.50, k=3" in lines[0]
    assert lines[1].startswith(f"sglang: release {SGLANG}") and "2.40" in lines[1]
    rows = [line.split() for line in lines if line.split()[:1] in (["1"], ["16"])]
    assert rows[0][:5] == ["1", "vllm", "100.0", "110.0", "0.91"]
    assert rows[1][:5] == ["1", "sglang", "120.0", "100.0", "1.20"]
    assert rows[2][:3] == ["16", "vllm", "900.0"]
    # equal shares: vLLM (100 + 900) / 2 = 500 against SGLang (120 + 800) / 2 = 460
    assert lines[-1].startswith("winner at the load mix (c=1: 50%, c=16: 50%): vllm")
    assert "sglang 460.0 tok/s (1.09x)" in lines[-1]


def test_a_night_heavy_load_mix_picks_the_other_engine(db, capsys):
    rc, out, _ = table(db, "--load-profile", "1=0.9,16=0.1", "--json", capsys=capsys)
    assert rc == 0
    doc = json.loads(out)
    assert doc["verdict"]["winner"] == SGLANG
    assert doc["verdict"]["weighted_tps"] == {
        VLLM: pytest.approx(180.0),
        SGLANG: pytest.approx(188.0),
    }
    # the profile as validation_load_profile is written (a JSON object), as the advisor takes it
    rc, out, _ = table(db, "--load-profile", '{"1": 0.9, "16": 0.1}', "--json", capsys=capsys)
    assert rc == 0 and json.loads(out)["verdict"]["winner"] == SGLANG


def test_a_load_level_one_engine_did_not_measure_names_no_winner(db, capsys):
    rc, out, _ = table(db, "--load-profile", "1=0.5,64=0.5", capsys=capsys)
    assert rc == 1
    assert out.splitlines()[-1] == (
        "no winner: load-profile levels [64] were not measured by every engine"
        " (both measured: [1, 16])"
    )


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--load-profile", "1=nan"], "--load-profile '1=nan'"),
        (["--load-profile", "1=inf,16=1"], "--load-profile '1=inf,16=1'"),
        (["--load-profile", "c1=1"], "--load-profile 'c1=1'"),
    ],
)
def test_bad_load_profiles_are_one_line_errors(db, capsys, args, names):
    rc, out, err = table(db, *args, capsys=capsys)
    assert rc == 2 and out == ""
    assert err.startswith("compare-engines: error: " + names) and err.count("\n") == 1


def test_a_release_the_history_does_not_have_is_named(db, capsys):
    rc = compare_engines.main(
        ["table", "--db", db, "--node", "node1", "--release", VLLM, "--release", "0.25.0-nope"]
    )
    err = capsys.readouterr().err
    assert rc == 2
    want = "release 0.25.0-nope: no validation of it on node1 in the history"
    assert err == f"compare-engines: error: {want}\n"


def test_a_corrupt_history_is_a_usage_error(tmp_path, capsys):
    bad = tmp_path / "history.sqlite"
    bad.write_bytes(b"\xff\xfe not sqlite at all" * 64)
    rc = compare_engines.main(
        ["table", "--db", str(bad), "--node", "n", "--release", "a", "--release", "b"]
    )
    err = capsys.readouterr().err
    assert rc == 2 and str(bad) in err and err.count("\n") == 1


def test_a_level_that_measured_nothing_or_an_infinite_figure_is_not_compared():
    res = result(VLLM, {1: 100.0, 16: math.inf}, {1: 110.0, 16: 700.0}, "2026-12-02T00:00:00Z")
    res["speed"]["levels"].append({"concurrency": 64, "output_tps": 5.0, "requests": 0})
    assert sorted(compare_engines.engine_run(res).levels) == [1]


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--engines", "vllm,trtllm"], "--engines vllm,trtllm"),
        (["--engines", "vllm"], "--engines vllm"),
        (["--set", "sglang={not json"], "--set sglang={not json"),
        (["--set", 'tgi={"a": 1}'], '--set tgi={"a": 1}'),
        (["-i", "/nonexistent/inventory"], "-i /nonexistent/inventory: no such inventory"),
    ],
)
def test_run_refuses_bad_input_before_any_playbook(tmp_path, capsys, monkeypatch, args, names):
    def no_playbook(*a, **k):  # the refusal comes before any node is touched
        raise AssertionError("a playbook ran")

    monkeypatch.setattr(compare_engines.subprocess, "run", no_playbook)
    argv = ["run", "--node", "node1", "--db", str(tmp_path / "h.sqlite")]
    argv += args if "-i" in args else ["-i", str(tmp_path), *args]
    rc = compare_engines.main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("compare-engines: error: " + names), err
