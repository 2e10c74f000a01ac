"""Reading the node (nvidia-smi, /sys, /proc, the kernel log), read-only; --root and
--kernel-log point it at a fake tree in tests."""

from __future__ import annotations

import contextlib
import pwd
import shutil
import subprocess
from pathlib import Path

from .model import Options


class Probe:
    """Everything the doctor reads from the node; paths honour the root prefix."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.root = Path(options.root)

    def path(self, absolute: str) -> Path:
        return self.root / absolute.lstrip("/")

    def smi(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.options.nvidia_smi, *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def read_text(self, absolute: str) -> str | None:
        try:
            return self.path(absolute).read_text()
        except OSError:
            return None

    def kernel_log(self) -> tuple[list[str] | None, str]:
        if self.options.kernel_log:
            try:
                text = Path(self.options.kernel_log).read_text(errors="replace")
            except OSError as error:
                return None, f"{self.options.kernel_log}: {error.strerror}"
            return text.splitlines(), self.options.kernel_log
        commands = (
            ["journalctl", "-k", "-b", "0", "--no-pager", "-q", "-o", "short-iso"],
            ["dmesg"],
        )
        for command in commands:
            if shutil.which(command[0]) is None:
                continue
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                result = subprocess.run(
                    command, capture_output=True, text=True, timeout=60, check=False
                )
                if result.returncode == 0:
                    return result.stdout.splitlines(), " ".join(command[:2])
        return None, "neither `journalctl -k` nor `dmesg` could be read"

    def process_owner(self, pid: int) -> str | None:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return None
        for line in status.splitlines():
            if line.startswith("Uid:"):
                uid = int(line.split()[1])
                try:
                    return pwd.getpwuid(uid).pw_name
                except KeyError:
                    return str(uid)
        return None
