"""The drafter's provenance file and the deploy's refusal (issue 17.3), on real config files.

The target is the real Kimi-K2.5 config.json (tests/fixtures/drafters/kimi-k2.5), the drafter
the fixed AQ-MedAI-like one; the provenance is written by the same code the pipeline uses.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specdeploy.controller import drafter
from specdeploy.controller import drafter_provenance as prov
from specdeploy.node.patching.patches import Manifest

REPO = Path(__file__).resolve().parents[2]

FIX = REPO / "tests" / "fixtures" / "drafters"
KIMI = FIX / "kimi-k2.5"
FIXED = FIX / "kimi-k25-eagle3-fixed"  # top-level ids [1, 29, 57]
LLAMA8B = FIX / "llama-3.1-8b-instruct"


@pytest.fixture(scope="module")
def manifest() -> Manifest:
    return Manifest.load(REPO / "patches" / "vllm" / "manifest.yml")


def kimi_cfg() -> dict:
    return json.loads((KIMI / "config.json").read_text())


def trained(tmp_path: Path, **change: object) -> Path:
    """The fixed Kimi drafter with a provenance file as the pipeline writes it."""
    d = tmp_path / "drafter"
    shutil.copytree(FIXED, d)
    p = prov.Provenance(
        target_config_sha256=prov.target_config_sha256(kimi_cfg()),
        aux_layer_ids=[1, 29, 57],
        aux_offset=prov.INPUT_OF_LAYER,
        vllm_version="0.16.0",
        trainer="speculators 0.9.0",
        speculators_version="0.9.0",
        data={"prompts": 10000, "tokens": 41_000_000},
        epochs=5,
        heldout={"per_position_acceptance": [0.6, 0.4, 0.3]},
        target_model="Kimi-K2.5",
    )
    for k, v in change.items():
        setattr(p, k, v)
    prov.write(d, p)
    return d


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specdeploy.controller.drafter", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )


def errors(res: drafter.Result) -> list[str]:
    return [f.code for f in res.errors]


def check_dir(d: Path, manifest: Manifest, version: str = "0.16.0", require: bool = False):
    tcfg, _ = drafter.load_config(KIMI)
    dcfg, ddir = drafter.load_config(d)
    res = drafter.check(tcfg, dcfg, version, manifest, ddir)
    pf = d / prov.FILE_NAME
    drafter.check_provenance(res, tcfg, pf.read_text() if pf.is_file() else None, require)
    return res


def test_target_hash_is_canonical_json() -> None:
    raw = (KIMI / "config.json").read_text()
    cfg = json.loads(raw)
    reordered = json.dumps(dict(reversed(list(cfg.items()))), indent=4)
    assert prov.target_config_sha256(json.loads(reordered)) == prov.target_config_sha256(cfg)
    changed = json.loads(raw)
    changed["text_config"]["num_hidden_layers"] = 60
    assert prov.target_config_sha256(changed) != prov.target_config_sha256(cfg)


def test_matching_provenance_passes(tmp_path: Path, manifest: Manifest) -> None:
    res = check_dir(trained(tmp_path), manifest)
    assert res.ok, res.text()
    assert any(f.code == "provenance" and "[1, 29, 57]" in f.message for f in res.findings)


def test_other_target_is_refused(tmp_path: Path, manifest: Manifest) -> None:
    other = json.loads((LLAMA8B / "config.json").read_text())
    d = trained(tmp_path, target_config_sha256=prov.target_config_sha256(other))
    res = check_dir(d, manifest)
    assert errors(res) == ["provenance.target_config_sha256"]


def test_shifted_layer_ids_are_refused(tmp_path: Path, manifest: Manifest) -> None:
    """Trained on [2, 30, 58], served [1, 29, 57] (the config's top-level list)."""
    res = check_dir(trained(tmp_path, aux_layer_ids=[2, 30, 58]), manifest)
    assert errors(res) == ["provenance.aux_layer_ids"]
    msg = res.errors[0].message
    assert "[2, 30, 58]" in msg and "[1, 29, 57]" in msg


def test_config_edited_after_training_is_refused(tmp_path: Path, manifest: Manifest) -> None:
    """Someone shifts the served ids in config.json; the provenance still says [1, 29, 57]."""
    d = trained(tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = [2, 30, 58]
    (d / "config.json").write_text(json.dumps(cfg))
    assert errors(check_dir(d, manifest)) == ["provenance.aux_layer_ids"]


def test_output_offset_is_refused(tmp_path: Path, manifest: Manifest) -> None:
    res = check_dir(trained(tmp_path, aux_offset=prov.OUTPUT_OF_LAYER), manifest)
    assert errors(res) == ["provenance.aux_offset"]
    assert "input-of-layer" in res.errors[0].message


def test_missing_provenance_warns_or_refuses(tmp_path: Path, manifest: Manifest) -> None:
    d = tmp_path / "published"
    shutil.copytree(FIXED, d)
    res = check_dir(d, manifest)
    assert res.ok
    assert "provenance.missing" in [f.code for f in res.findings if f.level == "warning"]
    assert errors(check_dir(d, manifest, require=True)) == ["provenance.missing"]


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda o: o.pop("aux_layer_ids"), "aux_layer_ids"),
        (lambda o: o.update(aux_offset="middle"), "aux_offset"),
        (lambda o: o.update(target_config_sha256="abc"), "target_config_sha256"),
        (lambda o: o.update(schema=9), "schema"),
    ],
)
def test_bad_provenance_names_the_field(tmp_path: Path, manifest: Manifest, edit, field) -> None:
    d = trained(tmp_path)
    obj = json.loads((d / prov.FILE_NAME).read_text())
    edit(obj)
    (d / prov.FILE_NAME).write_text(json.dumps(obj))
    res = check_dir(d, manifest)
    assert errors(res) == ["provenance.invalid"]
    assert f"field {field}" in res.errors[0].message


