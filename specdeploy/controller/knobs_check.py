"""Refuse unknown knobs: a variable of the inventory that looks like one of the toolkit's but
that nothing reads (a typo in group_vars would otherwise be ignored, silently, and its default
served instead).

A variable "looks like a knob" when its name starts with a role's prefix (``specdeploy_``,
``validation_``, ``vllm_service_`` ...; ``advise_`` for `make advise`). It is known when a role
documents it (the top-level keys of its ``defaults/main.yml`` and the options of its
``meta/argument_specs.yml``, what scripts/knobs_doc.py lists in the production inventory) or
when the toolkit's own code names it (roles, playbooks, plugins, templates,
Python: playbook-level knobs such as ``rollback_to``). Anything else is refused before any
node changes, one line a knob, naming where it was set and the closest known knob:

    specdeploy_speculative_confg (set for gpu-01, gpu-02): no such knob; did you mean
    specdeploy_speculative_config?

    python -m specdeploy.controller.knobs_check --inventory PATH [--inventory PATH ...]
        [--hosts a,b] [--json]

The variables are the inventory's, as ``ansible-inventory --list`` reads them (group_vars,
host_vars, the hosts file; Ansible's own classes, in this process), never extra vars or facts.
Exit codes: 0 every knob known, 2 an unknown knob (a usage error of the inventory) or an
inventory that cannot be read.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

from specdeploy.node import cli

REPO = Path(__file__).resolve().parents[2]
# Code that may read a knob (the inventory, docs and tests only talk about them).
SKIPPED_DIRS = {".git", ".venv", "tests", "docs", "inventory", "reports", "build", "patches"}
CODE_SUFFIXES = {".yml", ".yaml", ".py", ".j2", ".json", ".cfg"}
EXTRA_PREFIXES = ("advise",)  # playbooks/advise.yml's knobs (no role of that name)


class KnobsCheckError(Exception):
    """The inventory or a role file could not be read (names the source)."""


def roles(repo: Path = REPO) -> list[Path]:
    """The collection's roles (each has meta/argument_specs.yml)."""
    return sorted(p.parent.parent for p in (repo / "roles").glob("*/meta/argument_specs.yml"))


def prefixes(repo: Path = REPO) -> tuple[str, ...]:
    """The name prefixes of the toolkit's knobs: each role's name, and ``advise``."""
    return tuple(sorted({r.name for r in roles(repo)} | set(EXTRA_PREFIXES)))


def _yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise KnobsCheckError(f"{path}: {cli.reason(exc)}") from None
    return data if isinstance(data, dict) else {}


def documented(repo: Path = REPO) -> list[str]:
    """Every knob a role documents: its defaults' keys and its argument specs' options."""
    names: set[str] = set()
    for role in roles(repo):
        names.update(str(k) for k in _yaml(role / "defaults" / "main.yml"))
        specs = _yaml(role / "meta" / "argument_specs.yml").get("argument_specs") or {}
        for entry in specs.values():
            names.update(str(k) for k in ((entry or {}).get("options") or {}))
    return sorted(n for n in names if not n.startswith("_"))


def _code_files(repo: Path) -> Iterable[Path]:
    for root, dirs, files in os.walk(repo):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not d.startswith(".")]
        for name in files:
            path = Path(root) / name
            # this module's own examples of typos are no knobs
            if path.suffix in CODE_SUFFIXES and path.resolve() != Path(__file__).resolve():
                yield path


def known_names(repo: Path = REPO) -> tuple[set[str], list[str]]:
    """(every knob-like name the code reads or a role documents, the role-documented ones)."""
    documented_names = documented(repo)
    alternatives = "|".join(map(re.escape, prefixes(repo)))
    pattern = re.compile(rf"\b(?:{alternatives})_[a-z0-9_]+\b")
    found = set(documented_names)
    for path in _code_files(repo):
        try:
            found.update(pattern.findall(path.read_text(encoding="utf-8", errors="replace")))
        except OSError:
            continue
    return found, documented_names


