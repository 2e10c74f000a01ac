"""Import each PATCHED vLLM for real on the CPU and run vLLM's own checks (issue 3, item 5).

Per torch pin a venv is built once and cached (``<cache>/venvs/torch-<pin>``):
``uv pip install vllm==<first version> torch==<pin>`` with all dependencies (10 GB each). uv
(requirements.lock), not pip: on a fresh machine, as CI's is every run, pip took about 490 s
and 200 CPU-s per venv on this 2-core machine, uv 53 s and 93 CPU-s (the same 184 packages),
bytecode compiled by both; now uv compiles none (probe() says why). The other versions of the
same pin are swapped in with ``uv pip install --no-deps --reinstall <cached wheel>``.

The cached venv itself is never patched: the test builds an overlay directory whose ``vllm/``
tree is symlinks to the installed files, lets ``specdeploy.node.patching.patches apply`` replace
the target
files there (it writes real files over the links), and runs ``realimport_probe.py`` with the
venv's python and ``PYTHONPATH=<overlay>`` so ``import vllm`` resolves to the patched tree.

The probe (see its docstring) imports the model classes with no stubs, calls vLLM's
``supports_eagle3()`` on DeepseekV2ForCausalLM, DeepseekV3ForCausalLM and
KimiK25ForConditionalGeneration, and runs ``SpeculativeConfig._verify_args`` (the
model_validator that enforces the eagle3 target allowlist) for deepseek_v3 and kimi_k2
targets. Stubbed: only the SpeculativeConfig instance (object.__new__ + the attributes
_verify_args reads) and the target ModelConfig (a namespace carrying
hf_text_config.model_type), because a real ModelConfig needs a model from a hub. The same
probe on the unpatched install must give False / refused, so the test can fail.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from patchtest_util import MANIFEST, REPO

from specdeploy.controller import toolkit_archive, wheels
from specdeploy.node.patching.patches import Manifest

pytestmark = [pytest.mark.patches, pytest.mark.slow]

PROBE = Path(__file__).with_name("realimport_probe.py")
# version -> the version a fresh venv of its torch pin is built with
BUILD_WITH = {"2.9.1": "0.16.0", "2.10.0": "0.17.1"}
CASES = ["0.15.1", "0.16.0", "0.17.0", "0.17.1"]
BUILD_TIMEOUT_S = 1800


def _log(msg: str) -> None:
    print(f"[import-real] {msg}", file=sys.stderr, flush=True)


def uv_install(venv: Path) -> list[str]:
    """uv's install command into this venv, quiet. No bytecode: the 10 GB venv holds about
    24,000 sources (about 4 ms of CPU each to compile) and a probe imports a fraction of them;
    the unpatched probe writes the bytecode of what it imports into the venv (probe()), the
    patched one reads it. --native-tls: the machine's certificate store, which pip uses too."""
    found = Path(sys.executable).with_name("uv")
    uv = str(found) if found.is_file() else shutil.which("uv")
    if uv is None:
        pytest.fail("uv not found beside this python or on PATH (requirements.lock pins it)")
    python = str(venv / "bin" / "python")
    # One cache for both pins' builds, which run at once: the 168 packages they share (the CUDA
    # wheels among them, 4.3 GB) are downloaded and unpacked once and hard-linked into both.
    cache = ["--cache-dir", str(wheels.cache_dir() / "uv-cache"), "--link-mode", "hardlink"]
    return [uv, "pip", "install", "--python", python, "--native-tls", "-q", *cache]


def venv_dir(pin: str) -> Path:
    return wheels.cache_dir() / "venvs" / f"torch-{pin}"