def test_cli_reads_the_file_from_the_drafter_dir(tmp_path: Path) -> None:
    d = trained(tmp_path, aux_layer_ids=[2, 30, 58])
    p = cli("--target", str(KIMI), "--drafter", str(d), "--vllm-version", "0.16.0")
    assert p.returncode == 1
    lines = [ln for ln in p.stdout.splitlines() if "ERROR" in ln]
    assert len(lines) == 1 and "provenance.aux_layer_ids" in lines[0]


def test_cli_inline_as_the_preflight_passes_it(tmp_path: Path) -> None:
    """The role passes the probe's file texts; '' means the drafter has none."""
    d = trained(tmp_path)
    base = [
        "--vllm-version",
        "0.16.0",
        "--target-config-json",
        (KIMI / "config.json").read_text(),
        "--drafter-config-json",
        (d / "config.json").read_text(),
        "--json",
    ]
    ok = cli(*base, "--provenance-json", (d / prov.FILE_NAME).read_text())
    assert ok.returncode == 0, ok.stdout
    assert cli(*base, "--require-provenance", "false").returncode == 0
    none = cli(*base, "--require-provenance")
    assert none.returncode == 1
    codes = [f["code"] for f in json.loads(none.stdout)["findings"] if f["level"] == "error"]
    assert codes == ["provenance.missing"]
    other = json.loads((KIMI / "config.json").read_text())
    other["text_config"]["vocab_size"] += 1
    bad = cli(
        *base[:3],
        json.dumps(other),
        *base[4:],
        "--provenance-json",
        (d / prov.FILE_NAME).read_text(),
    )
    assert bad.returncode == 1
    codes = [f["code"] for f in json.loads(bad.stdout)["findings"] if f["level"] == "error"]
    assert "provenance.target_config_sha256" in codes


