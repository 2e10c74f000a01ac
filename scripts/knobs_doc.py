"""The production inventory's list of every knob of every role, generated from the roles.

inventory/production/group_vars/gpu_nodes.yml documents each variable an operator can set: for
every role (``specdeploy`` first), the knobs of ``defaults/main.yml`` with their comments and
default values, commented out, and the options of ``meta/argument_specs.yml`` that have no
default there (set by the playbook that runs the role), with their description. The section
between the BEGIN and END markers is this module's output and nothing else:

    python -m scripts.knobs_doc --write    # regenerate the section
    python -m scripts.knobs_doc --check    # exit 1 and name what is stale

Exit codes: 0 up to date (or written), 1 stale (--check), 2 usage or environment error
(a role file or the inventory file unreadable, no markers).
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from specdeploy.node.module_utils.specdeploy_fsio import atomic_write

REPO = Path(__file__).resolve().parents[1]
DOC = Path("inventory/production/group_vars/gpu_nodes.yml")
BEGIN = (
    "# ---- BEGIN every knob of every role (generated: python -m scripts.knobs_doc --write) ----"
)
END = "# ---- END every knob of every role ----"
FIRST_ROLE = "specdeploy"  # the shared knobs every other role reads
_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*):(\s|$)")


class KnobsDocError(Exception):
    """A role file or the inventory file cannot be read as expected (exit 2)."""


@dataclass(frozen=True)
class Knob:
    name: str
    lines: list[str]  # comment lines and the YAML of the default, as in defaults/main.yml
    gap: bool = False  # a blank line before it in defaults/main.yml (a new group)


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise KnobsDocError(f"{path}: {exc}") from exc


def default_blocks(path: Path) -> list[Knob]:
    """Each top-level key of a defaults file with the comment lines right above it."""
    if not path.is_file():
        return []
    knobs: list[Knob] = []
    pending: list[str] = []
    current: list[str] | None = None
    gap = False
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _KEY.match(line)
        if match:
            current = [*pending, line]
            knobs.append(Knob(match.group(1), current, gap and bool(knobs)))
            pending, gap = [], False
        elif line.startswith("#"):
            pending.append(line)
            current = None
        elif line.strip() in ("", "---"):  # a file header or a gap: not a knob's comment
            pending, gap = [], True
            current = None
        elif current is not None:  # a continuation of the value (indented YAML)
            current.append(line)
    return knobs


def spec_options(path: Path) -> dict[str, dict[str, Any]]:
    """Every option of every entry point of a role's argument specs (first description wins)."""
    specs = (_read_yaml(path) or {}).get("argument_specs") or {}
    options: dict[str, dict[str, Any]] = {}
    for entry in specs.values():
        for name, spec in ((entry or {}).get("options") or {}).items():
            options.setdefault(name, spec or {})
    return options


def roles(repo: Path) -> list[Path]:
    found = sorted(p.parent.parent for p in (repo / "roles").glob("*/meta/argument_specs.yml"))
    return sorted(found, key=lambda r: (r.name != FIRST_ROLE, r.name))


def _describe(spec: dict[str, Any]) -> str:
    kind = spec.get("type", "str")
    if spec.get("elements"):
        kind += f" of {spec['elements']}"
    choices = f"; one of {', '.join(map(str, spec['choices']))}" if spec.get("choices") else ""
    return f"{kind}{choices}: {spec.get('description', '').strip()}".rstrip(": ")


def _wrapped(text: str, first: str, rest: str) -> list[str]:
    """Comment lines of at most 100 columns (yamllint's limit is 140; the file's style 100)."""
    return textwrap.wrap(
        text, width=100, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False
    )


def render(repo: Path) -> tuple[str, list[str]]:
    """(the generated section, every knob name in it)."""
    out = [BEGIN]
    names: list[str] = []
    for role in roles(repo):
        specs = spec_options(role / "meta" / "argument_specs.yml")
        main = (_read_yaml(role / "meta" / "argument_specs.yml") or {}).get("argument_specs") or {}
        # the role's main entry point, else its first (the specdeploy role's is `knobs`)
        entry = main.get("main") or next(iter(main.values()), None) or {}
        summary = (entry.get("short_description") or "").strip()
        heading = f"# ==== role {role.name}: {summary}"
        out += ["", f"{heading} {'=' * max(3, 97 - len(heading))}"]
        knobs = [
            k
            for k in default_blocks(role / "defaults" / "main.yml")
            if k.name in specs or not k.name.startswith("_")
        ]
        for knob in knobs:
            names.append(knob.name)
            spec = specs.get(knob.name)
            if knob.gap:
                out.append("#")
            if spec and not any("#" in line for line in knob.lines):
                out += _wrapped(f"({_describe(spec)})", "# ", "#  ")
            out += [line if line.startswith("#") else f"# {line}" for line in knob.lines]
        unset = [n for n in specs if n not in {k.name for k in knobs} and not n.startswith("_")]
        if unset:
            out.append(f"# Set by the playbooks that run {role.name} (no inventory default):")
            for name in unset:
                names.append(name)
                out += _wrapped(f"{name}: {_describe(specs[name])}", "#   ", "#     ")
    out += ["", END]
    return "\n".join(out) + "\n", names


def splice(text: str, section: str, doc: Path) -> str:
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise KnobsDocError(f"{doc}: no '{BEGIN[:40]}...' / '{END}' markers")
    return text[:start] + section + text[end + len(END) + 1 :]


def documented_names(text: str) -> set[str]:
    start, end = text.find(BEGIN), text.find(END)
    body = text[start:end] if 0 <= start < end else ""
    return set(re.findall(r"^#\s*([A-Za-z_][A-Za-z0-9_]*):", body, re.M))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="knobs-doc", description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="regenerate the section")
    mode.add_argument("--check", action="store_true", help="exit 1 when the section is stale")
    ap.add_argument("--repo", type=Path, default=REPO, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    doc = args.repo / DOC
    try:
        section, names = render(args.repo)
        text = doc.read_text(encoding="utf-8")
        wanted = splice(text, section, doc)
        if args.write:
            if wanted != text:
                atomic_write(doc, wanted)
            print(f"{DOC}: {len(names)} knobs")
            return 0
    except KnobsDocError as exc:
        print(f"knobs-doc: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"knobs-doc: error: {doc}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if wanted == text:
        print(f"{DOC}: up to date ({len(names)} knobs)")
        return 0
    missing = sorted(set(names) - documented_names(text))
    extra = sorted(documented_names(text) - set(names))
    what = (f"missing knobs: {', '.join(missing)}" if missing else "") + (
        f"{'; ' if missing else ''}no longer knobs: {', '.join(extra)}" if extra else ""
    )
    print(
        f"{DOC} is stale ({what or 'a default or description changed'}): run "
        "python -m scripts.knobs_doc --write",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
