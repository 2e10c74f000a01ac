"""Apply, check, verify and revert the versioned vLLM patch series (node-side).

Runs ON the node with the release venv's python (stdlib + PyYAML + pyflakes):

    python -m specdeploy.node.patching.patches {list,status,check,apply,revert,verify}
        [--site-packages PATH] [--version X] [--manifest PATH] [--backup-dir PATH] [--json]

* ``--site-packages``: the directory holding ``vllm/`` (default: the running interpreter's
  purelib). ``--version``: default read from ``vllm-*.dist-info`` in site-packages.
* ``--manifest``: default ``$SPECDEPLOY_PATCH_MANIFEST``, else ``patches/vllm/manifest.yml``
  next to the package (repo root, or ``<release>/toolkit/`` when copied into a release).
* ``--backup-dir``: pristine copies, default ``<site-packages>/../specdeploy-pristine``.

Exit codes: 0 ok (including "unchanged"), 1 check failed (drift, verification failure),
2 usage/environment error (unsupported version, no vLLM found, bad manifest).

The patch application is pure Python: unified diffs are parsed and every hunk must match its
context exactly at its line number (no fuzz). Apply is all-or-nothing: every target's pristine
sha256 is checked and every patch applied in memory (and the result compared with the
manifest's patched sha256) before any file is written; after writing, the static
verification runs and a failure restores the pristine files.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdeploy.node import cli
from specdeploy.node.module_utils.specdeploy_fsio import atomic_write
from specdeploy.node.module_utils.versions import version_key
from specdeploy.node.patching import patch_verify
from specdeploy.node.patching.series import (  # noqa: F401  (re-exported: the patcher's API)
    MANIFEST_ENV,
    STATE_FILE,
    FilePatch,
    Hunk,
    Manifest,
    PatchError,
    UsageError,
    apply_hunks,
    default_backup_dir,
    default_manifest,
    default_site_packages,
    detect_version,
    parse_unified_diff,
    pristine_sources,
    series_sha256,
    sha256_bytes,
    sha256_file,
)


def _drop_pycache(path: Path) -> None:
    cache = path.parent / "__pycache__"
    if cache.is_dir():
        for pyc in cache.glob(f"{path.stem}.*.pyc"):
            pyc.unlink(missing_ok=True)


# --------------------------------------------------------------------------- core


@dataclass
class FileState:
    path: str
    state: str  # pristine | applied | drifted | missing
    expected_pristine: str
    expected_patched: str
    found: str | None


@dataclass
class Patcher:
    manifest: Manifest
    site_packages: Path
    version: str
    backup_dir: Path

    @property
    def kind(self) -> str:
        return self.manifest.kind(self.version)

    def require_supported(self) -> None:
        if self.kind == "unsupported":
            raise UsageError(self.manifest.unsupported_message(self.version))

    def vbackup(self) -> Path:
        return self.backup_dir / self.version

    # ---- state

    def file_states(self) -> list[FileState]:
        out = []
        for rel, t in sorted(self.manifest.targets(self.version).items()):
            found = sha256_file(self.site_packages / rel)
            if found is None:
                st = "missing"
            elif found == t["pristine_sha256"]:
                st = "pristine"
            elif found == t["patched_sha256"]:
                st = "applied"
            else:
                st = "drifted"
            out.append(FileState(rel, st, t["pristine_sha256"], t["patched_sha256"], found))
        return out

    def state(self) -> str:
        if self.kind == "native":
            return "native"
        states = {f.state for f in self.file_states()}
        if states == {"pristine"}:
            return "pristine"
        if states == {"applied"}:
            return "applied"
        return "drifted"

    def drift_messages(self, files: list[FileState] | None = None) -> list[str]:
        msgs = []
        for f in files if files is not None else self.file_states():
            if f.state in ("drifted", "missing"):
                msgs.append(
                    f"{f.path}: pristine sha256 mismatch: expected {f.expected_pristine} "
                    f"(or patched {f.expected_patched}), found {f.found or 'no file'}"
                )
        return msgs

    # ---- in-memory application

    def compute_patched(self) -> dict[str, bytes]:
        """Apply the whole series in memory to the pristine files; return new contents."""
        strip = self.manifest.strip
        targets = self.manifest.targets(self.version)
        current: dict[str, str] = {}
        for name, raw in self.manifest.read_series(self.version):
            for fp in parse_unified_diff(raw.decode("utf-8")):
                rel = fp.target(strip)
                if rel not in targets:
                    raise PatchError(f"{name}: touches {rel}, which the manifest does not list")
                if rel not in current:
                    current[rel] = (self.site_packages / rel).read_bytes().decode("utf-8")
                try:
                    current[rel] = apply_hunks(current[rel], fp)
                except PatchError as exc:
                    raise PatchError(f"{name}: {exc}") from exc
        out = {rel: s.encode("utf-8") for rel, s in current.items()}
        for rel, t in targets.items():
            if rel not in out:
                raise PatchError(f"manifest lists {rel} but no patch touches it")
            got = sha256_bytes(out[rel])
            if got != t["patched_sha256"]:
                raise PatchError(
                    f"{rel}: the series gives sha256 {got}, manifest expects "
                    f"{t['patched_sha256']} (patch files and manifest disagree)"
                )
        return out

    def pristine_sources(self) -> dict[str, bytes]:
        """Pristine content of every target: current file, backup, or series reversed."""
        return pristine_sources(self.manifest, self.site_packages, self.version, self.backup_dir)

    # ---- operations

    def check(self) -> tuple[str, list[str]]:
        """('would-apply'|'unchanged'|'native', messages); raises PatchError on drift."""
        self.require_supported()
        if self.kind == "native":
            return "native", []
        files = self.file_states()
        st = {f.state for f in files}
        if st == {"applied"}:
            return "unchanged", []
        if st != {"pristine"}:
            raise PatchError("; ".join(self.drift_messages(files)) or "mixed state")
        self.compute_patched()
        return "would-apply", []

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """One apply/revert at a time per site-packages (flock on the backup dir)."""
        self.vbackup().mkdir(parents=True, exist_ok=True)
        with open(self.vbackup() / ".lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            yield

    def apply(self) -> str:
        result, _ = self.check()  # before the lock: a drifted/applied run creates nothing
        if result != "would-apply":
            return result
        with self._locked():
            return self._apply()

    def _apply(self) -> str:
        """Returns 'applied', 'unchanged' or 'native'. All-or-nothing."""
        result, _ = self.check()
        if result != "would-apply":
            return result
        new = self.compute_patched()
        # 1. pristine backups (verified), 2. write targets, 3. verify, else restore.
        state = {
            "version": self.version,
            "series": [s["file"] for s in self.manifest.series(self.version)],
            "series_sha256": series_sha256(self.manifest.read_series(self.version)),
            "files": {},
        }
        for rel in new:
            src = self.site_packages / rel
            bk = self.vbackup() / rel
            data = src.read_bytes()
            if not (bk.is_file() and bk.read_bytes() == data):
                atomic_write(bk, data)
            if sha256_file(bk) != self.manifest.targets(self.version)[rel]["pristine_sha256"]:
                raise PatchError(f"backup of {rel} does not match the pristine hash")
            state["files"][rel] = {
                "pristine_sha256": sha256_bytes(data),
                "patched_sha256": sha256_bytes(new[rel]),
            }
        written: list[str] = []
        try:
            for rel, data in new.items():
                p = self.site_packages / rel
                atomic_write(p, data, mode=p.stat().st_mode & 0o7777)
                _drop_pycache(p)
                written.append(rel)
            report = patch_verify.verify(self.site_packages, self.version, self.manifest)
            if not report.ok:
                raise PatchError(
                    "verification failed after apply: "
                    + "; ".join(f"{c.name}: {c.detail}" for c in report.failed())
                )
        except BaseException:
            self._restore(written)
            raise
        atomic_write(self.vbackup() / STATE_FILE, json.dumps(state, indent=2).encode())
        return "applied"

    def _restore(self, rels: list[str]) -> None:
        for rel in rels:
            bk = self.vbackup() / rel
            p = self.site_packages / rel
            atomic_write(p, bk.read_bytes(), mode=p.stat().st_mode & 0o7777)
            _drop_pycache(p)

    def revert(self, *, force: bool = False) -> str:
        """Restore byte-identical pristine files. Returns 'reverted', 'unchanged', 'native'."""
        self.require_supported()
        if self.kind == "native":
            return "native"
        if all(f.state == "pristine" for f in self.file_states()):
            return "unchanged"
        with self._locked():
            return self._revert(force=force)

    def _revert(self, *, force: bool = False) -> str:
        """Restore byte-identical pristine files. Returns 'reverted', 'unchanged', 'native'."""
        self.require_supported()
        if self.kind == "native":
            return "native"
        files = self.file_states()
        if all(f.state == "pristine" for f in files):
            return "unchanged"
        recorded: dict[str, Any] = {}
        sf = self.vbackup() / STATE_FILE
        if sf.is_file():
            recorded = json.loads(sf.read_text()).get("files", {})
        plan: dict[str, bytes] = {}
        for f in files:
            if f.state == "pristine":
                continue
            ok_hashes = {f.expected_patched}
            if f.path in recorded:
                ok_hashes.add(recorded[f.path]["patched_sha256"])
            if f.found not in ok_hashes and not force:
                raise PatchError(
                    f"{f.path}: neither pristine nor the patched file this toolkit wrote "
                    f"(found {f.found}); refusing to overwrite a hand edit (use --force)"
                )
            bk = self.vbackup() / f.path
            if bk.is_file() and sha256_file(bk) == f.expected_pristine:
                plan[f.path] = bk.read_bytes()
            elif f.found == f.expected_patched:
                # no backup: reverse the series (works while the patch files are unchanged)
                plan[f.path] = self.pristine_sources()[f.path]
            else:
                raise PatchError(f"{f.path}: no pristine backup in {self.vbackup()}")
        for rel, data in plan.items():
            if sha256_bytes(data) != self.manifest.targets(self.version)[rel]["pristine_sha256"]:
                raise PatchError(f"{rel}: restored content does not match the pristine hash")
        for rel, data in plan.items():
            p = self.site_packages / rel
            atomic_write(p, data, mode=p.stat().st_mode & 0o7777)
            _drop_pycache(p)
        sf.unlink(missing_ok=True)
        return "reverted"

    def status(self) -> dict[str, Any]:
        self.require_supported()
        series = self.manifest.read_series(self.version) if self.kind == "patch" else []
        st = self.state()
        report = None
        if st in ("applied", "native"):
            report = patch_verify.verify(self.site_packages, self.version, self.manifest)
        files = self.file_states() if self.kind == "patch" else []
        return {
            "version": self.version,
            "kind": self.kind,
            "state": st,
            "series": [n for n, _ in series],
            "series_sha256": series_sha256(series) if series else None,
            "verified": bool(report and report.ok),
            "site_packages": str(self.site_packages),
            "manifest": str(self.manifest.path),
            "backup_dir": str(self.vbackup()),
            "torch": self.manifest.entry(self.version).get("torch"),
            "files": [f.__dict__ for f in files],
            "drift": self.drift_messages(files) if st == "drifted" else [],
            "checks": report.as_list() if report else [],
        }


# --------------------------------------------------------------------------- CLI


def _print(obj: dict[str, Any], as_json: bool, text: str) -> None:
    if as_json:
        print(json.dumps(obj, indent=2, sort_keys=False))
    else:
        print(text)


def _build(args: argparse.Namespace, manifest: Manifest) -> Patcher:
    sp = Path(args.site_packages) if args.site_packages else default_site_packages()
    if not (sp / "vllm").is_dir():
        raise UsageError(f"--site-packages {sp}: no vllm/ package there")
    version = args.version or detect_version(sp)
    bdir = Path(args.backup_dir) if args.backup_dir else default_backup_dir(sp)
    return Patcher(manifest, sp, version, bdir)


def main(argv: list[str] | None = None) -> int:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--site-packages", help="directory that holds vllm/ (default: this python's)"
    )
    common.add_argument("--version", help="vLLM version (default: from vllm-*.dist-info)")
    common.add_argument("--manifest", help="patches/vllm/manifest.yml (default: next to package)")
    common.add_argument(
        "--backup-dir", help="pristine backups (default: SP/../specdeploy-pristine)"
    )
    common.add_argument("--json", action="store_true", help="machine-readable output")
    ap = argparse.ArgumentParser(
        prog="vllm-patches",
        description="Versioned vLLM EAGLE-3 patch series: list/status/check/apply/revert/verify",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", parents=[common], help="supported versions and their series")
    sub.add_parser("status", parents=[common], help="state of the installed vLLM")
    sub.add_parser("check", parents=[common], help="would apply succeed? (changes nothing)")
    sub.add_parser("apply", parents=[common], help="apply the series (all-or-nothing)")
    rv = sub.add_parser("revert", parents=[common], help="restore byte-identical pristine files")
    rv.add_argument("--force", action="store_true", help="restore even over a hand edit")
    sub.add_parser("verify", parents=[common], help="static verification of the result")
    args = ap.parse_args(argv)

    try:
        manifest = Manifest.load(Path(args.manifest) if args.manifest else None)
        if args.cmd == "list":
            rows = []
            for v, e in sorted(manifest.versions().items(), key=lambda kv: version_key(kv[0])):
                rows.append(
                    {
                        "version": v,
                        "kind": e.get("kind"),
                        "torch": e.get("torch"),
                        "series": [s["file"] for s in e.get("series") or []],
                    }
                )
            obj = {
                "manifest": str(manifest.path),
                "native_from": manifest.native_from,
                "supported_patch_versions": manifest.patch_versions(),
                "versions": rows,
            }
            txt = "\n".join(
                f"{r['version']:8} {r['kind']:7} torch {r['torch']}  "
                + (", ".join(r["series"]) if r["series"] else "(native)")
                for r in rows
            )
            _print(obj, args.json, txt + f"\nnative from {manifest.native_from}")
            return 0

        p = _build(args, manifest)
        base = {"version": p.version, "kind": p.kind, "site_packages": str(p.site_packages)}
        if args.cmd == "status":
            obj = p.status()
            txt = (
                f"vLLM {obj['version']} ({obj['kind']}): {obj['state']}, "
                f"verified={str(obj['verified']).lower()}\n"
                f"series: {', '.join(obj['series']) or '-'}\nseries sha256: {obj['series_sha256']}"
            )
            if obj["drift"]:
                txt += "\n" + "\n".join(obj["drift"])
            _print(obj, args.json, txt)
            return 0
        if args.cmd == "check":
            try:
                res, _ = p.check()
            except PatchError as exc:
                _print({**base, "result": "drifted", "error": str(exc)}, args.json, f"drift: {exc}")
                return 1
            _print({**base, "result": res}, args.json, f"vLLM {p.version}: {res}")
            return 0
        if args.cmd == "apply":
            if p.kind == "native":
                rep = patch_verify.verify(p.site_packages, p.version, manifest)
                obj = {**base, "result": "native", "verified": rep.ok, "checks": rep.as_list()}
                txt = f"vLLM {p.version} supports EAGLE-3 natively; nothing patched. " + (
                    "verified" if rep.ok else "VERIFICATION FAILED:\n" + rep.text()
                )
                _print(obj, args.json, txt)
                return 0 if rep.ok else 1
            try:
                res = p.apply()
            except PatchError as exc:
                _print({**base, "result": "failed", "error": str(exc)}, args.json, f"error: {exc}")
                return 1
            st = p.status()
            obj = {
                **base,
                "result": res,
                **{k: st[k] for k in ("state", "series", "series_sha256", "verified")},
            }
            _print(obj, args.json, f"vLLM {p.version}: {res} ({len(st['series'])} patches)")
            return 0
        if args.cmd == "revert":
            try:
                res = p.revert(force=args.force)
            except PatchError as exc:
                _print({**base, "result": "failed", "error": str(exc)}, args.json, f"error: {exc}")
                return 1
            _print(
                {**base, "result": res, "state": p.state()}, args.json, f"vLLM {p.version}: {res}"
            )
            return 0
        if args.cmd == "verify":
            p.require_supported()
            rep = patch_verify.verify(p.site_packages, p.version, manifest)
            obj = {**base, "state": p.state(), "verified": rep.ok, "checks": rep.as_list()}
            _print(obj, args.json, rep.text())
            return 0 if rep.ok else 1
    except UsageError as exc:
        if getattr(args, "json", False):
            print(json.dumps({"error": str(exc), "exit": 2}))
        else:
            cli.usage_error("vllm-patches", exc)
        return 2
    except PatchError as exc:
        if getattr(args, "json", False):
            print(json.dumps({"error": str(exc), "exit": 1}))
        else:
            print(f"error: {exc}", file=sys.stderr)
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