def build_venv(pin: str) -> Path:
    """The cached full-dependency venv for this torch pin (built once; takes minutes)."""
    v = venv_dir(pin)
    ready = v / ".specdeploy-ready"
    if ready.is_file():
        return v
    v.parent.mkdir(parents=True, exist_ok=True)
    with open(v.parent / f".torch-{pin}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready.is_file():
            return v
        tmp = v.with_name(v.name + ".tmp")
        subprocess.run(["rm", "-rf", str(tmp)], check=True)
        t0 = time.monotonic()
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", str(tmp)], check=True)
        proc = subprocess.run(
            [*uv_install(tmp), f"vllm=={BUILD_WITH[pin]}", f"torch=={pin}"],
            capture_output=True,
            text=True,
            check=False,
            timeout=BUILD_TIMEOUT_S,
            # The other pin's build may be downloading a wheel both need (cuDNN, 700 MB): waiting
            # for its lock is part of this build, not a hang. uv's own limit is 300 s, which ci51
            # hit on a slow network (all four real-import cases errored).
            env=dict(os.environ, UV_LOCK_TIMEOUT=str(BUILD_TIMEOUT_S)),
        )
        if proc.returncode != 0:
            pytest.fail(f"uv pip install vllm=={BUILD_WITH[pin]} failed:\n{proc.stderr[-4000:]}")
        tmp.rename(v)
        secs = time.monotonic() - t0
        ready.write_text(f"vllm=={BUILD_WITH[pin]} torch=={pin} seconds={secs:.0f}\n")
        _log(f"built {v} in {secs:.0f}s")
    return v


def site_packages(venv: Path) -> Path:
    hits = sorted(venv.glob("lib/python3*/site-packages"))
    assert hits, f"no site-packages in {venv}"
    return hits[0]


def installed_version(sp: Path) -> str | None:
    infos = sorted(sp.glob("vllm-*.dist-info"))
    m = re.match(r"vllm-(.+)\.dist-info$", infos[0].name) if len(infos) == 1 else None
    return m.group(1) if m else None


def ensure_version(venv: Path, version: str) -> Path:
    sp = site_packages(venv)
    if installed_version(sp) != version:
        t0 = time.monotonic()
        proc = subprocess.run(
            [*uv_install(venv), "--no-deps", "--reinstall", str(wheels.fetch_wheel(version))],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        _log(f"swapped in vllm {version} in {time.monotonic() - t0:.0f}s")
    assert installed_version(sp) == version
    # what every release venv gets besides vLLM (PyYAML, pyflakes for the verifier)
    req = REPO / "requirements-node.txt"
    proc = subprocess.run(
        [*uv_install(venv), "-r", str(req)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return sp


def make_overlay(sp: Path, dest: Path, patched: list[str]) -> Path:
    """dest/vllm: real directories, symlinked files; the patch targets are real copies."""
    src_root = sp / "vllm"
    skip_pyc = {Path(r).stem for r in patched}
    for dirpath, _dirnames, filenames in os.walk(src_root):
        rel = Path(dirpath).relative_to(sp)
        (dest / rel).mkdir(parents=True, exist_ok=True)
        for name in filenames:
            relf = rel / name
            if str(relf) in patched:
                (dest / relf).write_bytes((sp / relf).read_bytes())
            elif rel.name == "__pycache__" and name.split(".")[0] in skip_pyc:
                continue
            else:
                os.symlink(sp / relf, dest / relf)
    return dest


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}


def probe(venv: Path, cwd: Path, overlay: Path | None) -> dict:
    """The probe's answer. On the venv itself (unpatched) it compiles what it imports into the
    venv, once per vLLM version (the overlay then links that bytecode); on the overlay it writes
    none (the patched sources' bytecode would only be thrown away with the overlay)."""
    env = _clean_env()
    env["VLLM_LOGGING_LEVEL"] = "ERROR"
    if overlay is not None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONPATH"] = str(overlay)
    proc = subprocess.run(
        [str(venv / "bin" / "python"), str(PROBE), "deepseek_v3", "kimi_k2"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, (
        f"probe failed rc={proc.returncode}:\n{proc.stderr[-4000:]}"
    )
    return json.loads(lines[-1])


@pytest.fixture(scope="module")
def manifest() -> Manifest:
    return Manifest.load(MANIFEST)


@pytest.fixture(scope="module")
def venvs(manifest: Manifest) -> Iterator[dict[str, Path]]:
    pins = {manifest.entry(v)["torch"] for v in CASES}
    assert pins == set(BUILD_WITH), pins
    with ThreadPoolExecutor(max_workers=len(pins)) as pool:  # both builds at once (~8 min)
        futures = {pin: pool.submit(build_venv, pin) for pin in sorted(pins)}
        yield {pin: f.result() for pin, f in futures.items()}


@pytest.fixture
def venv(version: str, venvs: dict[str, Path], manifest: Manifest) -> Iterator[Path]:
    """The pin's cached venv, held by this test alone from the reinstall to the last probe: a
    second `make test` on the same machine shares the cache and would swap vLLM under it."""
    pin = manifest.entry(version)["torch"]
    with open(venv_dir(pin).parent / f".torch-{pin}.use.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield venvs[pin]


@pytest.mark.timeout(2 * BUILD_TIMEOUT_S)
@pytest.mark.parametrize("version", CASES)
def test_patched_vllm_imports_and_passes_its_own_checks(
    version: str, venv: Path, manifest: Manifest, tmp_path: Path
) -> None:
    pin = manifest.entry(version)["torch"]
    sp = ensure_version(venv, version)
    targets = sorted(manifest.targets(version))
    for rel, t in manifest.targets(version).items():  # the installed files are pristine
        assert hashlib.sha256((sp / rel).read_bytes()).hexdigest() == t["pristine_sha256"], rel

    before = probe(venv, tmp_path, None)
    assert before["vllm_version"] == version and before["torch"].startswith(pin)
    assert not any(before["supports_eagle3"].values()), before
    assert all(r.startswith("refused") for r in before["spec_validation"].values()), before

    overlay = make_overlay(sp, tmp_path / "overlay", targets)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "specdeploy.node.patching.patches",
            "apply",
            "--json",
            "--site-packages",
            str(overlay),
            "--version",
            version,
            "--backup-dir",
            str(tmp_path / "pristine"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["verified"] is True

    # The node's view: the release venv's own python runs the toolkit copied into the release
    # (<release>/toolkit/{specdeploy,patches/vllm}) and reports applied + verified.
    # (the files the release archive packs, in its layout: plugins/module_utils lands under
    # specdeploy/node/module_utils there)
    toolkit = tmp_path / "toolkit"
    for name, source in toolkit_archive.toolkit_members("release"):
        (toolkit / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, toolkit / name)
    node = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "specdeploy.node.patching.patches",
            "status",
            "--json",
            "--site-packages",
            str(overlay),
            "--version",
            version,
            "--backup-dir",
            str(tmp_path / "pristine"),
        ],
        cwd=toolkit,
        capture_output=True,
        text=True,
        check=False,
        env=_clean_env(),
    )
    assert node.returncode == 0, node.stdout + node.stderr
    st = json.loads(node.stdout)
    assert st["state"] == "applied" and st["verified"] is True, st
    assert st["manifest"] == str(toolkit / "patches" / "vllm" / "manifest.yml")
    assert st["series_sha256"] == manifest.entry(version)["series_sha256"]

    after = probe(venv, tmp_path, overlay)
    _log(f"{version}: import {after['import_s']}s, {after}")
    assert Path(after["vllm_file"]).is_relative_to(overlay), after["vllm_file"]
    assert after["vllm_version"] == version and after["torch"].startswith(pin)
    assert after["supports_eagle3"] == {
        "DeepseekV2ForCausalLM": True,
        "DeepseekV3ForCausalLM": True,
        "KimiK25ForConditionalGeneration": True,
    }
    assert after["spec_validation"] == {"deepseek_v3": "accepted", "kimi_k2": "accepted"}
