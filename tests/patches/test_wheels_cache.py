"""specdeploy.controller.wheels: newest-version answer cached a day (no network here)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from specdeploy.controller import wheels


def test_fresh_answer_is_reused_without_asking_pypi(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SPECDEPLOY_CACHE", str(tmp_path))
    (tmp_path / "newest-vllm.json").write_text(
        json.dumps({"version": "9.9.9", "checked_at": time.time()})
    )

    def boom() -> str:
        raise AssertionError("PyPI must not be asked while the answer is fresh")

    monkeypatch.setattr(wheels, "_query_newest", boom)
    assert wheels.newest_version() == "9.9.9"


def test_stale_answer_is_refreshed_and_kept_on_a_network_flake(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SPECDEPLOY_CACHE", str(tmp_path))
    f = tmp_path / "newest-vllm.json"
    f.write_text(json.dumps({"version": "1.0.0", "checked_at": time.time() - 2 * 86400}))
    monkeypatch.setattr(wheels, "_query_newest", lambda: "2.0.0")
    assert wheels.newest_version() == "2.0.0"
    assert json.loads(f.read_text())["version"] == "2.0.0"

    f.write_text(json.dumps({"version": "2.0.0", "checked_at": 0}))

    def flake() -> str:
        raise RuntimeError("network down")

    monkeypatch.setattr(wheels, "_query_newest", flake)
    assert wheels.newest_version() == "2.0.0"  # stale beats a flake
    f.unlink()
    with pytest.raises(RuntimeError):
        wheels.newest_version()


@pytest.mark.patches
def test_extract_only_the_requested_members(tmp_path: Path, monkeypatch) -> None:
    """Extraction into a fresh cache reuses the downloaded wheel and writes only what is asked."""
    real_wheel = wheels.fetch_wheel("0.16.0")  # in the real cache (downloaded once)
    monkeypatch.setenv("SPECDEPLOY_CACHE", str(tmp_path))
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / real_wheel.name).symlink_to(real_wheel)
    dest = wheels.extract("0.16.0", ("vllm/config/speculative.py", "vllm/v1/spec_decode/"))
    files = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert "vllm/config/speculative.py" in files
    assert "vllm/v1/spec_decode/eagle.py" in files
    assert "vllm-0.16.0.dist-info/METADATA" in files
    assert not any(f.startswith("vllm/model_executor") for f in files)
