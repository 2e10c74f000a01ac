"""The controller's archive of a release's toolkit or of the stand-in (plugins/filter/
release_archive.py): the names roles/vllm_release/vars/main.yml built in Jinja."""

from __future__ import annotations

import pytest
from ansible_collections.specdeploy.toolkit.plugins.filter.release_archive import (
    FilterModule,
    release_archive,
)

RELEASE = {"toolkit_sha256": "0123456789abcdef" + "f" * 48, "standin_sha256": "a" * 64}


def test_one_archive_per_fingerprint_under_the_build_dir() -> None:
    assert (
        release_archive(RELEASE, "/t/build", "toolkit") == "/t/build/toolkit-0123456789abcdef.tar"
    )
    assert release_archive(RELEASE, "/t/build", "standin") == f"/t/build/standin-{'a' * 16}.tar"
    assert FilterModule().filters()["release_archive"] is release_archive


def test_an_unknown_part_is_refused() -> None:
    with pytest.raises(ValueError, match="part 'release' is not one of toolkit, standin"):
        release_archive(RELEASE, "/t/build", "release")
