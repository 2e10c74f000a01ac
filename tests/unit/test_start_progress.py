"""The load phases of a start, its ETA and downtime window (specdeploy.node.service.start_progress),
read from a real recorded vLLM 0.20.2 engine log and from the CI stand-in's own log."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from standin.harness import Standin

from specdeploy.node.service import engine_log, start_progress

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-0.20.2-gpu-tier" / "runs"
VLLM_TS = re.compile(r" (?:INFO|WARNING|ERROR|DEBUG) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) ")


def journal_of(engine_text: str, *, restart: bool = True, base: float = 1.8e9) -> str:
    """The recorded engine log as `journalctl -o short-unix` shows it under systemd, each line
    at the time vLLM stamped on it (progress bars keep the last stamp); with a restart, the
    old server's stop comes first."""
    lines, at = [], None
    for message in engine_text.splitlines():
        m = VLLM_TS.search(message)
        if m:
            _, _, hh, mm, ss = (int(x) for x in m.groups())
            at = base + hh * 3600 + mm * 60 + ss
        lines.append((at, message))
    first = next(a for a, _ in lines if a is not None)
    lines = [(a if a is not None else first, msg) for a, msg in lines]
    head = []
    if restart:
        head += [(first - 4.0, "Stopping vllm.service - vLLM (specdeploy)...")]
        head += [(first - 1.5, "Stopped vllm.service - vLLM (specdeploy).")]
    head += [(first - 1.0, "Started vllm.service - vLLM (specdeploy).")]
    return "".join(
        f"{a:.6f} node1 {'systemd[1]' if i < len(head) else 'python[645]'}: {msg}\n"
        for i, (a, msg) in enumerate(head + lines)
    )


@pytest.fixture(scope="module")
def cold_log() -> str:
    return (RUNS / "spec-fa-cold" / "engine.log").read_text()


def test_a_real_start_goes_through_every_phase_in_order(cold_log):
    entries = start_progress.parse_journal(journal_of(cold_log))
    events, percent = engine_log.parse_phases(entries)
    assert [e.phase for e in events] == list(engine_log.PHASES)
    assert percent == 100  # the last shard progress of the weights
    assert "for vLLM's torch.c" in events[3].message  # (cut at 200 characters)
    assert "Profiling CUDA graph memory" in events[4].message


def test_the_downtime_window_runs_from_the_stop_to_ready_and_its_parts_add_up(cold_log):
    events, _ = engine_log.parse_phases(start_progress.parse_journal(journal_of(cold_log)))
    window = engine_log.downtime_window(events)
    assert window is not None and window["from"] == "stop"
    assert window["window_s"] == pytest.approx(events[-1].at - events[0].at)
    assert sum(window["parts"].values()) == pytest.approx(window["window_s"], abs=0.05)
    # the recorded cold start: weights 19:49:47, torch.compile from 19:49:51, graphs 19:50:22
    assert window["parts"]["compile"] == pytest.approx(31, abs=1)
    assert set(window["parts"]) == set(engine_log.PHASES) - {"ready"}


LOADS = RUNS.parent.parent / "vllm-0.20.2-loads" / "runs"
MODEL_LOADING = re.compile(r"Model loading took [0-9.]+ GiB(?: memory)? and (?P<s>[0-9.]+) s")


@pytest.mark.parametrize(
    "run",
    [
        "nospec-load-drop",
        "nospec-eager-load-drop",
        "nospec-multithread-load-drop",
        "nospec-runai-load-drop",
        "nospec-prefetch-load-drop",
        "nospec-load-warm-2",
    ],
)
def test_every_weight_loader_shows_its_progress_and_its_weights_part(run):
    """The 45 GB load-time starts (docs/load-times.md): whichever loader the unit's extra
    arguments choose, the start shows the weights' percentage and the window's weights part
    covers vLLM's own "Model loading took" figure."""
    text = (LOADS / run / "engine.log").read_text()
    events, percent = engine_log.parse_phases(start_progress.parse_journal(journal_of(text)))
    assert [e.phase for e in events] == list(engine_log.PHASES)
    assert percent == 100
    window = engine_log.downtime_window(events)
    loading = float(MODEL_LOADING.search(text).group("s"))
    # vLLM's figure is inside the weights phase, which also holds the set-up before it
    # (log stamps have 1 s resolution)
    assert loading - 1 <= window["parts"]["weights"] <= loading + 12


def test_a_first_start_has_no_stop_and_a_window_from_the_start(cold_log):
    events, _ = engine_log.parse_phases(
        start_progress.parse_journal(journal_of(cold_log, restart=False))
    )
    window = engine_log.downtime_window(events)
    assert window["from"] == "start" and "stop" not in window["parts"]


def test_only_the_journals_last_start_is_followed(cold_log):
    earlier = journal_of(cold_log, base=1.8e9 - 7200)
    entries = start_progress.parse_journal(earlier + journal_of(cold_log))
    events, _ = engine_log.parse_phases(start_progress.last_start(entries))
    assert events[0].at > 1.8e9 - 3600 and [e.phase for e in events][-1] == "ready"


