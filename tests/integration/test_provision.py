"""Provisioning and the hardware preflight on a sandbox node (real SSH, real systemd, no GPU).

One node serves every case: the nvidia-smi replay is switched live, and the fake /sys trees
(tests/fixtures/nvidia-smi/hwtree.py) are installed once under /etc/specdeploy-sandbox/hw/.
The driver is tested against a local, signed apt repository holding an empty `nvidia-open`
package: check mode first, then a real install that must stop and ask for a reboot.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from email.utils import formatdate
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
sys.path.insert(0, str(FIXTURES / "nvidia-smi"))
import hwtree  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

HW_DIR = "/etc/specdeploy-sandbox/hw"
REPO_DIR = "/srv/specdeploy-test-nvidia-repo"
DRIVER_VERSION = "580.95.05"
# What differs from production on a sandbox node: /dev/shm of an nspawn container is 10% of
# the host's memory and cannot be grown from inside.
SANDBOX_VARS = {"gpu_node_min_shm_gb": 1}


def hw_vars(scenario: str) -> dict[str, str]:
    return {
        "gpu_node_doctor_root": f"{HW_DIR}/{scenario}",
        "gpu_node_doctor_kernel_log": f"{HW_DIR}/{scenario}/kern.log",
    }


class Play:
    """ansible-playbook against the sandbox inventory; JSON callback for exact assertions."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.inventory = Path(cluster.inventory).parent
        self.host = cluster.nodes[0].hostname

    def __call__(
        self,
        playbook: str,
        *args: str,
        extra: dict | None = None,
        inventory: Path | None = None,
        timeout: float = 600,
    ) -> tuple[int, dict]:
        env = dict(
            os.environ,
            ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
            ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
            ANSIBLE_NOCOLOR="1",
        )
        command = [
            str(REPO / ".venv" / "bin" / "ansible-playbook"),
            "-i",
            str(inventory or self.inventory),
            str(REPO / playbook),
            "-e",
            json.dumps({**SANDBOX_VARS, **(extra or {})}),
            *args,
        ]
        result = subprocess.run(
            command, capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout
        )
        lines = result.stdout.splitlines(keepends=True)
        start = next((i for i, line in enumerate(lines) if line.rstrip() == "{"), None)
        if start is None:  # profile_tasks prints its timings around the JSON document
            pytest.fail(
                f"no JSON from ansible-playbook (rc {result.returncode}):\n"
                f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            )
        report, _ = json.JSONDecoder().raw_decode("".join(lines[start:]))
        return result.returncode, report


def results(report: dict, host: str | None = None) -> dict[str, dict]:
    """Task name -> that task's result for the host (last one wins)."""
    out = {}
    for play in report["plays"]:
        for task in play["tasks"]:
            for name, result in task["hosts"].items():
                if host is None or name == host:
                    out[task["task"]["name"].split(" : ", 1)[-1]] = result  # drop "role : "
    return out


def failure(report: dict) -> str:
    failed = [r for r in results(report).values() if r.get("failed")]
    return failed[-1].get("msg", "") if failed else ""


def changed(report: dict, host: str) -> int:
    return report["stats"][host]["changed"]


