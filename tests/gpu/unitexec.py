"""Turn a rendered systemd unit (+ its environment file) into the argv and environment it starts.

Used by the GPU tier's driver (tests/gpu/driver.py) to start real vLLM with exactly the flags
the toolkit's template renders. Stdlib only.

What is read from the unit's [Service] section:

- ``ExecStart=``: the prefixes ``-@+!:`` are dropped, the command is split with shlex (the
  template quotes every argument that holds a character outside ``[A-Za-z0-9_./:=,@+-]`` in
  single quotes), then systemd's escapes ``%%`` and ``$$`` are undone.
- ``Environment=``: each shlex word ``KEY=VALUE``.
- ``EnvironmentFile=``: paths, ``-`` marking optional ones; the caller maps them to local files.
- ``WorkingDirectory=``, ``User=``, ``TimeoutStopSec=``, ``KillMode=`` are returned for the
  record; the driver does not apply them (see tests/gpu/README.md).

The one substitution (``substitute_program``): the node runs ``<release>/venv/bin/vllm serve``
(or ``<release>/venv/bin/python -m ...``); the GPU machine has no venv, vLLM is unpacked into a
PYTHONPATH directory, so ``.../bin/vllm ARGS`` becomes ``PYTHON -m vllm.entrypoints.cli.main
ARGS`` (the module the ``vllm`` console script calls) and ``.../bin/python ARGS`` becomes
``PYTHON ARGS``. Every other word stays as rendered.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field

VLLM_CLI_MODULE = "vllm.entrypoints.cli.main"


@dataclass
class Unit:
    exec_start: list[str]
    environment: dict[str, str] = field(default_factory=dict)
    environment_files: list[tuple[str, bool]] = field(default_factory=list)  # (path, optional)
    exec_start_pre: list[list[str]] = field(default_factory=list)
    settings: dict[str, list[str]] = field(default_factory=dict)  # every other key, raw


def _unescape(word: str) -> str:
    return word.replace("%%", "%").replace("$$", "$")


def _logical_lines(text: str) -> list[str]:
    out: list[str] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if not buf and (not line.strip() or line.lstrip().startswith(("#", ";"))):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        out.append(buf + line)
        buf = ""
    if buf:
        out.append(buf)
    return out


def _split_command(value: str) -> list[str]:
    value = value.strip()
    while value and value[0] in "-@+!:":
        value = value[1:]
    return [_unescape(w) for w in shlex.split(value)]


def parse_unit(text: str) -> Unit:
    """Parse the [Service] section of a unit file."""
    section = ""
    unit = Unit(exec_start=[])
    for line in _logical_lines(text):
        s = line.strip()
        if s.startswith("[") and s.endswith("]"):
            section = s[1:-1]
            continue
        if section != "Service" or "=" not in s:
            continue
        key, value = s.split("=", 1)
        key = key.strip()
        if key == "ExecStart":
            if unit.exec_start:
                raise ValueError("more than one ExecStart= (Type=exec allows one)")
            unit.exec_start = _split_command(value)
        elif key == "ExecStartPre":
            unit.exec_start_pre.append(_split_command(value))
        elif key == "Environment":
            for word in shlex.split(value):
                if "=" not in word:
                    raise ValueError(f"Environment= word without '=': {word!r}")
                k, v = word.split("=", 1)
                unit.environment[k] = _unescape(v)
        elif key == "EnvironmentFile":
            v = value.strip()
            unit.environment_files.append((v[1:], True) if v.startswith("-") else (v, False))
        else:
            unit.settings.setdefault(key, []).append(value.strip())
    if not unit.exec_start:
        raise ValueError("no ExecStart= in [Service]")
    return unit


def parse_env_file(text: str) -> dict[str, str]:
    """systemd EnvironmentFile= syntax: KEY=VALUE lines, # and ; comments, quoted values."""
    env: dict[str, str] = {}
    for line in _logical_lines(text):
        s = line.strip()
        if "=" not in s:
            continue
        k, v = s.split("=", 1)
        k, v = k.strip(), v.strip()
        if v[:1] in ("'", '"'):
            words = shlex.split(v)
            v = " ".join(words)
        env[k] = v
    return env


def substitute_program(argv: list[str], python: str) -> tuple[list[str], str]:
    """Replace the release venv's program by the GPU machine's python; returns (argv, note)."""
    prog = os.path.basename(argv[0])
    if prog == "vllm":
        return [python, "-m", VLLM_CLI_MODULE, *argv[1:]], (
            f"{argv[0]} -> {python} -m {VLLM_CLI_MODULE}"
        )
    if prog.startswith("python"):
        return [python, *argv[1:]], f"{argv[0]} -> {python}"
    raise ValueError(f"ExecStart program {argv[0]!r} is neither .../vllm nor .../python*")


def flag_value(argv: list[str], flag: str) -> str | None:
    """Value of ``--flag V`` or ``--flag=V`` in argv (last one wins), else None."""
    val = None
    for i, w in enumerate(argv):
        if w == flag and i + 1 < len(argv):
            val = argv[i + 1]
        elif w.startswith(flag + "="):
            val = w.split("=", 1)[1]
    return val


def has_flag(argv: list[str], flag: str) -> bool:
    return any(w == flag or w.startswith(flag + "=") for w in argv)
