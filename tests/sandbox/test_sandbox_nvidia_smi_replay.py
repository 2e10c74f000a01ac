"""The nvidia-smi replay installed in sandbox nodes answers in real nvidia-smi's formats."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"
REPLAY = HERE / "nvidia_smi_replay.py"
RECORDED = HERE / "recorded-h200"
UUID = re.compile(
    r"^GPU \d+: .+ \(UUID: GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-"
    r"[0-9a-f]{12}\)$"
)


def smi(*args: str, scenario: str = "healthy") -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "NVIDIA_SMI_REPLAY_SCENARIO": scenario,
        "NVIDIA_SMI_REPLAY_DIR": str(HERE / "scenarios"),
    }
    return subprocess.run(
        [sys.executable, str(REPLAY), *args], capture_output=True, text=True, env=env, timeout=30
    )


def test_list_gpus_names_eight_rtx_pro_6000_with_uuids():
    lines = smi("-L").stdout.splitlines()
    assert len(lines) == 8
    assert all(UUID.match(line) for line in lines), lines
    assert lines[7].startswith("GPU 7: NVIDIA RTX PRO 6000 Blackwell Server Edition (UUID: ")
    assert len({line.split("UUID: ")[1] for line in lines}) == 8


def test_query_gpu_csv_with_and_without_header_and_units():
    query = "--query-gpu=index,name,compute_cap,memory.total,utilization.gpu,fan.speed"
    full = smi(query, "--format=csv").stdout.splitlines()
    assert (
        full[0]
        == "index, name, compute_cap, memory.total [MiB], utilization.gpu [%], fan.speed [%]"
    )
    assert full[1] == (
        "0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 97887 MiB, 0 %, [N/A]"
    )
    bare = smi(query, "--format=csv,noheader,nounits").stdout.splitlines()
    assert len(bare) == 8
    assert bare[3] == "3, NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 97887, 0, [N/A]"
    header_only_units = smi(query, "--format=csv,nounits").stdout.splitlines()
    assert header_only_units[0] == full[0] and header_only_units[1] == bare[0]


def test_memory_free_is_total_minus_reserved_and_used():
    rows = smi(
        "--query-gpu=memory.total,memory.reserved,memory.used,memory.free",
        "--format=csv,noheader,nounits",
        scenario="foreign_process",
    ).stdout
    for row in rows.splitlines():
        total, reserved, used, free = (int(v) for v in row.split(", "))
        assert free == total - reserved - used
    assert "82440" in rows


def test_compute_apps_empty_on_a_healthy_node_and_listed_when_busy():
    args = ("--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits")
    assert smi(*args).stdout == ""
    with_header = smi("--query-compute-apps=pid,process_name,used_memory", "--format=csv")
    assert with_header.stdout == "pid, process_name, used_gpu_memory [MiB]\n"
    busy = smi(*args, scenario="foreign_process").stdout
    assert busy == "48213, /home/research/venv/bin/python3, 81920\n"
    uuid = smi("--query-compute-apps=gpu_uuid", "--format=csv,noheader", scenario="foreign_process")
    listed = smi("-L", scenario="foreign_process").stdout.splitlines()[3]
    assert uuid.stdout.strip() in listed


def test_failure_scenarios():
    assert len(smi("-L", scenario="seven_gpus").stdout.splitlines()) == 7
    driver = smi("--query-gpu=driver_version", "--format=csv,noheader", scenario="old_driver")
    assert set(driver.stdout.split()) == {"550.127.05"}
    broken = smi("--query-gpu=name", "--format=csv,noheader", scenario="driver_failure")
    assert broken.returncode == 9 and "couldn't communicate with the NVIDIA driver" in broken.stdout


def test_select_gpus_and_reject_unknown_fields():
    assert smi("-i", "2", "--query-gpu=index", "--format=csv,noheader").stdout == "2\n"
    assert smi("--id=0,5", "--query-gpu=index", "--format=csv,noheader").stdout == "0\n5\n"
    bad = smi("--query-gpu=name,bogus", "--format=csv")
    assert (
        bad.returncode == 2 and bad.stdout.strip() == 'Field "bogus" is not a valid field to query.'
    )
    assert smi("--bogus").returncode != 0


def test_table_has_the_real_layout():
    table = smi(scenario="foreign_process").stdout.splitlines()
    boxed = [line for line in table[1:] if line]
    assert {len(line) for line in boxed} == {91}, [line for line in boxed if len(line) != 91]
    assert "| NVIDIA-SMI 580.95.05" in table[2] and "CUDA Version: 13.0" in table[2]
    assert sum("NVIDIA RTX PRO 6000 Blac..." in line for line in table) == 8
    assert any("48213" in line and "81920MiB" in line for line in table)
    assert "No running processes found" in smi().stdout


ECC_QUERY = (
    "--query-gpu=index,ecc.errors.uncorrected.volatile.total,"
    "ecc.errors.uncorrected.aggregate.total,retired_pages.pending,remapped_rows.pending,"
    "remapped_rows.failure"
)


def test_ecc_and_row_remapper_fields_like_a_real_580_driver():
    healthy = smi(ECC_QUERY, "--format=csv,noheader,nounits").stdout.splitlines()
    assert healthy == [f"{i}, 0, 0, [N/A], No, No" for i in range(8)]
    broken = smi(ECC_QUERY, "--format=csv,noheader,nounits", scenario="ecc_errors").stdout
    assert broken.splitlines()[6] == "6, 2, 5, [N/A], Yes, No"
    assert [line for line in broken.splitlines() if line != "6, 2, 5, [N/A], Yes, No"] == [
        line for line in healthy if not line.startswith("6, ")
    ]
    table = smi(scenario="ecc_errors").stdout.splitlines()
    gpu_rows = [line for line in table if "NVIDIA RTX PRO 6000" in line]
    assert [row.split("|")[3].strip() for row in gpu_rows] == ["0"] * 6 + ["2", "0"]


def test_scenario_can_be_given_as_a_json_path():
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVIDIA_SMI_REPLAY")}
    env["NVIDIA_SMI_REPLAY_SCENARIO"] = str(HERE / "scenarios" / "seven_gpus.json")
    result = subprocess.run(
        [sys.executable, str(REPLAY), "-L"], capture_output=True, text=True, env=env, timeout=30
    )
    assert len(result.stdout.splitlines()) == 7


def test_scenarios_match_their_generator(tmp_path):
    subprocess.run([sys.executable, str(HERE / "make_scenarios.py"), str(tmp_path)], check=True)
    committed = sorted(p.name for p in (HERE / "scenarios").glob("*.json"))
    assert committed == sorted(p.name for p in tmp_path.glob("*.json"))
    for name in committed:
        assert json.loads((HERE / "scenarios" / name).read_text()) == json.loads(
            (tmp_path / name).read_text()
        ), name


def shape(field: str) -> str:
    """A csv value's format class: number with its unit, [N/A], or text."""
    match = re.fullmatch(r"-?\d+(\.\d+)?( (MiB|%|W|MHz))?", field)
    if match:
        return f"number{'.' if match.group(1) else ''}{match.group(2) or ''}"
    return "[N/A]" if field == "[N/A]" else "text"


