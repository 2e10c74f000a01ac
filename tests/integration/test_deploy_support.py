"""Helpers shared by the deploy and security integration modules (no test cases here).

`Deploy` runs ansible-playbook against the sandbox inventory as an operator would (default
callback, so the PLAY RECAP is what is parsed; results as one-line JSON so a failure message
can be read back exactly). `NodeState` reads node state over real SSH.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
ROOT = "/opt/specdeploy"
UNIT = "/etc/systemd/system/vllm.service"
# What "the node is unchanged" means: every path, size and mtime under the release root, plus
# the installed unit and the secrets directory.
LISTING_COMMAND = (
    f"sudo -n find {ROOT} {UNIT} /etc/specdeploy -printf '%p %s %T@ %m %u\\n' 2>/dev/null | sort"
)
RECAP = re.compile(
    r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)"
    r"\s+failed=(?P<failed>\d+)",
    re.M,
)
# `fatal: [host]: FAILED! => {...}`, or per loop item `failed: [host] (item=...) => {...}`.
FATAL = re.compile(
    r"^(?:fatal|failed): \[(?P<host>[^\]]+)\](?::| \(item=.*?\)) (?:FAILED! )?=> (?P<json>\{.*\})$",
    re.M,
)


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    command: list[str] = field(default_factory=list)

    def recap(self, host: str) -> dict[str, int]:
        for m in RECAP.finditer(self.stdout):
            if m.group("host") == host:
                return {k: int(v) for k, v in m.groupdict().items() if k != "host"}
        raise AssertionError(f"no PLAY RECAP line for {host}:\n{self.tail()}")

    def failures(self) -> list[dict]:
        out = []
        for m in FATAL.finditer(self.stdout):
            try:
                out.append(json.loads(m.group("json")))
            except ValueError:
                out.append({"msg": m.group("json")})
        return out

    def failure_message(self) -> str:
        return " | ".join(str(f.get("msg", f)) for f in self.failures())

    def changed_tasks(self) -> list[str]:
        """Names of the tasks that reported `changed` (TASK [...] lines, then `changed:`)."""
        names, current = [], ""
        for line in self.stdout.splitlines():
            if line.startswith("TASK ["):
                current = line[6 : line.rfind("]")]
            elif line.startswith("changed: ["):
                names.append(current)
        return names

    def tail(self, n: int = 4000) -> str:
        # The failed tasks first: the end of a rescued run shows only the recap.
        failed = self.failure_message()
        head = f"failed tasks: {failed[:n]}\n" if failed else ""
        return f"rc {self.returncode}\n{head}{self.stdout[-n:]}\n--- stderr ---\n{self.stderr[-n:]}"


class Deploy:
    """ansible-playbook against the cluster's inventory (real SSH, host keys checked)."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.inventory = Path(cluster.inventory).parent
        self.host = cluster.nodes[0].hostname
        self.address = cluster.nodes[0].address

    def __call__(
        self,
        playbook: str = "deploy.yml",
        *args: str,
        extra: dict | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 900,
        repo: Path = REPO,
    ) -> Run:
        """`repo`: the toolkit checkout to run from (a copy, to test what an edit changes)."""
        environment = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SPECDEPLOY_API", "SPECDEPLOY_HUB"))
        }
        environment.update(
            ANSIBLE_CONFIG=str(repo / "ansible.cfg"),
            ANSIBLE_CALLBACK_RESULT_FORMAT="json",
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_FORCE_COLOR="0",
        )
        environment.update(env or {})
        command = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(self.inventory)]
        command += [str(repo / playbook)]
        if extra:
            command += ["-e", json.dumps(extra)]
        command += list(args)
        started = time.monotonic()
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=environment,
            cwd=repo,
            timeout=timeout,
        )
        return Run(
            result.returncode,
            result.stdout,
            result.stderr,
            time.monotonic() - started,
            command,
        )


class NodeState:
    """Read-only views of the node, over SSH as `ops` (sudo where root is needed)."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.node = cluster.nodes[0]

    def sh(self, command: str, check: bool = True, timeout: float = 120) -> str:
        return self.cluster.ssh(self.node, command, check=check, timeout=timeout).stdout

    def run(self, command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.cluster.ssh(self.node, command, timeout=timeout)

    def listing(self) -> list[str]:
        return self.sh(LISTING_COMMAND, check=False).splitlines()

    def service(self, *props: str) -> dict[str, str]:
        args = " ".join(f"-p {p}" for p in props)
        out = self.sh(f"systemctl show vllm.service {args}")
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def current_release(self) -> str:
        return self.sh(f"readlink {ROOT}/current").strip().rsplit("/", 1)[-1]

    def manifest(self, release: str | None = None) -> dict:
        path = (
            f"{ROOT}/releases/{release}/manifest.json"
            if release
            else f"{ROOT}/current/manifest.json"
        )
        return json.loads(self.sh(f"sudo -n cat {path}"))

    def push(self, path: str, data: bytes, mode: str = "0644") -> None:
        """Write one file on the node as root."""
        from testbed import sandbox as sb

        q = shlex.quote(path)
        command = (
            f"sudo -n mkdir -p $(dirname {q}) && sudo -n tee {q} >/dev/null"
            f" && sudo -n chmod {mode} {q}"
        )
        subprocess.run(
            sb.ssh_command(self.node, command), input=data, check=True, capture_output=True
        )


def assert_unchanged(before: list[str], after: list[str]) -> None:
    """The node listing is the same; otherwise show what appeared, went or changed."""
    gone, new = sorted(set(before) - set(after)), sorted(set(after) - set(before))
    assert before == after, (
        f"node changed:\n- {chr(10).join(gone[:40])}\n+ {chr(10).join(new[:40])}"
    )


def copy_toolkit(destination: Path) -> Path:
    """A copy of this checkout's working tree (edits included, no .git, builds or reports)."""
    shutil.copytree(
        REPO,
        destination,
        symlinks=True,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "reports", ".gpu-stage", "__pycache__", ".*_cache"
        ),
    )
    (destination / ".venv").symlink_to(REPO / ".venv")
    return destination


def stage_models(deploy: Deploy) -> None:
    run = deploy("tests/playbooks/stage-models.yml")
    assert run.returncode == 0, run.tail()


def exec_start_argv(unit_text: str) -> list[str]:
    """The ExecStart= of a rendered unit, split the way systemd splits it, escapes undone."""
    lines = [line for line in unit_text.splitlines() if line.startswith("ExecStart=")]
    assert len(lines) == 1, lines
    value = lines[0].split("=", 1)[1].lstrip("-@+!:")
    return [w.replace("%%", "%").replace("$$", "$") for w in shlex.split(value)]


def flag_value(argv: list[str], flag: str) -> str:
    assert argv.count(flag) == 1, (flag, argv)
    return argv[argv.index(flag) + 1]