def test_a_config_that_differs_only_in_non_model_fields_is_the_same_target(
    tmp_path: Path, manifest: Manifest
) -> None:
    """Issue 26, item 7: a target config.json re-saved by another transformers (or with another
    source path) is the same model; a provenance hashed over the whole file before these
    fields were left out still matches; a changed model field is still another target."""
    cfg = kimi_cfg()
    resaved = json.loads(json.dumps(cfg))
    resaved["transformers_version"] = "9.99.0"
    resaved["_name_or_path"] = "/elsewhere/Kimi-K2.5"
    resaved["text_config"]["transformers_version"] = "9.99.0"
    assert prov.target_config_sha256(resaved) == prov.target_config_sha256(cfg)
    # a provenance written with the whole file's hash (the earlier definition) still matches
    legacy = __import__("hashlib").sha256(prov.canonical_config_bytes(cfg, whole=True)).hexdigest()
    assert legacy != prov.target_config_sha256(cfg)
    assert prov.target_config_matches(legacy, cfg)
    assert not prov.target_config_matches(legacy, resaved)  # the old hash saw that field
    assert res_ok(trained(tmp_path, target_config_sha256=legacy), manifest)
    changed = json.loads(json.dumps(cfg))
    changed["text_config"]["num_hidden_layers"] = 60
    assert not prov.target_config_matches(prov.target_config_sha256(cfg), changed)


def res_ok(d: Path, manifest: Manifest) -> bool:
    res = check_dir(d, manifest)
    return res.ok


def test_the_prompt_format_trained_on_is_recorded_and_a_different_served_one_warns(
    tmp_path: Path, manifest: Manifest
) -> None:
    from specdeploy.controller.drafter_pipeline import generate

    assert generate.prompt_format(["a", "b"]) == "raw"
    assert generate.prompt_format([[{"role": "user", "content": "a"}]]) == "chat-template"
    assert generate.prompt_format(["a", [{"role": "user", "content": "b"}]]) == "mixed"
    d = trained(tmp_path, prompt_format="raw")
    tcfg, _ = drafter.load_config(KIMI)
    dcfg, ddir = drafter.load_config(d)
    text = (d / prov.FILE_NAME).read_text()
    assert json.loads(text)["prompt_format"] == "raw"
    res = drafter.check(tcfg, dcfg, "0.16.0", manifest, ddir)
    drafter.check_provenance(res, tcfg, text, False, "chat-template")
    warn = [f for f in res.findings if f.code == "provenance.prompt_format"]
    assert res.ok and len(warn) == 1 and warn[0].level == "warning"
    assert "trained on raw prompts, the served workload is chat-template" in warn[0].message
    res = drafter.check(tcfg, dcfg, "0.16.0", manifest, ddir)
    drafter.check_provenance(res, tcfg, text, False, "raw")
    assert not [f for f in res.findings if f.code == "provenance.prompt_format"]
    # a bad value is refused, naming the field
    bad = json.loads(text)
    bad["prompt_format"] = "chatty"
    with pytest.raises(prov.ProvenanceError, match="field prompt_format"):
        prov.parse(json.dumps(bad))
    # the CLI takes the served format (what the preflight passes)
    r = cli("--target", str(KIMI), "--drafter", str(d), "--vllm-version", "0.16.0",
            "--served-prompt-format", "chat-template", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "provenance.prompt_format" in r.stdout


@pytest.mark.parametrize(
    "content, problem", [(b"", "empty file"), (b"  \n", "empty file"), (b"\xff\xfe{", "not UTF-8")]
)
def test_an_empty_or_non_utf8_provenance_file_is_an_error(tmp_path, content, problem) -> None:
    """Issue 28: an empty file counted as "no provenance" (a warning only), a non-UTF-8 one
    was a traceback. The file is there and says nothing: an error, with or without
    --require-provenance, read from the directory or given inline (as the deploy does)."""
    d = trained(tmp_path)
    (d / prov.FILE_NAME).write_bytes(content)
    for extra in ([], ["--provenance-json", content.decode(errors="replace")]):
        args = ["--target", str(KIMI), "--drafter", str(d), "--vllm-version", "0.16.0", "--json"]
        proc = cli(*args, *extra)
        assert proc.returncode == 1, proc.stderr
        found = [f for f in json.loads(proc.stdout)["findings"] if f["level"] == "error"]
        assert [f["code"] for f in found] == ["provenance.invalid"]
        assert problem in found[0]["message"]
    with pytest.raises(prov.ProvenanceError, match=problem):
        prov.read(d)
