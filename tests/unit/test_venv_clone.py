"""A new release's venv linked from an earlier release of the same vLLM (plugins/module_utils/
venv_clone.py, the module release_venv): real venvs made by `python -m venv`, as the release
role makes them."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specdeploy.node.module_utils import venv_clone

PYTHON = getattr(sys, "_base_executable", sys.executable)
VERSION = ".".join(str(part) for part in sys.version_info[:3])


def release(
    root: Path, rid: str, *, vllm: str = "0.16.0", status: str = "verified", wheelhouse: str = ""
) -> Path:
    """A finished release: manifest, toolkit requirements, a venv with vLLM's dist-info and a
    console script (as pip writes them: a #! line naming the venv's python), and the record of
    the wheel it was installed from (the build's last step)."""
    base = root / "releases" / rid
    (base / "toolkit").mkdir(parents=True)
    (base / "toolkit" / "requirements-node.txt").write_text("PyYAML==6.0.4\n")
    manifest = {"id": rid, "status": status, "inputs": {"vllm_version": vllm}}
    (base / "manifest.json").write_text(json.dumps(manifest))
    venv = base / "venv"
    subprocess.run([PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*")) / "site-packages"
    (site / f"vllm-{vllm}.dist-info").mkdir(parents=True)
    (site / f"vllm-{vllm}.dist-info" / "RECORD").write_text("vllm/__init__.py,,\n")
    (site / "vllm").mkdir()
    (site / "vllm" / "__init__.py").write_text(f"__version__ = {vllm!r}\n")
    script = venv / "bin" / "vllm"
    script.write_text(f"#!{venv}/bin/python\nimport vllm\nprint(vllm.__version__)\n")
    script.chmod(0o755)
    assert venv_clone.record_wheel(venv, venv_clone.wheel_digest(wheelhouse, vllm))
    return base


def new_release(root: Path, rid: str) -> Path:
    base = root / "releases" / rid
    (base / "toolkit").mkdir(parents=True)
    (base / "toolkit" / "requirements-node.txt").write_text("PyYAML==6.0.4\n")
    (base / "manifest.json").write_text(json.dumps({"id": rid, "status": "building"}))
    return base


def clone(
    root: Path, rid: str, vllm: str = "0.16.0", check: bool = False, wheelhouse: str = ""
) -> dict:
    return venv_clone.clone_from_earlier_release(
        root / "releases",
        rid,
        vllm,
        VERSION,
        root / "releases" / rid / "toolkit" / "requirements-node.txt",
        wheelhouse=wheelhouse,
        check=check,
    )


def test_a_new_release_of_the_same_vllm_gets_the_venv_by_links_and_its_own_paths(tmp_path):
    donor = release(tmp_path, "0.16.0-old")
    new = new_release(tmp_path, "0.16.0-new")
    assert clone(tmp_path, "0.16.0-new", check=True) == {
        "changed": True,
        "donor": "0.16.0-old",
        "rewritten": 0,
        "wheel": "index vllm==0.16.0",  # taken for the comparison: the record step reuses it
    }
    assert not (new / "venv").exists()  # check mode changes nothing
    result = clone(tmp_path, "0.16.0-new")
    assert result["changed"] and result["donor"] == "0.16.0-old" and result["rewritten"] >= 2
    site = "lib/python{}.{}/site-packages/vllm/__init__.py".format(*sys.version_info[:2])
    # the package files are the donor's (one inode, no copy) ...
    assert os.stat(new / "venv" / site).st_ino == os.stat(donor / "venv" / site).st_ino
    # ... the files that name the venv are its own, and the donor's are untouched
    assert (new / "venv" / "bin" / "vllm").read_text().startswith(f"#!{new}/venv/bin/python\n")
    assert (donor / "venv" / "bin" / "vllm").read_text().startswith(f"#!{donor}/venv/bin/")
    assert str(donor) not in (new / "venv" / "pyvenv.cfg").read_text()
    # the new venv runs as itself: its console script, its prefix
    ran = subprocess.run([str(new / "venv" / "bin" / "vllm")], capture_output=True, text=True)
    assert ran.returncode == 0 and ran.stdout.strip() == "0.16.0", ran.stderr
    prefix = subprocess.run(
        [str(new / "venv" / "bin" / "python"), "-c", "import sys; print(sys.prefix)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert prefix.stdout.strip() == str(new / "venv")
    # a second run finds the venv complete and changes nothing
    assert clone(tmp_path, "0.16.0-new")["changed"] is False


@pytest.mark.parametrize(
    ("donor", "reason"),
    [
        ({"vllm": "0.17.1"}, "another vLLM"),
        ({"status": "failed"}, "a failed release"),
        ({"status": "building"}, "an unfinished release"),
    ],
)
def test_only_a_finished_release_of_the_same_vllm_is_a_donor(tmp_path, donor, reason):
    release(tmp_path, "old", **donor)
    new_release(tmp_path, "new")
    result = clone(tmp_path, "new")
    assert result["changed"] is False and result["donor"] == "", reason
    assert not (tmp_path / "releases" / "new" / "venv").exists()


def test_other_node_requirements_or_python_are_no_donor(tmp_path):
    release(tmp_path, "old")
    new = new_release(tmp_path, "new")
    (new / "toolkit" / "requirements-node.txt").write_text("PyYAML==6.0.4\npyflakes==4.1.0\n")
    assert clone(tmp_path, "new")["changed"] is False
    (new / "toolkit" / "requirements-node.txt").write_text("PyYAML==6.0.4\n")
    other_python = venv_clone.clone_from_earlier_release(
        tmp_path / "releases", "new", "0.16.0", "3.0.0", new / "toolkit" / "requirements-node.txt"
    )
    assert other_python["changed"] is False


def test_a_venv_being_built_is_left_to_the_install(tmp_path):
    release(tmp_path, "old")
    new = new_release(tmp_path, "new")
    (new / "venv" / "bin").mkdir(parents=True)  # an interrupted install
    result = clone(tmp_path, "new")
    assert result["changed"] is False and "being built" in result["reason"]


def test_another_build_of_the_same_version_in_the_wheelhouse_is_installed_not_linked(tmp_path):
    """A local hotfix of vllm-0.16.0 (same version, other bytes) must reach the new release: a
    venv is linked only from one installed from the very same wheel."""
    house = tmp_path / "wheelhouse"
    house.mkdir()
    wheel = house / "vllm-0.16.0-cp38-abi3-manylinux1_x86_64.whl"
    wheel.write_bytes(b"the released wheel")
    release(tmp_path, "old", wheelhouse=str(house))
    new_release(tmp_path, "new")
    assert clone(tmp_path, "new", wheelhouse=str(house), check=True)["donor"] == "old"
    wheel.write_bytes(b"the released wheel, with a local hotfix")
    result = clone(tmp_path, "new", wheelhouse=str(house))
    assert result["changed"] is False and "wheel" in result["reason"], result
    # installed from an index: the wheelhouse's donor is no donor either
    assert clone(tmp_path, "new")["changed"] is False


def test_a_venv_without_the_wheel_record_is_no_donor(tmp_path):
    donor = release(tmp_path, "old")
    (donor / "venv" / venv_clone.WHEEL_MARKER).unlink()  # built before the record existed
    new_release(tmp_path, "new")
    assert clone(tmp_path, "new")["changed"] is False


def test_the_record_is_written_once(tmp_path):
    venv = release(tmp_path, "old") / "venv"
    digest = venv_clone.wheel_digest("", "0.16.0")
    assert venv_clone.record_wheel(venv, digest) is False  # the same: unchanged
    assert venv_clone.record_wheel(venv, "other", check=True) is True
    assert venv_clone.recorded_wheel(venv) == digest  # check mode wrote nothing


def test_the_wheel_is_read_only_when_a_release_is_there_to_compare_with(tmp_path, monkeypatch):
    """A node's first release has no donor: the link step does not read the 0.5 GB wheel (the
    record step after the install does, once)."""
    house = tmp_path / "wheelhouse"
    house.mkdir()
    (house / "vllm-0.16.0-cp38-abi3-manylinux1_x86_64.whl").write_bytes(b"wheel")
    new_release(tmp_path, "new")
    reads: list[Path] = []
    real = venv_clone.file_sha256
    monkeypatch.setattr(venv_clone, "file_sha256", lambda p: reads.append(p) or real(p))
    result = clone(tmp_path, "new", wheelhouse=str(house))
    assert result["changed"] is False and "wheel" not in result
    assert all(p.suffix != ".whl" for p in reads), reads


def test_the_wheel_digest_is_the_sha256_of_the_whole_file_read_in_blocks(tmp_path):
    wheel = tmp_path / "vllm-0.16.0-py3-none-any.whl"
    data = os.urandom(9 * (1 << 20) + 12345)  # more than two of sha256_file's 4 MiB blocks
    wheel.write_bytes(data)
    assert venv_clone.wheel_digest(str(tmp_path), "0.16.0") == (
        f"{hashlib.sha256(data).hexdigest()}  {wheel.name}"
    )
    assert venv_clone.file_sha256(tmp_path / "absent.whl") is None