def test_a_stuck_start_names_its_phase_with_the_weights_percentage(tmp_path, cold_log):
    text = journal_of(cold_log)
    cut = text.index("Loading safetensors checkpoint shards: 100%")
    journal = tmp_path / "journal.txt"
    journal.write_text(text[: text.rindex("\n", 0, cut) + 1])
    state = start_progress.follow("vllm", 0.0, tmp_path, "", 0.0, 0.1, journal)
    assert (state["phase"], state["percent"], state["key"]) == ("weights", 0, "weights:0")
    assert not state["ready"] and state["window"] is None


def test_eta_comes_from_this_nodes_recorded_starts(tmp_path, cold_log):
    for index, total in enumerate([40.0, 50.0, 60.0]):
        release = tmp_path / "releases" / f"r{index}"
        release.mkdir(parents=True)
        start = {"at": f"2026-12-0{index + 1}T00:00:00Z", "stop_to_ready_s": total + 1}
        start["window"] = {"window_s": total, "parts": {"stop": 2.0, "weights": total - 2.0}}
        (release / "manifest.json").write_text(json.dumps({"starts": [start]}))
    journal = tmp_path / "journal.txt"
    journal.write_text(journal_of(cold_log))
    state = start_progress.follow("vllm", 0.0, tmp_path, "", 0.0, 0.1, journal)
    assert state["starts"] == 3 and state["expected_s"] == 50.0
    assert state["eta_s"] == pytest.approx(50.0 - state["elapsed_s"])
    assert state["ready"] and state["window"]["window_s"] > 0


def test_no_recorded_start_means_no_eta(tmp_path, cold_log):
    journal = tmp_path / "journal.txt"
    journal.write_text(journal_of(cold_log))
    state = start_progress.follow("vllm", 0.0, tmp_path, "", 0.0, 0.1, journal)
    assert state["eta_s"] is None and state["starts"] == 0


def test_the_cli_prints_json_and_refuses_a_missing_journal(tmp_path, cold_log, capsys):
    journal = tmp_path / "journal.txt"
    journal.write_text(journal_of(cold_log))
    args = ["--unit", "vllm", "--since", "0", "--root", str(tmp_path), "--json"]
    assert start_progress.main([*args, "--journal-file", str(journal)]) == 0
    assert json.loads(capsys.readouterr().out)["phase"] == "ready"
    assert start_progress.main([*args, "--journal-file", str(tmp_path / "none")]) == 2
    assert "cannot read the journal" in capsys.readouterr().err


def test_the_ready_state_names_the_backends_engine_log_reads_from_the_same_log(
    tmp_path, cold_log, capsys
):
    """The deploy takes the attention backends from the followed start (no second journal
    read): the same list `engine_log --json` gives for the recorded vLLM log."""
    journal = tmp_path / "journal.txt"
    journal.write_text(journal_of(cold_log))
    args = ["--unit", "vllm", "--since", "0", "--root", str(tmp_path), "--json"]
    assert start_progress.main([*args, "--journal-file", str(journal)]) == 0
    state = json.loads(capsys.readouterr().out)
    log = tmp_path / "engine.log"
    log.write_text(cold_log)
    assert engine_log.main([str(log), "--json"]) == 0
    expected = json.loads(capsys.readouterr().out)["backends"]

    def choices(backends: list[dict]) -> list[dict]:  # "line" counts from the text each read
        return [{k: v for k, v in b.items() if k != "line"} for b in backends]

    assert expected and choices(state["backends"]) == choices(expected)


def test_the_standin_logs_the_phases_in_vllms_words():
    """The CI stand-in goes through the same phases, recognized by the same patterns."""
    with Standin(profile={"startup_delay_s": 0.4}, wait=False) as server:
        server.wait_healthy()
        text = server.log_text()
    now = time.time()
    journal = "".join(f"{now:.6f} node1 python[1]: {line}\n" for line in text.splitlines())
    events, _ = engine_log.parse_phases(start_progress.parse_journal(journal))
    assert [e.phase for e in events] == ["weights", "compile", "graphs", "api", "ready"]
    assert "Loading safetensors checkpoint shards: 100% Completed | 4/4" in text
    assert engine_log.parse(text).startup.keys() >= {"model_loading_s", "torch_compile_s"}


def test_a_server_that_ended_says_why_in_its_own_words(tmp_path):
    """A refused flag (the stand-in's argparse, as vLLM's: `vllm: error: ...`) is the line a
    failed start quotes; systemd's consequences after it are not."""
    with Standin(extra_args=["--no-such-flag", "1"], wait=False) as server:
        assert server.proc is not None and server.proc.wait(15) == 2
        text = server.log_text()
    journal = "".join(
        f"{1.8e9 + i:.6f} node1 vllm[7]: {line}\n" for i, line in enumerate(text.splitlines())
    )
    journal += f"{1.8e9 + 50:.6f} node1 systemd[1]: vllm.service: Failed with result 'exit-code'.\n"
    error = start_progress.last_error(start_progress.parse_journal(journal))
    assert error == "vllm: error: unrecognized arguments: --no-such-flag 1"
    assert start_progress.last_error(start_progress.parse_journal(journal_of_clean())) is None


def journal_of_clean() -> str:
    return "1800000000.0 node1 systemd[1]: Started vllm.service - vLLM (specdeploy).\n"
