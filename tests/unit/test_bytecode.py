"""A release venv's bytecode compiled at build (plugins/module_utils/bytecode.py, the module
release_bytecode): a real venv made by `python -m venv`, as the release role makes it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from module_runner import MODULES, run_module

MODULE = MODULES / "release_bytecode.py"
PYTHON = getattr(sys, "_base_executable", sys.executable)


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    v = tmp_path / "venv"
    subprocess.run([PYTHON, "-m", "venv", "--without-pip", str(v)], check=True)
    (site,) = v.glob("lib/python3*/site-packages")
    (site / "pkg").mkdir()
    (site / "pkg" / "__init__.py").write_text("")
    (site / "pkg" / "fast.py").write_text("X = 1\n")
    (site / "py2_testdata.py").write_text("print 'python 2'\n")  # compileall refuses it
    return v


def cached(path: Path) -> Path:
    return Path(importlib.util.cache_from_source(str(path)))


def test_compiles_what_the_server_could_not_and_records_what_it_refuses(venv: Path, tmp_path):
    (site,) = venv.glob("lib/python3*/site-packages")
    checked = run_module(MODULE, tmp_path, {"venv": str(venv), "_ansible_check_mode": True})
    assert checked["changed"] and checked["stale"] == 3, checked
    assert not cached(site / "pkg" / "fast.py").exists(), "check mode wrote bytecode"

    first = run_module(MODULE, tmp_path, {"venv": str(venv)})
    assert first["changed"] and first["stale"] == 3 and first["refused"] == 1, first
    assert cached(site / "pkg" / "fast.py").is_file()
    # a read-only server finds it: importing with writes off uses the cache file
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-v", "-c", "import pkg.fast"],
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"code object from '{cached(site / 'pkg' / 'fast.py')}'" in out.stderr

    second = run_module(MODULE, tmp_path, {"venv": str(venv)})
    assert second == {**second, "changed": False, "stale": 0}, second


def test_a_source_changed_after_the_build_is_compiled_again(venv: Path, tmp_path):
    (site,) = venv.glob("lib/python3*/site-packages")
    run_module(MODULE, tmp_path, {"venv": str(venv)})
    patched = site / "pkg" / "fast.py"
    later = time.time() + 5
    patched.write_text("X = 2\n")  # the patch step replaces files after the install
    os.utime(patched, (later, later))
    again = run_module(MODULE, tmp_path, {"venv": str(venv)})
    assert again["changed"] and again["stale"] == 1, again
    # a source stamped ahead of the clock (a node's clock off) is no reason to compile forever
    assert run_module(MODULE, tmp_path, {"venv": str(venv)})["changed"] is False


def test_a_directory_that_is_no_venv_is_one_line(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    out = run_module(MODULE, tmp_path, {"venv": str(tmp_path / "empty")})
    assert out.get("failed") and "no lib/python3*/site-packages" in out["msg"], out
    assert "\n" not in out["msg"]
