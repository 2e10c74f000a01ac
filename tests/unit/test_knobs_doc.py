"""The production inventory's knob list is generated from the roles and checked."""

from __future__ import annotations

import shutil
from pathlib import Path

from scripts import knobs_doc

REPO = Path(__file__).resolve().parents[2]


def copy_repo(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "roles", tmp_path / "roles", ignore=shutil.ignore_patterns("library"))
    shutil.copytree(REPO / "inventory" / "production", tmp_path / "inventory" / "production")
    return tmp_path


def test_a_new_knob_makes_the_check_fail_naming_it_until_written(tmp_path: Path, capsys) -> None:
    repo = copy_repo(tmp_path)
    assert knobs_doc.main(["--check", "--repo", str(repo)]) == 0
    defaults = repo / "roles" / "compile_cache" / "defaults" / "main.yml"
    defaults.write_text(defaults.read_text() + "# How many to keep.\ncompile_cache_keep: 2\n")
    capsys.readouterr()
    assert knobs_doc.main(["--check", "--repo", str(repo)]) == 1
    err = capsys.readouterr().err
    assert "missing knobs: compile_cache_keep" in err and "--write" in err
    assert knobs_doc.main(["--write", "--repo", str(repo)]) == 0
    assert knobs_doc.main(["--check", "--repo", str(repo)]) == 0
    doc = (repo / knobs_doc.DOC).read_text()
    assert "# How many to keep.\n# compile_cache_keep: 2\n" in doc
    assert "ansible-vault create" in doc  # the hand-written parts around the section stay


def test_an_option_without_default_is_listed_with_its_description(tmp_path: Path) -> None:
    section, names = knobs_doc.render(copy_repo(tmp_path))
    assert "validation_release_speculative" in names
    assert "#   rollback_reason: str: Why it failed." in section


def test_a_missing_marker_is_a_one_line_usage_error(tmp_path: Path, capsys) -> None:
    repo = copy_repo(tmp_path)
    (repo / knobs_doc.DOC).write_text("---\n")
    assert knobs_doc.main(["--check", "--repo", str(repo)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "gpu_nodes.yml" in err and "markers" in err
