"""Reading a host's variables in an action plugin, templated, as a task's Jinja would."""

from __future__ import annotations

import os
from pathlib import Path

from ansible.errors import AnsibleActionFail, AnsibleError

UNSET = object()


def resolve(templar, name: str, local_variables: dict | None = None):
    """The variable's value, templated, or UNSET when it is not defined. local_variables are
    seen by the templates the value refers to as well (a task's ``vars:``)."""
    if local_variables:
        variables = dict(templar.available_variables) | local_variables
        templar = templar.copy_with_new_env(available_variables=variables)
    # The raw value, templated only when it holds a template: resolving the name as an expression
    # compiled one Jinja expression per variable and task (a plain value needs none), which was
    # most of the input checks' controller time per node (docs/scale.md).
    try:
        raw = templar.available_variables[name]
    except KeyError:
        return UNSET
    try:
        return templar.template(raw)
    except AnsibleError:
        return UNSET


def jinja_int(value) -> int:
    """Jinja's ``| int`` for a knob's value: a float's string too ("3.0" -> 3), as the YAML
    that computed these values in Jinja had it (``-e`` gives strings)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return int(float(value))


def resolve_all(templar, names) -> dict:
    """name -> value for the names that are defined."""
    values = {}
    for name in names:
        value = resolve(templar, name)
        if value is not UNSET:
            values[name] = value
    return values


def require_all(templar, names, who: str) -> dict:
    """name -> value for every name; a one-line error naming the undefined ones, for ``who``
    (the plugin that reads them)."""
    values = resolve_all(templar, names)
    missing = [name for name in names if name not in values]
    if missing:
        raise AnsibleError(f"{who}: undefined: {', '.join(missing)}")
    return values


def task_args(args, who: str, options, choices=None) -> dict:
    """A task's arguments to an action, checked: no option outside `options`, and each option
    named in `choices` one of its values (the action then reads the rest from the variables)."""
    unknown = sorted(set(args) - set(options))
    if unknown:
        raise AnsibleActionFail(f"{who}: unknown options {', '.join(unknown)}")
    for name, allowed in (choices or {}).items():
        if args.get(name) not in allowed:
            raise AnsibleActionFail(
                f"{who}: {name} must be one of {', '.join(allowed)}: {args.get(name)!r}"
            )
    return dict(args)


def toolkit_dir(templar) -> str:
    """Where the toolkit's package is, for its tools' ``python -m`` on the controller: the knob
    specdeploy_toolkit_dir where the play has it, else this collection's root (the repository,
    or the installed collection)."""
    value = resolve(templar, "specdeploy_toolkit_dir")
    if value is not UNSET and value:
        return os.path.realpath(str(value))
    return str(Path(__file__).resolve().parents[2])
