"""The release archive holds node-side code only; the stand-in travels apart (issue 16, point 1)."""

from __future__ import annotations

import ast
import shutil
import tarfile
from pathlib import Path

import pytest

from specdeploy.controller import toolkit_archive

REPO = Path(__file__).resolve().parents[2]
NODE_SIDE = ("specdeploy/node/", "patches/vllm/")  # plugins/module_utils is packed under node/


def relative(part: str, repo: Path = REPO) -> list[str]:
    return toolkit_archive.toolkit_files(part, repo)


def test_the_release_holds_node_side_code_only():
    files = relative("release")
    assert "specdeploy/node/validation/check.py" in files and "patches/vllm/manifest.yml" in files
    assert "requirements-node.txt" in files and "specdeploy/__init__.py" in files
    strays = [
        f
        for f in files
        if not f.startswith(NODE_SIDE)
        and f not in ("specdeploy/__init__.py", "requirements-node.txt")
    ]
    assert strays == []
    # Maintainer tools live in scripts/, outside every directory a release takes.
    assert not [f for f in files if f.startswith("scripts/") or f.endswith("regen_patches.py")]


def test_the_standin_part_is_the_standin_and_its_recordings_only():
    files = relative("standin")
    assert "tests/standin/vllm_standin.py" in files
    assert "tests/fixtures/vllm-0.20.2/metrics-spec.txt" in files
    assert "tests/fixtures/sglang-0.5.15-h200/metrics-spec.txt" in files  # the SGLang dialect
    recorded = ("tests/fixtures/vllm-0.20.2/", "tests/fixtures/sglang-0.5.15-h200/metrics-")
    assert all(f.startswith(("tests/standin/", *recorded)) for f in files)
    assert not any("/profiles/" in f or f.endswith("harness.py") for f in files)


def test_node_code_imports_nothing_from_the_controller_or_the_tests():
    offenders = []
    for path in sorted((REPO / "specdeploy" / "node").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                if name.startswith(("specdeploy.controller", "testbed", "tests")):
                    offenders.append(f"{path.relative_to(REPO)}: {name}")
                if isinstance(node, ast.ImportFrom) and name == "specdeploy":
                    imported = [a.name for a in node.names]
                    if "controller" in imported:
                        offenders.append(f"{path.relative_to(REPO)}: specdeploy.controller")
    assert offenders == []


@pytest.fixture
def checkout(tmp_path):
    """A copy of the files both parts read, plus the test tooling and controller code."""
    for top in (
        "specdeploy",
        "plugins",
        "patches",
        "tests/standin",
        "tests/fixtures/vllm-0.20.2",
        "tests/fixtures/sglang-0.5.15-h200",
        "tests/testbed",
        "scripts",
    ):
        shutil.copytree(REPO / top, tmp_path / top, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "requirements-node.txt", tmp_path / "requirements-node.txt")
    return tmp_path


def append(path: Path, text: str = "\n# edited\n") -> None:
    with path.open("a") as handle:
        handle.write(text)


def test_only_node_code_changes_the_release_fingerprint(checkout):
    release = toolkit_archive.fingerprint("release", checkout)
    standin = toolkit_archive.fingerprint("standin", checkout)
    assert release == toolkit_archive.fingerprint("release", REPO)

    for edited in (
        "tests/testbed/bench.py",
        "tests/standin/profiles/pass.json",
        "tests/standin/harness.py",
        "specdeploy/controller/report.py",
        "scripts/regen_patches.py",
    ):
        append(checkout / edited)
    assert toolkit_archive.fingerprint("release", checkout) == release
    assert toolkit_archive.fingerprint("standin", checkout) == standin

    append(checkout / "tests/standin/vllm_standin.py")
    assert toolkit_archive.fingerprint("release", checkout) == release
    assert toolkit_archive.fingerprint("standin", checkout) != standin

    append(checkout / "specdeploy/node/validation/gate.py")
    assert toolkit_archive.fingerprint("release", checkout) != release


@pytest.mark.parametrize("part", sorted(toolkit_archive.PARTS))
def test_archive_is_reproducible_and_holds_the_fingerprinted_files(part, tmp_path):
    first, second = tmp_path / "a.tar", tmp_path / "b.tar"
    toolkit_archive.write_archive(first, part)
    toolkit_archive.write_archive(second, part)
    assert first.read_bytes() == second.read_bytes()
    with tarfile.open(first) as tar:
        assert tar.getnames() == relative(part)


def test_cli_prints_each_part_s_fingerprint(capsys):
    assert toolkit_archive.main(["--part", "standin", "--fingerprint"]) == 0
    assert capsys.readouterr().out.strip() == toolkit_archive.fingerprint("standin")
