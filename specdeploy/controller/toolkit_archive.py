"""The files shipped to a node, their fingerprint, and a reproducible tar of them.

Two parts, each with its own fingerprint and archive:
- ``release``: what runs on the node (``specdeploy/__init__.py``, ``specdeploy/node/``, the
  collection's ``plugins/module_utils/`` packed as ``specdeploy/node/module_utils/``, the
  patch series, ``requirements-node.txt``). A release holds its own copy, so it re-verifies
  itself with the patcher that built it and a rollback brings that exact tool back. This
  fingerprint is part of the release id: new node code means a new release. Controller code,
  tests, the bench, the demo and the stand-in are not in it, so editing them rebuilds nothing.
- ``standin``: the CI stand-in for the GPU server and the recorded vLLM (and SGLang) output it
  replays.
  Shipped to sandbox nodes only (specdeploy_server_standin), into a directory of its own,
  never into a release and never into the release id.
Exit codes: 0 ok, 2 usage or I/O error.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from specdeploy.node import cli
from specdeploy.node.module_utils.specdeploy_fsio import atomic_write

REPO = Path(__file__).resolve().parents[2]
SKIP_PARTS = {"__pycache__"}
SKIP_SUFFIXES = {".pyc", ".pyo"}


@dataclass(frozen=True)
class Part:
    """Directories walked recursively, single files, paths (relative) left out, and directories
    packed under another name (source, name in the archive)."""

    dirs: tuple[str, ...]
    files: tuple[str, ...]
    exclude: tuple[str, ...] = ()
    moved: tuple[tuple[str, str], ...] = ()


# The stdlib helpers the collection's modules and the node package share live once, in the
# collection's plugins/module_utils; a release (and a node_zipapp file) holds them where the node
# package imports them, specdeploy/node/module_utils (see that package's __init__).
MODULE_UTILS = ("plugins/module_utils", "specdeploy/node/module_utils")


PARTS = {
    "release": Part(
        dirs=("specdeploy/node", "patches/vllm"),
        files=("specdeploy/__init__.py", "requirements-node.txt"),
        moved=(MODULE_UTILS,),
    ),
    "standin": Part(
        dirs=("tests/standin", "tests/fixtures/vllm-0.20.2"),
        # the SGLang dialect's /metrics templates (the recorded SGLang 0.5.15 exposition)
        files=(
            "tests/fixtures/sglang-0.5.15-h200/metrics-spec.txt",
            "tests/fixtures/sglang-0.5.15-h200/metrics-nospec.txt",
        ),
        # The harness drives the stand-in from tests; the profiles are test data (the profile
        # a node runs is rendered from specdeploy_standin_profile into its release).
        exclude=(
            "tests/standin/harness.py",
            "tests/standin/fit_profile.py",
            "tests/standin/profiles",
            "tests/standin/README.md",
        ),
    ),
}


def _excluded(relative: str, part: Part) -> bool:
    return any(relative == e or relative.startswith(e + "/") for e in part.exclude)


def _wanted(path: Path, relative: str, spec: Part) -> bool:
    return (
        path.is_file()
        and not SKIP_PARTS & set(path.parts)
        and path.suffix not in SKIP_SUFFIXES
        and not path.name.startswith("test_")
        and not _excluded(relative, spec)
    )


def toolkit_members(part: str = "release", repo: Path = REPO) -> list[tuple[str, Path]]:
    """(name in the archive, source file), sorted by name."""
    spec = PARTS[part]
    members = [(name, repo / name) for name in spec.files]
    for top in spec.dirs:
        for path in (repo / top).rglob("*"):
            relative = path.relative_to(repo).as_posix()
            if _wanted(path, relative, spec):
                members.append((relative, path))
    for source, target in spec.moved:
        for path in (repo / source).rglob("*"):
            relative = path.relative_to(repo).as_posix()
            if _wanted(path, relative, spec):
                members.append((f"{target}/{path.relative_to(repo / source).as_posix()}", path))
    return sorted(members)


def toolkit_files(part: str = "release", repo: Path = REPO) -> list[str]:
    """The names in the archive, sorted."""
    return [name for name, _ in toolkit_members(part, repo)]


def fingerprint(part: str = "release", repo: Path = REPO) -> str:
    digest = hashlib.sha256()
    for name, path in toolkit_members(part, repo):
        digest.update(name.encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def write_archive(out: Path, part: str = "release", repo: Path = REPO) -> None:
    """A tar with fixed owners, modes and mtimes: the same files give the same bytes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, path in toolkit_members(part, repo):
            data = path.read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.uid, info.gid = len(data), 0, 0, 0
            info.uname = info.gname = "root"
            info.mode = 0o755 if path.stat().st_mode & 0o100 else 0o644
            tar.addfile(info, io.BytesIO(data))
    atomic_write(out, buffer.getvalue())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--part", choices=sorted(PARTS), default="release", help="which files (default release)"
    )
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--out", type=Path, help="write the archive here")
    group.add_argument("--fingerprint", action="store_true", help="print the sha256 and exit")
    args = parser.parse_args(argv)
    try:
        if args.fingerprint:
            print(fingerprint(args.part))
        else:
            write_archive(args.out, args.part)
    except OSError as error:
        return cli.usage_error("toolkit_archive", f"--out {args.out}: {cli.reason(error)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
