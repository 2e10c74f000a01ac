"""Controller-side checks (a Python module's command line) run once per distinct input.

Shared by the action plugins that run them (controller_check, preflight_inputs,
preflight_node): the answer is kept for the rest of the playbook run under the sha256 of exactly
what the command sees (its argument list, standard input and working directory), in the run's
own local temporary directory (Ansible's per-run ``ansible-local-*``, removed when
ansible-playbook exits). Hosts that ask for the same key at once wait on one lock while the
first runs the check.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
from pathlib import Path

from ansible import constants as C

CACHE_DIR = "specdeploy-controller-checks"


def cache_key(argv: list[str], stdin: str | None, chdir: str | None) -> str:
    blob = json.dumps({"argv": argv, "stdin": stdin, "chdir": chdir}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def run_check(argv: list[str], stdin: str | None, chdir: str | None) -> dict:
    # No input: /dev/null, not the worker's own stdin (Ansible's CLIs refuse a non-blocking one).
    proc = subprocess.run(
        argv,
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        cwd=chdir or None,
        capture_output=True,
        text=True,
        check=False,
    )
    return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}


def cached_run(directory: Path, argv: list[str], stdin: str | None, chdir: str | None):
    """(answer, whether it was another run's): the first caller for a key runs the check
    under the key's lock; the others wait on the lock and read its answer."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = cache_key(argv, stdin, chdir)
    answer_path = directory / f"{key}.json"
    with open(directory / f"{key}.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if answer_path.is_file():
                return json.loads(answer_path.read_text(encoding="utf-8")), True
            answer = run_check(argv, stdin, chdir)
            tmp = answer_path.with_name(answer_path.name + f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(answer), encoding="utf-8")
            tmp.replace(answer_path)
            return answer, False
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def run_once_per_input(argv: list[str], stdin: str | None, chdir: str | None):
    """cached_run in this playbook run's own local temporary directory: (answer, cached)."""
    return cached_run(Path(C.DEFAULT_LOCAL_TMP) / CACHE_DIR, argv, stdin, chdir)
