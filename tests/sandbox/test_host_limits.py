"""The sandbox raises the host's inotify instances per user before it boots nodes: each node's
systemd holds some, all counted against root, and two `make test` side by side ran out of the
kernel's default 128 (a node never booted)."""

from __future__ import annotations

from pathlib import Path

from testbed.sandbox.host import ensure_inotify_instances


def test_a_low_limit_is_raised_and_said(tmp_path: Path, capsys) -> None:
    setting = tmp_path / "max_user_instances"
    setting.write_text("128\n")
    ensure_inotify_instances(1024, setting)
    assert setting.read_text().strip() == "1024"
    said = capsys.readouterr()
    assert "from 128 to 1024" in said.err + said.out


def test_a_higher_limit_is_kept(tmp_path: Path) -> None:
    setting = tmp_path / "max_user_instances"
    setting.write_text("8192\n")
    ensure_inotify_instances(1024, setting)
    assert setting.read_text().strip() == "8192"


def test_an_unwritable_or_unreadable_limit_is_said_and_the_boot_goes_on(
    tmp_path: Path, capsys
) -> None:
    missing = tmp_path / "absent" / "max_user_instances"
    ensure_inotify_instances(1024, missing)  # no exception
    said = capsys.readouterr()
    assert "could not read" in said.err + said.out
    garbage = tmp_path / "garbage"
    garbage.write_text("many\n")
    ensure_inotify_instances(1024, garbage)
    said = capsys.readouterr()
    assert "could not read" in said.err + said.out and garbage.read_text() == "many\n"


def test_a_limit_that_cannot_be_raised_is_said_and_kept(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    # The tests run as root, whom file modes do not stop: the refusal (a read-only /proc/sys in a
    # container) is made by hand.
    setting = tmp_path / "max_user_instances"
    setting.write_text("128\n")

    def refused(self: Path, *args: object, **kwargs: object) -> int:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "write_text", refused)
    ensure_inotify_instances(1024, setting)  # no exception
    said = capsys.readouterr()
    assert "is 128 and could not be raised (Permission denied)" in said.err + said.out
    assert setting.read_text() == "128\n"
