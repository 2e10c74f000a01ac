"""How much of the playbooks is a program written in Jinja (issue 25, item 3).

Counts, over the YAML of roles/, playbooks/ and deploy.yml (templates/ are files rendered as
files, not counted):

- ``{{`` and ``{%`` occurrences;
- multi-line Jinja blocks: YAML block scalars (``|`` or ``>``) that hold Jinja and span two or
  more non-empty lines, with their line total and how many span more than 5 lines;
- Jinja expressions or statements whose delimiters are on different lines.

    python -m scripts.jinja_counts [--repo DIR] [--json] [--list]

Exit codes: 0 counted, 2 usage error (no such directory).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GLOBS = ("roles/**/*.yml", "playbooks/*.yml", "deploy.yml")
BLOCK_START = re.compile(r"^\s*(- )?([^#\s][^#]*?:\s*|)[>|][-+]?\s*$")
JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)


def yaml_files(repo: Path) -> list[Path]:
    return sorted({p for pattern in GLOBS for p in repo.glob(pattern) if p.is_file()})


def block_scalars(lines: list[str]) -> list[tuple[int, int]]:
    """(first line index, non-empty line count) of each block scalar holding Jinja."""
    found, i = [], 0
    while i < len(lines):
        if not BLOCK_START.match(lines[i]):
            i += 1
            continue
        indent = len(lines[i]) - len(lines[i].lstrip())
        j = i + 1
        while j < len(lines) and (
            not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent
        ):
            j += 1
        body = [line for line in lines[i + 1 : j] if line.strip()]
        text = "\n".join(body)
        if len(body) >= 2 and ("{{" in text or "{%" in text):
            found.append((i, len(body)))
        i = j
    return found


def count(repo: Path) -> dict:
    totals = {
        "files": 0,
        "expressions": 0,
        "statements": 0,
        "blocks": 0,
        "block_lines": 0,
        "blocks_over_5_lines": 0,
        "multiline_expressions": 0,
        "big_blocks": [],
    }
    for path in yaml_files(repo):
        text = path.read_text(encoding="utf-8")
        totals["files"] += 1
        totals["expressions"] += text.count("{{")
        totals["statements"] += text.count("{%")
        totals["multiline_expressions"] += sum(
            1 for m in JINJA.finditer(text) if "\n" in m.group(0)
        )
        for first, size in block_scalars(text.splitlines()):
            totals["blocks"] += 1
            totals["block_lines"] += size
            if size > 5:
                totals["blocks_over_5_lines"] += 1
                totals["big_blocks"].append(f"{path.relative_to(repo)}:{first + 1} ({size})")
    return totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repo", type=Path, default=REPO)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--list", action="store_true", help="name each block over 5 lines")
    args = parser.parse_args(argv)
    if not args.repo.is_dir():
        print(f"jinja_counts: error: --repo {args.repo}: not a directory", file=sys.stderr)
        return 2
    totals = count(args.repo)
    if args.json:
        print(json.dumps(totals, indent=2))
        return 0
    print(
        f"{totals['files']} files: {totals['expressions']} '{{{{', {totals['statements']} '{{%', "
        f"{totals['blocks']} multi-line Jinja blocks ({totals['block_lines']} lines, "
        f"{totals['blocks_over_5_lines']} over 5 lines), "
        f"{totals['multiline_expressions']} expressions over several lines"
    )
    if args.list:
        print("\n".join(totals["big_blocks"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
