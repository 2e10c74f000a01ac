"""The toolkit's one atomic-write helper (package and Ansible modules share it)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from specdeploy.node.module_utils.specdeploy_fsio import atomic_symlink, atomic_write

from specdeploy.node.module_utils import specdeploy_fsio


def test_atomic_write_replaces_content_with_mode_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "result.json"
    atomic_write(target, "old\n")
    atomic_write(target, b"new\n", mode=0o640)
    assert target.read_text() == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in target.parent.iterdir()) == ["result.json"]


def test_atomic_write_fsyncs_the_file_and_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(specdeploy_fsio.os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    atomic_write(tmp_path / "f", "x")
    assert len(synced) == 2  # the data, then the directory entry


def test_a_failed_write_keeps_the_old_file_and_cleans_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "f"
    target.write_text("old")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(specdeploy_fsio.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_atomic_symlink_switches_the_link(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    atomic_symlink(tmp_path / "current", "a")
    atomic_symlink(tmp_path / "current", "b")
    assert os.readlink(tmp_path / "current") == "b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "current"]
