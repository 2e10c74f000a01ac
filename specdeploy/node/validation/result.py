"""The validation result (``specdeploy.validation/1``, docs/validation-schema.md): built here
and nowhere else.

``spec-check`` (specdeploy.node.validation.check) fills one after measuring. When nothing could be
measured at all (the checker died before writing, the node was unreachable, its play failed),
the roles call this module's CLI for the same shape with ``status: error`` and exit code 2, so
the reports and the history never meet a hand-built copy:

    python -m specdeploy.node.validation.result not-measured --node NAME --reason TEXT \
        [--release ID] [--base-url URL] [--served-model-name NAME] [--out FILE [--keep]]

It prints the result as JSON; ``--out`` writes it too (``--keep``: only where no result is).
Exit codes: 0 written, 2 usage or environment error (an unwritable --out).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import sys
import uuid
from pathlib import Path
from typing import Any

from specdeploy.node import cli, jsontext
from specdeploy.node.module_utils.specdeploy_fsio import atomic_write

SCHEMA = "specdeploy.validation/1"
SCHEMA_PREFIX = "specdeploy.validation/"


def read_result(path: str | Path) -> dict[str, Any]:
    """The validation result in a file; ValueError ``"PATH: why"`` for one that cannot be read
    (not UTF-8, not JSON, NaN) or is not a result (a list, another schema, no node): a
    non-result must never become samples or rows labelled ``node="None"``."""
    try:
        d = jsontext.parse_object(Path(path).read_text(encoding="utf-8"), str(path))
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: {cli.reason(exc)}") from None
    return check_result(d, str(path))


def check_result(d: dict[str, Any], where: str) -> dict[str, Any]:
    """``d`` when it is a validation result, else ValueError naming ``where``."""
    if not str(d.get("schema", "")).startswith(SCHEMA_PREFIX):
        raise ValueError(f"{where}: not a specdeploy validation result (schema field)")
    if not isinstance(d.get("node"), str) or not d["node"]:
        raise ValueError(f"{where}: a validation result without a node name")
    return d


def now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def new_result(
    mode: str,
    node: str,
    release: str | None,
    base_url: str,
    served_model_name: str,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A result before anything is measured: passing, nothing filled in yet."""
    return {
        "schema": SCHEMA,
        "run_id": uuid.uuid4().hex,
        "mode": mode,
        "status": "pass",
        "exit_code": 0,
        "reasons": [],
        "node": node,
        "release": release,
        "labels": dict(labels or {}),
        "base_url": base_url,
        "served_model_name": served_model_name,
        "server_version": None,
        "started_at": now(),
        "finished_at": None,
        "duration_s": None,
        "smoke": None,
        "acceptance": None,
        "speed": None,
        "previous": None,
        "gates": None,
    }


def not_measured(
    node: str,
    reason: str,
    release: str | None = None,
    base_url: str = "",
    served_model_name: str = "",
) -> dict[str, Any]:
    """The result of a run that measured nothing: status error, exit code 2, the reason."""
    result = new_result("all", node, release, base_url, served_model_name)
    result.update(
        status="error",
        exit_code=2,
        reasons=[f"could not measure: {reason}"],
        finished_at=result["started_at"],
        duration_s=0,
    )
    return result


def from_throughput(doc: dict[str, Any], where: str = "baseline") -> dict[str, Any]:
    """A throughput/1 document measured WITHOUT speculation (a deploy's baseline start) as the
    validation result the controller's history keeps: mode ``baseline``, passed, its levels as
    ``speed.levels`` with ``speculative: false``, so the next release of the same node, model,
    parallel sizes and hardware takes its baseline from the history (no second baseline start)
    and `make advise` finds one. Deterministic ``run_id``: recording it twice stores it once.
    ValueError naming ``where`` for a document that is no such measurement."""
    from specdeploy.node.validation import speed  # node code; imports nothing from here

    if doc.get("schema") != speed.THROUGHPUT_SCHEMA:
        raise ValueError(f"{where}: not a {speed.THROUGHPUT_SCHEMA} document")
    if doc.get("speculative") is not False:
        raise ValueError(f"{where}: not measured without speculation; not a baseline")
    node, model = doc.get("node"), doc.get("model")
    if not isinstance(node, str) or not node or not isinstance(model, str) or not model:
        raise ValueError(f"{where}: names no node or model")
    levels = []
    rows = doc.get("levels") if isinstance(doc.get("levels"), dict) else {}
    for c, row in sorted(rows.items(), key=lambda kv: int(kv[0]) if str(kv[0]).isdigit() else 0):
        tps = speed.level_figure(f"{where}: level c={c}", row)  # SpeedInputError: a ValueError
        if tps is not None:
            levels.append({**row, "concurrency": int(c), "output_tps": tps})
    if not levels:
        raise ValueError(f"{where}: no measured level")
    labels = {str(k): str(v) for k, v in (doc.get("labels") or {}).items()}
    result = new_result("baseline", node, doc.get("release"), "", model, labels)
    at = str(doc.get("measured_at") or result["started_at"])
    result.update(
        run_id=hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32],
        started_at=at,
        finished_at=at,
        speed={
            "baseline_source": None,
            "speculative": False,
            "waiver": None,
            "levels": levels,
            "status": "not_applicable",
            "failed_levels": [],
            "message": "no speculation (a baseline start): this release's throughput is the "
            "baseline",
        },
    )
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="spec-result", description=__doc__.split("\n")[0])
    ap.add_argument("kind", choices=["not-measured"], help="which result to build")
    for flag, required, default, meaning in (
        ("--node", True, None, "the node's inventory name"),
        ("--reason", True, None, "why nothing could be measured"),
        ("--release", False, None, "the release id ('' or absent: unknown)"),
        ("--base-url", False, "", "where the server would answer"),
        ("--served-model-name", False, "", "the model name it would serve"),
    ):
        ap.add_argument(flag, required=required, default=default, help=meaning)
    ap.add_argument("--out", type=Path, help="also write it here (atomically)")
    ap.add_argument("--keep", action="store_true", help="leave an existing --out as it is")
    args = ap.parse_args(argv)
    result = not_measured(
        args.node, args.reason, args.release or None, args.base_url, args.served_model_name
    )
    text = json.dumps(result, indent=2)
    if args.out is not None and not (args.keep and args.out.exists()):
        try:
            atomic_write(args.out, text + "\n", mode=0o644)
        except OSError as exc:
            print(f"spec-result: error: --out {args.out}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
