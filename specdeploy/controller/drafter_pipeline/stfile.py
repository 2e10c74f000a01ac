"""Read safetensors files with the standard library (header, and rows of a tensor as floats).

The controller has no torch: the orchestrator counts extracted tokens and bytes from the
headers and the convention check compares rows of hidden states (bf16/f16/f32) here.
"""

from __future__ import annotations

import json
import struct
from array import array
from pathlib import Path
from typing import Any

DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I64": 8, "I32": 4, "BOOL": 1}


class SafetensorsFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        with path.open("rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            self.header: dict[str, Any] = json.loads(fh.read(n))
        self.data_start = 8 + n

    def shape(self, name: str) -> list[int]:
        return list(self.header[name]["shape"])

    def dtype(self, name: str) -> str:
        return str(self.header[name]["dtype"])

    def nbytes(self, name: str) -> int:
        lo, hi = self.header[name]["data_offsets"]
        return int(hi - lo)

    def _raw(self, name: str, start: int, length: int) -> bytes:
        lo, _ = self.header[name]["data_offsets"]
        with self.path.open("rb") as fh:
            fh.seek(self.data_start + lo + start)
            return fh.read(length)

    def ints(self, name: str) -> list[int]:
        dt = self.dtype(name)
        raw = self._raw(name, 0, self.nbytes(name))
        return list(array({"I64": "q", "I32": "i"}[dt], raw))

    def rows(self, name: str, first: int, count: int) -> list[float]:
        """Rows [first, first + count) of the first dimension, flattened, as floats."""
        dt = self.dtype(name)
        shape = self.shape(name)
        per_row = 1
        for d in shape[1:]:
            per_row *= d
        size = DTYPE_BYTES[dt]
        raw = self._raw(name, first * per_row * size, count * per_row * size)
        if dt == "F32":
            return list(array("f", raw))
        if dt == "BF16":
            u16 = array("H", raw)
            u32 = array("I", (x << 16 for x in u16))
            return list(array("f", u32.tobytes()))
        if dt == "F16":
            return list(struct.unpack(f"<{len(raw) // 2}e", raw))
        raise ValueError(f"{self.path}: {name} has dtype {dt}, not a float type")


def write(path: Path, tensors: dict[str, tuple[str, list[int], bytes]]) -> None:
    """A safetensors file from raw little-endian data (tests and the stdlib side)."""
    header: dict[str, Any] = {}
    off = 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        for _, _, data in tensors.values():
            fh.write(data)
