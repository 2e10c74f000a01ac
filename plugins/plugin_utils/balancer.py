"""What a drain or undrain of a node (specdeploy.controller.drain, run by the action
specdeploy.toolkit.balancer) means for the task: changed, failed, the message, and whether the
node is now out of rotation. Pure functions; the answer's parsing is the filter
specdeploy.toolkit.balancer_answer (plugins/filter/balancer.py).

roles/vllm_service tasks drain.yml and undrain.yml ran the command, then an assert whose
messages were built in Jinja; these are the same messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.specdeploy.toolkit.plugins.filter.balancer import balancer_answer

COMMANDS = ("drain", "undrain")


def command_argv(argv: list[Any], command: str, drain_timeout_s: Any) -> list[str]:
    """The balancer's command line (the knob specdeploy_drain_argv for this command); a drain
    waits at most specdeploy_drain_timeout_s for the node's HAProxy sessions to end."""
    extra = ["--wait-s", str(drain_timeout_s)] if command == "drain" else []
    return [str(part) for part in argv] + extra


def outcome(
    command: str,
    result: Mapping[str, Any],
    host: str,
    backend: str = "",
    server: str = "",
    must_succeed: bool = True,
) -> dict[str, Any]:
    """The task's result for the command's ``result`` (rc, stdout, stderr).

    A drain that the balancer refused fails: the server is not stopped. An undrain that failed
    fails only when ``must_succeed`` (a caller that only reports passes false): the node serves,
    but out of rotation."""
    if command not in COMMANDS:
        raise ValueError(f"unknown balancer command {command!r} (known: {', '.join(COMMANDS)})")
    answer = balancer_answer(result)
    rc, kind, message = result.get("rc"), answer["kind"], answer["message"]
    if command == "drain":
        said = {
            "changed": kind != "none" and rc == 0,
            # out of rotation unless no balancer is configured (undrain.yml puts it back)
            "drained": kind != "none",
            "failed": not answer["ok"],
            "msg": message if answer["ok"] else (
                f"could not take {host} out of the balancer's rotation, so it was not"
                f" restarted: {message}"
            ),
        }  # fmt: skip
    else:
        stays_out = not answer["ok"]
        said = {
            "changed": rc == 0,
            "failed": stays_out and must_succeed,
            "msg": message if not stays_out or not must_succeed else (
                f"{host} serves and passed its checks but STAYS OUT OF THE BALANCER'S ROTATION"
                f" (drained): {message}. Put it back by hand (HAProxy: `set server"
                f" {backend}/{server} state ready`; else specdeploy_undrain_command)."
            ),
        }  # fmt: skip
    return {"rc": rc, "kind": kind, **said}
