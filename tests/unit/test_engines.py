"""The engine facts (issue 29), fitted to real SGLang 0.5.15 output recorded on the H200."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from specdeploy.controller import engines

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.15-h200"


def test_sglang_metrics_parse_and_relate_to_vllms_definition():
    m = engines.parse_sglang_metrics((FIX / "metrics-spec.txt").read_text())
    assert m["num_steps"] == 3.0 and m["num_draft_tokens"] == 4.0
    acc = engines.acceptance_from_sglang(m["accept_length"], int(m["num_steps"]))
    # SGLang's own accept rate is (length - 1) / steps: the relation the module states.
    assert acc.rate == pytest.approx(m["accept_rate"])
    assert acc.per_position is None


def test_accept_log_lines_match_the_recorded_server_log():
    lines = (FIX / "server-spec-accept-lines.log").read_text().splitlines()
    found = [engines.ACCEPT_LOG.search(line) for line in lines]
    assert lines and all(found)
    for f in found:
        acc = engines.acceptance_from_sglang(float(f["len"]), 3)
        assert acc.rate == pytest.approx(float(f["rate"]), abs=0.01)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0.5, 4.5])
def test_bad_accept_length_is_a_one_line_error(bad):
    with pytest.raises(engines.EngineError, match="accept length"):
        engines.acceptance_from_sglang(bad, 3)


def test_sglang_argv_carries_the_eagle3_flags_and_metrics():
    spec = engines.SpecConfig("/srv/drafter", num_steps=3)
    server = ["python3", "-m", "sglang.launch_server"]
    argv = engines.sglang_argv(server, "/srv/t", "t", "127.0.0.1", 8000, 8, 32768, 0.85, spec,
                               attention_backend="triton",
                               disable_custom_all_reduce=True)  # fmt: skip
    pairs = dict(itertools.pairwise(argv))
    assert pairs["--speculative-algorithm"] == "EAGLE3"
    assert pairs["--speculative-draft-model-path"] == "/srv/drafter"
    assert pairs["--speculative-num-steps"] == "3"
    assert pairs["--speculative-eagle-topk"] == "1"
    assert pairs["--speculative-num-draft-tokens"] == "4"
    assert pairs["--tp-size"] == "8" and pairs["--attention-backend"] == "triton"
    assert "--enable-metrics" in argv and "--disable-custom-all-reduce" in argv
    base = engines.sglang_argv(["sgl"], "/srv/t", "t", "127.0.0.1", 8000, 8, 32768, 0.85, None)
    assert not any(a.startswith("--speculative") for a in base)


def test_per_position_gate_refused_on_sglang_only():
    gates = {"per_position_floors": [0.5, 0.3]}
    assert engines.refused_gates("vllm", gates) == []
    (line,) = engines.refused_gates("sglang", gates)
    assert "per_position_floors" in line and "unavailable on sglang" in line
    assert engines.refused_gates("sglang", {"per_position_floors": []}) == []


def test_aux_layer_shift_and_drafter_for_the_other_engine_refused():
    assert engines.served_aux_layers("vllm", "DeepseekV3ForCausalLM", [1, 2, 3]) == [1, 2, 3]
    assert engines.served_aux_layers("sglang", "DeepseekV3ForCausalLM", [1, 2, 3]) == [2, 3, 4]
    assert engines.served_aux_layers("sglang", "LlamaForCausalLM", [1, 2, 3]) == [1, 2, 3]
    (err,) = engines.check_drafter_engine("sglang", "DeepseekV3ForCausalLM", {})
    assert "exported for vllm" in err
    assert engines.check_drafter_engine("sglang", "DeepseekV3ForCausalLM",
                                        {"specdeploy_engine": "sglang"}) == []  # fmt: skip
    assert engines.check_drafter_engine("vllm", "DeepseekV3ForCausalLM",
                                        {"specdeploy_engine": "sglang"})  # fmt: skip
    assert engines.check_drafter_engine("sglang", "LlamaForCausalLM",
                                        {"norm_before_residual": True})  # fmt: skip


def test_sm120_refuses_known_bad_and_disables_custom_all_reduce_without_p2p():
    plan = engines.sm120_findings("sglang", (12, 0), p2p=False, tp_size=4, attention_backend="")
    assert plan.disable_custom_all_reduce and plan.attention_backend == "triton"
    bad = engines.sm120_findings("sglang", (12, 0), True, 4, "trtllm_mla")
    assert any(f.level == "error" and "24633" in f.source for f in bad.findings)
    h200 = engines.sm120_findings("sglang", (9, 0), True, 1, "")
    assert not h200.disable_custom_all_reduce and h200.attention_backend == ""


def test_unknown_engine_is_refused():
    with pytest.raises(engines.EngineError, match="not one of vllm, sglang"):
        engines.engine("trtllm")


def _cached_sglang_wheels() -> dict[str, Path]:
    d = Path.home() / ".cache" / "specdeploy" / "wheelhouse"
    return {p.name.split("-")[1]: p for p in d.glob("sglang-*.whl")} if d.is_dir() else {}


def test_sglang_pins_are_what_the_wheels_require():
    """SGLANG_PINS against each cached wheel's METADATA (pip download --no-deps sglang==V)."""
    import zipfile

    wheels = _cached_sglang_wheels()
    if not wheels:
        pytest.skip("no sglang wheel in ~/.cache/specdeploy/wheelhouse (make setup)")
    for version, whl in wheels.items():
        if version not in engines.SGLANG_PINS:
            continue
        with zipfile.ZipFile(whl) as z:
            meta = z.read(f"sglang-{version}.dist-info/METADATA").decode()
        for name, pin in engines.SGLANG_PINS[version].items():
            assert f"Requires-Dist: {name}" in meta.replace("[cu13]", "")
            line = next(ln for ln in meta.splitlines() if ln.startswith(f"Requires-Dist: {name}"))
            assert line.endswith(f"=={pin}"), line


