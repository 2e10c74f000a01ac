"""The toolkit files a release carries, their fingerprint, and a reproducible tar of them.

A release holds the exact patcher, patch series and checks that built and verified it, so
it can re-verify itself and a rollback brings back the tool that made it. The fingerprint is
part of the release id: new toolkit code means a new release, never an edited one.
Exit codes: 0 ok, 2 usage or I/O error.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import sys
import tarfile
from pathlib import Path

from specdeploy.node import cli
from specdeploy.node.module_utils.specdeploy_fsio import atomic_write

REPO = Path(__file__).resolve().parents[2]
# What a release needs on the node (the stand-in only matters on sandbox nodes, but shipping
# it everywhere keeps one archive per toolkit version; the production unit never runs it).
INCLUDE = ("specdeploy", "patches/vllm", "tests/standin", "tests/fixtures/vllm-0.20.2")
SINGLE_FILES = ("requirements-node.txt",)
SKIP_PARTS = {"__pycache__"}
SKIP_SUFFIXES = {".pyc", ".pyo"}


def toolkit_files(repo: Path = REPO) -> list[Path]:
    files = [repo / name for name in SINGLE_FILES]
    for top in INCLUDE:
        for path in (repo / top).rglob("*"):
            if (
                path.is_file()
                and not SKIP_PARTS & set(path.parts)
                and path.suffix not in SKIP_SUFFIXES
            ):
                files.append(path)
    return sorted(files, key=lambda p: p.relative_to(repo).as_posix())


def fingerprint(repo: Path = REPO) -> str:
    digest = hashlib.sha256()
    for path in toolkit_files(repo):
        digest.update(path.relative_to(repo).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def write_archive(out: Path, repo: Path = REPO) -> None:
    """A tar with fixed owners, modes and mtimes: the same files give the same bytes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in toolkit_files(repo):
            data = path.read_bytes()
            info = tarfile.TarInfo(path.relative_to(repo).as_posix())
            info.size, info.mtime, info.uid, info.gid = len(data), 0, 0, 0
            info.uname = info.gname = "root"
            info.mode = 0o755 if path.stat().st_mode & 0o100 else 0o644
            tar.addfile(info, io.BytesIO(data))
    atomic_write(out, buffer.getvalue())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--out", type=Path, help="write the archive here")
    group.add_argument("--fingerprint", action="store_true", help="print the sha256 and exit")
    args = parser.parse_args(argv)
    try:
        if args.fingerprint:
            print(fingerprint())
        else:
            write_archive(args.out)
    except OSError as error:
        return cli.usage_error("toolkit_archive", f"--out {args.out}: {cli.reason(error)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
