"""Fill the controller's caches: the sandbox wheelhouse and the vLLM wheels the tests read.

The sandbox nodes install from these wheels offline, the path a production node without
internet uses: they see a copy at /srv/wheelhouse, read-only, whose vLLM wheels have their
compiled kernels emptied (tests/testbed/sandbox/node_wheelhouse.py derives it from this
directory).
Exit codes: 0 ok, 2 download failed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import yaml

from specdeploy.controller import wheels
from specdeploy.node.module_utils import progress_line
from specdeploy.node.module_utils.venv_installer import UV_REQUIREMENT

REPO = Path(__file__).resolve().parents[2]
SANDBOX_VARS = REPO / "inventory" / "sandbox-group_vars" / "gpu_nodes.yml"
# A second supported version, for the tests that roll between releases of different vLLM, and
# the first with a k schedule by batch size the GPU tier runs (tests/integration/test_k_schedule).
EXTRA_SANDBOX_VLLM = ("0.17.1", "0.26.0")
# The SGLang the sandbox's specdeploy_engine=sglang releases pin (tests/integration/
# test_engine_sglang.py): its 12.8 MB wheel, installed --no-deps like vLLM's there (the stand-in
# reads its server_args.py), not torch and the CUDA stack it requires.
SANDBOX_SGLANG = ("0.5.15",)


def platform_args(python_version: str, machine: str, glibc: str) -> list[str]:
    """pip download flags that select wheels a node can install (its CPython, arch and glibc).

    manylinux_2_Y wheels need glibc >= 2.Y, so every Y from the node's glibc down to 5 is
    accepted (as pip does on the node), with the legacy aliases manylinux2014 (2.17),
    manylinux2010 (2.12) and manylinux1 (2.5), and pure-Python wheels.
    """
    major, minor = (int(part) for part in glibc.split(".")[:2])
    if major != 2 or minor < 5:
        raise ValueError(f"glibc {glibc}: manylinux wheels need glibc 2.5 or newer")
    tags = [f"manylinux_2_{y}_{machine}" for y in range(minor, 4, -1)]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags += [f"{alias}_{machine}" for y, alias in legacy.items() if y <= minor]
    args = ["--python-version", python_version, "--implementation", "cp", "--only-binary=:all:"]
    for tag in [*tags, "any"]:
        args += ["--platform", tag]
    return args


# The sandbox nodes run Debian 12: CPython 3.11 on x86-64, glibc 2.36.
NODE_PLATFORM = platform_args("3.11", "x86_64", "2.36")


def default_cache() -> Path:
    return Path(os.environ.get("SPECDEPLOY_CACHE", Path.home() / ".cache" / "specdeploy"))


def sandbox_vllm_versions() -> list[str]:
    """The vLLM versions the sandbox deploys: its group_vars plus what the tests switch to."""
    data = yaml.safe_load(SANDBOX_VARS.read_text())
    return sorted({str(data["specdeploy_vllm_version"]), *EXTRA_SANDBOX_VLLM})


def have(wheelhouse: Path, name: str, version: str) -> bool:
    prefix = f"{name.lower().replace('-', '_')}-{version}-"
    return any(p.name.lower().startswith(prefix) for p in wheelhouse.glob("*.whl"))


def download(wheelhouse: Path, requirement: str) -> None:
    name, version = requirement.split("==")
    if have(wheelhouse, name, version):
        return
    print(f"wheelhouse: downloading {requirement}", flush=True)
    with progress_line.Ticker(
        "wheelhouse", f"downloading {requirement}", no_eta="pip does not say the size ahead"
    ):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--disable-pip-version-check",
                "-d",
                str(wheelhouse),
                *NODE_PLATFORM,
                requirement,
            ],
            check=True,
        )


def node_requirements() -> list[str]:
    """The toolkit's own node-side pins (requirements-node.txt), one `name==version` each."""
    lines = (REPO / "requirements-node.txt").read_text().splitlines()
    return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]


def manifest_versions() -> list[str]:
    manifest = yaml.safe_load((REPO / "patches" / "vllm" / "manifest.yml").read_text())
    return [str(version) for version in manifest["versions"]]


def link_vllm(wheelhouse: Path, version: str) -> None:
    """The vLLM wheel is the one the patch tests use (one download, hard-linked here)."""
    source = wheels.fetch_wheel(version)
    target = wheelhouse / source.name
    if not target.exists():
        try:
            os.link(source, target)
        except OSError:
            target.write_bytes(source.read_bytes())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache", type=Path, default=default_cache())
    parser.add_argument("--vllm", nargs="*", help="vLLM versions (default: the sandbox's)")
    args = parser.parse_args(argv)
    wheelhouse = args.cache / "wheelhouse"
    wheelhouse.mkdir(parents=True, exist_ok=True)
    node_needs = node_requirements()
    try:
        for requirement in [
            *node_needs,
            UV_REQUIREMENT,  # the nodes' venv installer (specdeploy_venv_installer)
            *(f"vllm=={v}" for v in args.vllm or sandbox_vllm_versions()),
            *(f"sglang=={v}" for v in SANDBOX_SGLANG),
        ]:
            download(wheelhouse, requirement)
    except subprocess.CalledProcessError as error:
        print(f"wheelhouse: download failed: {error}", file=sys.stderr)
        return 2
    print(f"wheelhouse: {wheelhouse} ready ({len(list(wheelhouse.glob('*.whl')))} wheels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
