"""A release venv's Python bytecode, compiled once when the release is built (stdlib only).

The server runs as an unprivileged user under ProtectSystem=strict, so it can never write
``__pycache__`` into its venv: a venv installed with ``pip --no-compile`` (as the deploy did
until 12-04) compiles every module it imports, in every process, at every start. On an H200
that was 25-32 s of a 69-76 s warm start of vLLM 0.20.2 (docs/load-times.md, "The restart
window's fixed part"). Compiling once at build, with the venv's own interpreter (its cache tag),
takes it out of every later start.

Idempotent: a source whose cache file is missing or records another mtime or size (what the
import system checks) is stale; files the compiler refused (test data in Python 2 syntax,
templates) are recorded in ``MARKER`` and not counted again, so a second run compiles nothing
and reports no change.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

MARKER = "specdeploy-bytecode.json"

# Run by the venv's interpreter: its cache_from_source knows its own cache tag (cpython-312).
STALE_SCRIPT = r"""
import importlib.util, json, os, sys
skip = set(json.loads(sys.argv[1]))
magic = importlib.util.MAGIC_NUMBER

def current(path):
    # what the import system checks (PEP 552, timestamp mode): magic, then the source's
    # mtime and size as recorded in the header; a clock that is off changes nothing here
    try:
        st = os.stat(path)
        with open(importlib.util.cache_from_source(path), "rb") as f:
            head = f.read(16)
    except OSError:
        return False
    if len(head) < 16 or head[:4] != magic:
        return False
    flags = int.from_bytes(head[4:8], "little")
    if flags & 1:  # hash-based: checked or not, the file is there for this source
        return True
    mtime = int.from_bytes(head[8:12], "little")
    size = int.from_bytes(head[12:16], "little")
    return mtime == int(st.st_mtime) & 0xFFFFFFFF and size == st.st_size & 0xFFFFFFFF

stale = []
for top in sys.argv[2:]:
    for root, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            path = os.path.join(root, name)
            if name.endswith(".py") and path not in skip and not current(path):
                stale.append(path)
print(json.dumps(stale))
"""

# compileall's line for a file it could not compile: "*** Error compiling '/path/x.py'..."
REFUSED = re.compile(r"\*\*\* Error compiling '(?P<path>[^']+)'")


class BytecodeError(Exception):
    pass


def site_dirs(venv: Path) -> list[Path]:
    return sorted(p for p in venv.glob("lib/python3*/site-packages") if p.is_dir())


def _python(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        raise BytecodeError(f"{venv}: no bin/python (is it a venv?)")
    return python


def refused(venv: Path) -> list[str]:
    try:
        return list(json.loads((venv / MARKER).read_text(encoding="utf-8")).get("refused", []))
    except (OSError, ValueError, AttributeError):
        return []


def stale(venv: Path, dirs: list[Path], skip: list[str]) -> list[str]:
    """The sources under dirs (but skip) whose bytecode is missing or does not match them."""
    done = subprocess.run(
        [str(_python(venv)), "-c", STALE_SCRIPT, json.dumps(skip), *map(str, dirs)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise BytecodeError(f"{venv}: could not list stale bytecode: {done.stderr.strip()[-300:]}")
    return list(json.loads(done.stdout))


def compile_venv(venv: Path, check: bool = False) -> dict[str, Any]:
    """Compile what is stale; ``changed`` when something was (or, in check mode, would be)."""
    dirs = site_dirs(venv)
    if not dirs:
        raise BytecodeError(f"{venv}: no lib/python3*/site-packages")
    skip = refused(venv)
    todo = stale(venv, dirs, skip)
    result: dict[str, Any] = {"changed": bool(todo), "stale": len(todo), "refused": 0}
    if not todo or check:
        return result
    # -j 0: every core; the venv's own interpreter writes its own cache tag. compileall exits
    # 1 when any file failed: those are recorded, the rest is compiled.
    done = subprocess.run(
        [str(_python(venv)), "-m", "compileall", "-q", "-j", "0", *map(str, dirs)],
        capture_output=True,
        text=True,
        check=False,
    )
    bad = sorted({m.group("path") for m in REFUSED.finditer(done.stdout + done.stderr)})
    if done.returncode not in (0, 1) or (done.returncode == 1 and not bad):
        raise BytecodeError(f"{venv}: compileall failed: {(done.stdout + done.stderr)[-300:]}")
    (venv / MARKER).write_text(
        json.dumps({"refused": sorted(set(skip) | set(bad))}, indent=1) + "\n",
        encoding="utf-8",
    )
    result["refused"] = len(bad)
    return result
