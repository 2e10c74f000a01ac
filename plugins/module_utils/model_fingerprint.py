"""A cheap fingerprint of a model directory's content (the node probe reports it; the release
plan puts it into the release's inputs, so changed model files under the same path are a new
release, built and validated, not a no-op re-deploy that keeps serving the old weights).

Never reads a model whole: every file's relative path and size; small files (config.json, the
tokenizer, the drafter's provenance) hashed whole; each larger file (the weight shards) by a
sha256 of SAMPLES windows of WINDOW bytes spread over it (start, middle, end). It is the same
on every node that holds the same files (no mtimes, no inode numbers: one rollout plans one
release on every node), and it changes when a shard is replaced by other weights of the same
size (a fine-tune of the same shapes: its bytes differ in every window). Not a proof of
identity: a change confined to bytes between the windows goes unseen (the price of not hashing
hundreds of GB on every deploy). Hidden files and directories (.cache/ of a hub download) are
left out.
"""

from __future__ import annotations

import hashlib
import os

WHOLE_MAX = 16 * 1024 * 1024  # files up to this size are hashed whole
WINDOW = 64 * 1024
SAMPLES = 4


def file_digest(path: str, size: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        if size <= WHOLE_MAX:
            for chunk in iter(lambda: handle.read(1024 * 1024), b""):
                digest.update(chunk)
        else:
            step = (size - WINDOW) // (SAMPLES - 1)
            for index in range(SAMPLES):
                handle.seek(index * step)
                digest.update(handle.read(WINDOW))
    return digest.hexdigest()[:16]


def model_files(directory: str) -> list[dict]:
    """One entry per file under the directory (symlinks followed), sorted by path."""
    found = []
    for top, dirs, files in os.walk(directory, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            if name.startswith("."):
                continue
            path = os.path.join(top, name)
            try:
                size = os.stat(path).st_size
                found.append(
                    {
                        "path": os.path.relpath(path, directory),
                        "size": size,
                        "sha256": file_digest(path, size),
                    }
                )
            except OSError as error:  # unreadable: named in the fingerprint, never skipped
                found.append({"path": os.path.relpath(path, directory), "error": error.strerror})
    return sorted(found, key=lambda entry: entry["path"])


def model_fingerprint(directory: str) -> str:
    """The directory's fingerprint (16 hex digits), or "" when it is not a directory."""
    if not os.path.isdir(directory):
        return ""
    entries = model_files(directory)
    text = "\n".join(
        f"{e['path']}\t{e.get('size', '')}\t{e.get('sha256', e.get('error', ''))}" for e in entries
    )
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:16]
