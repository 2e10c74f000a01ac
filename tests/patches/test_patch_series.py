"""The versioned patch series against the real vLLM wheels (issue 3, items 1-4 and 6)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from patchtest_util import (
    MANIFEST,
    NATIVE_VERSIONS,
    PATCH_VERSIONS,
    REPO,
    run_cli,
    snapshot,
)

from specdeploy.controller import wheel_facts, wheels
from specdeploy.node.patching import patch_verify
from specdeploy.node.patching.patches import Manifest, parse_unified_diff, series_sha256

pytestmark = pytest.mark.patches


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def cli_json(*args: str) -> tuple[int, dict]:
    proc = run_cli(*args, "--json")
    try:
        return proc.returncode, json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise AssertionError(
            f"not JSON (rc={proc.returncode}): {proc.stdout!r} {proc.stderr!r}"
        ) from exc


# --------------------------------------------------------------------------- manifest


def test_manifest_versions(manifest: Manifest) -> None:
    assert manifest.patch_versions() == PATCH_VERSIONS
    assert manifest.native_from == "0.18.0"
    for v in ("0.18.0", "0.18.1", "0.20.2"):
        assert manifest.kind(v) == "native"
    assert manifest.kind("99.0.0") == "native"  # anything newer than native_from
    assert manifest.kind("0.15.0") == "unsupported"
    assert manifest.kind("0.17.2") == "unsupported"


@pytest.mark.parametrize("version", PATCH_VERSIONS)
def test_manifest_hashes_match_wheel_and_patch_files(manifest: Manifest, version: str) -> None:
    entry = manifest.entry(version)
    for rel, t in manifest.targets(version).items():
        assert sha(wheels.read_member(version, rel)) == t["pristine_sha256"], rel
    series = manifest.read_series(version)
    for s, (name, content) in zip(manifest.series(version), series, strict=True):
        assert s["file"] == name
        assert sha(content) == s["sha256"], f"{name} changed without regenerating the manifest"
    assert series_sha256(series) == entry["series_sha256"]
    meta = wheels.read_member(version, f"vllm-{version}.dist-info/METADATA").decode()
    assert f"Requires-Dist: torch=={entry['torch']}" in meta


@pytest.mark.parametrize("version", PATCH_VERSIONS)
def test_each_patch_is_one_concern_with_a_header(manifest: Manifest, version: str) -> None:
    for name, content in manifest.read_series(version):
        text = content.decode()
        header = text.split("\n--- a/", 1)[0]
        assert "What it fixes:" in header and "Backports:" in header, name
        files = parse_unified_diff(text)
        assert len(files) == 1, f"{name} touches {len(files)} files"
        assert files[0].target(1).startswith("vllm/"), name


def test_regenerating_from_the_wheels_changes_nothing() -> None:
    """The committed patches and manifest equal what scripts/regen_patches.py makes from the
    real wheels."""
    proc = subprocess.run(
        [sys.executable, "-m", "scripts.regen_patches", "--check"],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("version", [*PATCH_VERSIONS, "0.18.0", *NATIVE_VERSIONS])
def test_speculative_keys_equal_the_wheel(manifest: Manifest, version: str) -> None:
    got = wheel_facts.extract_from_wheel(version)
    entry = manifest.entry(version)
    assert entry["speculative_config_keys"] == got["keys"]
    assert entry["speculative_config_internal_keys"] == got["internal"]
    keys = set(got["keys"])
    assert {"method", "model", "num_speculative_tokens"} <= keys
    # version-dependent: 0.17 dropped disable_by_batch_size
    assert ("disable_by_batch_size" in keys) == (version in ("0.15.1", "0.16.0"))


# --------------------------------------------------------------------------- apply/revert


@pytest.mark.parametrize("version", PATCH_VERSIONS)
def test_apply_verify_reapply_revert(site, manifest: Manifest, version: str) -> None:
    sp = site(version)
    rels = sorted(manifest.targets(version))
    pristine = snapshot(sp, rels)

    # pristine: not verified, and the verifier says why
    rc, st = cli_json("status", "--site-packages", str(sp))
    assert rc == 0 and st["state"] == "pristine" and st["verified"] is False
    assert st["version"] == version  # read from the wheel's dist-info
    rep = patch_verify.verify(sp, version, manifest)
    failed = {c.name for c in rep.failed()}
    assert {"allowlist", "deepseek.bases", "kimi.bases", "eagle.kimi_token_mapping"} <= failed

    rc, res = cli_json("apply", "--site-packages", str(sp))
    assert rc == 0, res
    assert res["result"] == "applied" and res["verified"] is True
    for rel in rels:
        assert sha((sp / rel).read_bytes()) == manifest.targets(version)[rel]["patched_sha256"]

    rc, st = cli_json("status", "--site-packages", str(sp))
    assert st["state"] == "applied" and st["verified"] is True
    assert st["series"] == [s["file"] for s in manifest.series(version)]
    assert st["series_sha256"] == manifest.entry(version)["series_sha256"]
    assert all(c["ok"] for c in st["checks"]) and len(st["checks"]) >= 10

    # verify subcommand on its own
    proc = run_cli("verify", "--site-packages", str(sp))
    assert proc.returncode == 0, proc.stdout

    # re-apply: a no-op, files untouched
    mtimes = {r: (sp / r).stat().st_mtime_ns for r in rels}
    rc, res = cli_json("apply", "--site-packages", str(sp))
    assert rc == 0 and res["result"] == "unchanged"
    assert {r: (sp / r).stat().st_mtime_ns for r in rels} == mtimes

    # revert: byte-identical pristine files
    rc, res = cli_json("revert", "--site-packages", str(sp))
    assert rc == 0 and res["result"] == "reverted" and res["state"] == "pristine"
    assert snapshot(sp, rels) == pristine
    rc, res = cli_json("revert", "--site-packages", str(sp))
    assert rc == 0 and res["result"] == "unchanged"


@pytest.mark.parametrize("version", PATCH_VERSIONS)
def test_gnu_patch_gives_the_same_bytes(site, manifest: Manifest, version: str) -> None:
    """The series is plain `patch -p1` material (e.g. for ansible.posix.patch)."""
    if shutil.which("patch") is None:
        pytest.skip("no patch binary")
    ours, gnu = site(version), site(version)
    assert run_cli("apply", "--site-packages", str(ours)).returncode == 0
    for name, content in manifest.read_series(version):
        proc = subprocess.run(
            ["patch", "-p1", "--forward", "--quiet", "-d", str(gnu)],
            input=content,
            capture_output=True,
            check=False,
        )
        assert proc.returncode == 0, (name, proc.stdout, proc.stderr)
    rels = sorted(manifest.targets(version))
    assert snapshot(ours, rels) == snapshot(gnu, rels)


def test_drift_is_refused_and_nothing_changes(site, manifest: Manifest) -> None:
    version = "0.16.0"
    sp = site(version)
    rels = sorted(manifest.targets(version))
    drifted = "vllm/model_executor/models/kimi_k25.py"
    with (sp / drifted).open("a") as f:
        f.write("# local hand edit\n")
    before = snapshot(sp, rels)
    found = sha(before[drifted])

    for cmd in ("check", "apply"):
        proc = run_cli(cmd, "--site-packages", str(sp))
        assert proc.returncode == 1, proc.stdout + proc.stderr
        msg = proc.stdout + proc.stderr
        assert drifted in msg
        assert manifest.targets(version)[drifted]["pristine_sha256"] in msg
        assert found in msg
    assert snapshot(sp, rels) == before
    assert not (sp.parent / "specdeploy-pristine").exists()
    rc, st = cli_json("status", "--site-packages", str(sp))
    assert rc == 0 and st["state"] == "drifted" and st["verified"] is False
    assert any(drifted in d for d in st["drift"])


def test_apply_is_all_or_nothing_when_a_later_patch_fails(site, tmp_path: Path) -> None:
    """The last patch does not apply: the earlier ones must not have been written either."""
    version = "0.17.1"
    src = MANIFEST.parent
    mdir = tmp_path / "patches"
    shutil.copytree(src, mdir, ignore=shutil.ignore_patterns("*.py"))
    m = Manifest.load(mdir / "manifest.yml")
    last = m.series(version)[-1]["file"]
    p = mdir / version / last
    lines = p.read_text().splitlines(keepends=True)
    first_hunk = next(i for i, ln in enumerate(lines) if ln.startswith("@@"))
    ctx = next(
        i for i in range(first_hunk, len(lines)) if lines[i].startswith(" ") and lines[i].strip()
    )
    lines[ctx] = lines[ctx].rstrip("\n") + "  # not in the file\n"  # context no longer matches
    p.write_text("".join(lines))
    sp = site(version)
    rels = sorted(m.targets(version))
    before = snapshot(sp, rels)
    proc = run_cli("apply", "--site-packages", str(sp), "--manifest", str(mdir / "manifest.yml"))
    assert proc.returncode == 1
    assert last in proc.stdout + proc.stderr
    assert snapshot(sp, rels) == before


def test_revert_works_after_the_patch_files_changed(site, tmp_path: Path) -> None:
    version = "0.15.1"
    mdir = tmp_path / "patches"
    shutil.copytree(MANIFEST.parent, mdir, ignore=shutil.ignore_patterns("*.py"))
    sp = site(version)
    m = Manifest.load(mdir / "manifest.yml")
    rels = sorted(m.targets(version))
    pristine = snapshot(sp, rels)
    args = ("--site-packages", str(sp), "--manifest", str(mdir / "manifest.yml"))
    assert run_cli("apply", *args).returncode == 0
    for f in (mdir / version).glob("*.patch"):  # a newer toolkit: other patch files
        f.write_text("# replaced by a newer series\n")
    proc = run_cli("revert", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert snapshot(sp, rels) == pristine


def test_revert_refuses_to_overwrite_a_hand_edit(site, manifest: Manifest) -> None:
    version = "0.16.0"
    sp = site(version)
    rels = sorted(manifest.targets(version))
    pristine = snapshot(sp, rels)
    assert run_cli("apply", "--site-packages", str(sp)).returncode == 0
    target = sp / "vllm/config/speculative.py"
    target.write_text(target.read_text() + "# edited after patching\n")
    proc = run_cli("revert", "--site-packages", str(sp))
    assert proc.returncode == 1 and "vllm/config/speculative.py" in proc.stdout + proc.stderr
    assert target.read_text().endswith("# edited after patching\n")
    assert run_cli("revert", "--site-packages", str(sp), "--force").returncode == 0
    assert snapshot(sp, rels) == pristine


def test_custom_backup_dir(site, tmp_path: Path, manifest: Manifest) -> None:
    version = "0.17.0"
    sp = site(version)
    bdir = tmp_path / "bk"
    assert run_cli("apply", "--site-packages", str(sp), "--backup-dir", str(bdir)).returncode == 0
    for rel, t in manifest.targets(version).items():
        assert sha((bdir / version / rel).read_bytes()) == t["pristine_sha256"]
    assert run_cli("revert", "--site-packages", str(sp), "--backup-dir", str(bdir)).returncode == 0


def test_unknown_version_is_refused_with_the_supported_list(site) -> None:
    sp = site("0.16.0")
    for cmd in ("status", "check", "apply", "verify"):
        proc = run_cli(cmd, "--site-packages", str(sp), "--version", "0.15.0")
        assert proc.returncode == 2, (cmd, proc.stdout, proc.stderr)
        for v in PATCH_VERSIONS:
            assert v in proc.stderr
        assert "0.18.0" in proc.stderr


def test_no_vllm_in_site_packages_is_a_usage_error(tmp_path: Path) -> None:
    proc = run_cli("status", "--site-packages", str(tmp_path))
    assert proc.returncode == 2 and "vllm" in proc.stderr


def test_list(manifest: Manifest) -> None:
    rc, obj = cli_json("list")
    assert rc == 0
    assert obj["supported_patch_versions"] == PATCH_VERSIONS
    rows = {r["version"]: r for r in obj["versions"]}
    assert rows["0.15.1"]["series"][-1].startswith("0005-")
    assert rows["0.16.0"]["torch"] == "2.9.1" and rows["0.17.1"]["torch"] == "2.10.0"


# --------------------------------------------------------------------------- verification


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def test_verify_catches_a_relative_index_loop(site) -> None:
    sp = site("0.16.0")
    assert run_cli("apply", "--site-packages", str(sp)).returncode == 0
    _edit(
        sp / "vllm/model_executor/models/deepseek_v2.py",
        "            start=self.start_layer,\n",
        "",
    )
    rc, obj = cli_json("verify", "--site-packages", str(sp))
    assert rc == 1 and obj["verified"] is False
    bad = {c["name"] for c in obj["checks"] if not c["ok"]}
    assert bad == {"deepseek.absolute_index_loop"}


def test_verify_catches_a_missing_import(site) -> None:
    """Byte-compiles fine, crashes at import: the pyflakes check must see it."""
    sp = site("0.17.1")
    assert run_cli("apply", "--site-packages", str(sp)).returncode == 0
    _edit(
        sp / "vllm/model_executor/models/kimi_k25.py",
        "    SupportsEagle3,\n    SupportsMultiModal,",
        "    SupportsMultiModal,",
    )
    rc, obj = cli_json("verify", "--site-packages", str(sp))
    assert rc == 1
    bad = {(c["name"], c["file"]): c["detail"] for c in obj["checks"] if not c["ok"]}
    assert ("kimi.bases", "vllm/model_executor/models/kimi_k25.py") in bad
    detail = bad[("undefined_names", "vllm/model_executor/models/kimi_k25.py")]
    assert "SupportsEagle3" in detail


def test_verify_catches_an_unguarded_layer0_residual(site) -> None:
    sp = site("0.15.1")
    assert run_cli("apply", "--site-packages", str(sp)).returncode == 0
    _edit(
        sp / "vllm/model_executor/models/deepseek_v2.py",
        "hidden_states if residual is None else hidden_states + residual",
        "hidden_states + residual",
    )
    rep = patch_verify.verify(sp, "0.15.1", Manifest.load(MANIFEST))
    assert [c.name for c in rep.failed()] == ["deepseek.layer0_residual"]


# --------------------------------------------------------------------------- native


def _native_case(site, version: str) -> None:
    sp = site(version)
    rels = ["vllm/config/speculative.py", "vllm/model_executor/models/deepseek_v2.py"]
    before = snapshot(sp, rels)
    rc, st = cli_json("status", "--site-packages", str(sp))
    assert rc == 0, st
    assert st["version"] == version and st["kind"] == "native" and st["state"] == "native"
    assert st["verified"] is True, [c for c in st["checks"] if not c["ok"]]
    assert st["series"] == []
    rc, res = cli_json("apply", "--site-packages", str(sp))
    assert rc == 0 and res["result"] == "native" and res["verified"] is True
    assert snapshot(sp, rels) == before
    # a native install that lost the interface is caught
    _edit(
        sp / "vllm/model_executor/models/kimi_k25.py",
        "    SupportsEagle3,\n",
        "",
    )
    rc, obj = cli_json("verify", "--site-packages", str(sp))
    assert rc == 1 and "kimi.bases" in {c["name"] for c in obj["checks"] if not c["ok"]}


@pytest.mark.parametrize("version", NATIVE_VERSIONS)
def test_native_versions_recognised_and_verified(site, version: str) -> None:
    _native_case(site, version)


def test_newest_vllm_on_pypi_is_native_and_verified(
    site, newest_vllm: str, manifest: Manifest
) -> None:
    assert manifest.kind(newest_vllm) == "native"
    _native_case(site, newest_vllm)


@pytest.mark.parametrize("version", [*PATCH_VERSIONS, "0.18.0", *NATIVE_VERSIONS])
def test_drafter_facts_equal_the_wheel(manifest: Manifest, version: str) -> None:
    """What the drafter check relies on is read off the wheel, not remembered."""
    got = wheel_facts.drafter_facts_from_wheel(version)
    assert manifest.entry(version)["drafter"] == got
    archs = set(got["eagle3_architectures"])
    assert {"Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3"} <= archs
    assert ("Eagle3DeepseekV3ForCausalLM" in archs) == (version not in PATCH_VERSIONS)


def test_a_local_label_is_the_same_release_for_the_patcher(site, manifest: Manifest) -> None:
    """vLLM's own wheel index names CUDA builds 0.16.0+cu129: the same series applies."""
    sp = site("0.16.0")
    info = sp / "vllm-0.16.0.dist-info"
    meta = info / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 0.16.0\n", "Version: 0.16.0+cu129\n"))
    info.rename(sp / "vllm-0.16.0+cu129.dist-info")
    rc, res = cli_json("apply", "--site-packages", str(sp))
    assert rc == 0, res
    assert res["version"] == "0.16.0+cu129" and res["kind"] == "patch"
    assert res["result"] == "applied" and res["verified"] is True
    for rel, target in manifest.targets("0.16.0").items():
        assert sha((sp / rel).read_bytes()) == target["patched_sha256"]


@pytest.mark.parametrize("version", [*PATCH_VERSIONS, "0.18.0", *NATIVE_VERSIONS])
def test_shutdown_timeout_fact_equals_the_wheel(manifest: Manifest, version: str) -> None:
    """serve_shutdown_timeout is what the wheel's serve CLI has: 0.15-0.17 no drain at all."""
    got = wheel_facts.shutdown_timeout_from_wheel(version)
    assert manifest.entry(version)["serve_shutdown_timeout"] is got
    assert got is (tuple(int(p) for p in version.split(".")[:2]) >= (0, 18))
