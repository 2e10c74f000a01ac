"""specdeploy.node.doctor and its module specdeploy.toolkit.gpu_doctor against the nvidia-smi
replays and fake /sys trees (no GPU, no root)."""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import struct
import sys
from pathlib import Path

import hwtree
import pytest
from module_runner import MODULE_UTILS, MODULES, run_module

from specdeploy.node import doctor

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"


@pytest.fixture
def smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Point the doctor at the replay; returns a setter for the scenario (name or path)."""
    wrapper = tmp_path / "nvidia-smi"
    wrapper.write_text(
        f'#!/bin/sh\nexec {sys.executable} {FIXTURES / "nvidia_smi_replay.py"} "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv("NVIDIA_SMI_REPLAY_DIR", str(FIXTURES / "scenarios"))

    def use(scenario: str) -> str:
        monkeypatch.setenv("NVIDIA_SMI_REPLAY_SCENARIO", scenario)
        return str(wrapper)

    return use


def hw(tmp_path: Path, scenario: str) -> Path:
    return hwtree.build(tmp_path / f"hw-{scenario}", scenario)


def run(
    capsys: pytest.CaptureFixture[str], smi_path: str, root: Path, *extra: str
) -> tuple[int, dict]:
    argv = [
        "--json",
        "--nvidia-smi",
        smi_path,
        "--vllm-version",
        "0.16.0",
        "--root",
        str(root),
        "--kernel-log",
        str(root / "kern.log"),
        "--min-shm-gb",
        "0",
        *extra,
    ]
    rc = doctor.main(argv)
    return rc, json.loads(capsys.readouterr().out)


def check(report: dict, name: str) -> dict:
    found = [c for c in report["checks"] if c["name"] == name]
    assert found, f"no check {name}: {[c['name'] for c in report['checks']]}"
    return found[0]


def statuses(report: dict) -> dict[str, str]:
    return {c["name"]: c["status"] for c in report["checks"]}


def test_healthy_node_passes_and_derives_triton_mla_with_p2p(tmp_path, smi, capsys):
    rc, report = run(capsys, smi("healthy"), hw(tmp_path, "healthy"))
    assert rc == 0, report["failures"]
    assert report["ok"] and report["failed"] == []
    problems = {n: s for n, s in statuses(report).items() if s != "pass"}
    # The replay answers the ECC / row-remapper fields like a real 580 driver: all clean.
    assert problems == {}, report["table"]
    assert "(4 counters)" in check(report, "ecc")["message"]
    derived = report["derived"]
    assert derived["attention_backend"] == "TRITON_MLA"
    assert derived["compute_capability"] == "12.0"
    assert derived["nccl_p2p"] is True
    assert derived["nccl_environment"] == {"NCCL_P2P_DISABLE": "0"}
    assert derived["server_extra_args"] == []
    assert len(report["gpus"]) == 8 and report["gpus"][5]["bdf"] == "0000:ab:00.0"


def test_text_output_is_one_line_per_check(tmp_path, smi, capsys):
    root = hw(tmp_path, "healthy")
    argv = ["--nvidia-smi", smi("healthy"), "--root", str(root), "--kernel-log", "/dev/null"]
    rc = doctor.main([*argv, "--min-shm-gb", "0"])
    lines = capsys.readouterr().out.splitlines()
    assert rc == 0
    checks = [line for line in lines if line.split()[0] in ("PASS", "WARN", "FAIL", "SKIP")]
    assert len(checks) == len(lines) - 2  # + the derived line and the result line
    assert any(line.startswith("PASS  gpu_count") and "8 GPUs visible" in line for line in lines)
    assert lines[-2].startswith("derived: attention backend TRITON_MLA")
    assert lines[-1].startswith("result: OK: 0 failed")


def test_seven_gpus_fails_and_names_the_gpu_the_driver_lost(tmp_path, smi, capsys):
    rc, report = run(capsys, smi("seven_gpus"), hw(tmp_path, "healthy"))
    assert rc == 1
    assert report["failed"] == ["gpu_count"]
    message = check(report, "gpu_count")["message"]
    assert "7 GPUs visible, expected 8" in message
    # GPU index 5 (bus 0xab) is on the PCI bus but the driver does not show it.
    assert "0000:ab:00.0" in message
    assert check(report, "gpu_count")["fix"]


def test_expected_count_follows_the_option(tmp_path, smi, capsys):
    rc, report = run(capsys, smi("seven_gpus"), hw(tmp_path, "healthy"), "--expected-gpus", "7")
    assert rc == 0 and check(report, "gpu_count")["status"] == "pass"


def test_foreign_process_fails_with_pid_and_gpu(tmp_path, smi, capsys):
    rc, report = run(capsys, smi("foreign_process"), hw(tmp_path, "healthy"))
    assert rc == 1
    assert report["failed"] == ["gpu_processes"]
    c = check(report, "gpu_processes")
    assert "GPU 3: pid 48213" in c["message"] and "81920 MiB" in c["message"]
    assert "kill 48213" in c["fix"]


def test_the_service_users_own_process_is_not_foreign(tmp_path, smi, capsys):
    scenario = json.loads((FIXTURES / "scenarios" / "foreign_process.json").read_text())
    scenario["compute_apps"][0]["pid"] = os.getpid()
    path = tmp_path / "ours.json"
    path.write_text(json.dumps(scenario))
    root = hw(tmp_path, "healthy")
    rc, report = run(capsys, smi(str(path)), root, "--service-user", getpass.getuser())
    assert rc == 0, report["failures"]
    assert "only the service's own processes" in check(report, "gpu_processes")["message"]
    rc, report = run(capsys, smi(str(path)), root, "--service-user", "nobody-else")
    assert rc == 1 and report["failed"] == ["gpu_processes"]


def test_memory_held_by_an_invisible_process_is_foreign(tmp_path, smi, capsys):
    scenario = json.loads((FIXTURES / "scenarios" / "foreign_process.json").read_text())
    scenario["compute_apps"] = []  # e.g. a process in another container
    path = tmp_path / "hidden.json"
    path.write_text(json.dumps(scenario))
    rc, report = run(capsys, smi(str(path)), hw(tmp_path, "healthy"))
    assert rc == 1
    assert "GPU 3: 82440 MiB used by no listed process" in check(report, "gpu_processes")["message"]


def test_old_driver_fails_with_the_minimum_for_the_vllm_release(tmp_path, smi, capsys):
    rc, report = run(capsys, smi("old_driver"), hw(tmp_path, "healthy"))
    assert rc == 1 and report["failed"] == ["driver"]
    c = check(report, "driver")
    assert "550.127.05 is older than 570.26" in c["message"]
    assert "vLLM 0.16.0" in c["message"]
    assert "gpu_node_driver_manage" in c["fix"]


def test_driver_minimum_depends_on_the_vllm_release(tmp_path, smi, capsys):
    root = hw(tmp_path, "healthy")
    # vLLM 0.20 (torch 2.11, CUDA 13.0) needs 580.65.06: 580.95.05 is enough ...
    rc, report = run(capsys, smi("healthy"), root, "--vllm-version", "0.20.2")
    assert rc == 0 and "580.65.06" in check(report, "driver")["message"]
    # ... and an explicit minimum wins.
    rc, report = run(capsys, smi("healthy"), root, "--min-driver", "590.10")
    assert rc == 1 and "older than 590.10" in check(report, "driver")["message"]


def test_driver_failure_is_reported_and_exits_1(tmp_path, smi, capsys):
    rc, report = run(capsys, smi("driver_failure"), hw(tmp_path, "healthy"))
    assert rc == 1
    c = check(report, "nvidia_smi")
    assert c["status"] == "fail" and "exited 9" in c["message"]
    assert "couldn't communicate with the NVIDIA driver" in c["message"]
    assert report["derived"]["attention_backend"] == ""  # no GPU seen: nothing to derive


def test_missing_nvidia_smi_is_a_failed_check(tmp_path, capsys):
    root = hw(tmp_path, "healthy")
    rc = doctor.main(["--json", "--nvidia-smi", str(tmp_path / "absent"), "--root", str(root)])
    report = json.loads(capsys.readouterr().out)
    assert rc == 1 and "not found" in check(report, "nvidia_smi")["message"]


def test_acs_enabled_warns_and_falls_back_to_no_p2p(tmp_path, smi, capsys):
    root = hw(tmp_path, "acs_enabled")
    rc, report = run(capsys, smi("healthy"), root)
    assert rc == 0
    c = check(report, "pcie_acs")
    assert c["status"] == "warn"
    assert "ReqRedir+ CmpltRedir+" in c["message"] and "0000:17:08.0" in c["message"]
    assert "setpci" in c["fix"] or "BIOS" in c["fix"]
    derived = report["derived"]
    assert derived["nccl_p2p"] is False
    assert derived["nccl_environment"] == {"NCCL_P2P_DISABLE": "1"}
    assert derived["server_extra_args"] == ["--disable-custom-all-reduce"]
    # Strict mode: the same node fails.
    rc, report = run(capsys, smi("healthy"), root, "--require-p2p")
    assert rc == 1 and report["failed"] == ["pcie_acs"]


def test_operator_overrides_win_over_the_derivation(tmp_path, smi, capsys):
    root = hw(tmp_path, "acs_enabled")
    extra = ("--nccl-p2p", "on", "--attention-backend", "FLASHINFER_MLA")
    rc, report = run(capsys, smi("healthy"), root, *extra)
    derived = report["derived"]
    assert rc == 0
    assert derived["nccl_p2p"] is True and derived["nccl_p2p_source"] == "override"
    assert derived["attention_backend"] == "FLASHINFER_MLA"
    rc, report = run(capsys, smi("healthy"), hw(tmp_path, "healthy"), "--nccl-p2p", "off")
    assert report["derived"]["nccl_environment"] == {"NCCL_P2P_DISABLE": "1"}


def test_translating_iommu_blocks_p2p_but_passthrough_does_not(tmp_path, smi, capsys):
    rc, report = run(capsys, smi("healthy"), hw(tmp_path, "iommu_translated"))
    c = check(report, "iommu")
    assert rc == 0 and c["status"] == "warn"
    assert "DMA-FQ" in c["message"] and "intel_iommu=on" in c["message"]
    assert "iommu=pt" in c["fix"]
    assert report["derived"]["nccl_p2p"] is False
    rc, report = run(capsys, smi("healthy"), hw(tmp_path, "iommu_passthrough"))
    assert check(report, "iommu")["status"] == "pass"
    assert "iommu=pt" in check(report, "iommu")["message"]
    assert report["derived"]["nccl_p2p"] is True


def test_unknown_pcie_topology_is_a_warning_and_p2p_stays_off(tmp_path, smi, capsys):
    empty = tmp_path / "empty-root"
    empty.mkdir()
    rc, report = run(capsys, smi("healthy"), empty, "--kernel-log", "/dev/null")
    assert rc == 0
    c = check(report, "pcie_acs")
    assert c["status"] == "warn" and "8 of 8 GPUs not under" in c["message"]
    assert report["derived"]["nccl_p2p"] is False
    assert "unknown" in report["derived"]["nccl_p2p_source"]


def test_unreadable_extended_config_space_is_unknown(tmp_path, smi, capsys):
    root = hw(tmp_path, "acs_enabled")
    for config in (root / "sys" / "devices").rglob("config"):
        config.write_bytes(config.read_bytes()[:64])  # what a non-root reader gets
    rc, report = run(capsys, smi("healthy"), root)
    c = check(report, "pcie_acs")
    assert rc == 0 and c["status"] == "warn" and "needs root" in c["message"]
    assert report["derived"]["nccl_p2p"] is False


def test_xid_errors_fail_with_code_and_gpu(tmp_path, smi, capsys):
    rc, report = run(capsys, smi("healthy"), hw(tmp_path, "xid_errors"))
    assert rc == 1 and report["failed"] == ["xid"]
    message = check(report, "xid")["message"]
    assert "Xid 79 (GPU has fallen off the bus) on GPU 4" in message
    assert "Xid 48 (double-bit ECC error) on GPU 2 x2" in message


def test_application_xid_only_warns(tmp_path, smi, capsys):
    rc, report = run(capsys, smi("healthy"), hw(tmp_path, "xid_application"))
    assert rc == 0
    c = check(report, "xid")
    assert c["status"] == "warn" and "Xid 13" in c["message"] and "GPU 0" in c["message"]


def test_proprietary_modules_fail_on_blackwell(tmp_path, smi, capsys):
    rc, report = run(capsys, smi("healthy"), hw(tmp_path, "proprietary_modules"))
    assert rc == 1 and report["failed"] == ["kernel_modules"]
    assert "open" in check(report, "kernel_modules")["fix"]


def test_ecc_counters_are_read_when_nvidia_smi_has_them(tmp_path, smi, capsys):
    """A wrapper that answers the ECC fields (the replay rejects them) like a real 580 driver."""
    real = smi("healthy")
    wrapper = tmp_path / "nvidia-smi-ecc"
    wrapper.write_text(
        "#!/bin/sh\n"
        'case "$1" in --query-gpu=index,ecc.*)\n'
        '  for i in 0 1 2 3 4 5 6 7; do if [ $i = 6 ]; then echo "$i, 2, 5, [N/A], Yes, No";'
        ' else echo "$i, 0, 0, [N/A], No, No"; fi; done; exit 0;;\n'
        "esac\n"
        f'exec {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    rc, report = run(capsys, str(wrapper), hw(tmp_path, "healthy"))
    assert rc == 1 and report["failed"] == ["ecc"]
    message = check(report, "ecc")["message"]
    assert "GPU 6: 2 uncorrected ECC errors" in message
    assert "GPU 6: remapped_rows.pending" in message


def test_disk_quota_fails_with_the_numbers(tmp_path, smi, capsys):
    root = hw(tmp_path, "healthy")
    target = tmp_path / "not-yet" / "created"  # measured on the nearest existing parent
    rc, report = run(capsys, smi("healthy"), root, "--free-disk", f"{target}=1000000")
    assert rc == 1 and report["failed"] == ["disk"]
    assert f"under {target}" in check(report, "disk")["message"]
    assert "needs 1e+06 GB" in check(report, "disk")["message"]
    rc, report = run(capsys, smi("healthy"), root, "--free-disk", f"{target}=0.001")
    assert rc == 0 and check(report, "disk")["status"] == "pass"


def test_shm_too_small_fails(tmp_path, smi, capsys):
    root = hw(tmp_path, "healthy")
    rc, report = run(
        capsys, smi("healthy"), root, "--shm-path", str(tmp_path), "--min-shm-gb", "1000000"
    )
    assert rc == 1 and report["failed"] == ["shm"]
    assert "gpu_node_shm_size_gb" in check(report, "shm")["fix"]


def make_model(directory: Path, shards: int = 3) -> None:
    directory.mkdir(parents=True)
    (directory / "config.json").write_text('{"model_type": "deepseek_v3"}')
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    for i, name in enumerate(names):
        (directory / name).write_bytes(b"x" * (100 + i))
    weight_map = {f"layer.{i}.weight": name for i, name in enumerate(names)}
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def test_model_files_follow_the_checkpoint_index(tmp_path, smi, capsys):
    model = tmp_path / "model"
    make_model(model)
    root = hw(tmp_path, "healthy")
    rc, report = run(capsys, smi("healthy"), root, "--model-dir", str(model))
    assert rc == 0 and "5 files" in check(report, "model_files")["message"]
    (model / "model-00002-of-00003.safetensors").unlink()
    rc, report = run(capsys, smi("healthy"), root, "--model-dir", str(model))
    assert rc == 1
    assert (
        "1 of 5 files missing: model-00002-of-00003.safetensors"
        in (check(report, "model_files")["message"])
    )


def test_model_manifest_sizes_and_checksums(tmp_path, smi, capsys):
    model = tmp_path / "model"
    make_model(model)
    root = hw(tmp_path, "healthy")
    shard = "model-00001-of-00003.safetensors"
    sizes = tmp_path / "sizes.txt"
    sizes.write_text(f"# bytes file\n100  {shard}\n")
    rc, report = run(capsys, smi("healthy"), root, "--model-dir", f"{model}={sizes}")
    assert rc == 0 and "sizes match" in check(report, "model_files")["message"]
    sizes.write_text(f"4096  {shard}\n")
    rc, report = run(capsys, smi("healthy"), root, "--model-dir", f"{model}={sizes}")
    assert rc == 1 and f"{shard} is 100 B, expected 4096" in check(report, "model_files")["message"]

    sums = tmp_path / "SHA256SUMS"
    good = hashlib.sha256(b"x" * 100).hexdigest()
    sums.write_text(f"{good}  {shard}\n")
    extra = ("--model-dir", f"{model}={sums}", "--verify-checksums")
    rc, report = run(capsys, smi("healthy"), root, *extra)
    assert rc == 0 and "sha256 verified" in check(report, "model_files")["message"]
    (model / shard).write_bytes(b"y" * 100)  # same size, other content
    rc, report = run(capsys, smi("healthy"), root, *extra)
    assert rc == 1 and f"{shard} sha256 mismatch" in check(report, "model_files")["message"]


def test_usage_errors_exit_2(tmp_path, capsys):
    assert doctor.main(["--free-disk", "no-equals-sign"]) == 2
    assert doctor.main(["--root", str(tmp_path / "missing")]) == 2
    assert doctor.main(["--min-driver", "abc"]) == 2
    capsys.readouterr()


@pytest.mark.parametrize(
    ("cap", "backend"),
    [
        ("12.0", "TRITON_MLA"),
        ("9.0", "FLASH_ATTN_MLA"),
        ("10.0", "FLASHINFER_MLA"),
        ("8.9", "TRITON_MLA"),
    ],
)
def test_mla_backend_follows_vllm_priority_and_support(cap, backend):
    assert doctor.mla_backend(cap) == backend


def test_acs_control_walks_the_extended_capability_list():
    config = hwtree.config_space(0x1000, 0xC030, 0x060400, 0x001D)
    assert doctor.acs_control(config) == 0x001D
    assert doctor.acs_control(hwtree.config_space(0x10DE, 0x2BB5, 0x030200, None)) is None
    looped = bytearray(4096)
    struct.pack_into("<I", looped, 0x100, 0x0001 | (1 << 16) | (0x100 << 20))  # points at itself
    assert doctor.acs_control(bytes(looped)) is None
    with pytest.raises(ValueError):
        doctor.acs_control(config[:64])


def test_parsers():
    assert doctor.normalize_bdf("00000000:9A:00.0") == "0000:9a:00.0"
    assert doctor.normalize_bdf("0000:9a:00") == "0000:9a:00.0"
    xids = doctor.parse_xids(
        [
            "[  12.3] NVRM: Xid (PCI:0000:9a:00): 79, pid=1, name=x, GPU has fallen off the bus.",
            "unrelated line",
        ]
    )
    assert xids == [
        {
            "bdf": "0000:9a:00.0",
            "xid": 79,
            "detail": "pid=1, name=x, GPU has fallen off the bus.",
            "application": False,
        }
    ]
    assert doctor.version_at_least("580.95.05", "580.65.06")
    assert not doctor.version_at_least("570.26", "570.86.10")
    assert doctor.version_at_least("580", "580.0.0")


def test_ecc_errors_scenario_fails_the_ecc_check(tmp_path, smi, capsys):
    rc, report = run(capsys, smi("ecc_errors"), hw(tmp_path, "healthy"))
    assert rc == 1 and report["failed"] == ["ecc"]
    message = check(report, "ecc")["message"]
    assert "GPU 6: 2 uncorrected ECC errors" in message
    assert "GPU 6: 5 uncorrected ECC errors (ecc.errors.uncorrected.aggregate.total)" in message
    assert "GPU 6: remapped_rows.pending" in message and "GPU 5" not in message


# ---------------------------------------------------------------- the module (gpu_doctor)

MODULE = MODULES / "gpu_doctor.py"
LOGIC = MODULE_UTILS / "doctor"


def module_args(smi_path: str, root: Path, **extra) -> dict:
    """The module's parameters for what run() above passes on the command line."""
    return {
        "nvidia_smi": smi_path,
        "vllm_version": "0.16.0",
        "root": str(root),
        "kernel_log": str(root / "kern.log"),
        "min_shm_gb": 0,
        **extra,
    }


