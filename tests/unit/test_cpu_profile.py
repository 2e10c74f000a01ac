"""scripts/cpu_profile.py: the kernel's acct v3 records, rebuilt into a tree and summed by kind."""

from __future__ import annotations

from pathlib import Path

from scripts import cpu_profile


def record(pid: int, ppid: int, began: int, cpu_ticks: int, comm: str, version: int = 3) -> bytes:
    return cpu_profile.RECORD.pack(
        0, version, 0, 0, 0, 0, pid, ppid, began, 500.0, cpu_ticks, 0,
        0, 0, 0, 0, 0, 0, comm.encode(),
    )  # fmt: skip


def test_processes_are_summed_by_what_ran_them(tmp_path: Path, capsys) -> None:
    records = [
        record(10, 1, 1000, 300, "ansible-playboo"),  # the controller: 3 s
        record(11, 10, 1001, 50, "ansible-playboo"),  # a forked worker
        record(12, 11, 1001, 20, "sh"),
        record(13, 12, 1001, 40, "python3"),  # a module on the controller
        record(20, 1, 1000, 10, "sshd"),  # a node's sshd, its session, sudo, the module
        record(21, 20, 1001, 1, "sshd"),
        record(22, 21, 1001, 0, "sh"),
        record(23, 22, 1001, 0, "sudo"),
        record(24, 23, 1001, 170, "python3"),
        record(30, 1, 1000, 100, "haproxy"),
        record(13, 1, 1400, 7, "python3"),  # pid 13 again, later, not below the worker
    ]
    pacct = tmp_path / "pacct"
    pacct.write_bytes(b"".join(records))
    found = cpu_profile.profile(cpu_profile.parse(pacct.read_bytes()))
    kinds = {k: v["cpu_s"] for k, v in found["kinds"].items()}
    assert kinds == {
        "controller ansible": 3.5,
        "node module": 1.7,  # 1.71: rounded to tenths
        "controller module": 0.6,
        "other": 1.2,  # 1.17: haproxy, the node's own sshd, the later pid 13
    }
    assert found["processes"] == 11 and found["cpu_s"] == 7.0  # 6.98, rounded
    assert cpu_profile.main([str(pacct)]) == 0
    assert "node module" in capsys.readouterr().out
    # --since: only what began from then (the later pid 13)
    assert cpu_profile.main([str(pacct), "--since", "1400", "--json"]) == 0
    assert '"processes": 1,' in capsys.readouterr().out


def test_a_file_that_is_not_acct_v3_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    torn = tmp_path / "torn"
    torn.write_bytes(record(1, 0, 0, 1, "x")[:-3])
    v2 = tmp_path / "v2"
    v2.write_bytes(record(1, 0, 0, 1, "x", version=2))
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    for path in (torn, v2, empty, tmp_path / "missing"):
        assert cpu_profile.main([str(path)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"cpu_profile: {path}:") and "\n" not in err
    assert cpu_profile.comp_t((2 << 13) | 5) == 5 * 64
