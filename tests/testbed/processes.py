"""What is left of a killed command: the live processes that still carry its command line.

A forked child (Ansible's task workers, mitogen's multiplexer) keeps its parent's command line,
so after a kill these are the run's own processes, wherever they were reparented."""

from __future__ import annotations

import time
from pathlib import Path


def running_with(argv: list[str]) -> dict[int, str]:
    """Live (not zombie) processes whose command line is `argv`, after the interpreter that the
    kernel puts before a script's own: pid to command line."""
    wanted = "\0".join(argv).encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().rstrip(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # ended meanwhile
            continue
        if (cmdline == wanted or cmdline.endswith(b"\0" + wanted)) and state != "Z":
            found[int(entry.name)] = cmdline.replace(b"\0", b" ").decode(errors="replace")
    return found


def left_running(argv: list[str], wait_s: float = 30) -> dict[int, str]:
    """The processes of a killed `argv` still running after waiting up to `wait_s` for them."""
    deadline = time.monotonic() + wait_s
    while (left := running_with(argv)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left
