"""scripts/run_tests.py starts one session beyond --jobs only while the cores idle: measured over
the last minute, and a minute after the last start, so two `make test` side by side (no idle)
never add one."""

from __future__ import annotations

import pytest

from scripts import run_tests


def busy_then_idle(idle_share_last_minute: float) -> list[tuple[float, float, float]]:
    """Samples every 10 s over two minutes: the first minute busy, the second idle this share."""
    samples, idle, total = [], 0.0, 0.0
    for t in range(0, 130, 10):
        samples.append((float(t), idle, total))
        total += 200.0  # ticks per 10 s step
        idle += 200.0 * (idle_share_last_minute if t >= 60 else 0.0)
    return samples


def test_the_idle_share_is_over_the_last_window_only() -> None:
    share = run_tests.idle_fraction(busy_then_idle(0.3), 60.0)
    assert share is not None and abs(share - 0.3) < 1e-9
    # a minute that is half busy, half idle at 0.3
    assert abs(run_tests.idle_fraction(busy_then_idle(0.3)[:10], 60.0) - 0.15) < 1e-9


def test_no_verdict_until_a_whole_window_has_passed() -> None:
    assert run_tests.idle_fraction(busy_then_idle(0.9)[:6], 60.0) is None  # 50 s
    assert run_tests.idle_fraction([], 60.0) is None


def test_one_more_session_only_while_the_cores_idle_enough() -> None:
    assert run_tests.session_limit(4, 5, 0.20) == 5
    assert run_tests.session_limit(4, 5, run_tests.IDLE_TO_START) == 4  # not more than enough
    assert run_tests.session_limit(4, 5, 0.05) == 4
    assert run_tests.session_limit(4, 5, None) == 4  # within a minute of the last start
    assert run_tests.session_limit(4, 4, 0.9) == 4  # --max-jobs caps it
    assert run_tests.session_limit(4, 6, 0.9) == 6  # a start clears the samples: one a minute


@pytest.mark.parametrize("argv", [["--jobs", "0"], ["--jobs", "4", "--max-jobs", "3"],
                                  ["--max-jobs", "x"]])  # fmt: skip
def test_bad_job_counts_are_a_usage_error_before_any_session(argv, capsys) -> None:
    with pytest.raises(SystemExit) as stopped:
        run_tests.main([*argv, "--only", "no-such-session"])
    assert stopped.value.code == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "error:" in x]
    assert "jobs" in line


def test_the_machine_reading_is_idle_and_total_so_far() -> None:
    idle, total = run_tests.cpu_idle_total()
    assert 0 < idle < total
