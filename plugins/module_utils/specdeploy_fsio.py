"""Atomic file and symlink replacement (the one write helper of the toolkit), and the one
streaming file hash.

A reader (another deploy, a scrape, a crash-restarted process) sees either the old content or
the new one, never a torn file: the data goes to a temporary file in the same directory, is
flushed and fsync'ed, gets its mode (and owner), replaces the target with ``os.replace``, and
the directory is fsync'ed so the rename survives a power cut.
"""

from __future__ import annotations

import hashlib
import os
import tempfile


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # a directory that cannot be opened read-only (rare): the rename still happened
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory; the data itself is synced
    finally:
        os.close(fd)


def _replace(temporary: str, target: str, directory: str) -> None:
    """Rename the finished temporary over the target (removed again if that fails), then make
    the rename durable."""
    try:
        os.replace(temporary, target)
    except BaseException:
        if os.path.lexists(temporary):
            os.unlink(temporary)
        raise
    _fsync_dir(directory)


def atomic_write(
    path: str | os.PathLike[str],
    data: bytes | str,
    mode: int | None = None,
    owner: tuple[int, int] | None = None,
) -> None:
    """Replace ``path`` with ``data`` (str is written as UTF-8), creating parent directories."""
    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    os.makedirs(directory, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    descriptor, temporary = tempfile.mkstemp(
        prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=directory
    )
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        if owner is not None:
            os.chown(temporary, owner[0], owner[1])
        # mkstemp creates 0600; without an explicit mode the file gets what a plain open() would.
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(temporary, mode)
    except BaseException:
        os.unlink(temporary)
        raise
    _replace(temporary, target, directory)


def atomic_symlink(link: str | os.PathLike[str], points_to: str) -> None:
    """Point ``link`` at ``points_to`` in one rename (a reader never finds it missing)."""
    target = os.fspath(link)
    directory = os.path.dirname(os.path.abspath(target))
    temporary = os.path.join(directory, f".{os.path.basename(target)}.{os.getpid()}.tmp")
    if os.path.lexists(temporary):
        os.unlink(temporary)
    os.symlink(points_to, temporary)
    _replace(temporary, target, directory)


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The sha256 of a file of any size (read in 4 MiB blocks: model shards are GBs)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()
