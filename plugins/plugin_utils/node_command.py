"""Run a command on the node from an action plugin as ansible.builtin.command runs it, with
variables added to the task's environment (a release's toolkit on PYTHONPATH): the one way the
actions smoke and release_tool run the release's own Python."""

from __future__ import annotations


def run_command(action, argv: list[str], environment: dict[str, str], task_vars) -> dict:
    """The command module's result; ``environment`` goes after the task's own, so it wins."""
    action._task.environment = [*(action._task.environment or []), environment]
    return action._execute_module(
        module_name="ansible.builtin.command", module_args={"argv": argv}, task_vars=task_vars
    )