def unknown_knobs(
    hostvars: Mapping[str, Mapping[str, object]],
    known: set[str],
    documented: list[str],
    knob_prefixes: tuple[str, ...],
) -> list[tuple[str, list[str], str | None]]:
    """(name, the hosts it is set for, the closest documented knob or None) of every variable
    with a knob's prefix that ``known`` does not hold, sorted by name."""
    where: dict[str, list[str]] = {}
    for host, variables in sorted(hostvars.items()):
        for name in variables:
            if name.startswith(tuple(p + "_" for p in knob_prefixes)) and name not in known:
                where.setdefault(name, []).append(host)
    out = []
    for name, hosts in sorted(where.items()):
        close = difflib.get_close_matches(name, documented, n=1, cutoff=0.6)
        out.append((name, hosts, close[0] if close else None))
    return out


def message(name: str, hosts: list[str], closest: str | None) -> str:
    shown = ", ".join(hosts[:5]) + (f" and {len(hosts) - 5} more" if len(hosts) > 5 else "")
    hint = f"did you mean {closest}?" if closest else "see inventory/production/group_vars"
    return f"{name} (set for {shown}): no such knob; {hint}"


def inventory_hostvars(sources: list[str], hosts: list[str] | None) -> dict[str, dict]:
    """Each host's variables as the inventory sets them: what ``ansible-inventory --list``
    prints (group_vars, host_vars, the hosts file; no extra vars, no facts), read with the
    same Ansible classes in this process instead of a second Python process."""
    try:
        from ansible import constants as C
        from ansible.errors import AnsibleError
        from ansible.inventory.manager import InventoryManager
        from ansible.parsing.dataloader import DataLoader
        from ansible.utils.display import Display
        from ansible.vars.manager import VariableManager
    except ImportError as exc:  # the controller's Python is the one with Ansible
        raise KnobsCheckError(f"Ansible is not importable here: {exc}") from None
    where = f"--inventory {','.join(sources)}"
    warnings: list[str] = []
    display = Display()
    # Ansible's warnings on a source it cannot parse (one per inventory plugin tried, several
    # lines each) become this tool's one line; the first "Unable to parse ..." names the source.
    warn, warn_exc = display.warning, display.error_as_warning
    display.warning = lambda msg, *a, **k: warnings.append(str(msg))  # type: ignore[method-assign]
    display.error_as_warning = lambda *a, **k: None  # type: ignore[method-assign]
    try:
        loader = DataLoader()
        inventory = InventoryManager(loader=loader, sources=list(sources))
        variables = VariableManager(loader=loader, inventory=inventory)
        found = {
            host.name: {
                k: v
                for k, v in variables.get_vars(
                    host=host, include_hostvars=False, stage="all"
                ).items()
                if k not in C.INTERNAL_STATIC_VARS
            }
            for host in inventory.get_hosts()
            if hosts is None or host.name in hosts
        }
    except AnsibleError as exc:
        raise KnobsCheckError(f"{where}: {' '.join(str(exc).split())}") from None
    finally:
        display.warning, display.error_as_warning = warn, warn_exc  # type: ignore[method-assign]
    unparsed = [w for w in warnings if "parse" in w.lower()]
    if unparsed:
        raise KnobsCheckError(f"{where}: {' '.join(unparsed[0].split())}")
    return found


def main(argv: list[str] | None = None) -> int:
    p = cli.parser("knobs-check", __doc__)
    p.add_argument("--inventory", action="append", required=True, help="an inventory source")
    p.add_argument("--hosts", default="", help="only these hosts (comma-separated)")
    args = p.parse_args(argv)
    hosts = [h for h in args.hosts.split(",") if h] or None
    try:
        hostvars = inventory_hostvars(args.inventory, hosts)
        known, documented = known_names()
    except KnobsCheckError as exc:
        return cli.usage_error("knobs-check", exc)
    found = unknown_knobs(hostvars, known, documented, prefixes())
    if args.json:
        print(json.dumps({"unknown": [{"knob": n, "hosts": h, "closest": c} for n, h, c in found]}))
    for name, where, closest in found:
        print(f"knobs-check: error: {message(name, where, closest)}", file=sys.stderr)
    if not args.json and not found:
        print(f"every knob known ({len(hostvars)} host(s))")
    return cli.EXIT_USAGE if found else cli.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
