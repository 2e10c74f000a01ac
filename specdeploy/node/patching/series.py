"""The patch series of a vLLM version: the manifest, the unified-diff engine, hashes and the
pristine sources of the targets (node-side, stdlib + PyYAML).

The bottom of ``specdeploy.node.patching``: the patcher (``patches``) and the static
verification (``patch_verify``) both build on it, and it imports neither.
"""

from __future__ import annotations

import hashlib
import os
import re
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from specdeploy.node import cli
from specdeploy.node.module_utils.specdeploy_fsio import sha256_file as streamed_sha256
from specdeploy.node.module_utils.versions import public_version, version_key

MANIFEST_ENV = "SPECDEPLOY_PATCH_MANIFEST"
STATE_FILE = "specdeploy-state.json"


class PatchError(Exception):
    """A check failed (exit 1)."""


class UsageError(Exception):
    """Usage or environment error (exit 2)."""


# --------------------------------------------------------------------------- hashing


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str | None:
    """None for a missing file (a target the series expects)."""
    try:
        return streamed_sha256(path)
    except FileNotFoundError:
        return None


def series_sha256(patches: list[tuple[str, bytes]]) -> str:
    """sha256 over (name, NUL, content, NUL) of each patch file, in series order."""
    h = hashlib.sha256()
    for name, content in patches:
        h.update(name.encode() + b"\0" + content + b"\0")
    return h.hexdigest()


# --------------------------------------------------------------------------- unified diffs


@dataclass
class Hunk:
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    lines: list[tuple[str, str]]  # (' ' | '-' | '+', text with its line ending)

    def old_lines(self) -> list[str]:
        return [t for tag, t in self.lines if tag in " -"]

    def new_lines(self) -> list[str]:
        return [t for tag, t in self.lines if tag in " +"]


@dataclass
class FilePatch:
    old_path: str
    new_path: str
    hunks: list[Hunk] = field(default_factory=list)

    def target(self, strip: int) -> str:
        p = self.new_path if self.new_path != "/dev/null" else self.old_path
        parts = p.split("/")
        return "/".join(parts[strip:])


_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def parse_unified_diff(text: str) -> list[FilePatch]:
    """Parse a unified diff; text before the first ``--- `` line (the header) is ignored."""
    lines = text.splitlines(keepends=True)
    out: list[FilePatch] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old = line[4:].rstrip("\r\n").split("\t")[0]
            new = lines[i + 1][4:].rstrip("\r\n").split("\t")[0]
            fp = FilePatch(old, new)
            out.append(fp)
            i += 2
            while i < len(lines) and lines[i].startswith("@@"):
                m = _HUNK_RE.match(lines[i])
                if not m:
                    raise PatchError(f"bad hunk header: {lines[i].rstrip()}")
                h = Hunk(
                    int(m.group(1)),
                    int(m.group(2) or 1),
                    int(m.group(3)),
                    int(m.group(4) or 1),
                    [],
                )
                i += 1
                n_old = n_new = 0
                while i < len(lines) and (n_old < h.old_len or n_new < h.new_len):
                    ln = lines[i]
                    tag = ln[:1]
                    if tag == "\\":  # "\ No newline at end of file"
                        i += 1
                        continue
                    if tag not in " -+":
                        if ln in ("\n", "\r\n"):  # blank context line stripped of its space
                            tag, ln = " ", " " + ln
                        else:
                            raise PatchError(f"bad hunk line: {ln.rstrip()}")
                    h.lines.append((tag, ln[1:]))
                    if tag in " -":
                        n_old += 1
                    if tag in " +":
                        n_new += 1
                    i += 1
                    if i < len(lines) and lines[i].startswith("\\"):
                        t, s = h.lines[-1]
                        h.lines[-1] = (t, s.rstrip("\r\n"))
                        i += 1
                fp.hunks.append(h)
            continue
        i += 1
    if not out:
        raise PatchError("no file patches found")
    return out


def apply_hunks(content: str, fp: FilePatch, *, reverse: bool = False) -> str:
    """Apply (or reverse) every hunk with exact context at its line number."""
    src = content.splitlines(keepends=True)
    result: list[str] = []
    pos = 0
    for h in fp.hunks:
        old = h.new_lines() if reverse else h.old_lines()
        new = h.old_lines() if reverse else h.new_lines()
        start = (h.new_start if reverse else h.old_start) - 1
        if len(old) == 0:
            start += 1  # pure insertion: the header names the line before
        if start < pos or src[start : start + len(old)] != old:
            raise PatchError(
                f"hunk @@ -{h.old_start},{h.old_len} +{h.new_start},{h.new_len} @@ "
                f"does not match {fp.target(1)} exactly"
            )
        result.extend(src[pos:start])
        result.extend(new)
        pos = start + len(old)
    result.extend(src[pos:])
    return "".join(result)


