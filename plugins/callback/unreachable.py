"""Callback plugin: a node lost mid-run, said in the toolkit's words at the end of the run.

A node that stops answering over SSH during a deploy (network cut, reboot, sshd gone) is only an
UNREACHABLE line in Ansible's output, often with an empty cause, and no rescue of the stage runs
on it, so none of the toolkit's own failure messages is printed for it. This plugin notes where
each node was lost and, after the recap, says what that leaves and what to do.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: unreachable
type: notification
short_description: Say what a node that became unreachable mid-run leaves, and what to do
description:
  - Notes, for every host that becomes unreachable during the run, the play and the task it was
    lost in and Ansible's cause.
  - After the recap prints one paragraph per such host on standard error, what the run could not
    do there (the stage's own rescue does not run on an unreachable host, so nothing was rolled
    back or marked on it), that the run's deploy lock stays on the node until the next run
    breaks it as stale, and what to do.
  - Enabled by the toolkit's ansible.cfg (callbacks_enabled); an operator's own configuration
    enables it the same way.
author: specdeploy maintainers (!UNKNOWN)
version_added: 0.1.0
requirements:
  - enabled in the callbacks_enabled setting
"""

from ansible import constants as C
from ansible.plugins.callback import CallbackBase
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.unreachable import (
    Lost,
    report,
)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "specdeploy.toolkit.unreachable"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._play = ""
        self._lost: dict[str, Lost] = {}

    def v2_playbook_on_play_start(self, play) -> None:
        self._play = play.get_name().strip()

    def v2_runner_on_unreachable(self, result) -> None:
        if result._task.ignore_unreachable:  # the play handles it (make status lists the node)
            return
        host = result._host.get_name()
        if host not in self._lost:  # the first loss is where the run lost it
            items = [
                r for r in result._result.get("results") or [] if isinstance(r, dict)
            ]  # a loop task's own message is "All items completed"; the cause is its item's
            cause = next(
                (str(r.get("msg", "")) for r in reversed(items) if r.get("unreachable")),
                str(result._result.get("msg", "")),
            )
            self._lost[host] = Lost(host, self._play, result._task.get_name().strip(), cause)

    def v2_playbook_on_stats(self, stats) -> None:
        if self._lost:
            text = report(list(self._lost.values()))
            self._display.display(text, color=C.COLOR_ERROR, stderr=True)
