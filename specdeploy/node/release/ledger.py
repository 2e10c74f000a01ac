"""The release ledger's command line: ``python -m specdeploy.node.release.ledger`` on a node.

The logic is the collection's module_utils ``release`` (plugins/module_utils/release.py, here
``specdeploy.node.module_utils.release``); this file is only its argument parser and output.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specdeploy.node.module_utils.release import (
    STATUSES,
    ReleaseError,
    activate,
    deactivate,
    init_release,
    previous_release,
    prune,
    record_start,
    rollback_target,
    status,
    update_release,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specdeploy.node.release.ledger", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--root", required=True, type=Path, help="the toolkit root on the node")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("init", help="create a release manifest (status building)")
    p.add_argument("release_id")
    p.add_argument("--inputs-json", required=True, help="what defines the release, as JSON")
    p.add_argument(
        "--busy-timeout",
        type=float,
        default=300.0,
        help="wait this long for processes an interrupted run left in a half-built release",
    )
    p = sub.add_parser("update", help="merge fields into a manifest, optionally change status")
    p.add_argument("release_id")
    p.add_argument("--fields-json", default="{}")
    p.add_argument("--status", choices=STATUSES)
    p.add_argument("--reason")
    p.add_argument("--from-status", choices=STATUSES, help="change status only from this one")
    p.add_argument(
        "--failure-stage",
        choices=("build", "serve"),
        help="with --status failed: build (rebuilt on retry) or serve (reused on retry)",
    )
    p = sub.add_parser("record-start", help="append a start record to the manifest")
    p.add_argument("release_id")
    p.add_argument("--start-json", required=True)
    p = sub.add_parser("activate", help="switch `current` and append to the ledger")
    p.add_argument("release_id")
    p.add_argument("--action", default="deploy")
    p = sub.add_parser("deactivate", help="remove `current` (nothing serves) and record it")
    p.add_argument("--action", default="stop")
    sub.add_parser("previous", help="print the release before `current` in the ledger")
    p = sub.add_parser("target", help="the release a rollback activates (refuses with a reason)")
    p.add_argument("--to", default="", help="a release id; empty: the previous one")
    p = sub.add_parser("prune", help="remove old releases")
    p.add_argument("--keep", type=int, required=True)
    sub.add_parser("status", help="current, previous, releases and the ledger's tail")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    root: Path = args.root
    try:
        if args.command == "init":
            result = init_release(
                root, args.release_id, json.loads(args.inputs_json), args.busy_timeout
            )
        elif args.command == "update":
            result = update_release(
                root,
                args.release_id,
                json.loads(args.fields_json),
                args.status,
                args.reason,
                args.from_status,
                args.failure_stage,
            )
        elif args.command == "record-start":
            result = record_start(root, args.release_id, json.loads(args.start_json))
        elif args.command == "activate":
            result = activate(root, args.release_id, args.action)
        elif args.command == "deactivate":
            result = deactivate(root, args.action)
        elif args.command == "previous":
            previous = previous_release(root)
            if previous is None:
                print(
                    json.dumps(
                        {
                            "changed": False,
                            "previous": None,
                            "message": "no earlier release to go back to",
                        }
                    )
                )
                return 1
            result = {"changed": False, "previous": previous}
        elif args.command == "target":
            result = rollback_target(root, args.to)
        elif args.command == "prune":
            result = prune(root, args.keep)
        else:
            result = status(root)
    except ReleaseError as error:
        print(json.dumps({"changed": False, "error": str(error)}))
        return 1
    except (OSError, ValueError) as error:
        print(json.dumps({"changed": False, "error": f"{type(error).__name__}: {error}"}))
        return 2
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