def push(cluster, files: dict[str, bytes], target: str) -> None:
    """Write a tree of files onto the node under target (as root)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    node = cluster.nodes[0]
    from testbed import sandbox as sb

    command = f"sudo -n mkdir -p {target} && sudo -n tar -xzf - -C {target}"
    subprocess.run(
        sb.ssh_command(node, command), input=buffer.getvalue(), check=True, capture_output=True
    )


def push_dir(cluster, local: Path, target: str) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(local, arcname=".")
    from testbed import sandbox as sb

    command = f"sudo -n mkdir -p {target} && sudo -n tar -xzf - -C {target}"
    subprocess.run(
        sb.ssh_command(cluster.nodes[0], command),
        input=buffer.getvalue(),
        check=True,
        capture_output=True,
    )


@pytest.fixture(scope="module")
def node(sandbox, tmp_path_factory):
    cluster = sandbox(1)
    work = tmp_path_factory.mktemp("hw")
    for scenario in hwtree.SCENARIOS:
        hwtree.build(work / scenario, scenario)
    push_dir(cluster, work, HW_DIR)
    for model in ("tiny-dsv3", "tiny-dsv3-eagle3"):
        config = (FIXTURES / "models" / model / "config.json").read_bytes()
        push(cluster, {"config.json": config}, f"/srv/models/{model}")
    yield cluster
    cluster.set_scenario(cluster.nodes[0], "healthy")


@pytest.fixture(scope="module")
def play(node):
    return Play(node)


# ---------------------------------------------------------------- provisioning


def test_provisioning_is_idempotent_and_check_mode_safe(node, play):
    rc, first = play("playbooks/provision.yml", "--tags", "provision")
    assert rc == 0, failure(first)
    rc, second = play("playbooks/provision.yml", "--tags", "provision")
    assert rc == 0, failure(second)
    assert changed(second, play.host) == 0, [
        n for n, r in results(second).items() if r.get("changed")
    ]
    rc, check = play("playbooks/provision.yml", "--tags", "provision", "--check")
    assert rc == 0 and changed(check, play.host) == 0, failure(check)

    # The container is detected and the kernel-level settings are skipped with a message.
    said = results(second)["Say that the kernel settings are not applied inside containers"]
    assert said["msg"].startswith(f"{play.host} run in a container (systemd-nspawn)"), said
    host_only = (
        "Apply the kernel settings, grow /dev/shm, the persistence daemon, time sync (host only)"
    )
    assert results(second)[host_only].get("skipped")

    state = node.ssh(
        node.nodes[0],
        "getent passwd vllm; sudo -n stat -c '%U:%G %a %n' /opt/specdeploy "
        "/opt/specdeploy/releases /etc/specdeploy /var/cache/specdeploy "
        "/var/cache/specdeploy/compile /var/log/specdeploy; "
        "cat /etc/security/limits.d/90-specdeploy.conf /etc/sysctl.d/90-specdeploy.conf",
        check=True,
    ).stdout
    assert ":/var/cache/specdeploy:/usr/sbin/nologin" in state
    for line in (
        "root:root 755 /opt/specdeploy",
        "root:root 700 /etc/specdeploy",
        "vllm:vllm 750 /var/cache/specdeploy/compile",
        "vllm:vllm 750 /var/log/specdeploy",
    ):
        assert line in state, state
    assert any(
        line.split() == ["vllm", "-", "memlock", "unlimited"] for line in state.splitlines()
    ), state
    assert "vm.max_map_count=1048576" in state and "kernel.numa_balancing=0" in state


# ---------------------------------------------------------------- hardware preflight

CASES = [
    # id, nvidia-smi scenario, hw tree, expected rc, failing checks, text in the failure
    ("healthy", "healthy", "healthy", 0, [], ""),
    ("seven_gpus", "seven_gpus", "healthy", 2, ["gpu_count"], "7 GPUs visible, expected 8"),
    ("foreign_process", "foreign_process", "healthy", 2, ["gpu_processes"], "GPU 3: pid 48213"),
    ("old_driver", "old_driver", "healthy", 2, ["driver"], "550.127.05 is older than 570.26"),
    ("driver_failure", "driver_failure", "healthy", 2, ["nvidia_smi"], "nvidia-smi exited 9"),
    ("xid_errors", "healthy", "xid_errors", 2, ["xid"], "Xid 79 (GPU has fallen off the bus)"),
    ("acs_enabled", "healthy", "acs_enabled", 0, [], ""),
    ("iommu_translated", "healthy", "iommu_translated", 0, [], ""),
]


@pytest.mark.parametrize(
    ("smi", "tree", "rc_expected", "failing", "text"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_hardware_preflight(node, play, smi, tree, rc_expected, failing, text):
    node.set_scenario(node.nodes[0], smi)
    rc, report = play("playbooks/preflight.yml", "--tags", "hardware", extra=hw_vars(tree))
    tasks = results(report, play.host)
    doctor = tasks["Run the hardware doctor on the node (read-only)"]["report"]
    assert rc == rc_expected, failure(report)
    assert doctor["failed"] == failing, doctor["table"]
    assert changed(report, play.host) == 0  # read-only
    if failing:  # the doctor's task fails with its report: the table is in that result
        assert "Show the check table of every node" not in tasks
        table = doctor["table"]
    else:  # one task for the play shows a table per node
        shown = tasks["Show the check table of every node"]["results"]
        table = next(item["msg"] for item in shown if item["item"] == play.host)
    assert len(table) == len(doctor["checks"]) + 2  # one line per check, derived, result
    if failing:
        message = failure(report)
        assert message.startswith(f"{play.host}: hardware preflight failed: {failing[0]}: ")
        assert text in message and "(fix: " in message
        return
    derived = tasks["Run the hardware doctor on the node (read-only)"]
    nccl = derived["ansible_facts"]["specdeploy_nccl_environment"]
    backend = derived["ansible_facts"]["gpu_node_expected_attention_backend"]
    extra_args = derived["ansible_facts"]["gpu_node_server_extra_args"]
    assert backend == "TRITON_MLA"
    if tree == "healthy":
        assert nccl == {"NCCL_P2P_DISABLE": "0"} and extra_args == []
        assert table[-1].startswith("result: OK: 0 failed")
    else:
        assert nccl == {"NCCL_P2P_DISABLE": "1"}
        assert extra_args == ["--disable-custom-all-reduce"]
        warned = {"acs_enabled": "pcie_acs", "iommu_translated": "iommu"}[tree]
        assert warned in doctor["warnings"]


def test_operator_overrides_reach_the_facts(node, play):
    node.set_scenario(node.nodes[0], "healthy")
    extra = {
        **hw_vars("acs_enabled"),
        "gpu_node_nccl_p2p": "enabled",
        "gpu_node_attention_backend": "FLASHINFER_MLA",
        "gpu_node_nccl_environment": {"NCCL_DEBUG": "WARN"},
    }
    rc, report = play("playbooks/preflight.yml", "--tags", "hardware", extra=extra)
    assert rc == 0, failure(report)
    tasks = results(report, play.host)
    derived = tasks["Run the hardware doctor on the node (read-only)"]
    # the operator's gpu_node_nccl_environment wins over what the doctor derived
    assert derived["ansible_facts"]["specdeploy_nccl_environment"] == {
        "NCCL_P2P_DISABLE": "0",
        "NCCL_DEBUG": "WARN",
    }
    assert derived["ansible_facts"]["gpu_node_expected_attention_backend"] == "FLASHINFER_MLA"


def test_require_p2p_turns_acs_into_a_failure(node, play):
    node.set_scenario(node.nodes[0], "healthy")
    extra = {**hw_vars("acs_enabled"), "gpu_node_require_p2p": True}
    rc, report = play("playbooks/preflight.yml", "--tags", "hardware", extra=extra)
    assert rc == 2
    assert "pcie_acs: PCIe ACS redirects peer-to-peer traffic" in failure(report)


def test_small_disk_quota_fails_the_preflight(node, play):
    node.set_scenario(node.nodes[0], "healthy")
    node.ssh(
        node.nodes[0],
        "sudo -n mkdir -p /srv/quota && (mountpoint -q /srv/quota || "
        "sudo -n mount -t tmpfs -o size=64m specdeploy-quota /srv/quota)",
        check=True,
    )
    try:
        extra = {
            **hw_vars("healthy"),
            "specdeploy_root": "/srv/quota/specdeploy",
            "specdeploy_min_free_disk_gb": 1,
        }
        rc, report = play("playbooks/preflight.yml", "--tags", "hardware", extra=extra)
    finally:
        node.ssh(node.nodes[0], "sudo -n umount /srv/quota", check=True)
    assert rc == 2
    message = failure(report)
    assert "disk: only 0.1 GB free under /srv/quota/specdeploy (on /srv/quota), needs 1 GB" in (
        message
    )


# ---------------------------------------------------------------- the driver


def build_repo(out: Path) -> Path:
    """A signed flat apt repository with an empty nvidia-open package of DRIVER_VERSION."""
    if not (shutil.which("dpkg-deb") and shutil.which("gpg")):
        pytest.skip("dpkg-deb and gpg are needed to build the test apt repository")
    pkg = out / "build"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "DEBIAN" / "control").write_text(
        f"Package: nvidia-open\nVersion: {DRIVER_VERSION}-1\nArchitecture: all\n"
        "Maintainer: specdeploy tests <tests@specdeploy.invalid>\n"
        "Description: empty stand-in for NVIDIA's open kernel module metapackage\n"
    )
    repo = out / "repo"
    repo.mkdir()
    deb = repo / f"nvidia-open_{DRIVER_VERSION}-1_all.deb"
    subprocess.run(["dpkg-deb", "--build", str(pkg), str(deb)], check=True, capture_output=True)
    data = deb.read_bytes()
    control = (pkg / "DEBIAN" / "control").read_text()
    packages = (
        control.rstrip("\n")
        + f"\nFilename: ./{deb.name}\nSize: {len(data)}\n"
        + f"SHA256: {hashlib.sha256(data).hexdigest()}\n"
    )
    (repo / "Packages").write_text(packages)
    digest = hashlib.sha256(packages.encode()).hexdigest()
    (repo / "Release").write_text(
        f"Origin: specdeploy-test\nLabel: specdeploy-test\nDate: {formatdate(usegmt=True)}\n"
        f"SHA256:\n {digest} {len(packages.encode())} Packages\n"
    )
    home = tempfile.mkdtemp(prefix="gnupg-", dir=out)
    os.chmod(home, 0o700)
    gpg = ["gpg", "--homedir", home, "--batch", "--yes", "--passphrase", ""]
    try:
        subprocess.run(
            [*gpg, "--quick-gen-key", "specdeploy test repo", "ed25519", "sign", "never"],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [*gpg, "--clearsign", "-o", str(repo / "InRelease"), str(repo / "Release")],
            check=True,
            capture_output=True,
        )
        exported = subprocess.run([*gpg, "--armor", "--export"], check=True, capture_output=True)
    finally:  # gpg started an agent for this homedir: it would outlive the test session
        subprocess.run(["gpgconf", "--homedir", home, "--kill", "gpg-agent"], check=False)
    (repo / "key.asc").write_bytes(exported.stdout)
    return repo


DRIVER_VARS = {
    "gpu_node_driver_manage": True,
    "gpu_node_driver_version": DRIVER_VERSION,
    "gpu_node_driver_repo_url": f"file:{REPO_DIR}/",
    "gpu_node_driver_repo_key_url": f"file://{REPO_DIR}/key.asc",
}


@pytest.fixture(scope="module")
def driver_repo(node, tmp_path_factory):
    """The repository configured on the node (keyring, sources, package lists)."""
    repo = build_repo(tmp_path_factory.mktemp("apt"))
    push_dir(node, repo, REPO_DIR)
    sources = (
        "Types: deb\n"
        f"URIs: file:{REPO_DIR}/\n"
        "Suites: /\n"
        "Signed-By: /etc/apt/keyrings/nvidia-cuda.asc\n"
    )
    node.ssh(
        node.nodes[0],
        f"sudo -n install -d -m 0755 /etc/apt/keyrings && "
        f"sudo -n install -m 0644 {REPO_DIR}/key.asc /etc/apt/keyrings/nvidia-cuda.asc && "
        f"printf '%s' '{sources}' | sudo -n tee /etc/apt/sources.list.d/"
        "specdeploy-nvidia-cuda.sources >/dev/null && "
        "sudo -n apt-get update -qq -o Dir::Etc::sourcelist=/dev/null "
        "-o Dir::Etc::sourceparts=/etc/apt/sources.list.d",
        check=True,
        timeout=300,
    )
    yield repo
    node.ssh(
        node.nodes[0],
        "sudo -n apt-get purge -y -qq nvidia-open >/dev/null 2>&1; sudo -n rm -rf "
        f"{REPO_DIR} /etc/apt/keyrings/nvidia-cuda.asc "
        "/etc/apt/sources.list.d/specdeploy-nvidia-cuda.sources "
        "/etc/apt/preferences.d/specdeploy-nvidia-driver.pref /var/lib/apt/lists/_srv_specdeploy*",
    )


def installed(node) -> bool:
    return node.ssh(node.nodes[0], "dpkg-query -W -f '${Status}' nvidia-open").stdout.endswith(
        " installed"
    )


def uninstall(node) -> None:
    node.ssh(node.nodes[0], "sudo -n dpkg --purge nvidia-open >/dev/null 2>&1 || true", check=True)
    assert not installed(node)


def booted(node) -> str:
    return node.ssh(node.nodes[0], "ps -o lstart= -p 1", check=True).stdout.strip()


def test_driver_install_in_check_mode_changes_nothing(node, play, driver_repo):
    uninstall(node)
    rc, report = play("playbooks/provision.yml", "--tags", "driver", "--check", extra=DRIVER_VARS)
    assert rc == 0, failure(report)
    tasks = results(report, play.host)
    assert tasks["Install the pinned driver with the open kernel modules"]["changed"]
    said = tasks["Say what a real run would do (check mode)"]["msg"]
    assert f"driver {DRIVER_VERSION} (nvidia-open) would be installed" in said
    assert "A reboot would be needed: the run would stop and ask for one" in said
    assert not installed(node)
    rc, report = play(
        "playbooks/provision.yml",
        "--tags",
        "driver",
        "--check",
        extra={**DRIVER_VARS, "gpu_node_reboot_allowed": True},
    )
    said = results(report, play.host)["Say what a real run would do (check mode)"]["msg"]
    assert rc == 0 and "it would happen (gpu_node_reboot_allowed)" in said


def test_old_branch_is_refused_before_anything_changes(node, play, driver_repo):
    uninstall(node)
    extra = {**DRIVER_VARS, "gpu_node_driver_version": "550.127.05"}
    rc, report = play("playbooks/provision.yml", "--tags", "driver", extra=extra)
    assert rc == 2 and "branch 570" in failure(report)
    assert not installed(node)


def test_reboot_guard_stops_and_never_reboots_the_controller(node, play, driver_repo, tmp_path):
    uninstall(node)
    before = booted(node)
    rc, report = play("playbooks/provision.yml", "--tags", "driver", extra=DRIVER_VARS)
    assert rc == 2
    message = failure(report)
    assert f"NVIDIA driver {DRIVER_VERSION} is installed (changed in this run)" in message
    assert "a reboot is needed" in message and "gpu_node_reboot_allowed=true" in message
    assert installed(node)
    # The pin keeps apt from moving the driver.
    pref = node.ssh(
        node.nodes[0], "cat /etc/apt/preferences.d/specdeploy-nvidia-driver.pref"
    ).stdout
    assert f"Pin: version {DRIVER_VERSION}*" in pref

    # Nothing changed any more, but the running module is still not the pinned one.
    rc, report = play("playbooks/provision.yml", "--tags", "driver", extra=DRIVER_VARS)
    tasks = results(report, play.host)
    assert rc == 2 and "is installed (already)" in failure(report)
    assert not tasks["Install the pinned driver with the open kernel modules"]["changed"]

    # Reboots allowed, but the host is the machine Ansible runs on: refused.
    hosts = (Path(node.inventory)).read_text()
    alias = tmp_path / "inventory"
    alias.mkdir()
    (alias / "group_vars").symlink_to(Path(node.inventory).parent / "group_vars")
    (alias / "hosts.yml").write_text(
        hosts.replace(f"        {play.host}:", "        localhost:").replace(
            "          ansible_user: ops",
            "          ansible_user: ops\n          ansible_connection: ssh",
        )
    )
    probe = subprocess.run(
        [
            str(REPO / ".venv" / "bin" / "ansible"),
            "-i",
            str(alias),
            "localhost",
            "-m",
            "ansible.builtin.command",
            "-a",
            "cat /etc/specdeploy-sandbox/node.json",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        env=dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg")),
    )
    assert probe.returncode == 0 and '"name": "node' in probe.stdout, probe.stdout  # the node
    rc, report = play(
        "playbooks/provision.yml",
        "--tags",
        "driver",
        extra={**DRIVER_VARS, "gpu_node_reboot_allowed": True},
        inventory=alias,
    )
    assert rc == 2
    assert "Refusing to reboot localhost: it is the machine Ansible runs on" in failure(report)
    time.sleep(1)
    assert booted(node) == before  # no reboot happened at any point
