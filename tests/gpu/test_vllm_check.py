"""The GPU tier's first-call check tells a missing dependency from a stub's side effect, and
refuses a unit that does not start `vllm serve` (runs on the controller, no GPU, no vLLM).

.venv/bin/python -m pytest tests/gpu/test_vllm_check.py
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import vllm_check  # noqa: E402


def test_a_module_missing_outside_vllm_is_a_missing_dependency() -> None:
    assert vllm_check.missing_dependency("ModuleNotFoundError: No module named 'cbor2'")
    assert vllm_check.missing_dependency("ModuleNotFoundError: No module named 'zmq.asyncio'")


def test_errors_a_stub_can_cause_are_not_missing_dependencies() -> None:
    # a kernel library not yet unpacked, or anything else: the full check decides
    assert not vllm_check.missing_dependency(
        "ModuleNotFoundError: No module named 'vllm._C_stable_libtorch'"
    )
    assert not vllm_check.missing_dependency("AttributeError: '_OpNamespace' '_C' object")
    assert not vllm_check.missing_dependency("")


def test_a_unit_that_does_not_run_vllm_serve_fails_the_check(tmp_path: Path) -> None:
    d = tmp_path / "other"
    d.mkdir()
    (d / "vllm.service").write_text(
        "[Service]\nExecStart=/opt/r/venv/bin/python -m http.server 8011\n"
    )
    out = vllm_check.check_unit(d, [1, 16], engine_config=False)
    assert out["ok"] is False
    assert "vllm serve" in out["error"]
