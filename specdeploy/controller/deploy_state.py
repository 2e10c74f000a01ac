"""What a node's deploy state is, by name: for `make status`, and for the clean-up that
`make deploy` / `make rollback` run after an interrupted ansible-playbook (Ctrl-C: exit 99).

States (one word each, then a sentence for the operator):

* ``idle``: no deploy lock; nothing runs on the node.
* ``running``: a deploy or rollback of this controller holds the lock and its ansible-playbook
  still runs (or one of another controller, which only that controller can tell).
* ``interrupted``: the lock is held by a run of this controller whose ansible-playbook is gone
  (Ctrl-C, killed, crashed): the node is where that run stopped. Never shown as running: the
  next deploy or rollback breaks such a lock at once, and the clean-up below ends it.
* ``rolled-back`` / ``kept`` / ``unvalidated``: how the clean-up after an interrupted run left
  the node (recorded in the current release's manifest as ``interrupted``): rolled back to the
  release that served before, because the interrupted run had switched to a release it never
  validated; kept, because ``current`` is a validated release; or, with nothing earlier to go
  back to (a first deploy), the new release left serving, not validated, said so.

    python -m specdeploy.controller.deploy_state decide --node N --lock-json J
        --current-json J [--previous ID]      # the clean-up's plan for one node
    python -m specdeploy.controller.deploy_state show --nodes-json J   # the status column

Both print JSON (decide: {"state", "action", "message"}; show: {node: text}). Exit 0, or 2 on
bad input. ``action``: ``none`` (not interrupted), ``unlock`` (give back the dead run's lock,
change nothing else), ``rollback`` (to ``--previous``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from specdeploy.node import cli, jsontext
from specdeploy.node.module_utils.deploy_lock import alive, describe

PASSED = ("pass", "waived")  # a validation that let the release serve


def validated_since_activation(manifest: dict[str, Any]) -> bool:
    """Whether the release passed a validation after it was last activated (its status is
    ``active`` from the switch on, before any check ran: that alone proves nothing), or a
    rollback's verify did (the release, validated when it served before, found unchanged on
    the node and answering its smoke check): a rollback activates without validating again."""
    activated = str(
        manifest.get("activated_at") or (manifest.get("last_activation") or {}).get("at") or ""
    )
    last = manifest.get("last_validation")
    passed = isinstance(last, dict) and last.get("status") in PASSED
    if passed and str(last.get("at") or "") >= activated:  # type: ignore[union-attr]
        return True
    rollback = manifest.get("last_rollback")
    return (
        isinstance(rollback, dict)
        and rollback.get("smoke") == "pass"
        and str(rollback.get("at") or "") >= activated
    )


def lock_state(owner: dict[str, Any] | None) -> tuple[str, str]:
    """(state, text) of a node's lock alone: idle, running or interrupted."""
    if not owner:
        return "idle", "-"
    who = describe(owner, None)
    running = alive(owner)
    if running is False:
        return "interrupted", (
            f"INTERRUPTED: {who} is gone, its lock left behind (not running; the next deploy "
            "or rollback breaks it)"
        )
    if running is None:
        return "running", f"{who} (another controller's run: only it can tell whether it runs)"
    return "running", f"running: {who}"


def decide(
    node: str, owner: dict[str, Any] | None, current: dict[str, Any], previous: str | None
) -> dict[str, str]:
    """The clean-up's plan for a node after an interrupted run (see the module doc)."""
    state, text = lock_state(owner)
    if state != "interrupted":
        return {"state": state, "action": "none", "message": f"{node}: {text}"}
    release = current.get("release_id") or current.get("current")
    status = "validated" if validated_since_activation(current) else "not validated since its "
    status += "" if status == "validated" else f"activation at {current.get('activated_at', '?')}"
    run = f"the interrupted {owner.get('purpose', 'deploy') if owner else 'run'}"
    if not release:
        return {
            "state": "kept",
            "action": "unlock",
            "message": f"{node}: {run} had switched nothing (no release is current); its "
            "lock is given back",
        }
    if validated_since_activation(current):
        return {
            "state": "kept",
            "action": "unlock",
            "message": f"{node}: {run} left release {release} current, which is validated; "
            "it stays, the lock is given back",
        }
    if previous:
        return {
            "state": "rolled-back",
            "action": "rollback",
            "message": f"{node}: {run} left release {release} current without validating it "
            f"({status}); rolled back to {previous}, the release that served before",
        }
    return {
        "state": "unvalidated",
        "action": "unlock",
        "message": f"{node}: {run} left release {release} current without validating it "
        f"({status}) and nothing earlier to go back to: it serves UNVALIDATED; run "
        "make deploy again to validate it",
    }


def show(nodes: list[dict[str, Any]]) -> dict[str, str]:
    """The DEPLOY column of `make status` per node: the lock's state, else how the last
    interrupted run was ended (when that is newer than the release's last validation)."""
    out: dict[str, str] = {}
    for n in nodes:
        state, text = lock_state(n.get("lock"))
        manifest = n.get("manifest") or {}
        ended = manifest.get("interrupted") if isinstance(manifest, dict) else None
        validated = (manifest.get("last_validation") or {}).get("at") or ""
        if state == "idle" and isinstance(ended, dict) and str(ended.get("at", "")) > validated:
            text = f"{str(ended.get('state', 'interrupted')).upper()} at {ended.get('at')}: "
            text += str(ended.get("message", ""))
        out[str(n.get("node"))] = text
    return out


def _object(text: str, flag: str) -> Any:
    try:
        return jsontext.loads(text)
    except ValueError as e:
        raise ValueError(f"{flag}: not JSON ({e})") from None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="deploy-state", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("decide", help="the clean-up's plan for one node after an interruption")
    d.add_argument("--node", required=True)
    d.add_argument("--lock-json", required=True, help="the lock's owner record, or null")
    d.add_argument("--current-json", required=True, help="the current release's manifest")
    d.add_argument("--previous", default="", help="the release before current ('' none)")
    s = sub.add_parser("show", help="the DEPLOY column of make status")
    s.add_argument("--nodes-json", required=True, help="[{node, lock, manifest}]")
    args = p.parse_args(argv)
    try:
        if args.command == "decide":
            owner = _object(args.lock_json, "--lock-json")
            current = _object(args.current_json, "--current-json")
            if owner is not None and not isinstance(owner, dict):
                raise ValueError("--lock-json: not an object or null")
            if not isinstance(current, dict):
                raise ValueError("--current-json: not an object")
            print(json.dumps(decide(args.node, owner, current, args.previous or None)))
        else:
            nodes = _object(args.nodes_json, "--nodes-json")
            if not isinstance(nodes, list) or not all(isinstance(n, dict) for n in nodes):
                raise ValueError("--nodes-json: not a list of objects")
            print(json.dumps(show(nodes)))
    except ValueError as e:
        return cli.usage_error("deploy-state", e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
