"""The drafter proof's H200 recording (tests/fixtures/vllm-0.20.2-drafter-proof, issue 17.4)
read back with the toolkit's own parsers: what docs/drafter-gpu.md states follows from the raw
/metrics texts, engine logs and provenance files, not only from the summary JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdeploy.controller import drafter_provenance
from specdeploy.node.service import engine_log
from specdeploy.node.validation import metrics

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "vllm-0.20.2-drafter-proof"
RUNS = [
    (stage, tag)
    for stage in ("serve", "serve-chat")
    for tag in ("trained-A", "other-target-B", "shifted-A")
]


def run_dir(stage: str, tag: str) -> Path:
    return FIX / stage / "runs" / tag


@pytest.mark.parametrize(("stage", "tag"), RUNS)
def test_metrics_text_engine_log_and_check_agree(stage: str, tag: str) -> None:
    d = run_dir(stage, tag)
    acc = json.loads((d / "acceptance.json").read_text())["acceptance"]
    # the server served only the check's window: the /metrics counters since its start are
    # the check's counts, and give its per-position acceptance
    snap = metrics.snapshot((d / "metrics.txt").read_text(), "tiny-dsv3")
    assert snap.num_drafts == acc["num_drafts"]
    assert list(snap.accepted_per_pos) == acc["accepted_per_position"]
    rates = [a / snap.num_drafts for a in snap.accepted_per_pos]
    assert rates == pytest.approx(acc["per_position_acceptance"], abs=1e-12)
    # vLLM's own log lines of the same window say the same, to their printed precision
    log = engine_log.parse((d / "engine.log").read_text(errors="replace"))
    total = engine_log.combine_spec_lines(log.spec_lines)
    assert total is not None
    assert total["per_position"] == pytest.approx(acc["per_position_acceptance"], abs=2e-3)
    assert total["mean_acceptance_length"] == pytest.approx(acc["mean_acceptance_length"], 1e-3)
    # and the engine fed the layer ids the drafter's config names
    cfg = json.loads((FIX / stage / "proof-serve.json").read_text())["runs"][tag]["aux_layer_ids"]
    assert list(log.aux_layers or ()) == cfg


def test_the_trained_drafter_accepts_and_another_targets_collapses() -> None:
    def mal(stage: str, tag: str) -> float:
        acc = json.loads((run_dir(stage, tag) / "acceptance.json").read_text())["acceptance"]
        return float(acc["mean_acceptance_length"])

    # the claims of docs/drafter-gpu.md, from the raw results
    assert mal("serve", "trained-A") > 2.0
    assert mal("serve", "other-target-B") < 1.05
    assert mal("serve", "trained-A") - mal("serve", "shifted-A") < 0.25
    assert mal("serve", "trained-A") - mal("serve-chat", "trained-A") > 0.8


def test_recorded_provenance_loads_and_names_the_convention() -> None:
    for name, target in (("A", "target-A"), ("B", "target-B")):
        path = FIX / f"pipeline-{name}" / f"drafter-{name}" / drafter_provenance.FILE_NAME
        prov = drafter_provenance.read(path.parent)
        assert prov is not None
        assert prov.aux_layer_ids == [1, 2, 3]
        assert prov.aux_offset == "input-of-layer"
        assert prov.vllm_version == "0.20.2"
        assert prov.target_model.endswith(target)
