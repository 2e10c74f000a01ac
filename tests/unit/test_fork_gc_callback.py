"""The fork_gc callback (plugins/callback/fork_gc.py): Ansible's workers start with the
controller's objects frozen out of their garbage collections, and the controller itself keeps
collecting as before. Real ansible-playbook runs with the repository's ansible.cfg; a probe
action (run inside the forked worker) and a probe callback (in the controller) read the
collector's frozen count."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE_ACTION = """\
import gc
from ansible.plugins.action import ActionBase

class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        return {"changed": False, "frozen_in_worker": gc.get_freeze_count()}
"""

PROBE_CALLBACK = """\
import gc, json, os
from ansible.plugins.callback import CallbackBase

class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gc_probe"
    CALLBACK_NEEDS_ENABLED = True

    def v2_runner_on_ok(self, result):
        self.worker = result._result.get("frozen_in_worker")

    def v2_playbook_on_stats(self, stats):
        out = {"worker": self.worker, "controller": gc.get_freeze_count()}
        with open(os.environ["GC_PROBE_OUT"], "w") as handle:
            json.dump(out, handle)
"""

PLAY = """\
- name: Probe
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Read the worker's frozen objects
      gc_probe:
"""


def frozen_counts(tmp_path: Path, callbacks: str) -> dict[str, int]:
    (tmp_path / "action_plugins").mkdir()
    (tmp_path / "action_plugins" / "gc_probe.py").write_text(PROBE_ACTION)
    (tmp_path / "callback_plugins").mkdir()
    (tmp_path / "callback_plugins" / "gc_probe.py").write_text(PROBE_CALLBACK)
    (tmp_path / "play.yml").write_text(PLAY)
    out = tmp_path / "probe.json"
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_CALLBACK_PLUGINS=str(tmp_path / "callback_plugins"),
        ANSIBLE_CALLBACKS_ENABLED=callbacks,
        GC_PROBE_OUT=str(out),
    )
    run = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "play.yml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads(out.read_text())


def test_workers_start_with_the_controllers_objects_frozen(tmp_path: Path) -> None:
    counts = frozen_counts(tmp_path, "specdeploy.toolkit.fork_gc,gc_probe")
    # the controller's objects (plays, variables, plugins): tens of thousands
    assert counts["worker"] > 10_000, counts
    assert counts["controller"] == 0, "the controller must keep collecting its own objects"


def test_without_the_callback_workers_collect_everything_they_inherited(tmp_path: Path) -> None:
    counts = frozen_counts(tmp_path, "gc_probe")
    assert counts == {"worker": 0, "controller": 0}


@pytest.mark.parametrize("times", [1, 3])
def test_the_hooks_are_registered_once_per_process(times: int) -> None:
    from ansible_collections.specdeploy.toolkit.plugins.callback import fork_gc

    fork_gc._registered = False
    try:
        first = [fork_gc.register_fork_hooks() for _ in range(times)]
        assert first == [True] + [False] * (times - 1)
    finally:
        fork_gc._registered = True  # this pytest process keeps the (harmless) hooks
