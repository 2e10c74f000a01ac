"""The release venv's installer (plugins/module_utils/venv_installer.py): uv unpacked from the
node's wheelhouse, pip where it is not there, offline from the wheelhouse, and real installs of
the toolkit's node-side pins by both (the sandbox's wheelhouse, filled by `make setup`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from ansible_collections.specdeploy.toolkit.plugins.module_utils import venv_installer as vi

from specdeploy.controller.wheelhouse import default_cache

SANDBOX_WHEELHOUSE = default_cache() / "wheelhouse"
CONTROLLER_UV = Path(sys.executable).parent / "uv"  # requirements.lock pins the same uv


def fake_uv_wheel(wheelhouse: Path, script: str = "#!/bin/sh\necho uv 0.13.9\n") -> Path:
    wheelhouse.mkdir(parents=True, exist_ok=True)
    wheel = wheelhouse / f"uv-{vi.UV_VERSION}-py3-none-manylinux_2_17_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"uv-{vi.UV_VERSION}.data/scripts/uv", script)
        archive.writestr(f"uv-{vi.UV_VERSION}.dist-info/METADATA", "Name: uv\n")
    return wheel


def test_uv_is_unpacked_once_from_the_wheelhouse_and_runs(tmp_path: Path) -> None:
    fake_uv_wheel(tmp_path / "wh")
    tool, note = vi.uv_binary(tmp_path / "tools", str(tmp_path / "wh"))
    assert note == "" and tool == tmp_path / "tools" / f"uv-{vi.UV_VERSION}" / "uv"
    assert os.access(tool, os.X_OK)
    (tmp_path / "wh").joinpath(next(iter(os.listdir(tmp_path / "wh")))).unlink()
    assert vi.uv_binary(tmp_path / "tools", str(tmp_path / "wh")) == (tool, "")  # kept


@pytest.mark.parametrize(
    ("setup", "why"),
    [
        ("none", "no wheelhouse"),
        ("empty", "no uv==0.13.9 wheel in"),
        ("corrupt", "no uv binary in it"),
        ("wrong-binary", "does not run here"),
    ],
)
def test_without_a_usable_uv_wheel_the_reason_is_named(tmp_path: Path, setup: str, why: str):
    wheelhouse = tmp_path / "wh"
    wheelhouse.mkdir()
    if setup == "corrupt":
        (wheelhouse / f"uv-{vi.UV_VERSION}-py3-none-any.whl").write_bytes(b"not a zip")
    if setup == "wrong-binary":  # a wheel for another machine: the kernel refuses it
        fake_uv_wheel(wheelhouse, script="\x7fELF garbage")
    tool, note = vi.uv_binary(tmp_path / "tools", "" if setup == "none" else str(wheelhouse))
    assert tool is None and why in note


def test_both_installers_go_offline_from_the_wheelhouse_and_the_engine_deps_follow_the_knob():
    venv = Path("/nonexistent/venv")
    uv = vi.commands("uv", Path("/t/uv"), "/usr/bin/python3", venv, "r.txt", "vllm==1", True, "/w")
    assert uv[0] == ["/t/uv", "venv", *vi.UV_COMMON, "--python", "/usr/bin/python3", str(venv)]
    assert uv[1][-3:] == ["--no-deps", "-r", "r.txt"] and uv[2][-2:] == ["--no-deps", "vllm==1"]
    assert all({"--no-index", "--offline"} <= set(c) for c in uv[1:])
    pip = vi.commands("pip", None, "/usr/bin/python3", venv, "r.txt", "vllm==1", False, "")
    assert pip[0] == ["/usr/bin/python3", "-m", "venv", str(venv)]
    assert pip[2][-1] == "vllm==1" and "--no-deps" not in pip[2] and "--no-index" not in pip[2]
    assert all("--no-compile" in c for c in pip[1:])


def test_an_unknown_installer_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(vi.InstallError, match="installer 'conda': must be one of uv, pip"):
        vi.install(
            installer="conda", tools_dir=tmp_path, python=sys.executable, venv=tmp_path / "v",
            requirements="r.txt", package="x", no_deps=True, wheelhouse="",
        )  # fmt: skip
    assert not (tmp_path / "v").exists()


def node_pins(tmp_path: Path) -> tuple[Path, str]:
    if not SANDBOX_WHEELHOUSE.is_dir() or not any(SANDBOX_WHEELHOUSE.glob("pyflakes-*.whl")):
        pytest.fail(f"{SANDBOX_WHEELHOUSE}: no wheelhouse (make setup fills it)")
    requirements = tmp_path / "requirements-node.txt"
    requirements.write_text("PyYAML==6.0.4\n")
    return requirements, "pyflakes==4.1.0"


def controller_uv_as_the_nodes(tools: Path) -> None:
    """The controller's uv is the pinned one; a node unpacks the same binary from its wheel."""
    version = subprocess.run([CONTROLLER_UV, "--version"], capture_output=True, text=True)
    assert version.stdout.split()[1] == vi.UV_VERSION, "requirements.lock pins another uv"
    (tools / f"uv-{vi.UV_VERSION}").mkdir(parents=True)
    shutil.copy2(CONTROLLER_UV, tools / f"uv-{vi.UV_VERSION}" / "uv")