def test_engine_requirement_and_unknown_sglang_version():
    assert engines.engine_requirement("vllm", "0.16.0", "0.5.15") == "vllm==0.16.0"
    assert engines.engine_requirement("sglang", "0.16.0", "0.5.17") == "sglang==0.5.17"
    with pytest.raises(engines.EngineError, match=r"specdeploy_sglang_version is '0\.5\.18'"):
        engines.engine_requirement("sglang", "0.16.0", "0.5.18")
    assert (
        engines.main(["--engine", "sglang", "--gates-json", "{}", "--sglang-version", "0.4"]) == 2
    )
    ok = ["--engine", "sglang", "--gates-json", "{}", "--sglang-version", "0.5.15"]
    assert engines.main(ok) == 0
    assert engines.main([*ok, "--api-key-set", "true"]) == 2  # SGLang: key only in argv


def test_attention_backend_in_sglang_words_default_triton():
    spec = engines.SpecConfig("/d", num_steps=3)
    argv = engines.sglang_argv(["s"], "/t", "t", "127.0.0.1", 1, 1, 4096, 0.5, spec)
    assert dict(itertools.pairwise(argv))["--attention-backend"] == "triton"
    argv = engines.sglang_argv(["s"], "/t", "t", "127.0.0.1", 1, 1, 4096, 0.5, spec,
                               attention_backend="FLASHINFER_MLA")  # fmt: skip
    assert dict(itertools.pairwise(argv))["--attention-backend"] == "flashinfer"


def test_engine_log_reads_sglangs_backend_from_the_recorded_server_args_line():
    from specdeploy.node.service import engine_log

    text = (FIX / "server-spec.log").read_text()  # the real SGLang 0.5.15 server log
    (choice,) = engine_log.parse_backends(text)
    assert choice.name == "triton" and choice.mla


MODELS = Path(__file__).resolve().parents[1] / "fixtures" / "models"
DRAFTERS = Path(__file__).resolve().parents[1] / "fixtures" / "drafters"


def _drafter_check(target: Path, drafter_cfg: dict, engine: str) -> tuple[int, list[dict]]:
    import contextlib
    import io
    import json

    from specdeploy.controller import drafter

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = drafter.main(["--vllm-version", "0.16.0",
                           "--target-config-json", target.read_text(),
                           "--drafter-config-json", json.dumps(drafter_cfg),
                           "--engine", engine, "--json"])  # fmt: skip
    return rc, json.loads(out.getvalue())["findings"]


def _errors(findings: list[dict]) -> list[str]:
    return [f["message"] for f in findings if f["level"] == "error"]


@pytest.mark.parametrize(
    ("drafter_dir", "engine", "refused"),
    [
        ("tiny-dsv3-eagle3", "vllm", None),
        ("tiny-dsv3-eagle3", "sglang", "exported for vllm"),
        ("tiny-dsv3-eagle3-sglang", "sglang", None),
        ("tiny-dsv3-eagle3-sglang", "vllm", "exported for sglang"),
    ],
)
def test_drafter_check_knows_the_engine_on_the_recorded_tiny_target(drafter_dir, engine, refused):
    """The recorded H200 run's pair: vLLM's drafter (ids [1, 2, 3]) and SGLang's export (ids
    [0, 1, 2], the same layers in SGLang's convention) on the 4-layer DeepSeek-V3 target."""
    import json

    cfg = json.loads((MODELS / drafter_dir / "config.json").read_text())
    rc, findings = _drafter_check(MODELS / "tiny-dsv3" / "config.json", cfg, engine)
    errors = _errors(findings)
    if refused is None:
        assert rc == 0 and errors == [], errors
    else:
        assert rc == 1 and any(refused in e and f"specdeploy_engine is {engine}" in e
                               for e in errors), errors  # fmt: skip
    if drafter_dir == "tiny-dsv3-eagle3" and engine == "sglang":
        # the hand run's failure, named: layer 4 of a 4-layer target
        assert any("target layers [2, 3, 4]" in e and "[4] do not exist" in e for e in errors)


