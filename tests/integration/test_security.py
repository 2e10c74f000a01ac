"""Security of a deployed node (issue 9), on one sandbox node with one verbose (-vvv) deploy.

The deploy takes the API key and a hub token from the controller's environment
(SPECDEPLOY_API_KEY / SPECDEPLOY_HUB_TOKEN, the env lookup of roles/vllm_service/defaults) and
serves under a name full of shell metacharacters, so the values the checks read back from the
node (/v1/models, /metrics) carry them too.
"""

from __future__ import annotations

import configparser
import glob
import json
import re
import secrets
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from test_deploy_support import (
    FIXTURES,
    REPO,
    ROOT,
    UNIT,
    assert_unchanged,
    stage_models,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

# The exposure score `systemd-analyze security vllm.service` gave on the sandbox node
# (systemd 252, Debian bookworm) for templates/vllm.service.j2. The limit is 4.0; a
# change that makes the unit weaker than recorded fails here too (re-record it deliberately).
RECORDED_EXPOSURE = 1.9
EXPOSURE_LIMIT = 4.0

TOKEN = secrets.token_hex(4)
MARK = f"/tmp/specdeploy-pwned-{TOKEN}"
API_KEY = "sk-" + secrets.token_urlsafe(24)
HUB_TOKEN = "hf_" + secrets.token_urlsafe(18)
SERVED = f"tiny-dsv3 $(touch {MARK}-served); touch {MARK}-semi | tee {MARK}-pipe && x"
SECRETS_ENV = "/etc/specdeploy/vllm.secrets.env"
KEY_FILE = "/etc/specdeploy/vllm.api-key"


@pytest.fixture(scope="module")
def deployed(play, node):
    """One -vvv deploy with the key and the hub token from the controller's environment."""
    stage_models(play)
    run = play(
        "deploy.yml",
        "-vvv",
        extra={"specdeploy_served_model_name": SERVED},
        env={"SPECDEPLOY_API_KEY": API_KEY, "SPECDEPLOY_HUB_TOKEN": HUB_TOKEN},
    )
    assert run.returncode == 0, run.tail()
    print(f"verbose deploy with an API key: {run.seconds:.0f} s")
    return run


@pytest.fixture(scope="module")
def main_pid(deployed, node) -> int:
    pid = int(node.service("MainPID")["MainPID"])
    assert pid > 0
    return pid


def base_url(play) -> str:
    return f"http://{play.address}:8000"


def http(url: str, key: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if key is not None:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


# ---------------------------------------------------------------- the unprivileged server


def test_server_runs_as_the_unprivileged_service_user(deployed, node, main_pid):
    group = node.service("ControlGroup")["ControlGroup"]
    # cgroup v2, or the v2 tree of a hybrid layout (the nspawn node), or the v1 systemd tree.
    pids = node.sh(
        " || ".join(
            f"cat /sys/fs/cgroup{tree}{group}/cgroup.procs 2>/dev/null"
            for tree in ("", "/unified", "/systemd")
        )
    ).split()
    assert str(main_pid) in pids
    table = node.sh("sudo -n ps -o user=,uid=,pid=,args= -p " + ",".join(pids))
    rows = [line.split(None, 3) for line in table.splitlines()]
    assert rows and all(user == "vllm" and uid != "0" for user, uid, _, _ in rows), table
    status = node.sh(f"sudo -n cat /proc/{main_pid}/status")
    fields = dict(re.findall(r"^(\w+):\s+(.*)$", status, re.M))
    assert fields["NoNewPrivs"] == "1"
    assert int(fields["CapEff"], 16) == 0 and int(fields["CapBnd"], 16) == 0
    assert fields["Seccomp"] == "2"  # the system call filter is in force


def test_sandbox_confines_the_server(deployed, node, main_pid):
    """Inside the server's own mount namespace, as the service user."""
    env = node.sh(f"sudo -n cat /proc/{main_pid}/environ").split("\0")
    cache = next(e.split("=", 1)[1] for e in env if e.startswith("VLLM_CACHE_ROOT="))
    inside = f"sudo -n nsenter -t {main_pid} -m -S $(id -u vllm) -G $(id -g vllm) --"
    release = node.current_release()
    refused = node.run(f"{inside} touch {ROOT}/releases/{release}/venv/x")
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr, refused
    refused = node.run(f"{inside} touch /etc/x")
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr
    allowed = node.run(f"{inside} sh -c 'touch {cache}/.w && rm {cache}/.w'")
    assert allowed.returncode == 0, allowed.stderr
    # ProtectHome, PrivateTmp, ProtectProc=invisible as the server sees them.
    assert node.run(f"{inside} ls /home/ops").returncode != 0
    mounts = node.sh(f"sudo -n nsenter -t {main_pid} -m cat /proc/self/mountinfo")
    assert re.search(r" /proc .*hidepid=invisible", mounts), mounts
    assert re.search(r"systemd-private-\w+-vllm\.service-\w+/tmp /tmp ", mounts), mounts


def test_exposure_score_is_ok(deployed, node):
    out = node.sh("sudo -n systemd-analyze security --no-pager vllm.service")
    m = re.search(r"Overall exposure level for vllm\.service: (\d+\.\d+) (\w+)", out)
    assert m, out[-2000:]
    score = float(m.group(1))
    print(f"systemd-analyze security vllm.service: {score} {m.group(2)}")
    assert score <= EXPOSURE_LIMIT and m.group(2) == "OK", out
    assert score <= RECORDED_EXPOSURE + 0.05, f"weaker than recorded ({RECORDED_EXPOSURE}):\n{out}"


# ---------------------------------------------------------------- the API key


def test_api_refuses_a_request_without_the_key(deployed, play):
    assert http(f"{base_url(play)}/v1/models")[0] == 401
    assert http(f"{base_url(play)}/v1/models", key="wrong-" + API_KEY)[0] == 401
    code, body = http(f"{base_url(play)}/v1/models", key=API_KEY)
    assert code == 200
    assert [m["id"] for m in json.loads(body)["data"]] == [SERVED]


def test_the_checks_authenticate_with_the_key_file(deployed, node):
    manifest = node.manifest()
    assert manifest["last_validation"]["status"] == "pass", manifest["last_validation"]
    release_dir = f"{ROOT}/releases/{node.current_release()}"
    check = (
        f"sudo -n env PYTHONDONTWRITEBYTECODE=1 PYTHONPATH={release_dir}/toolkit "
        f"{release_dir}/venv/bin/python -m specdeploy.node.validation.check smoke "
        f"--base-url http://{node.node.address}:8000 "
        f"--served-model-name '{SERVED}' --request-timeout 10 --json"
    )
    with_key = node.run(f"{check} --api-key-file {KEY_FILE}")
    assert with_key.returncode == 0, with_key.stdout[-2000:]
    without = node.run(check)
    assert without.returncode != 0
    assert "401" in without.stdout, without.stdout[-2000:]


def test_no_secret_in_the_verbose_output(deployed):
    text = deployed.stdout + deployed.stderr
    # It really was -vvv: the inventory's -vvv log, whichever connection layer runs (the stock
    # ssh plugin's "ESTABLISH SSH CONNECTION" lines are not there with mitogen's).
    assert "did not pass its verify_file() method" in text
    assert "Write the server's secrets environment file" in text  # and the secrets were written
    assert API_KEY not in text
    assert HUB_TOKEN not in text


def test_secrets_on_disk_only_in_the_root_only_files(deployed, node, main_pid):
    from testbed import sandbox as sb

    # The secrets go to grep on stdin: a command line would land in sudo's log.
    command = (
        "sudo -n grep -rlF -f /dev/stdin /etc /opt /var /srv /tmp /root /home /run /usr/local; true"
    )
    found = subprocess.run(
        sb.ssh_command(node.node, command),
        input=f"{API_KEY}\n{HUB_TOKEN}\n",
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout.split()
    assert sorted(found) == sorted([SECRETS_ENV, KEY_FILE]), found
    modes = node.sh(f"sudo -n stat -c '%U:%G %a %n' {SECRETS_ENV} {KEY_FILE} /etc/specdeploy")
    assert modes.splitlines() == [
        f"root:root 600 {SECRETS_ENV}",
        f"root:root 600 {KEY_FILE}",
        "root:root 700 /etc/specdeploy",
    ]
    assert node.sh(f"sudo -n cat {KEY_FILE}").strip() == API_KEY
    env_lines = node.sh(f"sudo -n cat {SECRETS_ENV}").splitlines()
    assert f"VLLM_API_KEY={API_KEY}" in env_lines and f"HF_TOKEN={HUB_TOKEN}" in env_lines
    # Delivered through the environment, never on the command line.
    assert API_KEY not in node.sh(f"sudo -n cat /proc/{main_pid}/cmdline")
    assert f"VLLM_API_KEY={API_KEY}" in node.sh(f"sudo -n cat /proc/{main_pid}/environ").split("\0")
    # Nor on the controller (reports, inventories).
    for where in ("reports", "inventory"):
        if (REPO / where).exists():
            hits = subprocess.run(
                ["grep", "-rlF", "-e", API_KEY, "-e", HUB_TOKEN, str(REPO / where)],
                capture_output=True,
                text=True,
            ).stdout
            assert hits == "", hits


def test_non_loopback_host_needs_a_key(deployed, play, node):
    listing = node.listing()
    before = node.service("MainPID", "ActiveEnterTimestamp")
    # Same inputs as the deployed release but the address; no key in the environment.
    run = play(extra={"specdeploy_host": "10.255.255.1", "specdeploy_served_model_name": SERVED})
    assert run.returncode != 0, run.tail()
    message = run.failure_message()
    assert "specdeploy_host=10.255.255.1" in message and "specdeploy_api_key" in message, message
    assert_unchanged(listing, node.listing())
    assert node.service("MainPID", "ActiveEnterTimestamp") == before


# ---------------------------------------------------------------- file modes


def test_file_modes_of_the_release_root(deployed, node):
    release_dir = f"{ROOT}/releases/{node.current_release()}"
    world = node.sh(
        f"sudo -n find {ROOT} /etc/specdeploy /var/cache/specdeploy /var/log/specdeploy "
        f"{UNIT} ! -type l -perm -o+w -print"
    )
    assert world == "", world
    not_root = node.sh(f"sudo -n find {ROOT} ! -user root -print -o ! -group root -print")
    assert not_root == "", not_root
    # The service user can write nothing under the release root (the patch backups included)...
    writable = node.sh(f"sudo -n -u vllm find {ROOT} -writable -print 2>/dev/null; true")
    assert writable == "", writable
    backups = node.sh(f"sudo -n find {release_dir}/patch-backups -type f -print")
    assert backups.strip(), "no patch backups to audit"
    # ... but its caches and its log directory.
    cache = node.sh(f"grep '^VLLM_CACHE_ROOT=' {release_dir}/config/vllm.env").split("=", 1)[1]
    for path in (cache.strip(), "/var/log/specdeploy"):
        assert node.run(f"sudo -n -u vllm test -w {path}").returncode == 0, path
    assert node.run(f"sudo -n -u vllm cat {SECRETS_ENV}").returncode != 0


# ---------------------------------------------------------------- input from the node is data


def marker_files(node) -> list[str]:
    on_node = node.sh(
        f"sudo -n find / -xdev \\( -path /proc -o -path /sys \\) -prune -o "
        f"-name 'specdeploy-pwned-{TOKEN}*' -print 2>/dev/null; true",
        timeout=300,
    ).split()
    return on_node + glob.glob(f"{MARK}*")


def test_served_name_with_shell_metacharacters_is_data(deployed, node, play):
    # The deploy passed its readiness and validation checks (they parsed /v1/models and the
    # /metrics text, both carrying the name) and nothing ran the name as a command.
    code, body = http(f"{base_url(play)}/metrics", key=API_KEY)
    assert code == 200
    assert f'model_name="{SERVED}"' in body.decode(), body.decode()[:2000]
    assert marker_files(node) == []


def test_config_json_with_shell_metacharacters_is_data(deployed, node, play):
    drafter = json.loads((FIXTURES / "models" / "tiny-dsv3-eagle3" / "config.json").read_text())
    drafter["architectures"] = [f"LlamaForCausalLMEagle3$(touch {MARK}-arch);`touch {MARK}-bt`"]
    target = json.loads((FIXTURES / "models" / "tiny-dsv3" / "config.json").read_text())
    target["model_type"] = f"deepseek_v3$(touch {MARK}-model-type)"
    node.push(f"/srv/models/evil-drafter-{TOKEN}/config.json", json.dumps(drafter).encode())
    node.push(f"/srv/models/evil-target-{TOKEN}/config.json", json.dumps(target).encode())
    try:
        run = play(
            "playbooks/preflight.yml",
            "--tags",
            "inputs",
            extra={
                "specdeploy_model_path": f"/srv/models/evil-target-{TOKEN}",
                "specdeploy_drafter_path": f"/srv/models/evil-drafter-{TOKEN}",
                "specdeploy_speculative_config": {
                    "method": "eagle3",
                    "model": f"/srv/models/evil-drafter-{TOKEN}",
                    "num_speculative_tokens": 3,
                },
            },
        )
        # The drafter's architecture is refused, quoted verbatim as data.
        assert run.returncode != 0, run.tail()
        assert f"$(touch {MARK}-arch)" in run.failure_message(), run.tail()
        assert marker_files(node) == []
    finally:
        node.sh(f"sudo -n rm -rf /srv/models/evil-drafter-{TOKEN} /srv/models/evil-target-{TOKEN}")


# ---------------------------------------------------------------- SSH host keys (static)


def test_host_key_checking_stays_on_in_every_shipped_config():
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "ansible.cfg")
    assert cfg.getboolean("defaults", "host_key_checking") is True
    shipped = [REPO / "ansible.cfg", REPO / "Makefile"]
    for top in ("inventory", "playbooks", "roles"):
        shipped += [p for p in (REPO / top).rglob("*") if p.is_file()]
    weak = re.compile(
        r"StrictHostKeyChecking\s*=?\s*(no|off|accept-new)|UserKnownHostsFile\s*=?\s*/dev/null"
        r"|host_key_checking\s*[:=]\s*(false|no|0)|ANSIBLE_HOST_KEY_CHECKING\s*[:=]\s*(false|no|0)",
        re.I,
    )
    offenders = [str(p) for p in shipped if weak.search(p.read_text(errors="replace"))]
    assert offenders == [], offenders
    # The production inventory says how to pin the node's host key.
    production = "".join(
        p.read_text() for p in (REPO / "inventory" / "production").rglob("*.yml") if p.is_file()
    )
    assert "known_hosts" in production and "ssh-keyscan" in production


def test_sandbox_inventory_uses_its_recorded_known_hosts(cluster):
    hosts = yaml.safe_load(Path(cluster.inventory).read_text())
    nodes = hosts["all"]["children"]["gpu_nodes"]["hosts"]
    for name, host in nodes.items():
        args = host["ansible_ssh_common_args"]
        assert "StrictHostKeyChecking=yes" in args, (name, args)
        known = re.search(r"UserKnownHostsFile=(\S+)", args).group(1)
        assert Path(known).is_file() and host["ansible_host"] in Path(known).read_text()