def test_the_module_utils_package_is_the_node_code_itself():
    # One copy: the module imports the collection's module_utils doctor package, and the node
    # package's specdeploy.node.module_utils.doctor is that same directory (no link, no copy).
    from specdeploy.node.module_utils.doctor import runner

    assert "plugins.module_utils.doctor.runner import" in MODULE.read_text()
    assert not LOGIC.is_symlink() and not [p for p in LOGIC.iterdir() if p.is_symlink()]
    assert Path(runner.__file__).resolve() == LOGIC / "runner.py"
    assert doctor.run is runner.run
    # The node package keeps only the command line.
    assert sorted(p.name for p in Path(doctor.__file__).parent.glob("*.py")) == [
        "__init__.py",
        "__main__.py",
        "cli.py",
    ]


def test_the_module_returns_the_commands_report_in_check_mode_too(tmp_path, smi, capsys):
    root, smi_path = hw(tmp_path, "acs_enabled"), smi("healthy")
    free = [{"path": str(tmp_path), "min_gb": 0}]
    rc, report = run(capsys, smi_path, root, "--free-disk", f"{tmp_path}=0")
    assert rc == 0 and report["warnings"] == ["pcie_acs"], report["table"]
    for check_mode in (False, True):
        args = {**module_args(smi_path, root, free_disk=free), "_ansible_check_mode": check_mode}
        out = run_module(MODULE, tmp_path, args)
        assert not out.get("failed") and out["changed"] is False, out
        # free disk moves between the two runs: compare the rest exactly
        assert {**out["report"], "checks": None, "table": None} == {
            **report,
            "checks": None,
            "table": None,
        }
        assert [c["name"] for c in out["report"]["checks"]] == [c["name"] for c in report["checks"]]
        assert out["msg"] == report["table"][-1]
        # The report's failed and warnings lists stay inside it (Ansible reads the top level's).
        assert "warnings" not in out, out


