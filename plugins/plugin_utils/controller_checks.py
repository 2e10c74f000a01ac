"""Controller-side checks (a Python module's command line) run once per distinct input.

Shared by the action plugins that run them (controller_check, preflight_inputs,
preflight_node): the answer is kept for the rest of the playbook run under the sha256 of exactly
what the command sees (its argument list, standard input and working directory), in the run's
own local temporary directory (Ansible's per-run ``ansible-local-*``, removed when
ansible-playbook exits). Hosts that ask for the same key at once wait on one lock while the
first runs the check.

A check that is one of the toolkit's own pure controller commands (``IN_PROCESS``: ``python -m
specdeploy.controller.<tool>`` with this interpreter) runs inside the task's worker process, as
its ``main(argv)`` with the standard streams captured, instead of in a new interpreter: the same
answer (exit status, stdout, stderr) without a Python start and its imports (0.1-0.6 CPU-s per
check; a no-op deploy runs six). The worker is a fork that ends with the task, so nothing the
command leaves behind (imports, a changed working directory) outlives it; one check at a time
runs in-process (the streams and the working directory are the process's).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import io
import json
import os
import subprocess
import sys
import threading
import traceback
from pathlib import Path

from ansible import constants as C

CACHE_DIR = "specdeploy-controller-checks"

# Commands whose main(argv) only reads files and its stdin, prints, and (the history) writes its
# SQLite file or (the toolkit's archives) a tar file, or (the drain) talks to HAProxy's
# runtime API or runs the operator's hook with
# /dev/null as its input: no signal handler, no path such as /dev/stdin that names the
# process's own stream.
IN_PROCESS = frozenset(
    f"specdeploy.controller.{tool}"
    for tool in (
        "knobs_check", "inputs", "baseline_plan", "engines", "drafter", "schedule", "history",
        "drain", "monitoring", "deploy_state", "advisor", "toolkit_archive",
    )
)  # fmt: skip
_IN_PROCESS_LOCK = threading.Lock()


def cache_key(argv: list[str], stdin: str | None, chdir: str | None) -> str:
    blob = json.dumps({"argv": argv, "stdin": stdin, "chdir": chdir}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def in_process_module(argv: list[str], chdir: str | None) -> str | None:
    """The module to run in-process for this command line, or None (a new process)."""
    if len(argv) < 3 or argv[1] != "-m" or argv[2] not in IN_PROCESS or "/dev/stdin" in argv:
        return None
    try:
        if os.path.realpath(argv[0]) != os.path.realpath(sys.executable):
            return None
    except OSError:
        return None
    # `python -m` in chdir imports the package found there first: only that one will do
    loaded = sys.modules.get("specdeploy")
    if loaded is not None:
        where = os.path.dirname(os.path.dirname(os.path.realpath(loaded.__file__ or "")))
        if where != os.path.realpath(chdir or os.getcwd()):
            return None
    return argv[2]


def run_in_process(module: str, args: list[str], stdin: str | None, chdir: str | None) -> dict:
    """main(args) of the module as `python -m module args` in chdir would run it."""
    out, err = io.StringIO(), io.StringIO()
    with _IN_PROCESS_LOCK:
        cwd, path, argv0, stdin0 = os.getcwd(), list(sys.path), list(sys.argv), sys.stdin
        try:
            if chdir:
                os.chdir(chdir)
            sys.path.insert(0, os.getcwd())
            sys.stdin = io.StringIO(stdin or "")
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    loaded = importlib.import_module(module)
                    # as `python -m` sets it: argparse names the program after it
                    sys.argv = [loaded.__file__ or module, *args]
                    rc = loaded.main(args)
                except SystemExit as stop:
                    rc = stop.code
                except Exception:  # what the interpreter does with it: a traceback, exit 1
                    traceback.print_exc()
                    rc = 1
        finally:
            os.chdir(cwd)
            sys.path[:], sys.argv, sys.stdin = path, argv0, stdin0
    if rc is None:
        rc = 0
    elif not isinstance(rc, int):  # sys.exit("message"): printed, exit 1
        err.write(f"{rc}\n")
        rc = 1
    return {"rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue()}


def run_check(argv: list[str], stdin: str | None, chdir: str | None) -> dict:
    module = in_process_module(argv, chdir)
    if module is not None:
        return run_in_process(module, argv[3:], stdin, chdir)
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
