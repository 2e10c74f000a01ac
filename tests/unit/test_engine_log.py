"""specdeploy.node.service.engine_log on real vLLM 0.20.2 engine logs (recorded on an H200)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdeploy.node.service import engine_log

FIX = Path(__file__).resolve().parents[1] / "fixtures"
RECIPE = FIX / "vllm-0.20.2"  # the first recordings (gpu recipe, 2026-12-02)
TIER = FIX / "vllm-0.20.2-gpu-tier"  # the GPU tier's own recordings


def _read(path: Path) -> str:
    if not path.exists():
        pytest.skip(f"fixture {path} not recorded")
    return path.read_text(errors="replace")


def test_default_selection_with_eagle3_drafter() -> None:
    text = _read(RECIPE / "server-spec.log")
    backends = engine_log.parse_backends(text)
    names = [b.name for b in backends]
    assert names == ["FLASH_ATTN", "FLASH_ATTN_MLA"] or names == ["FLASH_ATTN_MLA", "FLASH_ATTN"]
    tgt, dft = engine_log.target_and_drafter(backends)
    assert (tgt, dft) == ("FLASH_ATTN_MLA", "FLASH_ATTN")
    mla = next(b for b in backends if b.mla)
    assert not mla.forced
    assert mla.candidates == ("FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA")
    assert mla.process == "EngineCore" and mla.pid is not None


def test_forced_triton_mla_without_spec() -> None:
    backends = engine_log.parse_backends(_read(RECIPE / "server-nospec-forced-tritonmla.log"))
    assert [(b.name, b.forced, b.mla) for b in backends] == [("TRITON_MLA", True, True)]


def test_forced_triton_mla_with_llama_drafter_is_refused() -> None:
    text = _read(RECIPE / "server-spec-forced-tritonmla-FAILS.log")
    refusals = engine_log.parse_refusals(text)
    assert len(refusals) == 1
    assert refusals[0].name == "TRITON_MLA"
    assert refusals[0].reasons == ("non-MLA not supported",)
    # the target's MLA layers took the forced backend before the drafter failed
    assert engine_log.target_and_drafter(engine_log.parse_backends(text)) == ("TRITON_MLA", None)


def test_spec_line_and_aux_layers() -> None:
    s = engine_log.parse(_read(RECIPE / "server-spec.log"))
    assert s.aux_layers == (1, 2, 3)
    assert len(s.spec_lines) == 1
    line = s.spec_lines[0]
    assert (line.accepted, line.drafted) == (344, 516)
    assert line.per_position == (0.802, 0.651, 0.547)
    assert line.mean_acceptance_length == pytest.approx(3.00)
    assert line.num_drafts == pytest.approx(172)
    tot = engine_log.combine_spec_lines(s.spec_lines)
    assert tot is not None
    assert tot["mean_acceptance_length"] == pytest.approx(1 + 344 / 172)
    assert tot["draft_acceptance_rate"] == pytest.approx(line.draft_acceptance_rate / 100, abs=1e-3)


def test_no_spec_log_has_no_spec_lines() -> None:
    s = engine_log.parse(_read(RECIPE / "server-nospec.log"))
    assert s.spec_lines == [] and s.aux_layers is None
    assert engine_log.combine_spec_lines(s.spec_lines) is None


def test_combine_weights_per_position_by_drafts() -> None:
    text = "\n".join(
        f"SpecDecoding metrics: Mean acceptance length: {1 + a / (d / 2):.2f}, "
        "Accepted throughput: 1.00 tokens/s, Drafted throughput: 1.00 tokens/s, "
        f"Accepted: {a} tokens, Drafted: {d} tokens, Per-position acceptance rate: {pos}, "
        f"Avg Draft acceptance rate: {100 * a / d:.1f}%"
        for a, d, pos in [(10, 20, "0.600, 0.400"), (2, 40, "0.100, 0.000")]
    )
    lines = engine_log.parse_spec_lines(text)
    tot = engine_log.combine_spec_lines(lines)
    assert tot is not None
    assert (tot["accepted"], tot["drafted"], tot["num_drafts"]) == (12, 60, 30)
    assert tot["per_position"] == pytest.approx([(0.6 * 10 + 0.1 * 20) / 30, 0.4 * 10 / 30])
    assert tot["mean_acceptance_length"] == pytest.approx(1 + 12 / 30)


def test_unrelated_backend_lines_are_not_attention() -> None:
    text = (
        "(EngineCore pid=1) INFO [unquantized.py:286] Using TRITON Unquantized MoE backend out of "
        "potential backends: ['FlashInfer TRTLLM', 'TRITON'].\n"
        "(EngineCore pid=1) INFO [cuda.py:308] Using AttentionBackendEnum.FLASHINFER backend.\n"
    )
    s = engine_log.parse(text)
    assert [b.name for b in s.backends] == ["FLASHINFER"]
    assert s.moe_backends == ["TRITON"]


def test_tier_recordings_match_their_results() -> None:
    """Each recorded GPU-tier engine log gives the backends its results.json recorded."""
    results = TIER / "results.json"
    if not results.exists():
        pytest.skip("GPU tier recordings not present")
    runs = json.loads(results.read_text())["runs"]
    checked = 0
    for tag, r in runs.items():
        log = TIER / "runs" / tag / "engine.log"
        if not log.exists() or "target_backend" not in r:
            continue
        tgt, dft = engine_log.target_and_drafter(engine_log.parse_backends(log.read_text()))
        assert (tgt, dft) == (r["target_backend"], r["drafter_backend"]), tag
        checked += 1
    assert checked > 0


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = RECIPE / "server-spec.log"
    _read(src)
    assert engine_log.main([str(src), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["aux_layers"] == [1, 2, 3]
    empty = tmp_path / "empty.log"
    empty.write_text("nothing here\n")
    assert engine_log.main([str(empty)]) == 1
    assert engine_log.main([str(tmp_path / "missing.log")]) == 2
