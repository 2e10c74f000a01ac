"""One node-side tool as a single file: a zipapp of the node package that runs one module.

For a node without a release (a new machine, a hand check): one file to copy and run, the
whole ``specdeploy.node`` package (stdlib-only modules are all the tool imports; the
collection's module_utils packed where the node package imports them) and a ``__main__`` that
runs the module, e.g. the hardware doctor as ``sudo python3 doctor.pyz --json``. The archive is
reproducible (sorted members, fixed timestamps): the same code gives the same bytes. No role
uses it: the deploy runs the doctor as the module specdeploy.toolkit.gpu_doctor (one round trip
per node; ``ansible.builtin.script`` of this file cost about six).

    python -m specdeploy.controller.node_zipapp --module specdeploy.node.doctor --out FILE

Exit codes: 0 written, 2 usage or environment error (unknown module, unwritable --out).
"""

from __future__ import annotations

import argparse
import io
import sys
import zipfile
from pathlib import Path

from specdeploy.controller import toolkit_archive
from specdeploy.node import cli
from specdeploy.node.module_utils.specdeploy_fsio import atomic_write

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "specdeploy/node"
FIXED_TIME = (1980, 1, 1, 0, 0, 0)
MAIN = "import runpy\n\nrunpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n"


def members(repo: Path = REPO) -> list[tuple[str, Path]]:
    """(name in the zip, source): the node package's Python files, the collection's
    module_utils packed where the node package imports them (as in a release)."""
    top = [("specdeploy/__init__.py", repo / "specdeploy" / "__init__.py")]
    node = [
        (name, path)
        for name, path in toolkit_archive.toolkit_members("release", repo)
        if name.startswith(PACKAGE + "/") and name.endswith(".py")
    ]
    return top + node


def build(module: str, repo: Path = REPO) -> bytes:
    path = repo / Path(*module.split("."))
    if not (path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()):
        raise ValueError(f"--module {module}: no such module with a __main__ in {repo}")
    if not module.startswith("specdeploy.node."):
        raise ValueError(f"--module {module}: only node-side modules (specdeploy.node.*)")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, source in members(repo):
            info = zipfile.ZipInfo(name, FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, source.read_bytes())
        info = zipfile.ZipInfo("__main__.py", FIXED_TIME)
        info.compress_type = zipfile.ZIP_DEFLATED
        archive.writestr(info, MAIN.format(module=module))
    return buffer.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="node-zipapp", description=__doc__.split("\n")[0])
    ap.add_argument("--module", required=True, help="e.g. specdeploy.node.doctor")
    ap.add_argument("--out", type=Path, required=True, help="the .pyz to write")
    args = ap.parse_args(argv)
    try:
        cli.check_paths(writable=[("--out", args.out)])
        data = build(args.module)
        if not (args.out.is_file() and args.out.read_bytes() == data):
            atomic_write(args.out, data, mode=0o644)
    except (cli.PathError, ValueError) as exc:
        return cli.usage_error("node-zipapp", exc)
    except OSError as exc:
        return cli.usage_error("node-zipapp", f"--out {args.out}: {cli.reason(exc)}")
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
