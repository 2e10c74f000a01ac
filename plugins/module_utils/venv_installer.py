"""A release venv's packages installed by uv, or by pip where uv is not to hand (stdlib only).

uv builds the same venv for a fraction of pip's CPU: the vLLM 0.16.0 wheel without its
dependencies (the sandbox's release) took uv 4.5 CPU-s against pip's 11.9, venv included (pip's
venv alone runs ensurepip, 3.8); a full-dependency vLLM venv with torch and the CUDA wheels took
uv 53 s against pip's 490 s (docs/test-time.md). The node gets uv from its wheelhouse, the wheel
the controller's fill or the operator put there: its binary is unpacked once per node into the
tools directory. A node without that wheel (no wheelhouse, installs from an index) installs with
pip, and the result says why.

Both installers are offline from the wheelhouse where there is one, never compile bytecode (the
release_bytecode step compiles on every core) and install the toolkit's node-side needs without
their dependencies, then the engine package with or without its own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Any

# The one pin of the node's installer: the wheelhouse fills download this (specdeploy.controller
# wheelhouse and controller_wheelhouse), the node unpacks it.
UV_VERSION = "0.13.9"
UV_REQUIREMENT = f"uv=={UV_VERSION}"
INSTALLERS = ("uv", "pip")
# uv reads no uv.toml and downloads no Python: the node's own interpreter, the operator's pins.
UV_COMMON = ["--no-config", "--no-python-downloads", "--no-progress"]


class InstallError(Exception):
    """The venv could not be built; the message names the command and its last output."""


def uv_wheel(wheelhouse: Path) -> Path | None:
    """The uv wheel of the pinned version in the wheelhouse, if there is one."""
    found = sorted(wheelhouse.glob(f"uv-{UV_VERSION}-*.whl"))
    return found[0] if found else None


def uv_binary(tools_dir: Path, wheelhouse: str) -> tuple[Path | None, str]:
    """The node's uv (unpacked from the wheelhouse's wheel on first use), or None and why."""
    target = tools_dir / f"uv-{UV_VERSION}" / "uv"
    if not target.is_file():
        if not wheelhouse:
            return None, f"no wheelhouse to take {UV_REQUIREMENT} from"
        wheel = uv_wheel(Path(wheelhouse))
        if wheel is None:
            return None, f"no {UV_REQUIREMENT} wheel in {wheelhouse}"
        try:
            with zipfile.ZipFile(wheel) as archive:
                data = archive.read(f"uv-{UV_VERSION}.data/scripts/uv")
        except (OSError, KeyError, zipfile.BadZipFile) as exc:
            return None, f"{wheel.name}: no uv binary in it ({exc})"
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name("uv.partial")
        partial.write_bytes(data)
        partial.chmod(0o755)
        os.replace(partial, target)  # a half-written binary is never taken for uv
    try:
        probe = subprocess.run(
            [str(target), "--version"], capture_output=True, text=True, check=False, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{target} does not run here ({exc})"
    if probe.returncode != 0:
        return None, f"{target} does not run here: {probe.stderr.strip()[-200:]}"
    return target, ""


def uv_cache(venv: Path) -> Path:
    """uv's cache for one build, beside the venv (removed after the build)."""
    return venv.parent / ".uv-cache"


def offline(installer: str, wheelhouse: str) -> list[str]:
    if not wheelhouse:
        return []
    return ["--no-index", "--find-links", wheelhouse] + (["--offline"] if installer == "uv" else [])