def pins_only(tmp_path: Path) -> Path:
    """A wheelhouse with the node pins and no uv."""
    wheelhouse = tmp_path / "wh"
    wheelhouse.mkdir()
    for wheel in SANDBOX_WHEELHOUSE.glob("*.whl"):
        if wheel.name.lower().startswith(("pyyaml-", "pyflakes-")):
            os.link(wheel, wheelhouse / wheel.name)
    return wheelhouse


# uv from the tools directory; uv asked for with no uv wheel in the wheelhouse: pip, and why
@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_a_real_install_offline_then_a_repeat_changes_nothing(
    tmp_path: Path, installer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    requirements, package = node_pins(tmp_path)
    tools = tmp_path / "tools"
    if installer == "uv":
        controller_uv_as_the_nodes(tools)
        wheelhouse = SANDBOX_WHEELHOUSE
    else:
        wheelhouse = pins_only(tmp_path)
    venv = tmp_path / "venv"
    args = {
        "installer": "uv", "tools_dir": tools, "python": sys.executable, "venv": venv,
        "requirements": str(requirements), "package": package, "no_deps": True,
        "wheelhouse": str(wheelhouse),
    }  # fmt: skip
    cache_seen: list[bool] = []
    real_run = subprocess.run

    def run_and_look(command, **kwargs):  # uv's cache is where the build says, during it
        if "env" in kwargs:  # the build's commands, not uv's --version probe
            cache_seen.append(Path(kwargs["env"]["UV_CACHE_DIR"]) == vi.uv_cache(venv))
        return real_run(command, **kwargs)

    monkeypatch.setattr(vi.subprocess, "run", run_and_look)
    first = vi.install(**args)
    assert cache_seen and all(cache_seen)
    note = "" if installer == "uv" else f"no uv==0.13.9 wheel in {wheelhouse}"
    assert first == {"changed": True, "installer": installer, "installer_note": note}
    probe = [venv / "bin" / "python", "-c", "import yaml, pyflakes; print(pyflakes.__version__)"]
    assert subprocess.run(probe, capture_output=True, text=True).stdout.strip() == "4.1.0"
    assert not list(venv.glob("lib/python3*/site-packages/pyflakes/__pycache__"))  # not compiled
    assert not vi.uv_cache(venv).exists()  # nothing of the venv shared with a cache
    writable = [p for p in venv.rglob("*") if not p.is_symlink() and p.stat().st_mode & 0o002]
    assert writable == []  # nothing in a release venv that any user may write (uv's .lock was)
    assert vi.install(**args)["changed"] is False
    assert vi.install(**args, check=True)["changed"] is False


def test_a_failed_install_names_the_command_and_its_output(tmp_path: Path) -> None:
    requirements, _ = node_pins(tmp_path)
    controller_uv_as_the_nodes(tmp_path / "tools")
    with pytest.raises(
        vi.InstallError, match=r"^uv pip install nosuchpkg==9 failed \(exit 1\): .*nosuchpkg"
    ):
        vi.install(
            installer="uv", tools_dir=tmp_path / "tools", python=sys.executable,
            venv=tmp_path / "venv", requirements=str(requirements), package="nosuchpkg==9",
            no_deps=True, wheelhouse=str(SANDBOX_WHEELHOUSE),
        )  # fmt: skip


def test_a_failed_install_says_its_root_cause_first() -> None:
    """uv 0.13.9's output on a full disk, in the shape the disk-full fault recorded ("error:",
    then indented "cause:" lines, the deepest last): the cause leads, uv's progress lines go."""
    uv = (
        "Using Python 3.11.2 environment at: /opt/s/releases/r/venv\n"
        "Resolved 1 package in 0.72ms\n"
        "error: Failed to download `vllm==0.16.0`\n"
        "  cause: Failed to extract archive: vllm-0.16.0-cp38-abi3-manylinux_2_31_x86_64.whl\n"
        "  cause: failed to write to file `/opt/s/releases/r/.uv-cache/x.py`: No space left on"
        " device (os error 28)\n"
    )
    assert vi.why(uv) == (
        "failed to write to file `/opt/s/releases/r/.uv-cache/x.py`: No space left on device"
        " (os error 28) (error: Failed to download `vllm==0.16.0` cause: Failed to extract"
        " archive: vllm-0.16.0-cp38-abi3-manylinux_2_31_x86_64.whl)"
    )
    pip = "Processing ./vllm.whl\nERROR: Could not install packages due to an OSError: [Errno 28]"
    assert vi.why(pip).startswith("ERROR: Could not install packages due to an OSError")
    assert vi.why("") == "no output"
