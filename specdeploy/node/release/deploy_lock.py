"""The deploy lock's command line: ``python -m specdeploy.node.release.deploy_lock`` (the controller
asks it who runs and whether an owner is alive, roles/rollback/tasks/lock.yml).

The logic is the collection's module_utils ``deploy_lock`` (plugins/module_utils/deploy_lock.py,
here ``specdeploy.node.module_utils.deploy_lock``); this file is only its parser and output.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specdeploy.node.module_utils.deploy_lock import acquire, alive, read_owner, release, whoami


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specdeploy.node.release.deploy_lock", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("acquire", help="take the node's deploy lock (on the node)")
    p.add_argument("--root", required=True, type=Path)
    p.add_argument("--owner-json", required=True)
    p.add_argument("--stale-after", type=float, default=4 * 3600.0)
    p.add_argument("--break-token", help="remove a lock with this token (its owner is gone)")
    p = sub.add_parser("release", help="give the lock back (on the node)")
    p.add_argument("--root", required=True, type=Path)
    p.add_argument("--token", required=True)
    p = sub.add_parser("show", help="print the lock's owner (on the node)")
    p.add_argument("--root", required=True, type=Path)
    p = sub.add_parser("whoami", help="the owner record of this run (on the controller)")
    p.add_argument("--purpose", default="deploy")
    p = sub.add_parser("alive", help="does the owner still run (on the controller)")
    p.add_argument("--owner-json", required=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "acquire":
            result = acquire(
                args.root, json.loads(args.owner_json), args.stale_after, args.break_token
            )
            rc = 0 if result["acquired"] else 1
        elif args.command == "release":
            result = release(args.root, args.token)
            rc = 0 if result["released"] or "owner" not in result else 1
        elif args.command == "show":
            held = read_owner(args.root)
            result = {"changed": False, "held": held is not None, "owner": held}
            rc = 0
        elif args.command == "whoami":
            result = whoami(args.purpose)
            rc = 0
        else:
            result = {"changed": False, "alive": alive(json.loads(args.owner_json))}
            rc = 0
    except (OSError, ValueError) as error:
        print(json.dumps({"changed": False, "error": f"{type(error).__name__}: {error}"}))
        return 2
    print(json.dumps(result, sort_keys=True))
    return rc


if __name__ == "__main__":
    sys.exit(main())