CLOCK = re.compile(r"^[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4} {7}$")
FRAME = re.compile(r"^[+|=\- ]*$")
PROCESS_ROW = re.compile(r"^\|\s+(\d+)\s+(N/A)\s+(N/A)\s+(\d+)\s+(C|G|C\+G)\s+(\S+)\s+(\S+) \|$")


def table_layout(lines: list[str]) -> list[object]:
    """The plain table's format, not its values: the clock line's shape; frame, heading and
    empty-table lines verbatim; where the version line's labels start; where each GPU row's
    cells are split; where each process row's columns end (name: where it starts). Repeated
    items (one block per GPU) count once."""
    layout: list[object] = ["clock" if CLOCK.match(lines[0]) else f"bad clock line {lines[0]!r}"]
    for line in lines[1:]:
        process = PROCESS_ROW.match(line)
        if FRAME.match(line) or "Name" in line or "Memory-Usage" in line or "ID   ID" in line:
            item: object = line
        elif "Processes:" in line or "No running processes found" in line:
            item = line
        elif "Driver Version:" in line:
            item = ("version", len(line), line.index("Driver Version:"), line.index("CUDA"))
        elif process:
            item = ("process", len(line), *(process.end(i) for i in range(1, 6)), process.start(6))
            item += (process.end(7),)
        else:
            item = ("cells", tuple(i for i, c in enumerate(line) if c == "|"))
        if item not in layout:
            layout.append(item)
    return layout


RECORDINGS = sorted(RECORDED.glob("*.cmd")) if RECORDED.is_dir() else []


@pytest.mark.skipif(not RECORDINGS, reason="no real nvidia-smi recordings in recorded-h200/ yet")
@pytest.mark.parametrize("recording", RECORDINGS, ids=lambda p: p.stem)
def test_replay_formats_match_real_h200_recordings(recording: Path):
    """recorded-h200/<name>.cmd holds the nvidia-smi arguments, <name>.out the real stdout;
    `-running` recordings are replayed with a GPU process (foreign_process), others idle."""
    args = recording.read_text().split()
    args = args[1:] if args and args[0] == "nvidia-smi" else args
    real = recording.with_suffix(".out").read_text().splitlines()
    scenario = "foreign_process" if recording.stem.endswith("-running") else "healthy"
    result = smi(*args, scenario=scenario)
    assert result.returncode == 0, result.stdout
    replay = result.stdout.splitlines()
    assert bool(replay) == bool(real), (replay, real)  # idle compute apps + noheader: nothing
    if not real:
        return
    if "-L" in args:
        assert all(UUID.match(line) for line in real + replay)
        return
    if not any(arg.startswith("--query-") for arg in args):
        assert table_layout(replay) == table_layout(real)
        return
    if "noheader" not in " ".join(args):
        assert replay[0] == real[0]  # identical header line
        real, replay = real[1:], replay[1:]
    assert bool(replay) == bool(real), (replay, real)  # with a header: the header alone
    for got, want in zip(replay, real, strict=False):
        assert len(got.split(", ")) == len(want.split(", ")), (got, want)
        for mine, theirs in zip(got.split(", "), want.split(", "), strict=True):
            assert shape(mine) == shape(theirs), (mine, theirs)