# --------------------------------------------------------------------------- manifest


def default_manifest() -> Path:
    env = os.environ.get(MANIFEST_ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "patches" / "vllm" / "manifest.yml"


@dataclass
class Manifest:
    path: Path
    data: dict[str, Any]

    @classmethod
    def load(cls, path: Path | None) -> Manifest:
        p = path or default_manifest()
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise UsageError(f"--manifest {p}: manifest not found") from exc
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise UsageError(f"--manifest {p}: {cli.reason(exc)}") from exc
        if not isinstance(data, dict) or "versions" not in data or "native_from" not in data:
            raise UsageError(f"--manifest {p}: missing 'versions' or 'native_from'")
        return cls(p, data)

    @property
    def native_from(self) -> str:
        return str(self.data["native_from"])

    @property
    def strip(self) -> int:
        return int(self.data.get("patch_strip", 1))

    def versions(self) -> dict[str, dict[str, Any]]:
        return {str(k): v for k, v in self.data["versions"].items()}

    def patch_versions(self) -> list[str]:
        return sorted(
            (v for v, e in self.versions().items() if e.get("kind") == "patch"), key=version_key
        )

    def kind(self, version: str) -> str:
        """'patch', 'native' or 'unsupported' (a local label does not change the release)."""
        entry = self.versions().get(public_version(version))
        if entry is not None:
            return str(entry.get("kind", "patch"))
        if version_key(version) >= version_key(self.native_from):
            return "native"
        return "unsupported"

    def entry(self, version: str) -> dict[str, Any]:
        return self.versions().get(public_version(version), {})

    def series(self, version: str) -> list[dict[str, Any]]:
        return list(self.entry(version).get("series") or [])

    def patch_path(self, version: str, name: str) -> Path:
        return self.path.parent / public_version(version) / name

    def read_series(self, version: str) -> list[tuple[str, bytes]]:
        out = []
        for s in self.series(version):
            p = self.patch_path(version, s["file"])
            try:
                out.append((s["file"], p.read_bytes()))
            except FileNotFoundError as exc:
                raise UsageError(f"patch file missing: {p}") from exc
        return out

    def targets(self, version: str) -> dict[str, dict[str, str]]:
        return dict(self.entry(version).get("targets") or {})

    def unsupported_message(self, version: str) -> str:
        return (
            f"vLLM {version} is not supported: patch series exist for "
            f"{', '.join(self.patch_versions())}; versions >= {self.native_from} are native"
        )


# --------------------------------------------------------------------------- site-packages


def default_site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def detect_version(site_packages: Path) -> str:
    infos = sorted(site_packages.glob("vllm-*.dist-info"))
    if not infos:
        raise UsageError(f"--site-packages {site_packages}: no vllm-*.dist-info; pass --version")
    versions = set()
    for d in infos:
        meta = d / "METADATA"
        v = None
        if meta.is_file():
            m = re.search(r"^Version:\s*(\S+)", meta.read_text(errors="replace"), re.M)
            v = m.group(1) if m else None
        if v is None:
            m2 = re.match(r"vllm-(.+)\.dist-info$", d.name)
            v = m2.group(1) if m2 else None
        if v:
            versions.add(v)
    if len(versions) != 1:
        raise UsageError(f"ambiguous vLLM dist-info in {site_packages}: {sorted(versions)}")
    return versions.pop()


def default_backup_dir(site_packages: Path) -> Path:
    return site_packages.parent / "specdeploy-pristine"


def pristine_sources(
    manifest: Manifest, site_packages: Path, version: str, backup_dir: Path
) -> dict[str, bytes]:
    """Pristine content of every target: current file, backup, or series reversed."""
    out: dict[str, bytes] = {}
    targets = manifest.targets(version)
    for rel, t in targets.items():
        cur = (site_packages / rel).read_bytes()
        if sha256_bytes(cur) == t["pristine_sha256"]:
            out[rel] = cur
            continue
        bk = (backup_dir / version) / rel
        if bk.is_file() and sha256_file(bk) == t["pristine_sha256"]:
            out[rel] = bk.read_bytes()
    missing = [r for r in targets if r not in out]
    if missing:
        text = {r: (site_packages / r).read_bytes().decode() for r in missing}
        series = manifest.read_series(version)
        for _name, raw in reversed(series):
            for fp in reversed(parse_unified_diff(raw.decode())):
                rel = fp.target(manifest.strip)
                if rel in text:
                    text[rel] = apply_hunks(text[rel], fp, reverse=True)
        for r in missing:
            data = text[r].encode()
            if sha256_bytes(data) != targets[r]["pristine_sha256"]:
                raise PatchError(f"{r}: cannot reconstruct the pristine file")
            out[r] = data
    return out
