"""The wheelhouse the sandbox nodes install from: the controller's wheels, vLLM's without kernels.

`make prefetch` fills <cache>/wheelhouse with the real wheels (vLLM, SGLang, uv, the node's own
pins). The nodes see <cache>/node-wheelhouse read-only at /srv/wheelhouse: the same wheels,
hard-linked, except that in each vLLM wheel every compiled extension module (``*.so``) is an
empty file, with RECORD rewritten to match. Everything else in it is the wheel's own, byte for
byte: every Python file the patch series, the checks and the stand-in read, and the dist-info.

Why: a sandbox node has no GPU and runs the stand-in server (tests/standin), so nothing loads
those kernels, yet they are 98% of the installed size (0.16.0: 1,223 of 1,244 MB). Each first
deploy of `make test` (34 per run) unpacked and wrote them through a node's overlay, and the
controller-wheelhouse tests copied them to every node over SSH. The patch tier
(tests/patches) and the GPU tier use the real wheels, untouched, and so does `make bench`
(SPECDEPLOY_SANDBOX_NODE_WHEELS=real: its figures stand for a real node, which installs them).
"""

from __future__ import annotations

import base64
import contextlib
import csv
import hashlib
import io
import json
import os
import zipfile
import zlib
from pathlib import Path

from testbed.sandbox.config import SandboxError, cache_dir
from testbed.sandbox.host import flocked

# kernelless (the default) or real: the vLLM wheels the nodes see at /srv/wheelhouse.
SWITCH = "SPECDEPLOY_SANDBOX_NODE_WHEELS"

# Bumped when what a derived wheel holds changes, so older derivations are made again.
RECIPE = 1
STAMP = ".derived.json"
README = """\
The sandbox nodes' wheelhouse (tests/testbed/sandbox/node_wheelhouse.py): the controller's
wheels, hard-linked, except that the compiled extension modules (*.so) of each vLLM wheel are
empty files (no GPU here; the stand-in server never loads them). Every other file is the real
wheel's own.
"""


def source_wheelhouse() -> Path:
    """The real wheels (`make prefetch`)."""
    return cache_dir() / "wheelhouse"


def real_wheels_wanted() -> bool:
    value = os.environ.get(SWITCH, "kernelless").strip().lower()
    if value not in ("kernelless", "real"):
        raise SandboxError(f"{SWITCH} must be kernelless or real, not {value!r}")
    return value == "real"


def node_wheelhouse() -> Path:
    """The directory the nodes see at /srv/wheelhouse."""
    return source_wheelhouse() if real_wheels_wanted() else cache_dir() / "node-wheelhouse"


def is_kernel(name: str) -> bool:
    return name.endswith(".so")


def record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode()}"


def without_kernels(source: Path, target: Path) -> None:
    """Write `source` (a wheel) to `target` with every ``*.so`` member empty and RECORD to match.

    Written to a temporary name and renamed: a half-written wheel is never in the wheelhouse."""
    partial = target.with_name(f".{target.name}.partial")
    rows = io.StringIO()
    record = csv.writer(rows, lineterminator="\n")  # quotes names with commas, as wheels need
    record_info = None
    try:
        with zipfile.ZipFile(source) as wheel, zipfile.ZipFile(partial, "w") as out:
            for info in wheel.infolist():
                if info.filename.endswith(".dist-info/RECORD"):
                    record_info = info
                    continue
                data = b"" if is_kernel(info.filename) else wheel.read(info)
                out.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
                if not info.is_dir():
                    record.writerow([info.filename, record_hash(data), len(data)])
            if record_info is not None:
                record.writerow([record_info.filename, "", ""])
                out.writestr(record_info, rows.getvalue(), compress_type=zipfile.ZIP_DEFLATED)
    except (OSError, EOFError, zipfile.BadZipFile, zlib.error) as error:
        partial.unlink(missing_ok=True)
        raise SandboxError(f"{source}: not a readable wheel ({error}); remove it and run make "
                           "prefetch to download it again") from None  # fmt: skip
    if record_info is None:
        partial.unlink()
        raise SandboxError(f"{source}: no .dist-info/RECORD, not a wheel")
    os.replace(partial, target)


def fingerprint(path: Path) -> list[int]:
    stat = path.stat()
    return [stat.st_size, stat.st_mtime_ns, stat.st_ino]


def link_or_copy(source: Path, target: Path) -> None:
    partial = target.with_name(f".{target.name}.partial")
    partial.unlink(missing_ok=True)
    try:
        os.link(source, partial)
    except OSError:
        partial.write_bytes(source.read_bytes())
    os.replace(partial, target)


def ensure_node_wheelhouse() -> Path:
    """Bring the node wheelhouse up to date with the source; cheap when it is (a stat per wheel).

    One builder at a time per cache (the test sessions boot nodes at once); a derived wheel is
    made again when its source wheel changed (size, mtime, inode) or RECIPE did."""
    source_dir = source_wheelhouse()
    source_dir.mkdir(parents=True, exist_ok=True)
    if real_wheels_wanted():
        return source_dir
    target_dir = node_wheelhouse()
    with flocked(cache_dir() / ".node-wheelhouse.lock"):
        target_dir.mkdir(parents=True, exist_ok=True)
        stamp_path = target_dir / STAMP
        try:
            stamps = json.loads(stamp_path.read_text())
        except (OSError, ValueError):
            stamps = {}
        if stamps.get("recipe") != RECIPE:
            stamps = {"recipe": RECIPE}
        wheels = {path.name: path for path in source_dir.glob("*.whl")}
        for name, source in sorted(wheels.items()):
            target = target_dir / name
            if name.startswith("vllm-"):
                key = fingerprint(source)
                if stamps.get(name) != key or not target.is_file():
                    without_kernels(source, target)
                    stamps[name] = key
            elif not target.is_file() or not os.path.samefile(source, target):
                link_or_copy(source, target)
        for stale in target_dir.glob("*.whl"):
            if stale.name not in wheels:
                stale.unlink()
                stamps.pop(stale.name, None)
        readme = target_dir / "README"
        if not readme.is_file() or readme.read_text() != README:
            readme.write_text(README)
        partial = stamp_path.with_name(f"{STAMP}.partial")
        partial.write_text(json.dumps(stamps, sort_keys=True))
        os.replace(partial, stamp_path)
    with contextlib.suppress(OSError):
        target_dir.chmod(0o755)
    return target_dir
