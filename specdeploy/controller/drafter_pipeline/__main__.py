"""python -m specdeploy.controller.drafter_pipeline run|status --config FILE [--until STEP] [--json]

Trains an EAGLE-3 drafter for the target a node serves (see __init__.py). Exit 0 done, 1 a
check failed (the hidden-state convention), 2 usage or environment error (config, disk space,
a worker that failed, a work directory made with other settings).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specdeploy.controller.drafter_pipeline import pipeline
from specdeploy.controller.drafter_pipeline.config import ConfigError, load
from specdeploy.controller.drafter_pipeline.convention import ConventionMismatch
from specdeploy.controller.drafter_pipeline.extract import DiskSpaceError
from specdeploy.controller.drafter_pipeline.generate import GenerateError
from specdeploy.controller.drafter_pipeline.launch import WorkerError
from specdeploy.controller.drafter_pipeline.workdir import StaleStepError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specdeploy.controller.drafter_pipeline")
    ap.add_argument("command", choices=["run", "status"])
    ap.add_argument("--config", type=Path, required=True, help="the pipeline's knobs (YAML)")
    ap.add_argument("--until", choices=pipeline.STEPS, default=pipeline.PROVENANCE)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        cfg = load(a.config)
        if a.command == "status":
            print(pipeline.dumps(pipeline.status(cfg)))
            return 0
        res = pipeline.run(cfg, a.until)
    except ConventionMismatch as exc:
        return fail(a.json, f"convention check failed: {exc}", 1)
    except (
        ConfigError,
        DiskSpaceError,
        GenerateError,
        WorkerError,
        StaleStepError,
        OSError,
    ) as exc:
        return fail(a.json, str(exc), 2)
    if a.json:
        print(pipeline.dumps(res))
    else:
        last = list(res)[-1]
        print(f"[drafter] done through {last}: {json.dumps(res[last], default=str)[:600]}")
    return 0


def fail(as_json: bool, msg: str, code: int) -> int:
    if as_json:
        print(json.dumps({"error": msg, "exit": code}))
    else:
        print(f"error: {msg}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