def test_a_failed_check_is_in_the_report_and_the_module_does_not_fail(tmp_path, smi):
    args = module_args(
        smi("seven_gpus"), hw(tmp_path, "healthy"), model_dirs=[{"path": str(tmp_path / "no")}]
    )
    out = run_module(MODULE, tmp_path, args)
    assert not out.get("failed") and not out["report"]["ok"], out
    assert out["report"]["failed"] == ["gpu_count", "model_files"]
    assert out["report"]["failures"][0].startswith("gpu_count: 7 GPUs visible, expected 8")
    assert out["msg"].startswith("result: FAIL: 2 failed (gpu_count, model_files)")


def test_asked_to_the_module_fails_on_a_failed_check_naming_the_node_and_each_fix(tmp_path, smi):
    args = module_args(
        smi("seven_gpus"),
        hw(tmp_path, "healthy"),
        model_dirs=[{"path": str(tmp_path / "no")}],
        fail_on_failed_checks=True,
        node="node3",
    )
    out = run_module(MODULE, tmp_path, args)
    assert out["failed"], out
    assert out["msg"].startswith("node3: hardware preflight failed: gpu_count: 7 GPUs visible")
    assert " ;; model_files: " in out["msg"] and "(fix: " in out["msg"]
    assert out["report"]["table"][-1].startswith("result: FAIL")  # the table is in the result
    assert "ansible_facts" not in out  # nothing derived from a node that failed


