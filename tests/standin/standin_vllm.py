"""STAND-IN view of vLLM's rules: its ``vllm serve`` flags, its SpeculativeConfig keys and EAGLE-3
target allowlist (read by AST from the vLLM installed next to the interpreter, else 0.20.2's),
whether a target class implements ``SupportsEagle3``, attention backends per platform, and the
model's ``config.json``."""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import importlib.util
import json
import os
import re
from pathlib import Path

DEFAULT_VERSION = "0.20.2"
# SpeculativeConfig fields of vLLM 0.20.2 (read from the wheel's config/speculative.py).
SPEC_KEYS_0_20_2 = [
    "enforce_eager",
    "num_speculative_tokens",
    "model",
    "method",
    "draft_tensor_parallel_size",
    "tensor_parallel_size",
    "quantization",
    "moe_backend",
    "max_model_len",
    "revision",
    "code_revision",
    "disable_padded_drafter_batch",
    "use_local_argmax_reduction",
    "prompt_lookup_max",
    "prompt_lookup_min",
    "speculative_token_tree",
    "parallel_drafting",
    "target_model_config",
    "target_parallel_config",
    "draft_model_config",
    "draft_parallel_config",
    "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_cached_requests",
    "suffix_decoding_max_spec_factor",
    "suffix_decoding_min_token_prob",
    "draft_load_config",
    "rejection_sample_method",
    "synthetic_acceptance_rates",
    "synthetic_acceptance_length",
]
AUX_SUPPORTED_0_20_2 = [
    "llama",
    "qwen",
    "minicpm",
    "gpt_oss",
    "hunyuan_vl",
    "hunyuan_v1_dense",
    "afmoe",
    "nemotron_h",
    "deepseek_v2",
    "deepseek_v3",
    "kimi_k2",
    "kimi_k25",
    "minimax_m2",
    "gemma4",
]
MLA_BACKENDS = [
    "FLASH_ATTN_MLA",
    "FLASHMLA",
    "FLASHINFER_MLA",
    "TRITON_MLA",
    "CUTLASS_MLA",
    "FLASHMLA_SPARSE",
    "ROCM_AITER_MLA",
]
ATTN_BACKENDS = [*MLA_BACKENDS, "FLASH_ATTN", "TRITON_ATTN", "FLASHINFER", "FLEX_ATTENTION",
                                "TREE_ATTN", "ROCM_ATTN", "ROCM_AITER_FA", "TORCH_SDPA",
                                "CPU_ATTN", "NO_ATTENTION"]  # fmt: skip
PLATFORMS = {
    # platform: (auto MLA backend, potential MLA list, auto non-MLA backend, potential list, FA)
    "sm120": (
        "TRITON_MLA",
        ["TRITON_MLA"],
        "FLASH_ATTN",
        ["FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION"],
        2,
    ),
    "h200": (
        "FLASH_ATTN_MLA",
        ["FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA"],
        "FLASH_ATTN",
        ["FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION"],
        3,
    ),
}
MLA_MODEL_TYPES = ("deepseek", "kimi")


def _max_model_len(v: str) -> int:
    m = re.fullmatch(r"(\d+)([kKmM]?)", v.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"invalid max model len {v!r}")
    n = int(m[1])
    return n * {"": 1, "k": 1000, "K": 1024, "m": 1000000, "M": 1048576}[m[2]]


def _json_obj(v: str) -> dict[str, object]:
    try:
        d = json.loads(v)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"invalid JSON {v!r}: {e}") from None
    if not isinstance(d, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {v!r}")
    return d


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vllm", description="vLLM CLI (STAND-IN)")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", prog="vllm serve", usage="vllm serve [model_tag] [options]")
    s.add_argument("model_tag", nargs="?", default=None)
    s.add_argument("--model", default=None)
    s.add_argument("--served-model-name", nargs="+", default=None)
    s.add_argument("--host", default=None)
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    s.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    s.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    s.add_argument("--speculative-config", "-sc", type=_json_obj, default=None)
    s.add_argument("--max-model-len", type=_max_model_len, default=None)
    s.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    s.add_argument("--enforce-eager", action="store_true")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--attention-backend", choices=ATTN_BACKENDS, default=None)
    s.add_argument("--disable-custom-all-reduce", action="store_true")
    s.add_argument("--trust-remote-code", action="store_true")
    s.add_argument("--api-key", nargs="+", default=None)
    s.add_argument("--max-num-seqs", type=int, default=None)
    s.add_argument("--max-num-batched-tokens", type=int, default=None)
    s.add_argument(
        "--kv-cache-dtype",
        default="auto",
        choices=["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"],
    )
    s.add_argument("--dtype", default="auto")
    s.add_argument("--tokenizer", default=None)
    s.add_argument("--block-size", type=int, default=None)
    s.add_argument("--disable-log-stats", action="store_true")
    s.add_argument("--uvicorn-log-level", default="info")
    s.add_argument("--enable-expert-parallel", action="store_true")
    if serve_has_shutdown_timeout():
        # 0 aborts in-flight requests on SIGTERM (vLLM's default); N > 0 drains for N s
        s.add_argument("--shutdown-timeout", type=int, default=0)
    return p


