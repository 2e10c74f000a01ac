"""What every command of the toolkit shares: the exit codes and the one-line usage errors.

Exit codes, the same in every tool: 0 ok, 1 a check failed (the answer is "no"), 2 usage or
environment error (the question could not be asked: a bad flag, a missing or unreadable file,
an unwritable output, a broken history file). A usage error is one line on stderr naming the
flag and the file, never a traceback:

    spec-report: error: --history /var/lib/specdeploy/history.db: file is not a database

Stdlib only (runs on the node).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from collections.abc import Iterable, Iterator

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2


class PathError(Exception):
    """A path given on the command line cannot be used; the message names the flag and path."""

    def __init__(self, flag: str, path: object, reason: str) -> None:
        super().__init__(f"{flag} {path}: {reason}")


def reason(exc: BaseException) -> str:
    """The short why of an OS or parse error, without the errno prefix and the path again."""
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"
    if type(exc).__module__.startswith("yaml"):  # a YAML syntax or constructor error
        problem = getattr(exc, "problem", None)
        mark = getattr(exc, "problem_mark", None)
        if problem:
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
            return f"not valid YAML: {problem}{where}"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower() if exc.strerror[0].isupper() else exc.strerror
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def parser(
    prog: str, doc: str | None, json_help: str = "machine-readable output on stdout"
) -> argparse.ArgumentParser:
    """A command's parser: ``prog``, the first line of its module docstring ``doc`` as the
    description, and the ``--json`` (output for machines) every tool has."""
    p = argparse.ArgumentParser(prog=prog, description=(doc or "").split("\n")[0] or None)
    p.add_argument("--json", action="store_true", help=json_help)
    return p


def finite(where: str, value: object, *, positive: bool = False) -> float:
    """``value`` as a finite float (an int or float, never a bool, NaN or infinity); else
    ValueError ``"WHERE: VALUE is not a finite number"`` (``positive``: also > 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where}: {value!r} is not a number")
    x = float(value)
    if not math.isfinite(x):
        raise ValueError(f"{where}: {value!r} is not a finite number")
    if positive and x <= 0:
        raise ValueError(f"{where}: {value!r} is not > 0")
    return x


def finite_float(text: str) -> float:
    """An argparse ``type``: a finite number ("nan", "inf" and "1e999" are refused)."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return x


def read_text(flag: str, path: object, *, empty_ok: bool = False) -> str:
    """The UTF-8 text of the file a flag names; PathError naming both when it is missing,
    unreadable, not UTF-8 or (unless ``empty_ok``) empty."""
    try:
        with open(os.fspath(path), encoding="utf-8") as handle:  # type: ignore[arg-type]
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise PathError(flag, path, reason(exc)) from exc
    if not empty_ok and not text.strip():
        raise PathError(flag, path, "empty file")
    return text


def usage_error(prog: str, message: object) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def require_readable(flag: str, path: object, kind: str = "file") -> None:
    """``kind``: "file", "dir" or "any"."""
    if path is None or path == "":
        return
    p = os.fspath(path)  # type: ignore[arg-type]
    if not os.path.exists(p):
        raise PathError(flag, p, "no such file or directory")
    if kind == "file" and os.path.isdir(p):
        raise PathError(flag, p, "is a directory, not a file")
    if kind == "dir" and not os.path.isdir(p):
        raise PathError(flag, p, "not a directory")
    if not os.access(p, os.R_OK):
        raise PathError(flag, p, "permission denied")


def require_writable(flag: str, path: object) -> None:
    """The file can be created or replaced: its nearest existing ancestor is a writable dir."""
    if path is None or path == "":
        return
    p = os.path.abspath(os.fspath(path))  # type: ignore[arg-type]
    if os.path.isdir(p):
        raise PathError(flag, p, "is a directory, not a file")
    parent = os.path.dirname(p)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise PathError(flag, p, f"{parent} is not a directory")
    if not os.access(parent, os.W_OK):
        raise PathError(flag, p, f"{parent} is not writable")


@contextlib.contextmanager
def naming(flag: str, path: object) -> Iterator[None]:
    """Inside: an error reading the file a flag names becomes a PathError naming both."""
    try:
        yield
    except PathError:
        raise
    except Exception as exc:  # OSError; ValueError: bad JSON, bad content; YAML errors
        if not isinstance(exc, OSError | ValueError) and not type(exc).__module__.startswith(
            "yaml"
        ):
            raise
        if path is None or path == "":
            raise
        raise PathError(flag, path, reason(exc)) from exc


def check_paths(
    readable: Iterable[tuple[str, object]] = (),
    writable: Iterable[tuple[str, object]] = (),
    directories: Iterable[tuple[str, object]] = (),
) -> None:
    """Check (flag, path) pairs before any work; the first bad one raises PathError."""
    for flag, value in readable:
        for one in _each(value):
            require_readable(flag, one, "any")
    for flag, value in directories:
        for one in _each(value):
            require_readable(flag, one, "dir")
    for flag, value in writable:
        for one in _each(value):
            require_writable(flag, one)


def _each(value: object) -> list[object]:
    """A flag's value or values (a repeatable flag gives a list)."""
    return list(value) if isinstance(value, list | tuple) else [value]
