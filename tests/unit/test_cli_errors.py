"""Every tool: a bad path, an unwritable output or a broken history file is one line on stderr
that names the flag and the file, exit code 2 (usage or environment), never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specdeploy.node import cli
from specdeploy.node.validation.result import not_measured

REPO = Path(__file__).resolve().parents[2]
MISSING = "/nonexistent/specdeploy-test"
SERVER = ["--base-url", "http://127.0.0.1:9", "--served-model-name", "m"]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cli")
    a_file = root / "a-file"
    a_file.write_text("")
    broken_json = root / "broken.json"
    broken_json.write_text("{")
    broken_db = root / "history.db"
    broken_db.write_bytes(b"this is no sqlite database\0\1\2" * 40)
    results = root / "results"
    results.mkdir()
    (results / "n1.json").write_text(json.dumps(not_measured("n1", "test")))
    broken_yaml = root / "manifest.yml"
    broken_yaml.write_text("versions: [\n")
    return {
        "file": a_file,
        "json": broken_json,
        "db": broken_db,
        "results": results,
        "yaml": broken_yaml,
    }


CASES = {
    # name: (module, args, the flag, the file) with {file}/{json}/... from the fixture
    "spec-check prompts": (
        "specdeploy.node.validation.check",
        ["acceptance", *SERVER, "--prompts", f"{MISSING}/p.jsonl"],
        "--prompts",
        f"{MISSING}/p.jsonl",
    ),
    "spec-check unwritable out": (
        "specdeploy.node.validation.check",
        ["smoke", *SERVER, "--out", "{file}/result.json"],
        "--out",
        "{file}/result.json",
    ),
    "spec-check broken baseline": (
        "specdeploy.node.validation.check",
        ["acceptance", *SERVER, "--baseline-file", "{json}"],
        "--baseline-file",
        "{json}",
    ),
    "spec-check api key file": (
        "specdeploy.node.validation.check",
        ["smoke", *SERVER, "--api-key-file", f"{MISSING}/key"],
        "--api-key-file",
        f"{MISSING}/key",
    ),
    "spec-report missing results": (
        "specdeploy.controller.report",
        [f"{MISSING}/results"],
        "RESULTS",
        f"{MISSING}/results",
    ),
    "spec-report broken history": (
        "specdeploy.controller.report",
        ["{results}", "--history", "{db}"],
        "--history",
        "{db}",
    ),
    "spec-report unwritable html": (
        "specdeploy.controller.report",
        ["{results}", "--html", "{file}/report.html"],
        "--html",
        "{file}/report.html",
    ),
    "spec-history broken history": (
        "specdeploy.controller.history",
        ["runs", "--db", "{db}"],
        "--db",
        "{db}",
    ),
    "vllm-patches site-packages": (
        "specdeploy.node.patching.patches",
        ["status", "--site-packages", MISSING],
        "--site-packages",
        MISSING,
    ),
    "vllm-patches broken manifest": (
        "specdeploy.node.patching.patches",
        ["list", "--manifest", "{yaml}"],
        "--manifest",
        "{yaml}",
    ),
    "drafter-check target": (
        "specdeploy.controller.drafter",
        ["--target", MISSING, "--drafter", MISSING, "--vllm-version", "0.16.0"],
        "--target",
        MISSING,
    ),
    "spec-inputs manifest": (
        "specdeploy.controller.inputs",
        ["--vllm-version", "0.16.0", "--manifest", f"{MISSING}/m.yml"],
        "--manifest",
        f"{MISSING}/m.yml",
    ),
    "gpu-doctor root": (
        "specdeploy.node.doctor",
        ["--root", MISSING, "--json"],
        "--root",
        MISSING,
    ),
    "engine-log": (
        "specdeploy.node.service.engine_log",
        [f"{MISSING}/log"],
        "LOG",
        f"{MISSING}/log",
    ),
    "vllm-spec-keys": (
        "specdeploy.node.patching.speckeys",
        ["--file", f"{MISSING}/speculative.py"],
        "--file",
        f"{MISSING}/speculative.py",
    ),
    "spec-result unwritable out": (
        "specdeploy.node.validation.result",
        ["not-measured", "--node", "n", "--reason", "r", "--out", "{file}/n.json"],
        "--out",
        "{file}/n.json",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_path_is_one_line_naming_the_flag_and_the_file(case: str, files) -> None:
    module, args, flag, path = CASES[case]
    names = {k: str(v) for k, v in files.items()}
    args = [a.format(**names) for a in args]
    path = path.format(**names)
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert proc.returncode == cli.EXIT_USAGE, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "error: " in lines[0] and f"{flag} {path}" in lines[0], lines[0]


def test_the_exit_codes_are_one_set() -> None:
    assert (cli.EXIT_OK, cli.EXIT_CHECK_FAILED, cli.EXIT_USAGE) == (0, 1, 2)