def serve_has_shutdown_timeout() -> bool:
    """Whether the installed vLLM's serve CLI has --shutdown-timeout (0.18 on): the stand-in
    refuses the flag where the real server would (`vllm: error: unrecognized arguments`)."""
    _version, root = installed_vllm()
    if root is None:
        return True  # no vLLM beside the stand-in (its own unit tests): the newest CLI
    from specdeploy.node.patching.speckeys import has_shutdown_timeout

    try:
        return has_shutdown_timeout((root / "engine" / "arg_utils.py").read_text("utf-8"))
    except (OSError, SyntaxError, ValueError):
        return False


def installed_vllm() -> tuple[str | None, Path | None]:
    try:
        version = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None, None
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        spec = None
    root = None
    if spec and spec.submodule_search_locations:
        root = Path(next(iter(spec.submodule_search_locations)))
    return version, root


def _class_node(path: Path, name: str) -> ast.ClassDef | None:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    for n in ast.walk(tree):
        if isinstance(n, ast.ClassDef) and n.name == name:
            return n
    return None


def spec_rules(root: Path | None) -> tuple[list[str], list[str], str]:
    """(allowed SpeculativeConfig keys, eagle3 target allowlist, its variable name)."""
    default = (SPEC_KEYS_0_20_2, AUX_SUPPORTED_0_20_2, "aux_hidden_states_supported")
    if root is None:
        return default
    cls = _class_node(root / "config" / "speculative.py", "SpeculativeConfig")
    if cls is None:
        return default
    # The keys pydantic accepts, read by the preflight's own extractor (one reading of
    # SpeculativeConfig: the stand-in refuses exactly what the deploy refuses).
    from specdeploy.node.patching.speckeys import extract_fields

    try:
        keys = extract_fields(ast.unparse(cls))["keys"]
    except ValueError:
        keys = []
    allow: list[str] = []
    var = "aux_hidden_states_supported"
    for n in ast.walk(cls):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.List):
            names = [t.id for t in n.targets if isinstance(t, ast.Name)]
            if names and names[0] in ("eagle3_target_supported", "aux_hidden_states_supported"):
                var = names[0]
                allow += [
                    e.value
                    for e in n.value.elts
                    if isinstance(e, ast.Constant) and isinstance(e.value, str)
                ]
    return keys or SPEC_KEYS_0_20_2, allow, var


def supports_eagle3(root: Path, arch: str) -> bool | None:
    files = {
        "DeepseekV3ForCausalLM": ("deepseek_v2.py", "DeepseekV3ForCausalLM"),
        "DeepseekV2ForCausalLM": ("deepseek_v2.py", "DeepseekV2ForCausalLM"),
        "KimiK25ForConditionalGeneration": ("kimi_k25.py", "KimiK25ForConditionalGeneration"),
    }
    if arch not in files:
        return None
    fname, cname = files[arch]
    path = root / "model_executor" / "models" / fname
    seen: set[str] = set()
    while cname and cname not in seen:
        seen.add(cname)
        cls = _class_node(path, cname)
        if cls is None:
            return None
        names = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in cls.bases]
        if "SupportsEagle3" in names:
            return True
        # DeepseekV3ForCausalLM derives from DeepseekV2ForCausalLM in the same file.
        cname = next((n for n in names if n.endswith("ForCausalLM")), "")
    return False


def read_config(path: str | None) -> dict[str, object] | None:
    if not path:
        return None
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            d = json.load(f)
        return d if isinstance(d, dict) else None
    except (OSError, ValueError):
        return None


def model_type_of(cfg: dict[str, object] | None) -> str | None:
    if not cfg:
        return None
    tc = cfg.get("text_config")
    if isinstance(tc, dict) and isinstance(tc.get("model_type"), str):
        return str(tc["model_type"])
    mt = cfg.get("model_type")
    return mt if isinstance(mt, str) else None


def arch_of(cfg: dict[str, object] | None) -> str | None:
    if not cfg:
        return None
    a = cfg.get("architectures")
    return str(a[0]) if isinstance(a, list) and a else None


def validate_schedule(root: Path, schedule: object) -> str | None:
    """vLLM's num_speculative_tokens_per_batch_size validation, run from the installed wheel's
    own vllm/v1/spec_decode/dynamic/utils.py (no imports of its own); its message, or None."""
    path = root / "v1" / "spec_decode" / "dynamic" / "utils.py"
    if not path.is_file():
        return None  # no such file in this version: the key check above already refused
    spec = importlib.util.spec_from_file_location("_vllm_dynamic_sd_utils", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    try:
        mod.validate_and_normalize_dynamic_sd_schedule(schedule)
    except ValueError as e:
        return str(e)
    return None
