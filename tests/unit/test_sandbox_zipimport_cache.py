"""The sandbox nodes' zipimport cache (tests/testbed/sandbox/zipimport_cache.py): a module
imported from a zip behaves exactly as without it, from a second zip without compiling."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from testbed.sandbox.config import SandboxError
from testbed.sandbox.files import zipimport_cache_wanted

HOOK = Path(__file__).resolve().parents[1] / "testbed" / "sandbox" / "zipimport_cache.py"
SOURCE = "def where():\n    raise RuntimeError('from the zip')\n\nVALUE = 6 * 7\n"

# Loads the hook as the node's .pth does, points it at a cache directory, imports `payload`
# from the zip; `--no-compile` makes compiling fail, so a success shows the cache answered.
PROBE = """
import importlib.util, json, sys, traceback, zipimport
spec = importlib.util.spec_from_file_location("hook", sys.argv[1])
hook = importlib.util.module_from_spec(spec); spec.loader.exec_module(hook)
hook.CACHE = sys.argv[2]
if "--no-compile" in sys.argv:
    def refuse(pathname, source):
        raise AssertionError("compiled")
    hook._compile_source = refuse
sys.path.insert(0, sys.argv[3])
import payload
try:
    payload.where()
except RuntimeError:
    frame = traceback.extract_tb(sys.exc_info()[2])[-1]
print(json.dumps({"value": payload.VALUE, "file": frame.filename,
                  "code_file": payload.where.__code__.co_filename}))
"""


def zip_with_payload(path: Path, source: str = SOURCE) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("payload.py", source)
    return path


def probe(cache: Path, archive: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROBE, str(HOOK), str(cache), str(archive), *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_second_zip_with_the_same_source_is_served_from_the_cache(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    first = probe(cache, zip_with_payload(tmp_path / "one.zip"))
    assert first.returncode == 0, first.stderr
    assert len(list(cache.iterdir())) == 1
    second_zip = zip_with_payload(tmp_path / "two.zip")
    second = probe(cache, second_zip, "--no-compile")
    assert second.returncode == 0, second.stderr
    answer = json.loads(second.stdout)
    assert answer["value"] == 42
    # Tracebacks name the zip the code came from this time, as a .pyc's would.
    assert answer["file"] == answer["code_file"] == str(second_zip / "payload.py")


def test_changed_source_is_compiled_not_taken_from_the_cache(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    assert probe(cache, zip_with_payload(tmp_path / "one.zip")).returncode == 0
    changed = zip_with_payload(tmp_path / "two.zip", SOURCE.replace("6 * 7", "6 * 8"))
    assert "AssertionError: compiled" in probe(cache, changed, "--no-compile").stderr
    assert json.loads(probe(cache, changed).stdout)["value"] == 48


def test_a_corrupt_entry_or_an_unwritable_cache_only_costs_a_compile(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    assert probe(cache, zip_with_payload(tmp_path / "one.zip")).returncode == 0
    (entry,) = cache.iterdir()
    entry.write_bytes(b"\x00torn")
    again = probe(cache, zip_with_payload(tmp_path / "two.zip"))
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["value"] == 42
    missing = probe(tmp_path / "absent", zip_with_payload(tmp_path / "three.zip"))
    assert missing.returncode == 0, missing.stderr
    assert json.loads(missing.stdout)["value"] == 42
    assert not (tmp_path / "absent").exists()


def test_the_switch_takes_on_or_off_and_names_a_bad_value(monkeypatch):
    monkeypatch.delenv("SPECDEPLOY_SANDBOX_ZIPIMPORT_CACHE", raising=False)
    assert zipimport_cache_wanted()
    monkeypatch.setenv("SPECDEPLOY_SANDBOX_ZIPIMPORT_CACHE", "off")
    assert not zipimport_cache_wanted()
    monkeypatch.setenv("SPECDEPLOY_SANDBOX_ZIPIMPORT_CACHE", "maybe")
    with pytest.raises(SandboxError, match="SPECDEPLOY_SANDBOX_ZIPIMPORT_CACHE must be on or off"):
        zipimport_cache_wanted()
