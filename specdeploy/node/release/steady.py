"""The steady-node check's command line: ``python -m specdeploy.node.release.steady``.

The logic is the collection's module_utils ``steady`` (plugins/module_utils/steady.py, here
``specdeploy.node.module_utils.steady``); this file is only its argument parser and output.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specdeploy.node.module_utils.steady import check


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", required=True, help="JSON file of the check's parameters")
    parser.add_argument("--no-smoke", action="store_true", help="skip the readiness smoke check")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    try:
        spec = json.loads(Path(args.spec).read_text())
        result = check(spec, run_smoke=not args.no_smoke)
    except (OSError, ValueError, KeyError) as error:
        print(f"steady: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        print("steady" if result["steady"] else "\n".join(["drift:", *result["drifts"]]))
    return 0 if result["steady"] else 1


if __name__ == "__main__":
    sys.exit(main())
