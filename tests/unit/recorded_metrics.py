"""Real vLLM 0.20.2 /metrics texts (tests/fixtures/vllm-0.20.2) the acceptance and metrics tests
read: with speculation, without, and with a random (untrained) drafter."""

from __future__ import annotations

from pathlib import Path

FIX = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "vllm-0.20.2"
SPEC = (FIX / "metrics-spec.txt").read_text()
NOSPEC = (FIX / "metrics-nospec.txt").read_text()
RANDOM = (FIX / "metrics-spec-random-drafter.txt").read_text()