def test_kimi_drafter_for_sglang_is_checked_in_vllms_convention():
    """Kimi-K2.5 (61 layers) with the published-layout drafter (ids [1, 29, 57]): SGLang needs
    the export with ids [0, 28, 56]; the checks see both as the same target layers."""
    import json

    target = DRAFTERS / "kimi-k2.5" / "config.json"
    cfg = json.loads((DRAFTERS / "kimi-k25-eagle3-fixed" / "config.json").read_text())
    assert _drafter_check(target, cfg, "vllm")[0] == 0
    rc, findings = _drafter_check(target, cfg, "sglang")
    assert rc == 1 and any("exported for vllm" in e for e in _errors(findings))
    sgl = dict(cfg, specdeploy_engine="sglang",
               eagle_aux_hidden_state_layer_ids=[0, 28, 56],
               eagle_config={**cfg["eagle_config"],
                             "eagle_aux_hidden_state_layer_ids": [0, 28, 56]})  # fmt: skip
    rc, findings = _drafter_check(target, sgl, "sglang")
    assert rc == 0, _errors(findings)
    assert any("target layers [1, 29, 57] for its ids [0, 28, 56]" in f["message"]
               for f in findings)  # fmt: skip


def test_the_sglang_export_lists_the_layers_sglang_feeds_and_round_trips():
    vllm_cfg = {"eagle_aux_hidden_state_layer_ids": [1, 29, 57], "eagle_config": {
        "eagle_aux_hidden_state_layer_ids": [1, 29, 57], "use_aux_hidden_state": True}}  # fmt: skip
    sg = engines.in_sglang_convention("KimiK25ForConditionalGeneration", vllm_cfg)
    assert sg["specdeploy_engine"] == "sglang"
    assert sg["eagle_aux_hidden_state_layer_ids"] == [0, 28, 56]
    assert sg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 28, 56]
    # SGLang feeds it exactly the layers vLLM fed the drafter it was trained on
    assert engines.served_aux_layers("sglang", "KimiK25ForConditionalGeneration", [0, 28, 56]) == [
        1, 29, 57]  # fmt: skip
    back = engines.in_vllm_convention("KimiK25ForConditionalGeneration", sg)
    assert back["eagle_aux_hidden_state_layer_ids"] == [1, 29, 57]
    assert engines.check_drafter_engine("sglang", "KimiK25ForConditionalGeneration", sg) == []
    # an architecture SGLang does not shift keeps its ids
    llama = engines.in_sglang_convention(
        "LlamaForCausalLM", {"eagle_aux_hidden_state_layer_ids": [2]}
    )
    assert llama == {"eagle_aux_hidden_state_layer_ids": [2], "specdeploy_engine": "sglang"}


@pytest.mark.parametrize(
    ("cfg", "names"),
    [
        ({"norm_before_residual": True}, "norm_before_residual"),
        ({"eagle_aux_hidden_state_layer_ids": [0, 1, 2]}, "aux layer ids [0, 1, 2]"),
    ],
)
def test_a_drafter_sglang_cannot_serve_the_same_way_is_not_exported(cfg, names):
    with pytest.raises(ValueError, match=re.escape(names)):
        engines.in_sglang_convention("DeepseekV3ForCausalLM", cfg)


def test_the_pipeline_writes_the_sglang_export_beside_the_drafter(tmp_path):
    from specdeploy.controller.drafter_pipeline import pipeline, stfile

    src = tmp_path / "drafter"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}))
    stfile.write(src / "model.safetensors", {"fc.weight": ("BF16", [2, 2], b"\0" * 8)})
    out = tmp_path / "drafter-sglang"
    assert pipeline.sglang_export(src, out, "DeepseekV3ForCausalLM") == ""
    assert json.loads((out / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"] == [
        0, 1, 2]  # fmt: skip
    assert (out / "model.safetensors").read_bytes() == (src / "model.safetensors").read_bytes()
    # q/k/v biases SGLang would drop: no export, and the earlier one is gone with a reason
    stfile.write(
        src / "model.safetensors", {"layers.0.self_attn.q_proj.bias": ("BF16", [2], b"\0" * 4)}
    )
    why = pipeline.sglang_export(src, out, "DeepseekV3ForCausalLM")
    assert why == "no SGLang export: SGLang does not load layers.0.self_attn.q_proj.bias"
    assert not out.exists()
