"""Start a step's worker in another venv's Python (the release's vLLM, the training torch).

The worker imports this package from the toolkit checkout (PYTHONPATH), writes its log to the
step's directory and reports finished units as ``CHUNK <index> <count>`` lines (other lines
go to the log only). A failed worker is one error line with the log's tail.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


class WorkerError(RuntimeError):
    pass


def run_worker(
    python: str,
    module: str,
    args: list[str],
    log_path: Path,
    on_chunk: Callable[[int, int], None],
    env: dict[str, str] | None = None,
) -> None:
    if not Path(python).exists():
        raise WorkerError(f"{python}: no such Python (check vllm_python / train_python)")
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env["PYTHONPATH"] = str(REPO) + (
        os.pathsep + full_env["PYTHONPATH"] if full_env.get("PYTHONPATH") else ""
    )
    full_env["PYTHONUNBUFFERED"] = "1"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("a", encoding="utf-8") as log:
        proc = subprocess.Popen(
            [python, "-m", module, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=full_env,
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            log.flush()
            if line.startswith("CHUNK "):
                parts = line.split()
                on_chunk(int(parts[1]), int(parts[2]))
        rc = proc.wait()
    if rc != 0:
        tail = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        raise WorkerError(
            f"{module} exited {rc}; last lines of {log_path}: " + " | ".join(t[:240] for t in tail)
        )
