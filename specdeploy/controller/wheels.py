"""Fetch vLLM wheels from PyPI once, into the cache, and unpack only the members needed.

Layout under the cache dir (``$SPECDEPLOY_CACHE`` or ``~/.cache/specdeploy``)::

    wheels/vllm-X-*.whl          the wheel, downloaded once with ``pip download --no-deps``
    vllm-src/X/vllm/...          members extracted from it (only the ones asked for)
    vllm-src/X/vllm-X.dist-info/ the wheel's dist-info (METADATA, RECORD, ...)
    newest-vllm.json             "the newest vLLM on PyPI", cached for a day

CLI::

    python -m specdeploy.controller.wheels fetch 0.16.0 0.17.1 ...  # download, extract targets
    python -m specdeploy.controller.wheels path 0.16.0   # the wheel's path (fetched)
    python -m specdeploy.controller.wheels newest [--refresh]         # newest vLLM version on PyPI
    python -m specdeploy.controller.wheels extract 0.16.0 vllm/config/speculative.py ...
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from specdeploy.node import cli

NEWEST_TTL_S = 24 * 3600

# Members every patch test needs besides the patch targets themselves.
DEFAULT_MEMBERS: tuple[str, ...] = (
    "vllm/config/speculative.py",
    "vllm/model_executor/models/deepseek_v2.py",
    "vllm/model_executor/models/kimi_k25.py",
    "vllm/model_executor/models/interfaces.py",
    "vllm/model_executor/models/registry.py",
    "vllm/v1/spec_decode/",  # a trailing slash means every member under that folder
)


def cache_dir() -> Path:
    """The cache root: ``$SPECDEPLOY_CACHE`` or ``~/.cache/specdeploy``."""
    env = os.environ.get("SPECDEPLOY_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "specdeploy"


def wheels_dir() -> Path:
    return cache_dir() / "wheels"


def src_dir(version: str) -> Path:
    return cache_dir() / "vllm-src" / version


def _find_wheel(version: str) -> Path | None:
    d = wheels_dir()
    if not d.is_dir():
        return None
    hits = sorted(d.glob(f"vllm-{version}-*.whl"))
    return hits[0] if hits else None


def _pip() -> list[str]:
    return [sys.executable, "-m", "pip"]


def fetch_wheel(version: str, *, quiet: bool = True) -> Path:
    """Return the cached wheel of vllm==version, downloading it (no deps) the first time."""
    found = _find_wheel(version)
    if found is not None and zipfile.is_zipfile(found):
        return found
    d = wheels_dir()
    d.mkdir(parents=True, exist_ok=True)
    cmd = [
        *_pip(),
        "download",
        "--no-deps",
        "--only-binary=:all:",
        f"vllm=={version}",
        "-d",
        str(d),
    ]
    if quiet:
        cmd.append("-q")
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    found = _find_wheel(version)
    if proc.returncode != 0 or found is None:
        raise RuntimeError(
            f"pip download vllm=={version} failed (rc={proc.returncode}): "
            f"{(proc.stderr or proc.stdout).strip()[-2000:]}"
        )
    return found


def extract(version: str, members: list[str] | tuple[str, ...] = DEFAULT_MEMBERS) -> Path:
    """Extract the given members (plus the dist-info) of the wheel into vllm-src/<version>/.

    Idempotent: members already present are not rewritten. Returns the directory, which
    looks like a (partial) site-packages.
    """
    wheel = fetch_wheel(version)
    dest = src_dir(version)
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        dist_info = [n for n in names if re.match(r"^vllm-[^/]+\.dist-info/", n)]
        wanted: list[str] = []
        missing: list[str] = []
        for m in members:
            if m.endswith("/"):
                under = sorted(n for n in names if n.startswith(m) and not n.endswith("/"))
                wanted.extend(under)
                if not under:
                    missing.append(m)
            elif m in names:
                wanted.append(m)
            else:
                missing.append(m)
        for name in [*wanted, *dist_info]:
            target = dest / name
            if target.is_file():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(target.name + ".part")
            tmp.write_bytes(zf.read(name))
            tmp.replace(target)
    marker = dest / ".missing-members"
    if missing:
        # Not fatal: native versions may lack a member older ones have (or vice versa).
        marker.write_text("\n".join(sorted(missing)) + "\n")
    elif marker.exists():
        marker.unlink()
    return dest


def read_member(version: str, member: str) -> bytes:
    """Read one member of the cached wheel without extracting it."""
    with zipfile.ZipFile(fetch_wheel(version)) as zf:
        return zf.read(member)


def _version_key(v: str) -> tuple[int, ...]:
    parts = []
    for p in re.split(r"[.+-]", v):
        if p.isdigit():
            parts.append(int(p))
        else:
            break
    return tuple(parts)


def _query_newest() -> str:
    proc = subprocess.run(
        [*_pip(), "index", "versions", "vllm"], capture_output=True, text=True, check=False
    )
    m = re.search(r"^vllm \(([^)]+)\)", proc.stdout, re.M)
    if proc.returncode == 0 and m:
        return m.group(1)
    # Fallback: pip download without a pin resolves the newest release.
    tmp = cache_dir() / "newest-probe"
    tmp.mkdir(parents=True, exist_ok=True)
    proc2 = subprocess.run(
        [*_pip(), "download", "--no-deps", "-q", "vllm", "-d", str(tmp)],
        capture_output=True,
        text=True,
        check=False,
    )
    versions = [
        mm.group(1) for p in tmp.glob("vllm-*.whl") if (mm := re.match(r"vllm-([^-]+)-", p.name))
    ]
    if proc2.returncode != 0 or not versions:
        raise RuntimeError(
            "cannot find the newest vLLM on PyPI: "
            + (proc.stderr.strip() or proc2.stderr.strip())[-1000:]
        )
    newest = max(versions, key=_version_key)
    wheels_dir().mkdir(parents=True, exist_ok=True)
    for p in tmp.glob("vllm-*.whl"):
        p.replace(wheels_dir() / p.name)
    return newest


def newest_version(*, refresh: bool = False, ttl_s: int = NEWEST_TTL_S) -> str:
    """The newest vLLM release on PyPI; the answer is cached for ``ttl_s`` (a day)."""
    f = cache_dir() / "newest-vllm.json"
    if not refresh and f.is_file():
        try:
            data = json.loads(f.read_text())
            if time.time() - float(data["checked_at"]) < ttl_s:
                return str(data["version"])
        except (ValueError, KeyError, TypeError):
            pass
    try:
        v = _query_newest()
    except RuntimeError:
        if f.is_file():  # stale answer beats a network flake
            return str(json.loads(f.read_text())["version"])
        raise
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps({"version": v, "checked_at": time.time()}) + "\n")
    return v


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specdeploy.controller.wheels", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help="download wheels and extract the patch targets")
    f.add_argument("versions", nargs="+", help="vLLM versions, or 'newest'")
    p = sub.add_parser("path", help="print the cached wheel path")
    p.add_argument("version")
    n = sub.add_parser("newest", help="print the newest vLLM version on PyPI (cached a day)")
    n.add_argument("--refresh", action="store_true")
    e = sub.add_parser("extract", help="extract members into vllm-src/<version>/")
    e.add_argument("version")
    e.add_argument("members", nargs="*")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "fetch":
            for v in args.versions:
                ver = newest_version() if v == "newest" else v
                t0 = time.monotonic()
                whl = fetch_wheel(ver)
                dest = extract(ver)
                print(f"{ver}: {whl} -> {dest} ({time.monotonic() - t0:.1f}s)")
        elif args.cmd == "path":
            print(fetch_wheel(args.version))
        elif args.cmd == "newest":
            print(newest_version(refresh=args.refresh))
        elif args.cmd == "extract":
            print(extract(args.version, tuple(args.members) or DEFAULT_MEMBERS))
    except RuntimeError as exc:
        return cli.usage_error("wheels", exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
