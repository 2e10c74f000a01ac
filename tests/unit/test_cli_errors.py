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
    latin1 = root / "latin1.txt"  # issue 28: non-UTF-8 files were tracebacks in 5 tools
    latin1.write_bytes(b"\xff\xfe model: caf\xe9\n")
    a_list = root / "list.json"
    a_list.write_text("[1, 2]\n")
    nan = root / "nan.json"
    nan.write_text('{"a": NaN}\n')
    garbage = root / "garbage"
    garbage.write_text("garbage !!\n")
    empty = root / "empty"
    empty.write_text("")
    gates = root / "gates.yml"
    gates.write_text("min_speed_up: {[1]: 2}\n")
    result = root / "n1.json"
    result.write_text(json.dumps(not_measured("n1", "test")))
    return {
        "file": a_file,
        "json": broken_json,
        "db": broken_db,
        "results": results,
        "yaml": broken_yaml,
        "latin1": latin1,
        "list": a_list,
        "nan": nan,
        "garbage": garbage,
        "empty": empty,
        "gates": gates,
        "result": result,
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
    # Issue 28: tracebacks, wrong exit 0s and silent exit 1s found by trying each console
    # script with bad input.
    **{
        f"spec-report unwritable {flag}": (
            "specdeploy.controller.report",
            ["{result}", f"--{flag}", f"/proc/specdeploy-test.{flag}"],
            f"--{flag}",
            f"/proc/specdeploy-test.{flag}",
        )
        for flag in ("junit", "prom", "html", "json")
    },
    "spec-report empty history": (
        "specdeploy.controller.report",
        ["{result}", "--history", "{empty}", "--record"],
        "--history",
        "{empty}",
    ),
    "spec-history empty history": (
        "specdeploy.controller.history",
        ["runs", "--db", "{empty}"],
        "--db",
        "{empty}",
    ),
    "spec-textfile a list": (
        "specdeploy.node.validation.textfile",
        ["{list}", "--out", "{results}/out.prom"],
        "RESULT",
        "{list}",
    ),
    "spec-textfile not a result": (
        "specdeploy.node.validation.textfile",
        ["{json}", "--out", "{results}/out.prom"],
        "RESULT",
        "{json}",
    ),
    "spec-textfile NaN": (
        "specdeploy.node.validation.textfile",
        ["{nan}", "--out", "{results}/out.prom"],
        "RESULT",
        "{nan}",
    ),
    "spec-report a list": ("specdeploy.controller.report", ["{list}"], "RESULTS", "{list}"),
    "spec-report non-UTF-8": ("specdeploy.controller.report", ["{latin1}"], "RESULTS", "{latin1}"),
    "spec-check malformed gates": (
        "specdeploy.node.validation.check",
        ["all", *SERVER, "--gates", "{gates}"],
        "--gates",
        "{gates}",
    ),
    "spec-check non-finite baseline": (
        "specdeploy.node.validation.check",
        ["all", *SERVER, "--baseline-tps", "nan"],
        "--baseline-tps",
        "'nan'",
    ),
    "spec-check NaN baseline file": (
        "specdeploy.node.validation.check",
        ["all", *SERVER, "--baseline-file", "{nan}"],
        "--baseline-file",
        "{nan}",
    ),
    "vllm-spec-keys garbage keys file": (
        "specdeploy.node.patching.speckeys",
        ["--file", "{garbage}"],
        "--file",
        "{garbage}",
    ),
    "spec-inputs non-UTF-8 manifest": (
        "specdeploy.controller.inputs",
        ["--vllm-version", "0.20.2", "--manifest", "{latin1}"],
        "--manifest",
        "{latin1}",
    ),
    "vllm-patches non-UTF-8 manifest": (
        "specdeploy.node.patching.patches",
        ["list", "--manifest", "{latin1}"],
        "--manifest",
        "{latin1}",
    ),
    "drafter-check non-UTF-8 config": (
        "specdeploy.controller.drafter",
        ["--target", "{latin1}", "--drafter", "{latin1}", "--vllm-version", "0.20.2"],
        "--target",
        "{latin1}",
    ),
    "drafter-pipeline non-UTF-8 config": (
        "specdeploy.controller.drafter_pipeline",
        ["status", "--config", "{latin1}"],
        "--config",
        "{latin1}",
    ),
    "spec-monitoring non-UTF-8 spec": (
        "specdeploy.controller.monitoring",
        ["{latin1}"],
        "SPEC",
        "{latin1}",
    ),
    "engine-log empty": ("specdeploy.node.service.engine_log", ["{empty}"], "LOG", "{empty}"),
    "advisor corrupt history": (
        "specdeploy.controller.advisor",
        [
            "--per-position",
            "0.8",
            "--spec-tps",
            "1=4",
            "--history",
            "{db}",
            "--node",
            "n",
            "--model",
            "m",
        ],
        "--history",
        "{db}",
    ),
    "baseline plan corrupt history": (
        "specdeploy.controller.baseline_plan",
        ["--levels", "1", "--history", "{db}", "--node", "n", "--model", "m", "--serving", "none"],
        "validation_history_db",
        "{db}",
    ),
    "baseline plan NaN knob": (
        "specdeploy.controller.baseline_plan",
        ["--levels", "1,8", "--knob", "NaN"],
        "validation_baseline_tps=nan:",
        "not a finite number",
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
    assert "error" in lines[0] and f"{flag} {path}" in lines[0], lines[0]


def test_the_exit_codes_are_one_set() -> None:
    assert (cli.EXIT_OK, cli.EXIT_CHECK_FAILED, cli.EXIT_USAGE) == (0, 1, 2)


def test_the_empty_history_file_is_left_as_it_was(files) -> None:
    """Issue 28: an existing empty file was silently turned into a database (exit 0)."""
    proc = subprocess.run(
        [sys.executable, "-m", "specdeploy.controller.history", "runs", "--db", files["empty"]],
        capture_output=True, text=True, cwd=REPO, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2 and "empty file, not a history database" in proc.stderr
    assert files["empty"].stat().st_size == 0


def test_engine_log_says_why_it_exits_1(files) -> None:
    """Issue 28: a log without a backend choice was exit 1 with nothing said."""
    proc = subprocess.run(
        [sys.executable, "-m", "specdeploy.node.service.engine_log", str(files["latin1"])],
        capture_output=True, text=True, cwd=REPO, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "no attention backend choice" in proc.stderr and str(files["latin1"]) in proc.stderr
