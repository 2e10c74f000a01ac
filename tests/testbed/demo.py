"""`make demo`: the toolkit's main job on a local sandbox GPU node, start to end.

Boots a sandbox node (systemd-nspawn, real sshd on 127.0.0.11), deploys vLLM 0.16.0 with the
EAGLE-3 patch series and the CI stand-in for the GPU server, re-deploys (changed=0), validates,
deploys a changed speculative config as a second release, rolls back to the first, and prints
what happened at each step. Full logs go to build/demo/. It takes a free sandbox instance of its
own (0 first; test sessions use 1 and up) and holds it while it runs. Exit codes: 0 ok, 1 a step
failed, 2 no free instance.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LOGS = REPO / "build" / "demo"
PLAYBOOK = [str(REPO / ".venv" / "bin" / "ansible-playbook")]
RECAP = re.compile(
    r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M
)


class StepFailed(Exception):
    pass


def say(message: str) -> None:
    print(f"demo: {message}", flush=True)


def run(name: str, argv: list[str], expect_rc: int = 0) -> tuple[str, float]:
    """Run one step, log it, return its output and seconds; a wrong exit code stops the demo."""
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / f"{name}.log"
    start = time.monotonic()
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    log.write_text(result.stdout + result.stderr)
    if result.returncode != expect_rc:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-25:])
        raise StepFailed(
            f"{name} exited {result.returncode} (expected {expect_rc}); log {log}\n{tail}"
        )
    return result.stdout, seconds


def recap(output: str) -> str:
    rows = [f"{h}: ok={ok} changed={ch} failed={f}" for h, ok, ch, _u, f in RECAP.findall(output)]
    return "; ".join(rows) or "no recap"


def changed_count(output: str) -> int:
    return sum(int(m[2]) for m in RECAP.findall(output))


def node_ssh(*command: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "testbed.sandbox", "ssh", "node1", "--", *command],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout.strip()


def node_status() -> dict:
    """What serves on the node, read from the `current` symlink and its manifest."""
    link = node_ssh("sudo", "readlink", "/opt/specdeploy/current")
    try:
        manifest = json.loads(node_ssh("sudo", "cat", "/opt/specdeploy/current/manifest.json"))
    except ValueError:
        return {"current": None, "status": "nothing serves"}
    return {
        "current": Path(link).name if link else None,
        "status": manifest.get("status"),
        "patches": manifest.get("patches", {}).get("state"),
        "starts": [
            {k: start.get(k) for k in ("action", "stop_to_ready_s")}
            for start in manifest.get("starts", [])[-1:]
        ],
    }


def completion(address: str) -> str:
    """Ask the serving release for a completion over HTTP, from the controller."""
    body = json.dumps({"model": "tiny-dsv3", "prompt": "one two", "max_tokens": 6}).encode()
    request = urllib.request.Request(
        f"http://{address}:8000/v1/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())["choices"][0]["text"]
    except (OSError, ValueError, KeyError) as error:
        raise StepFailed(
            f"the rolled-back release does not answer on {address}: {error}"
        ) from error


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", action="store_true", help="leave the sandbox node running")
    args = parser.parse_args(argv)
    keep = args.keep or os.environ.get("KEEP") == "1"
    from testbed import sandbox

    try:  # a free instance of its own, held for the whole demo (0 first; never a test's)
        index, held = sandbox.claim_instance(first=0)
    except sandbox.SandboxError as error:
        say(f"cannot start: {error}")
        return 2
    inventory = str(sandbox.inventory_path().parent)
    address = sandbox.node_address(1)
    try:
        say(f"1/7 booting a sandbox GPU node (Debian 12, systemd as PID 1, sshd on {address})")
        start = time.monotonic()
        try:
            sandbox.up(1)
        except sandbox.SandboxError as error:
            raise StepFailed(f"sandbox-up: {error}") from error
        s = time.monotonic() - start
        say(f"    node up in {s:.1f} s (instance {index}); inventory {inventory}/ (keys pinned)")
        run("stage-models", [*PLAYBOOK, "-i", inventory, "tests/playbooks/stage-models.yml"])

        say("2/7 ansible-playbook deploy.yml: vLLM 0.16.0 + EAGLE-3 patch series, stand-in server")
        out, s = run("deploy-1", [*PLAYBOOK, "-i", inventory, "deploy.yml"])
        first = node_status()
        say(f"    {recap(out)} in {s:.0f} s")
        say(
            f"    serving release {first.get('current')} ({first.get('status')}), patches "
            f"{first.get('patches')}, last start {first.get('starts')}"
        )

        say("3/7 the same deploy again: nothing may change, nothing restarts")
        out, s = run("deploy-2", [*PLAYBOOK, "-i", inventory, "deploy.yml"])
        say(f"    {recap(out)} in {s:.0f} s")
        if changed_count(out) != 0:
            raise StepFailed(f"the re-deploy changed something: {recap(out)}")

        say("4/7 make validate: smoke, acceptance and gates against the serving release")
        out, s = run("validate", [*PLAYBOOK, "-i", inventory, "playbooks/validate.yml"])
        for line in out.splitlines():
            if "mean acceptance length" in line or "PASS" in line or "FAIL" in line:
                say("    " + line.strip().strip('"').replace('"msg": ', ""))
        say(f"    validated in {s:.0f} s")

        say("5/7 deploy a changed speculative config (num_speculative_tokens 4): a new release")
        extra = json.dumps(
            {
                "specdeploy_speculative_config": {
                    "method": "eagle3",
                    "model": "/srv/models/tiny-dsv3-eagle3",
                    "num_speculative_tokens": 4,
                }
            }
        )
        out, s = run("deploy-3", [*PLAYBOOK, "-i", inventory, "deploy.yml", "-e", extra])
        second = node_status()
        say(f"    {recap(out)} in {s:.0f} s; now serving {second.get('current')}")

        say("6/7 make rollback: back to the previous release by the ledger")
        out, s = run("rollback", [*PLAYBOOK, "-i", inventory, "playbooks/rollback.yml"])
        back = node_status()
        say(
            f"    {recap(out)} in {s:.0f} s; now serving {back.get('current')} "
            f"({back.get('status')})"
        )
        if back.get("current") != first.get("current"):
            raise StepFailed(
                f"rollback serves {back.get('current')}, expected {first.get('current')}"
            )
        say(f"    and it answers: {completion(address)!r}")

        say("7/7 make status")
        out, _ = run("status", [*PLAYBOOK, "-i", inventory, "playbooks/status.yml"])
        for line in out.splitlines():
            if ("sandbox-node" in line or "fleet:" in line) and '"' in line:
                say("    " + line.strip().strip('",'))
        say(f"done: deployed, re-deployed with changed=0, validated, rolled back. Logs: {LOGS}")
        return 0
    except StepFailed as error:
        say(f"FAILED: {error}")
        return 1
    finally:
        if keep:
            say(
                "the node keeps running (KEEP=1); "
                f"SPECDEPLOY_SANDBOX_INSTANCE={index} make sandbox-down stops it"
            )
        else:
            for problem in sandbox.down():
                say(problem)
            say("sandbox node stopped (KEEP=1 keeps it)")
        held.close()  # type: ignore[attr-defined]


if __name__ == "__main__":
    sys.exit(main())
