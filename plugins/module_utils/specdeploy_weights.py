"""Tensor names and shapes of a checkpoint, read from its headers without loading weights.

The drafter check needs to know whether an EAGLE-3 drafter with a reduced draft vocabulary
ships its ``d2t`` table (draft id -> target id offset), and its shape. Read from the
safetensors index and the safetensors headers (8-byte little-endian length, then JSON) or, for
a torch zip checkpoint, the tensor names in its pickle (no shapes). Used on the controller
(``python -m specdeploy.controller.drafter --drafter DIR``) and on the node by the preflight's
probe module (as ``ansible.module_utils.specdeploy_weights``), so the deploy reads the same.
"""

from __future__ import annotations

import json
import os
import struct
import zipfile
from typing import Any

MAX_HEADER_BYTES = 100_000_000
# The tensors the drafter check reads (a probe returns only these, not a model's thousands).
DRAFTER_TENSORS = ("d2t", "t2d", "fc.weight")


def safetensors_header(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > MAX_HEADER_BYTES:
                return None
            header = json.loads(handle.read(length))
    except (OSError, struct.error, ValueError):
        return None
    return header if isinstance(header, dict) else None


def _shapes(header: dict[str, Any] | None) -> dict[str, list[int] | None]:
    return {
        name: list(value.get("shape", [])) if isinstance(value, dict) else None
        for name, value in (header or {}).items()
        if name != "__metadata__"
    }


def tensor_shapes(
    model_dir: str | os.PathLike[str],
) -> tuple[dict[str, list[int] | None] | None, str]:
    """({tensor name: shape or None}, where it was read); (None, "") when there are no weights."""
    directory = os.fspath(model_dir)
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.isfile(index):
        try:
            with open(index, encoding="utf-8") as handle:
                weight_map = json.load(handle).get("weight_map", {})
        except (OSError, ValueError, AttributeError):
            weight_map = {}
        names: dict[str, list[int] | None] = dict.fromkeys(weight_map, None)
        for shard in sorted(set(weight_map.values())):
            names.update(_shapes(safetensors_header(os.path.join(directory, shard))))
        return names, os.path.basename(index)
    try:
        entries = sorted(os.listdir(directory))
    except OSError:
        return None, ""
    shards = [e for e in entries if e.endswith(".safetensors")]
    if shards:
        found: dict[str, list[int] | None] = {}
        for shard in shards:
            found.update(_shapes(safetensors_header(os.path.join(directory, shard))))
        return found, ", ".join(shards)
    for entry in (e for e in entries if e.endswith(".bin")):
        path = os.path.join(directory, entry)
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                pickle = next((n for n in archive.namelist() if n.endswith("data.pkl")), None)
                raw = archive.read(pickle) if pickle else b""
            return (
                {n: None for n in DRAFTER_TENSORS if n.encode() in raw},
                entry + " (tensor names from its pickle)",
            )
    return None, ""


def drafter_tensors(model_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """What the drafter check needs of a drafter's weights, small enough for a module result:
    {"tensors": {name: shape}, "where": str} with only DRAFTER_TENSORS, or None (no weights)."""
    shapes, where = tensor_shapes(model_dir)
    if shapes is None:
        return None
    return {"tensors": {n: s for n, s in shapes.items() if n in DRAFTER_TENSORS}, "where": where}
