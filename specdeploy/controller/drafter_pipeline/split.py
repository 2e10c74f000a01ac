"""Which responses are held out of training (for the held-out acceptance): a hash of the
seed and the response's index, so the orchestrator and the training worker agree."""

from __future__ import annotations

import hashlib


def is_heldout(record: int, fraction: float, seed: int) -> bool:
    h = hashlib.sha256(f"{seed}:{record}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64 < fraction