def commands(
    installer: str,
    tool: Path | None,
    python: str,
    venv: Path,
    requirements: str,
    package: str,
    no_deps: bool,
    wheelhouse: str,
) -> list[list[str]]:
    """The installer's commands: the venv (when it has no interpreter yet), the toolkit's needs,
    the engine package."""
    source = offline(installer, wheelhouse)
    engine_deps = ["--no-deps"] if no_deps else []
    steps: list[list[str]] = []
    if installer == "uv":
        uv = str(tool)
        if not (venv / "bin" / "python").exists():
            steps.append([uv, "venv", *UV_COMMON, "--python", python, str(venv)])
        # uv unpacks each wheel into its cache, then links the files into the venv: the cache
        # sits beside the venv (same filesystem, not the node's /tmp, which may be RAM) and goes
        # once the install is done, so no file of the venv is shared with anything
        install = [uv, "pip", "install", *UV_COMMON, "--link-mode", "hardlink"]
        install += ["--python", str(venv / "bin" / "python"), *source]
    else:
        if not (venv / "bin" / "pip").exists():  # also a venv uv began: venv adds pip to it
            steps.append([python, "-m", "venv", str(venv)])
        install = [str(venv / "bin" / "pip"), "install", "--disable-pip-version-check"]
        install += ["--no-compile", *source]
    steps.append([*install, "--no-deps", "-r", requirements])
    steps.append([*install, *engine_deps, package])
    return steps


def label(installer: str, command: list[str]) -> str:
    """A command named briefly: the installer, its verb and what it installs."""
    verb = "venv" if "venv" in command[:3] else "pip install"
    return f"{installer} {verb} {command[-1]}"


# uv's lines that say what it did, not what went wrong
UV_PROGRESS = ("Using Python", "Resolved ", "Prepared ", "Installed ", "Audited ", "Uninstalled ")


def why(output: str) -> str:
    """A failed install in one line: the installer's last line first (uv's deepest "cause:",
    pip's ERROR: the root cause, e.g. "No space left on device"), then the lines before it."""
    lines = [line.strip() for line in output.strip().splitlines()]
    lines = [line for line in lines if line and not line.startswith(UV_PROGRESS)][-15:]
    if not lines:
        return "no output"
    cause = lines[-1].removeprefix("cause:").strip()
    return cause + (f" ({' '.join(lines[:-1])})" if len(lines) > 1 else "")


def installed_something(installer: str, output: str) -> bool:
    """Whether an install command changed the venv (its own summary line says so)."""
    marker = "Installed " if installer == "uv" else "Successfully installed "
    return any(line.strip().startswith(marker) for line in output.splitlines())


def install(
    *,
    installer: str,
    tools_dir: Path,
    python: str,
    venv: Path,
    requirements: str,
    package: str,
    no_deps: bool,
    wheelhouse: str,
    check: bool = False,
) -> dict[str, Any]:
    """Build the venv; return changed, the installer that ran and, where pip ran instead of the
    uv asked for, why."""
    if installer not in INSTALLERS:
        raise InstallError(f"installer {installer!r}: must be one of {', '.join(INSTALLERS)}")
    note = ""
    tool = None
    if installer == "uv":
        tool, note = uv_binary(tools_dir, wheelhouse) if not check else (None, "")
        if tool is None and not check:
            installer = "pip"
    fresh = not (venv / "bin" / "python").exists()
    if check:
        return {"changed": fresh, "installer": installer, "installer_note": note}
    changed = fresh
    cache = uv_cache(venv)
    env = dict(os.environ, PIP_NO_INPUT="1", UV_CACHE_DIR=str(cache))
    try:
        for command in commands(
            installer, tool, python, venv, requirements, package, no_deps, wheelhouse
        ):
            done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
            output = done.stdout + done.stderr
            if done.returncode != 0:
                failed = f"{label(installer, command)} failed (exit {done.returncode})"
                raise InstallError(f"{failed}: {why(output)}")
            changed = changed or installed_something(installer, output)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        # uv's lock of the venv is world-writable (0666): no file under the release root may be
        # (test_security's audit); uv makes it again whenever it next works on the venv
        if installer == "uv":
            with contextlib.suppress(OSError):
                (venv / ".lock").unlink()
    return {"changed": changed, "installer": installer, "installer_note": note}
