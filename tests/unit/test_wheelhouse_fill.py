"""The controller's wheelhouse fill command line (plugins/filter/wheelhouse_fill.py), as
roles/vllm_release/tasks/fill_wheelhouse.yml built it in Jinja; the tool's own parser takes it."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.specdeploy.toolkit.plugins.filter.wheelhouse_fill import (
    FilterModule,
    wheelhouse_fill_args,
)

PLATFORM = {"python": "3.11", "machine": "x86_64", "glibc": "2.36"}


def test_the_fill_downloads_the_pinned_vllm_for_the_nodes_platform() -> None:
    assert wheelhouse_fill_args(PLATFORM, "/srv/wh", "0.16.0", True) == [
        "--dir", "/srv/wh", "--vllm", "0.16.0",
        "--python-version", "3.11", "--machine", "x86_64", "--glibc", "2.36",
    ]  # fmt: skip


@pytest.mark.parametrize(("dependencies", "no_deps"), [(True, False), (False, True), ("", True)])
def test_no_deps_only_where_the_dependencies_are_not_installed(dependencies, no_deps) -> None:
    args = wheelhouse_fill_args(PLATFORM, "/srv/wh", "0.16.0", dependencies)
    assert ("--no-deps" in args) is no_deps


def test_the_tool_reads_them_as_meant(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from specdeploy.controller import controller_wheelhouse

    seen: list = []
    monkeypatch.setattr(controller_wheelhouse, "fill", lambda *a: seen.append(a) or {})
    rc = controller_wheelhouse.main(wheelhouse_fill_args(PLATFORM, "/w", "0.16.0", False))
    assert rc == 0, capsys.readouterr()
    assert seen == [(Path("/w"), "0.16.0", False, "3.11", "x86_64", "2.36")]


def test_the_filter_is_registered() -> None:
    assert FilterModule().filters()["wheelhouse_fill_args"] is wheelhouse_fill_args
