"""The controller-side input checks the preflight runs before any node is touched."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from specdeploy.node.module_utils.attention import is_mla_backend, mla_backend

from specdeploy.controller import inputs
from specdeploy.node.patching.patches import Manifest

REPO = Path(__file__).resolve().parents[2]
SPEC = {"method": "eagle3", "num_speculative_tokens": 3}
DRAFTER = "/srv/models/Kimi-K2.5-eagle3"


@pytest.fixture(scope="module")
def manifest() -> Manifest:
    return Manifest.load(REPO / "patches" / "vllm" / "manifest.yml")


def knobs(errors: list[dict[str, str]]) -> list[str]:
    return [e["knob"] for e in errors]


def test_a_local_label_is_the_same_release_for_the_manifest_lookup(manifest) -> None:
    plain_errors, plain = inputs.check(manifest, "0.16.0", SPEC, DRAFTER, True, "")
    local_errors, local = inputs.check(manifest, "0.16.0+cu129", SPEC, DRAFTER, True, "")
    assert plain_errors == local_errors == []
    assert local["release"] == "0.16.0" and local["kind"] == "patch"
    assert local["entry"]["series_sha256"] == plain["entry"]["series_sha256"]
    assert inputs.check(manifest, "0.18.0+cu130", SPEC, DRAFTER, True, "")[1]["native"] is True


def test_an_unsupported_version_names_the_knob_and_the_supported_ones(manifest) -> None:
    errors, _ = inputs.check(manifest, "0.14.0", SPEC, DRAFTER, True, "")
    assert knobs(errors) == ["specdeploy_vllm_version"]
    assert "0.14.0" in errors[0]["message"] and "0.16.0" in errors[0]["message"]


def test_unknown_speculative_keys_are_refused_per_version(manifest) -> None:
    errors, _ = inputs.check(manifest, "0.16.0", {**SPEC, "bogus_key": 1}, DRAFTER, True, "")
    assert (
        knobs(errors) == ["specdeploy_speculative_config"] and "bogus_key" in errors[0]["message"]
    )
    assert inputs.check(manifest, "0.16.0", {"bogus_key": 1}, DRAFTER, False, "")[0] == []


def test_the_drafter_is_one_knob(manifest) -> None:
    same = inputs.check(manifest, "0.16.0", {**SPEC, "model": DRAFTER + "/"}, DRAFTER, True, "")
    assert same[0] == []
    errors, _ = inputs.check(manifest, "0.16.0", {**SPEC, "model": "/other"}, DRAFTER, True, "")
    assert knobs(errors) == ["specdeploy_speculative_config"]
    assert (
        "/other" in errors[0]["message"]
        and f"specdeploy_drafter_path={DRAFTER}" in (errors[0]["message"])
    )


@pytest.mark.parametrize("backend", ["TRITON_MLA", "FLASHMLA", "FLASHMLA_SPARSE", "CUTLASS_MLA"])
def test_a_forced_mla_only_backend_is_refused_with_speculation(manifest, backend: str) -> None:
    errors, _ = inputs.check(manifest, "0.16.0", SPEC, DRAFTER, True, backend)
    assert knobs(errors) == ["specdeploy_attention_backend"] and backend in errors[0]["message"]
    assert inputs.check(manifest, "0.16.0", SPEC, DRAFTER, False, backend)[0] == []
    assert inputs.check(manifest, "0.16.0", SPEC, DRAFTER, True, "FLASH_ATTN")[0] == []


def test_the_mla_table_answers_the_engine_log_and_the_doctor_alike() -> None:
    assert is_mla_backend("AttentionBackendEnum.FLASHMLA") and not is_mla_backend("FLASH_ATTN")
    assert mla_backend("12.0") == "TRITON_MLA" and mla_backend("9.0") == "FLASH_ATTN_MLA"
    assert mla_backend("10.0") == "FLASHINFER_MLA" and mla_backend("x") == ""


def test_cli_exit_codes() -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "specdeploy.controller.inputs", *args],
            capture_output=True,
            text=True,
            cwd=REPO,
            check=False,
        )

    ok = cli("--vllm-version", "0.16.0+cu129", "--speculative-config-json", json.dumps(SPEC))
    assert ok.returncode == 0, ok.stderr
    bad = cli(
        "--vllm-version", "0.16.0", "--speculative-config-json", json.dumps(SPEC),
        "--attention-backend", "TRITON_MLA", "--json",
    )  # fmt: skip
    assert bad.returncode == 1
    assert json.loads(bad.stdout)["errors"][0]["knob"] == "specdeploy_attention_backend"
    usage = cli("--vllm-version", "0.16.0", "--speculative-config-json", "{")
    assert usage.returncode == 2 and usage.stderr.count("\n") == 1
    assert "--speculative-config-json" in usage.stderr


@pytest.mark.parametrize("k", ["three", -2, 0, 2.5, True, None])
def test_num_speculative_tokens_must_be_an_integer_above_zero(manifest, k) -> None:
    """Issue 28: spec-inputs accepted "three" and -2 (exit 0), which the deploy refuses."""
    spec = {"method": "eagle3"} | ({} if k is None else {"num_speculative_tokens": k})
    errors, _ = inputs.check(manifest, "0.20.2", spec, DRAFTER, True, "")
    assert knobs(errors) == ["specdeploy_speculative_config"]
    assert "num_speculative_tokens is" in errors[0]["message"]
    proc = subprocess.run(
        [sys.executable, "-m", "specdeploy.controller.inputs", "--vllm-version", "0.20.2",
         "--speculative-config-json", json.dumps(spec)],
        capture_output=True, text=True, cwd=REPO, check=False,
    )  # fmt: skip
    assert proc.returncode == 1 and "want an integer > 0" in proc.stdout


def test_a_version_missing_from_the_manifest_is_refused_in_preflight(manifest) -> None:
    """Issue 28: 0.19.0 (>= native_from, no entry) passed the preflight and failed at
    install. It is refused here, naming the knob and the versions the manifest knows."""
    errors, facts = inputs.check(manifest, "0.19.0", SPEC, DRAFTER, True, "")
    assert knobs(errors)[0] == "specdeploy_vllm_version"
    assert "0.19.0 is not in the patch manifest" in errors[0]["message"]
    assert "0.20.2" in errors[0]["message"] and facts["entry"] == {}
    no_spec, _ = inputs.check(manifest, "0.19.0", {}, DRAFTER, False, "")
    assert knobs(no_spec) == ["specdeploy_vllm_version"]
