"""The controller's wheelhouse fill (specdeploy/controller/controller_wheelhouse.py), with real pip.

pip downloads from a local find-links directory of small wheels built here (the same
PIP_FIND_LINKS / PIP_NO_INDEX environment an operator sets for a mirror), so no test needs
the network; the integration test (tests/integration/test_controller_wheelhouse.py) ships the
real vLLM wheel to sandbox nodes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from specdeploy.node.module_utils.venv_installer import UV_VERSION

from specdeploy.controller import controller_wheelhouse, wheelhouse

PLATFORM = ["--python-version", "3.11", "--machine", "x86_64", "--glibc", "2.36"]


def build_wheel(directory: Path, name: str, version: str, tag: str = "py3-none-any") -> Path:
    """A minimal valid wheel (METADATA, WHEEL, RECORD), enough for pip download."""
    dist = f"{name.replace('-', '_')}-{version}"
    path = directory / f"{dist}-{tag}.whl"
    files = {
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}.dist-info/WHEEL": f"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: {tag}\n",
    }
    record = []
    for member, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{member},sha256={digest.decode()},{len(text)}")
    record.append(f"{dist}.dist-info/RECORD,,")
    files[f"{dist}.dist-info/RECORD"] = "\n".join(record) + "\n"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
    return path


@pytest.fixture
def index(tmp_path, monkeypatch) -> Path:
    """A find-links directory with the toolkit's node pins and a vLLM 0.16.0, and pip pointed
    at it only (no index)."""
    links = tmp_path / "links"
    links.mkdir()
    for requirement in wheelhouse.node_requirements():
        name, version = requirement.split("==")
        build_wheel(links, name, version)
    build_wheel(links, "vllm", "0.16.0")
    build_wheel(links, "uv", UV_VERSION)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    return links


def run_fill(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specdeploy.controller.controller_wheelhouse", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )


def test_a_fill_downloads_vllm_and_the_pins_and_a_repeat_touches_no_network(index, tmp_path):
    target = tmp_path / "controller-wheelhouse"
    first = run_fill("--dir", str(target), "--vllm", "0.16.0", "--no-deps", *PLATFORM)
    assert first.returncode == 0, first.stderr
    result = json.loads(first.stdout)
    assert result["changed"] is True
    names = sorted(result["wheels"])
    assert any(n.startswith("vllm-0.16.0-") for n in names)
    assert any(n.lower().startswith("pyyaml-") for n in names)
    assert any(n.startswith(f"uv-{UV_VERSION}-") for n in names)  # the nodes' venv installer
    for name, digest in result["wheels"].items():
        assert hashlib.sha256((target / name).read_bytes()).hexdigest() == digest

    # The source goes away: a repeat of the same fill must not need it.
    for wheel in index.glob("*.whl"):
        wheel.unlink()
    again = run_fill("--dir", str(target), "--vllm", "0.16.0", "--no-deps", *PLATFORM)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {**result, "changed": False}


def test_a_wheel_gone_from_the_wheelhouse_is_downloaded_again(index, tmp_path):
    target = tmp_path / "wh"
    first = json.loads(
        run_fill("--dir", str(target), "--vllm", "0.16.0", "--no-deps", *PLATFORM).stdout
    )
    vllm = next(n for n in first["wheels"] if n.startswith("vllm-"))
    (target / vllm).unlink()
    second = run_fill("--dir", str(target), "--vllm", "0.16.0", "--no-deps", *PLATFORM)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["changed"] is True
    assert (target / vllm).is_file()


def test_a_version_the_index_lacks_fails_with_exit_2_and_pips_reason(index, tmp_path):
    target = tmp_path / "wh"
    result = run_fill("--dir", str(target), "--vllm", "0.99.0", "--no-deps", *PLATFORM)
    assert result.returncode == 2
    assert "vllm==0.99.0" in result.stderr and "failed" in result.stderr
    assert not (target / ".fills").exists()  # no record of a fill that did not happen


def test_a_relative_directory_is_a_usage_error(index):
    result = run_fill("--dir", "relative/wh", "--vllm", "0.16.0", "--no-deps", *PLATFORM)
    assert result.returncode == 2 and "absolute" in result.stderr


def test_platform_tags_accept_every_manylinux_the_nodes_glibc_can_run():
    args = wheelhouse.platform_args("3.12", "aarch64", "2.35")
    platforms = [args[i + 1] for i, a in enumerate(args) if a == "--platform"]
    assert platforms[0] == "manylinux_2_35_aarch64" and "manylinux_2_17_aarch64" in platforms
    assert "manylinux_2_36_aarch64" not in platforms
    assert {"manylinux2014_aarch64", "manylinux1_aarch64", "manylinux_2_5_aarch64", "any"} <= set(
        platforms
    )
    assert args[args.index("--python-version") + 1] == "3.12"
    assert "manylinux2014_x86_64" not in wheelhouse.platform_args("3.11", "x86_64", "2.12")
    with pytest.raises(ValueError, match=r"2\.5 or newer"):
        wheelhouse.platform_args("3.11", "x86_64", "2.4")


def test_fill_keys_differ_by_version_dependencies_and_platform():
    base = controller_wheelhouse.fill_key("0.16.0", False, "3.11", "x86_64", "2.36")
    assert base != controller_wheelhouse.fill_key("0.17.1", False, "3.11", "x86_64", "2.36")
    assert base != controller_wheelhouse.fill_key("0.16.0", True, "3.11", "x86_64", "2.36")
    assert base != controller_wheelhouse.fill_key("0.16.0", False, "3.12", "x86_64", "2.36")