def test_the_module_sets_what_the_server_needs_as_facts_the_operator_s_nccl_winning(tmp_path, smi):
    args = module_args(
        smi("healthy"),
        hw(tmp_path, "acs_enabled"),
        fail_on_failed_checks=True,
        nccl_environment={"NCCL_DEBUG": "WARN", "NCCL_P2P_DISABLE": "0"},
    )
    out = run_module(MODULE, tmp_path, args)
    assert not out.get("failed"), out
    facts, derived = out["ansible_facts"], out["report"]["derived"]
    assert derived["nccl_environment"] == {"NCCL_P2P_DISABLE": "1"}  # ACS: P2P off, derived
    assert facts["specdeploy_nccl_environment"] == {"NCCL_P2P_DISABLE": "0", "NCCL_DEBUG": "WARN"}
    assert facts["gpu_node_server_extra_args"] == ["--disable-custom-all-reduce"]
    assert facts["gpu_node_expected_attention_backend"] == derived["attention_backend"]
    assert facts["gpu_node_nccl_p2p_enabled"] == derived["nccl_p2p"]
    assert facts["gpu_node_doctor"] == out["report"]


def test_bad_input_fails_the_module_with_the_commands_message(tmp_path):
    out = run_module(MODULE, tmp_path, {"root": "/nonexistent/root"})
    assert out["failed"] and out["msg"] == (
        "gpu-doctor: error: --root /nonexistent/root: not a directory"
    )
    out = run_module(MODULE, tmp_path, {"nccl_p2p": "maybe"})
    assert out["failed"] and "nccl_p2p" in out["msg"] and "auto, on, off" in out["msg"], out
