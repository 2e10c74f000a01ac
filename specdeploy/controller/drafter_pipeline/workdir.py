"""The work directory: one state file per step, chunks written atomically, progress with ETA.

Layout (``workdir``)::

    generate/state.json  generate/chunk-00000.jsonl ...
    extract/state.json   extract/chunk-00000.safetensors ...
    convention/state.json
    train/state.json     train/checkpoint.pt (the training worker's own resume point)
    convert/state.json   drafter/ (config.json, model.safetensors)
    provenance/state.json

A chunk exists only complete: it is written to ``NAME.tmp``, fsynced and renamed, so a killed
run leaves at most a ``.tmp`` that the next run overwrites. A step's state file says ``done``
only after its last chunk; a rerun skips finished steps and, inside a step, finished chunks.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from specdeploy.node.module_utils import progress_line


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode())


def chunk_name(index: int, suffix: str) -> str:
    return f"chunk-{index:05d}{suffix}"


class StepState:
    """``<workdir>/<step>/state.json``: status, the inputs hash, counters, result."""

    def __init__(self, workdir: Path, step: str) -> None:
        self.dir = workdir / step
        self.path = self.dir / "state.json"
        self.step = step
        self.data: dict[str, Any] = {}
        if self.path.is_file():
            self.data = json.loads(self.path.read_text())

    @property
    def done(self) -> bool:
        return self.data.get("status") == "done"

    def begin(self, inputs_hash: str) -> None:
        """Start or resume; refuse to mix chunks made with other inputs."""
        old = self.data.get("inputs")
        if old is not None and old != inputs_hash:
            raise StaleStepError(
                f"{self.step}: {self.dir} was made with other settings (inputs {old}, now "
                f"{inputs_hash}); remove {self.dir} to redo the step with the new ones"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        self.data.update({"step": self.step, "inputs": inputs_hash, "status": "running"})
        self.data.setdefault("started", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        self.save()

    def update(self, **values: Any) -> None:
        self.data.update(values)
        self.save()

    def finish(self, result: dict[str, Any]) -> None:
        self.data.update(
            {
                "status": "done",
                "result": result,
                "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        )
        self.save()

    def save(self) -> None:
        atomic_write_json(self.path, self.data)

    @property
    def result(self) -> dict[str, Any]:
        return dict(self.data.get("result") or {})


class StaleStepError(RuntimeError):
    pass


class Progress:
    """One line per update in the format every wait uses (specdeploy.node.module_utils.
    progress_line): ``[drafter] train: epoch 1/3, 12/81 sequences 15% (40.1 s in; ETA 3 min
    10 s from this run's 18.0 sequences/min)``; work done by an earlier, interrupted run is
    counted as done but not in the rate."""

    def __init__(
        self,
        step: str,
        total: int,
        unit: str,
        done: int = 0,
        out: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.step, self.total, self.unit = step, total, unit
        self.start_done = done
        self.done = done
        self.clock = clock
        self.t0 = clock()
        self.out = out or sys.stdout
        self.extra = ""

    def line(self) -> str:
        elapsed = self.clock() - self.t0
        new = self.done - self.start_done
        pct = 100.0 * self.done / self.total if self.total else 100.0
        rate = new / elapsed if elapsed > 0 and new > 0 else 0.0
        resumed = f"; {self.start_done} resumed from an earlier run" if self.start_done else ""
        what = f"{self.extra}{self.done}/{self.total} {self.unit}"
        return progress_line.line(
            f"[drafter] {self.step}",
            what,
            elapsed,
            percent=pct,
            eta_s=(self.total - self.done) / rate if rate > 0 else None,
            basis=f"this run's {rate * 60:.1f} {self.unit}/min{resumed}",
            no_eta=f"no {self.unit} finished yet in this run{resumed}",
        )

    def advance(self, n: int = 1, extra: str = "") -> None:
        self.done += n
        self.extra = f"{extra}, " if extra else ""
        print(self.line(), file=self.out, flush=True)
