"""The page-cache read-ahead before a restart (specdeploy.node.service.prefetch): when memory
allows,
the model's files are read ahead with posix_fadvise(WILLNEED); otherwise a reason is given."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from specdeploy.node.service import prefetch

GIB = 1024**3


def meminfo(tmp_path: Path, available_kb: int) -> Path:
    path = tmp_path / "meminfo"
    path.write_text(f"MemTotal: 99999999 kB\nMemFree: 1 kB\nMemAvailable: {available_kb} kB\n")
    return path


@pytest.fixture
def model(tmp_path: Path) -> Path:
    root = tmp_path / "model"
    (root / "sub").mkdir(parents=True)
    (root / "config.json").write_text("{}")
    (root / "model-00001-of-00002.safetensors").write_bytes(os.urandom(64 * 1024))
    (root / "sub" / "model-00002-of-00002.safetensors").write_bytes(os.urandom(32 * 1024))
    (root / "README.md").write_text("not read by the loader")
    return root


def test_the_model_files_are_found_largest_first(model):
    files = prefetch.model_files([model])
    assert [p.name for p in files] == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "config.json",
    ]


def test_auto_reads_ahead_when_memavailable_holds_the_files(tmp_path, model):
    result = prefetch.run(
        "auto", [model], reserve=0, meminfo=meminfo(tmp_path, 8 * 1024**2), timeout_s=60
    )
    assert result.prefetch and result.files == 3 and result.errors == []
    assert result.bytes == 96 * 1024 + 2
    # it returns once every byte was read, not when the reads are queued
    assert result.resident_bytes == result.bytes and not result.timed_out


def test_a_read_that_outlasts_the_timeout_says_so_and_lets_the_stop_go_ahead(tmp_path, model):
    result = prefetch.run(
        "auto", [model], reserve=0, meminfo=meminfo(tmp_path, 8 * 1024**2), timeout_s=0
    )
    assert result.prefetch and result.timed_out
    assert result.resident_bytes < result.bytes
    assert prefetch.message(result).endswith(
        "; stopped waiting at the timeout, the kernel keeps reading"
    )


def test_auto_skips_with_a_message_when_memory_is_short(tmp_path, model):
    result = prefetch.run(
        "auto", [model], reserve=GIB, meminfo=meminfo(tmp_path, 1024**2 // 2), timeout_s=60
    )
    assert not result.prefetch
    assert result.reason.startswith("skipped:") and "do not fit" in result.reason
    assert "MemAvailable 0.5 GiB, reserve 1.0 GiB" in result.reason
    assert prefetch.message(result) == f"page cache read-ahead {result.reason}"


def test_always_reads_ahead_even_when_memory_is_short(tmp_path, model):
    result = prefetch.run(
        "always", [model], reserve=GIB, meminfo=meminfo(tmp_path, 1), timeout_s=60
    )
    assert result.prefetch and result.errors == []


def test_never_reads_nothing(tmp_path, model):
    result = prefetch.run(
        "never", [model], reserve=0, meminfo=meminfo(tmp_path, 8 * 1024**2), timeout_s=60
    )
    assert not result.prefetch and result.files == 0 and result.reason == "off (never)"


def test_the_kernel_is_asked_for_every_file(monkeypatch, tmp_path, model):
    advised = []
    real = os.posix_fadvise

    def spy(fd, offset, length, advice):
        advised.append((os.readlink(f"/proc/self/fd/{fd}"), offset, length, advice))
        return real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", spy)
    prefetch.run("auto", [model], reserve=0, meminfo=meminfo(tmp_path, 8 * 1024**2), timeout_s=60)
    assert {Path(p).name for p, *_ in advised} == {
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "config.json",
    }
    assert {(o, n, a) for _, o, n, a in advised} == {(0, 0, os.POSIX_FADV_WILLNEED)}


def test_the_cli_prints_json_and_refuses_a_missing_directory(tmp_path, model, capsys):
    mem = str(meminfo(tmp_path, 8 * 1024**2))
    assert (
        prefetch.main(["--path", str(model), "--meminfo", mem, "--reserve-gb", "0", "--json"]) == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["prefetch"] and out["mode"] == "auto"
    assert out["resident_bytes"] == out["bytes"] and out["timed_out"] is False
    assert out["seconds"] >= 0 and "gb_per_s" in out
    # the line the deploy prints before the stop
    assert re.fullmatch(
        r"page cache read-ahead .*: resident in [0-9.]+ s \([0-9.]+ GB/s\)", out["message"]
    )
    assert prefetch.main(["--path", str(tmp_path / "none"), "--meminfo", mem]) == 2
    assert "not a directory" in capsys.readouterr().err
