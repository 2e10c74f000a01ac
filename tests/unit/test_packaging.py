"""The project installs as a package with its commands (pyproject.toml)."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def test_every_python_package_of_the_product_is_packaged() -> None:
    listed = set(PROJECT["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(REPO).parts)
        for init in (REPO / "specdeploy").rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert sorted(found - listed) == [], "add them to [tool.setuptools] packages"
    # The test bed and the maintainer tools are not part of the product's packaging.
    assert not [name for name in listed if name.split(".")[0] in ("testbed", "scripts", "tests")]


def test_every_console_script_names_a_main_that_exists() -> None:
    scripts = PROJECT["project"]["scripts"]
    for name in ("spec-check", "spec-report", "vllm-patches", "drafter-check", "gpu-doctor"):
        assert name in scripts
    # The test bed's tools (sandbox, demo, bench) run as python -m testbed.<tool>, not as commands.
    assert not [
        name for name, target in scripts.items() if target.startswith(("testbed", "scripts"))
    ]
    for name, target in scripts.items():
        module, _, function = target.partition(":")
        assert callable(getattr(importlib.import_module(module), function)), name


def test_no_path_tricks_left_in_scripts() -> None:
    """Maintainer tools run as python -m scripts.<tool> from the checkout: no sys.path edits."""
    tools = sorted((REPO / "scripts").glob("*.py"))
    assert tools
    assert [t.name for t in tools if "sys.path" in t.read_text(encoding="utf-8")] == []


def test_unit_tests_take_their_import_paths_from_the_pytest_config() -> None:
    """tests/unit imports through pytest's ``pythonpath`` (pyproject.toml), each entry a folder
    of the checkout: no sys.path edits at a module's top (module_runner's child process edits
    its own)."""
    paths = PROJECT["tool"]["pytest"]["ini_options"]["pythonpath"]
    assert [p for p in paths if not (REPO / p).is_dir()] == []
    tests = sorted((REPO / "tests" / "unit").glob("*.py"))
    assert [t.name for t in tests if _touches_sys_path_at_top(t)] == []


def _touches_sys_path_at_top(path: Path) -> bool:
    """Code outside functions and classes that names sys.path (an insert, an append, a slice
    assignment). Read from the syntax tree: a string holding a child process's program, which
    edits its own sys.path, is not the module's code."""
    import ast

    def names_sys_path(node: ast.AST) -> bool:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            return False
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "path"
            and isinstance(node.value, ast.Name)
            and node.value.id == "sys"
        ):
            return True
        return any(names_sys_path(child) for child in ast.iter_child_nodes(node))

    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return any(names_sys_path(stmt) for stmt in tree.body)


def test_make_setup_leaves_the_tracked_tree_alone() -> None:
    """Issue 28: `make setup` (pip install -e .) rewrote specdeploy.egg-info/SOURCES.txt, a
    tracked file, so a fresh clone was dirty after setup. The build metadata is not tracked,
    and git ignores it."""
    import shutil
    import subprocess

    if shutil.which("git") is None or not (REPO / ".git").exists():
        import pytest

        pytest.skip("not a git checkout")
    tracked = subprocess.run(
        ["git", "ls-files", "--", "specdeploy.egg-info"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert tracked == ""
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", "specdeploy.egg-info/SOURCES.txt"], cwd=REPO, check=False
    )
    assert ignored.returncode == 0
