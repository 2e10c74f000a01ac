"""EAGLE-3 drafter compatibility check (issue 3, item 7) on real config.json shapes."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from specdeploy.controller import drafter
from specdeploy.node.patching.patches import Manifest, UsageError

REPO = Path(__file__).resolve().parents[2]

FIX = REPO / "tests" / "fixtures" / "drafters"
KIMI = FIX / "kimi-k2.5"
LLAMA8B = FIX / "llama-3.1-8b-instruct"


@pytest.fixture(scope="module")
def manifest() -> Manifest:
    return Manifest.load(REPO / "patches" / "vllm" / "manifest.yml")


def run(target: Path, draft: Path, version: str, manifest: Manifest) -> drafter.Result:
    tcfg, _ = drafter.load_config(target)
    dcfg, ddir = drafter.load_config(draft)
    return drafter.check(tcfg, dcfg, version, manifest, ddir)


def codes(res: drafter.Result, level: str = "error") -> set[str]:
    return {f.code for f in res.findings if f.level == level}


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    """A real (tiny-data) safetensors file: 8-byte header length, JSON header, data."""
    size = {"I64": 8, "BF16": 2, "F16": 2, "F32": 4}
    header: dict[str, object] = {}
    off = 0
    for name, (dtype, shape) in tensors.items():
        n = size[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * off)


def drafter_dir(tmp_path: Path, fixture: str) -> Path:
    d = tmp_path / fixture
    shutil.copytree(FIX / fixture, d)
    return d


# --------------------------------------------------------------------------- Kimi-K2.5


def test_aqmedai_like_drafter_on_016_reports_ignored_eagle_config_ids_with_fix(manifest) -> None:
    res = run(KIMI, FIX / "kimi-k25-eagle3-aqmedai-like", "0.16.0", manifest)
    assert not res.ok
    assert codes(res) == {"drafter.aux_layers.eagle_config_ignored"}
    msg = next(f.message for f in res.errors)
    assert '"eagle_aux_hidden_state_layer_ids": [1, 29, 57]' in msg  # the fix
    assert res.aux_layers_served == [2, 30, 58]  # what 0.16 would really feed: the default
    assert res.target["hidden_size"] == 7168 and res.target["num_hidden_layers"] == 61


def test_fixed_kimi_drafter_passes_and_serves_its_trained_layers(manifest) -> None:
    for v in ("0.15.1", "0.16.0", "0.17.1", "0.18.1", "0.20.2"):
        res = run(KIMI, FIX / "kimi-k25-eagle3-fixed", v, manifest)
        assert res.ok, (v, res.text())
        assert res.aux_layers_served == [1, 29, 57]


def test_newest_version_reads_the_eagle_config_list(manifest) -> None:
    """0.34.0's llama_eagle3 reads eagle_config's list itself (fact from the wheel)."""
    res = run(KIMI, FIX / "kimi-k25-eagle3-aqmedai-like", "0.34.0", manifest)
    assert res.ok, res.text()
    assert res.aux_layers_served == [1, 29, 57]


def test_mla_drafter_needs_018(manifest) -> None:
    for v in ("0.15.1", "0.16.0", "0.17.0", "0.17.1"):
        res = run(KIMI, FIX / "kimi-k25-eagle3-mla-like", v, manifest)
        assert codes(res) == {"drafter.architecture"}, v
        assert "MLA" in res.errors[0].message and "0.18.0" in res.errors[0].message
    for v in ("0.18.0", "0.18.1", "0.20.2"):
        assert run(KIMI, FIX / "kimi-k25-eagle3-mla-like", v, manifest).ok, v


def test_llama8b_drafter_pointed_at_kimi(manifest) -> None:
    res = run(KIMI, FIX / "broken-llama8b-drafter-for-kimi", "0.16.0", manifest)
    assert codes(res) == {"drafter.target_hidden_size", "drafter.vocab_size"}
    hid = next(f for f in res.errors if f.code == "drafter.target_hidden_size")
    assert "4096" in hid.message and "7168" in hid.message


def test_aux_ids_out_of_range(manifest) -> None:
    res = run(KIMI, FIX / "broken-kimi-drafter-bad-ids", "0.16.0", manifest)
    assert codes(res) == {"drafter.aux_layers.range"}
    assert "[0, 61]" in res.errors[0].message and "1..60" in res.errors[0].message


def test_plain_llama_is_not_an_eagle3_drafter_and_needs_three_layers(manifest) -> None:
    res = run(KIMI, FIX / "broken-kimi-drafter-plain-llama", "0.17.1", manifest)
    assert codes(res) == {"drafter.architecture", "drafter.aux_layers.count"}


# --------------------------------------------------------------------------- Llama-3.1-8B


def test_yuhuili_like_llama_drafter(manifest) -> None:
    res = run(LLAMA8B, FIX / "eagle3-llama3.1-8b-yuhuili-like", "0.16.0", manifest)
    assert res.ok, res.text()
    assert res.aux_layers_served == [2, 16, 29]  # (2, n//2, n-3) for 32 layers
    assert "drafter.aux_layers.default" in codes(res, "warning")
    assert "drafter.d2t" in codes(res, "warning")  # no weights next to the config


# --------------------------------------------------------------------------- d2t in weights


def test_d2t_present_in_safetensors(tmp_path: Path, manifest) -> None:
    d = drafter_dir(tmp_path, "eagle3-llama3.1-8b-yuhuili-like")
    write_safetensors(
        d / "model.safetensors", {"d2t": ("I64", [32000]), "fc.weight": ("F16", [4, 3])}
    )
    res = run(LLAMA8B, d, "0.16.0", manifest)
    assert res.ok and "drafter.d2t" in codes(res, "info")


def test_d2t_missing_is_an_error(tmp_path: Path, manifest) -> None:
    d = drafter_dir(tmp_path, "eagle3-llama3.1-8b-yuhuili-like")
    write_safetensors(d / "model.safetensors", {"fc.weight": ("F16", [4, 3])})
    res = run(LLAMA8B, d, "0.16.0", manifest)
    assert codes(res) == {"drafter.d2t"}


def test_d2t_wrong_length_is_an_error(tmp_path: Path, manifest) -> None:
    d = drafter_dir(tmp_path, "eagle3-llama3.1-8b-yuhuili-like")
    write_safetensors(d / "model.safetensors", {"d2t": ("I64", [16000])})
    res = run(LLAMA8B, d, "0.16.0", manifest)
    assert codes(res) == {"drafter.d2t"} and "[32000]" in res.errors[0].message


def test_d2t_from_sharded_index(tmp_path: Path, manifest) -> None:
    d = drafter_dir(tmp_path, "eagle3-llama3.1-8b-yuhuili-like")
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"fc.weight": "model-00001-of-00001.safetensors"}})
    )
    assert codes(run(LLAMA8B, d, "0.16.0", manifest)) == {"drafter.d2t"}


# --------------------------------------------------------------------------- CLI


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specdeploy.controller.drafter", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )


def test_cli_exit_codes_and_json() -> None:
    bad = cli(
        "--target",
        str(KIMI),
        "--drafter",
        str(FIX / "kimi-k25-eagle3-aqmedai-like"),
        "--vllm-version",
        "0.16.0",
        "--json",
    )
    assert bad.returncode == 1
    obj = json.loads(bad.stdout)
    assert obj["ok"] is False and obj["errors"] == 1
    assert obj["findings"][0].keys() == {"level", "code", "message"}
    good = cli(
        "--target",
        str(KIMI),
        "--drafter",
        str(FIX / "kimi-k25-eagle3-fixed"),
        "--vllm-version",
        "0.16.0",
    )
    assert good.returncode == 0 and "OK" in good.stdout


def test_cli_usage_errors(tmp_path: Path) -> None:
    missing = cli("--target", str(tmp_path), "--drafter", str(KIMI), "--vllm-version", "0.16.0")
    assert missing.returncode == 2 and "config not found" in missing.stderr
    old = cli(
        "--target",
        str(KIMI),
        "--drafter",
        str(FIX / "kimi-k25-eagle3-fixed"),
        "--vllm-version",
        "0.14.1",
    )
    assert old.returncode == 2 and "0.15.1" in old.stderr


def test_unknown_newer_version_uses_newest_facts_with_a_warning(manifest) -> None:
    res = run(KIMI, FIX / "kimi-k25-eagle3-fixed", "9.0.0", manifest)
    assert res.ok and "vllm.version_unknown" in codes(res, "warning")


def test_target_without_sizes_is_an_error(tmp_path: Path, manifest) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["X"]}))
    res = run(tmp_path, FIX / "kimi-k25-eagle3-fixed", "0.16.0", manifest)
    assert codes(res) == {"target.config"}


def test_version_gate_is_a_usage_error(manifest) -> None:
    with pytest.raises(UsageError):
        run(KIMI, FIX / "kimi-k25-eagle3-fixed", "0.15.0", manifest)


def test_cli_inline_config_json_as_the_preflight_role_passes_it() -> None:
    proc = cli(
        "--vllm-version",
        "0.16.0",
        "--target-config-json",
        (KIMI / "config.json").read_text(),
        "--drafter-config-json",
        (FIX / "kimi-k25-eagle3-aqmedai-like" / "config.json").read_text(),
        "--json",
    )
    assert proc.returncode == 1
    obj = json.loads(proc.stdout)
    assert [f["code"] for f in obj["findings"] if f["level"] == "error"] == [
        "drafter.aux_layers.eagle_config_ignored"
    ]
    bad = cli("--vllm-version", "0.16.0", "--target-config-json", "{", "--drafter", str(KIMI))
    assert bad.returncode == 2 and "--target-config-json: not JSON (" in bad.stderr


# ------------------------------------------------ what the deploy passes: the node's weights


def test_the_deploys_drafter_check_refuses_a_draft_vocab_without_d2t(tmp_path: Path) -> None:
    """The preflight passes config.json content inline and the probe's reading of the weights'
    safetensors headers: a reduced draft vocabulary without d2t is an error before the load."""
    from specdeploy.node.module_utils.specdeploy_weights import drafter_tensors

    d = drafter_dir(tmp_path, "eagle3-llama3.1-8b-yuhuili-like")
    write_safetensors(d / "model.safetensors", {"fc.weight": ("F16", [4, 3])})
    args = [
        "--vllm-version",
        "0.16.0",
        "--target-config-json",
        (LLAMA8B / "config.json").read_text(),
        "--drafter-config-json",
        (d / "config.json").read_text(),
        "--json",
    ]
    without = cli(*args, "--drafter-weights-json", json.dumps(drafter_tensors(d)))
    assert without.returncode == 1
    errors = [f for f in json.loads(without.stdout)["findings"] if f["level"] == "error"]
    assert [f["code"] for f in errors] == ["drafter.d2t"]
    assert "no d2t tensor" in errors[0]["message"] and "model.safetensors" in errors[0]["message"]

    write_safetensors(d / "model.safetensors", {"d2t": ("I64", [32000])})
    with_d2t = cli(*args, "--drafter-weights-json", json.dumps(drafter_tensors(d)))
    assert with_d2t.returncode == 0, with_d2t.stdout
    # No weights on the node to read: the d2t cannot be confirmed, said as a warning.
    nothing = cli(*args, "--drafter-weights-json", "null")
    assert nothing.returncode == 0
    assert "drafter.d2t" in {f["code"] for f in json.loads(nothing.stdout)["findings"]}


def test_a_local_label_is_the_same_vllm_for_the_drafter_check(manifest) -> None:
    plain = run(KIMI, FIX / "kimi-k25-eagle3-aqmedai-like", "0.16.0", manifest)
    local = run(KIMI, FIX / "kimi-k25-eagle3-aqmedai-like", "0.16.0+cu129", manifest)
    assert [(f.level, f.code) for f in local.findings] == [
        (f.level, f.code) for f in plain.findings
    ]
    assert "vllm.version_unknown" not in codes(local, "warning")
