"""Fixtures for the patch tests: real vLLM wheels from PyPI, downloaded once into the cache.

Only the members the patcher and the verifier read are extracted (``specdeploy.controller.wheels``,
into ``<cache>/vllm-src/<version>/`` together with the wheel's real dist-info); each test gets
its own copy as a small tmp "site-packages", so tests that modify files are independent.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: specdeploy

from patchtest_util import MANIFEST

from specdeploy.controller import wheels
from specdeploy.node.patching.patches import Manifest


@pytest.fixture(scope="session")
def manifest() -> Manifest:
    return Manifest.load(MANIFEST)


@pytest.fixture(scope="session")
def newest_vllm() -> str:
    """The newest vLLM on PyPI (answer cached for a day by specdeploy.controller.wheels)."""
    return wheels.newest_version()


@pytest.fixture(scope="session")
def extracted() -> Callable[[str], Path]:
    """version -> <cache>/vllm-src/<version> (download + extract once per session)."""
    done: dict[str, Path] = {}

    def get(version: str) -> Path:
        if version not in done:
            done[version] = wheels.extract(version)
        return done[version]

    return get


@pytest.fixture
def site(tmp_path: Path, extracted: Callable[[str], Path]) -> Callable[[str], Path]:
    """version -> a fresh tmp site-packages holding that wheel's extracted members."""

    count = [0]

    def make(version: str) -> Path:
        count[0] += 1
        sp = tmp_path / f"sp{count[0]}-{version}" / "site-packages"
        shutil.copytree(extracted(version), sp, ignore=shutil.ignore_patterns(".missing-*"))
        return sp

    return make
