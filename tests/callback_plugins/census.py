"""Callback plugin of the test runner: what each ansible-playbook run of a test session cost.

`make test` is CPU-bound on its 2 cores (docs/test-time.md), so its wall time is the work the
sessions give the machine. Most of that work is Ansible runs: each host-task costs the controller
a fork, an SSH channel and its result handling, and the node a module run. scripts/run_tests.py
enables this plugin for its sessions (ANSIBLE_CALLBACK_PLUGINS, ANSIBLE_CALLBACKS_ENABLED) and
points SPECDEPLOY_CENSUS at a file per session; each run appends one JSON line: the playbook,
its host-tasks (by outcome, and those that ran by module: where the next cut is), the release
venvs it built from wheels (not linked from an earlier release: the costliest single step of a
first deploy), its wall and its CPU (the ansible-playbook process and every process it waited
for: workers, SSH clients). The runner adds
them up per session. Without SPECDEPLOY_CENSUS the plugin writes nothing.

A test bed tool, not part of the collection: an operator's run reports its task times through
profile_tasks.
"""

from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: census
type: aggregate
short_description: One JSON line per run (host-tasks, venv builds, CPU) for the test runner
description:
  - Appends one JSON object per ansible-playbook run to the file named by SPECDEPLOY_CENSUS.
requirements:
  - enabled in callbacks_enabled (scripts/run_tests.py does it for the test sessions)
"""

VENV_BUILD = "specdeploy.toolkit.release_venv_build"


def cpu_seconds() -> float:
    """This process and every child it waited for (workers, their SSH clients)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "census"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._path = os.environ.get("SPECDEPLOY_CENSUS", "")
        self._began = time.monotonic()
        self._playbook = ""
        self._counts = {"ok": 0, "changed": 0, "failed": 0, "skipped": 0, "unreachable": 0}
        self._venv_builds = 0
        self._actions: dict[str, int] = {}  # host-tasks that ran (not skipped), by module

    def v2_playbook_on_start(self, playbook) -> None:
        self._playbook = Path(playbook._file_name).name

    def _count(self, outcome: str, result) -> None:
        self._counts[outcome] += 1
        if outcome != "skipped":
            action = result._task.action
            self._actions[action] = self._actions.get(action, 0) + 1
        answer = result._result
        if outcome == "ok" and answer.get("changed"):
            self._counts["changed"] += 1
            if result._task.action == VENV_BUILD and not answer.get("linked"):
                self._venv_builds += 1

    def v2_runner_on_ok(self, result) -> None:
        self._count("ok", result)

    def v2_runner_on_failed(self, result, ignore_errors: bool = False) -> None:
        self._count("failed", result)

    def v2_runner_on_skipped(self, result) -> None:
        self._count("skipped", result)

    def v2_runner_on_unreachable(self, result) -> None:
        self._count("unreachable", result)

    def v2_playbook_on_stats(self, stats) -> None:
        if not self._path:
            return
        counts = self._counts
        line = {
            "playbook": self._playbook,
            "host_tasks": sum(counts[k] for k in ("ok", "failed", "skipped", "unreachable")),
            **counts,
            "venv_builds": self._venv_builds,
            "actions": self._actions,
            "wall_s": round(time.monotonic() - self._began, 2),
            "cpu_s": round(cpu_seconds(), 2),
        }
        # O_APPEND: one short write per run, whole, whatever other runs of the session append
        with open(self._path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")
