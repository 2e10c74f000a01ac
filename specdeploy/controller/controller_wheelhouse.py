"""Fill the controller's wheelhouse for a rollout: the pinned vLLM, for the nodes' platform.

The deploy runs this once per rollout on the controller (roles/vllm_release, fill_wheelhouse);
each node then receives only the wheels it lacks and installs offline (`pip --no-index`), so a
fleet downloads vLLM (and, with dependencies, torch and the CUDA wheels) once, not once per node.

A fill is recorded per (vLLM version, dependencies or not, platform) under `.fills/`: a repeat
finds its record, checks that the wheels are still there, and touches no network. pip's own
environment (PIP_INDEX_URL, PIP_FIND_LINKS, PIP_NO_INDEX) selects where wheels come from, as
for any pip run on the controller.

Prints one JSON object: {"changed", "dir", "record", "wheels": {file name: sha256}}.
Exit codes: 0 ok, 2 usage error or download failed.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

from specdeploy.controller import wheelhouse
from specdeploy.node.module_utils.specdeploy_fsio import atomic_write, sha256_file
from specdeploy.node.module_utils.venv_installer import UV_REQUIREMENT, UV_VERSION

# pip download names every wheel it resolved, new or already in the directory, in these lines.
PIP_WHEEL_LINE = re.compile(r"^\s*(?:Saved|File was already downloaded)\s+(?P<path>\S+\.whl)\s*$")


def fill_key(vllm_version: str, dependencies: bool, python: str, machine: str, glibc: str) -> str:
    deps = "deps" if dependencies else "nodeps"
    return f"vllm-{vllm_version}-{deps}-cp{python}-{machine}-glibc{glibc}-uv{UV_VERSION}"


def read_record(record: Path, directory: Path) -> dict[str, str] | None:
    """The wheels of an earlier identical fill, or None when it must run (again)."""
    try:
        data = json.loads(record.read_text())
        wheels = data["wheels"]
        sizes = data["sizes"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for name in wheels:
        path = directory / name
        if not path.is_file() or path.stat().st_size != sizes.get(name):
            return None
    return dict(wheels)


def pip_download(
    directory: Path, requirements: list[str], platform: list[str], deps: bool
) -> set[str]:
    """Run pip download; return the file names of the wheels it resolved."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
        "-d",
        str(directory),
        *platform,
        *([] if deps else ["--no-deps"]),
        *requirements,
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])
        raise RuntimeError(f"pip download {' '.join(requirements)} failed:\n{tail}")
    names = set()
    for line in result.stdout.splitlines():
        match = PIP_WHEEL_LINE.match(line)
        if match:
            names.add(Path(match.group("path")).name)
    return names


def fill(
    directory: Path,
    vllm_version: str,
    dependencies: bool,
    python: str,
    machine: str,
    glibc: str,
) -> dict:
    key = fill_key(vllm_version, dependencies, python, machine, glibc)
    record = directory / ".fills" / f"{key}.json"
    known = read_record(record, directory)
    if known is not None:
        return {"changed": False, "dir": str(directory), "record": key, "wheels": known}
    directory.mkdir(parents=True, exist_ok=True)
    platform = wheelhouse.platform_args(python, machine, glibc)
    # The toolkit's own pins go without dependencies, as the node installs them; uv installs
    # the node's release venvs (specdeploy_venv_installer).
    needs = [*wheelhouse.node_requirements(), UV_REQUIREMENT]
    names = pip_download(directory, needs, platform, deps=False)
    names |= pip_download(directory, [f"vllm=={vllm_version}"], platform, deps=dependencies)
    if not any(name.lower().startswith(f"vllm-{vllm_version}-") for name in names):
        raise RuntimeError(f"pip download resolved no vllm-{vllm_version} wheel ({sorted(names)})")
    wheels = {name: sha256_file(directory / name) for name in sorted(names)}
    sizes = {name: (directory / name).stat().st_size for name in wheels}
    # The record appears only once every wheel is in place.
    atomic_write(record, json.dumps({"wheels": wheels, "sizes": sizes}, indent=1) + "\n")
    return {"changed": True, "dir": str(directory), "record": key, "wheels": wheels}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", type=Path, required=True, help="the controller's wheelhouse")
    parser.add_argument("--vllm", required=True, help="the pinned vLLM version")
    parser.add_argument(
        "--no-deps", action="store_true", help="vLLM without its dependencies (sandbox nodes)"
    )
    parser.add_argument("--python-version", required=True, help="the node's CPython, e.g. 3.11")
    parser.add_argument("--machine", required=True, help="the node's architecture, e.g. x86_64")
    parser.add_argument("--glibc", required=True, help="the node's glibc, e.g. 2.36")
    args = parser.parse_args(argv)
    if not args.dir.is_absolute():
        print(f"controller wheelhouse {args.dir}: must be an absolute path", file=sys.stderr)
        return 2
    try:
        result = fill(
            args.dir, args.vllm, not args.no_deps, args.python_version, args.machine, args.glibc
        )
    except (RuntimeError, ValueError, OSError) as error:
        print(f"controller wheelhouse {args.dir}: {error}", file=sys.stderr)
        return 2
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
