"""The node package is split by job (patching, release, service, validation, doctor) and its
modules import each other without a circle, counting imports inside functions too (a circle
hidden that way still ties two modules into one)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NODE = REPO / "specdeploy" / "node"


def node_imports(root: Path = NODE) -> dict[str, set[str]]:
    modules = {}
    for path in root.rglob("*.py"):
        name = ".".join(path.relative_to(root.parents[1]).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    deps: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("specdeploy."):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    deps[name].add(full if full in modules else node.module)
            elif isinstance(node, ast.Import):
                deps[name].update(a.name for a in node.names if a.name.startswith("specdeploy."))
    return {name: {d for d in deps[name] if d in modules and d != name} for name in modules}


def circles(deps: dict[str, set[str]]) -> list[list[str]]:
    found, state = [], {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for dep in sorted(deps[module]):
            if state.get(dep) == "open":
                found.append([*path[path.index(dep) :], dep])
            elif dep not in state:
                visit(dep, [*path, dep])
        state[module] = "done"

    for module in sorted(deps):
        if module not in state:
            visit(module, [module])
    return found


def test_the_node_package_has_no_import_circle() -> None:
    assert circles(node_imports()) == []


def test_the_node_code_is_split_by_job() -> None:
    packages = sorted(p.parent.name for p in NODE.glob("*/__init__.py"))
    assert packages == ["doctor", "module_utils", "patching", "release", "service", "validation"]
    flat = sorted(p.stem for p in NODE.glob("*.py") if p.stem != "__init__")
    # shared by every job (the attention table and the version strings, which the doctor module
    # needs too, live in the collection's module_utils: specdeploy.node.module_utils)
    assert flat == ["cli", "jsontext"]


def test_a_circle_is_found(tmp_path: Path) -> None:
    package = tmp_path / "specdeploy" / "node"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from specdeploy.node import b\n")
    (package / "b.py").write_text("from specdeploy.node import a\n")
    assert circles(node_imports(package)) == [
        ["specdeploy.node.a", "specdeploy.node.b", "specdeploy.node.a"]
    ]
