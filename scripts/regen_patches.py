#!/usr/bin/env python3
"""Regenerate the vLLM patch series and manifest.yml from the real wheels.

Maintainer tool (controller side), not used at deploy time. For each supported version it
takes the pristine files from the cached wheel (``specdeploy.controller.wheels``), applies the edits
below (each anchored on code, asserting the anchor occurs exactly once), writes every concern
as its own patch with ``diff -u`` between the real pristine and the edited file, and rewrites
``manifest.yml`` (pristine/patched sha256, torch pin, series hash, speculative-config keys
extracted by ``specdeploy.node.patching.speckeys``).

    python -m scripts.regen_patches            # rewrite patches + manifest
    python -m scripts.regen_patches --check    # exit 1 if anything would change

Reference for the backport: the same files in the vLLM 0.18.0 wheel (upstream's own
implementation); the deliberate difference is the layer-0 ``residual is None`` guard.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from scripts import speculators_fit
from specdeploy.controller import wheel_facts, wheels
from specdeploy.node.patching import speckeys
from specdeploy.node.patching.patches import series_sha256, sha256_bytes

HERE = Path(__file__).resolve().parents[1] / "patches" / "vllm"

PATCH_VERSIONS = ["0.15.1", "0.16.0", "0.17.0", "0.17.1"]
NATIVE_VERSIONS = ["0.18.0", "0.18.1", "0.20.2", "0.23.0", "0.24.0", "0.25.0", "0.26.0", "0.34.0"]
NATIVE_FROM = "0.18.0"

SPEC = "vllm/config/speculative.py"
DSV2 = "vllm/model_executor/models/deepseek_v2.py"
KIMI = "vllm/model_executor/models/kimi_k25.py"
EAGLE = "vllm/v1/spec_decode/eagle.py"

UPSTREAM = (
    "vLLM v0.18.0 release (the same file in the vllm-0.18.0 wheel); upstream threads:\n"
    "#   vllm-project/vllm#31254 (kimi_k2 eagle3 allowlist), #31257 (Kimi K2 Eagle3),\n"
    "#   #32079 (EAGLE-3 for DeepSeek V3), #35966 (Kimi-K2.5 + AQ-MedAI drafter)."
)


def sub1(text: str, old: str, new: str, what: str) -> str:
    n = text.count(old)
    if n != 1:
        raise SystemExit(f"anchor for {what!r} found {n} times (expected exactly 1)")
    return text.replace(old, new)


# --------------------------------------------------------------------------- edits


def edit_allowlist(text: str, version: str) -> str:
    m = re.search(
        r"^( +)(eagle3_target_supported|aux_hidden_states_supported) = \[(.*?)\]\n",
        text,
        re.M | re.S,
    )
    if not m:
        raise SystemExit(f"{version}: allowlist not found")
    indent, name, body = m.group(1), m.group(2), m.group(3)
    items = re.findall(r'"([^"]+)"', body)
    for extra in ("deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25"):
        if extra not in items:
            items.append(extra)
    inner = "".join(f'{indent}    "{i}",\n' for i in items)
    return text[: m.start()] + f"{indent}{name} = [\n{inner}{indent}]\n" + text[m.end() :]


def edit_deepseek(text: str, version: str) -> str:
    text = sub1(
        text,
        "from .interfaces import MixtureOfExperts, SupportsEagle, SupportsLoRA, SupportsPP\n",
        "from .interfaces import (\n"
        "    MixtureOfExperts,\n"
        "    SupportsEagle,\n"
        "    SupportsEagle3,\n"
        "    SupportsLoRA,\n"
        "    SupportsPP,\n"
        ")\n",
        "interfaces import",
    )
    text = sub1(
        text,
        "        self.make_empty_intermediate_tensors = make_empty_intermediate_tensors_factory(\n"
        '            ["hidden_states", "residual"], config.hidden_size\n'
        "        )\n"
        "\n"
        "    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:\n"
        "        return self.embed_tokens(input_ids)\n",
        "        self.make_empty_intermediate_tensors = make_empty_intermediate_tensors_factory(\n"
        '            ["hidden_states", "residual"], config.hidden_size\n'
        "        )\n"
        "\n"
        "        # EAGLE-3: absolute indices of the layers whose input is captured.\n"
        "        self.aux_hidden_state_layers = tuple[int, ...]()\n"
        "\n"
        "    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:\n"
        "        return self.embed_tokens(input_ids)\n",
        "DeepseekV2Model.__init__ end",
    )
    text = sub1(
        text,
        "        for layer in islice(self.layers, self.start_layer, self.end_layer):\n"
        "            hidden_states, residual = layer(\n"
        "                positions, hidden_states, residual, llama_4_scaling\n"
        "            )\n",
        "        aux_hidden_states: list[torch.Tensor] = []\n"
        "        # start=self.start_layer: idx is the ABSOLUTE layer index, so the capture\n"
        "        # is right on every pipeline-parallel rank, not only the first one.\n"
        "        for idx, layer in enumerate(\n"
        "            islice(self.layers, self.start_layer, self.end_layer),\n"
        "            start=self.start_layer,\n"
        "        ):\n"
        "            if idx in self.aux_hidden_state_layers:\n"
        "                # The first layer of the first rank has no residual yet.\n"
        "                aux_hidden_states.append(\n"
        "                    hidden_states if residual is None else hidden_states + residual\n"
        "                )\n"
        "            hidden_states, residual = layer(\n"
        "                positions, hidden_states, residual, llama_4_scaling\n"
        "            )\n",
        "DeepseekV2Model.forward layer loop",
    )
    text = sub1(
        text,
        "        hidden_states, _ = self.norm(hidden_states, residual)\n"
        "        return hidden_states\n",
        "        hidden_states, _ = self.norm(hidden_states, residual)\n"
        "        if len(aux_hidden_states) > 0:\n"
        "            return hidden_states, aux_hidden_states\n"
        "        return hidden_states\n",
        "DeepseekV2Model.forward return",
    )
    text = sub1(
        text,
        "class DeepseekV2ForCausalLM(\n"
        "    nn.Module, SupportsPP, DeepseekV2MixtureOfExperts, SupportsLoRA, SupportsEagle\n"
        "):\n",
        "class DeepseekV2ForCausalLM(\n"
        "    nn.Module,\n"
        "    SupportsPP,\n"
        "    DeepseekV2MixtureOfExperts,\n"
        "    SupportsLoRA,\n"
        "    SupportsEagle,\n"
        "    SupportsEagle3,\n"
        "):\n",
        "DeepseekV2ForCausalLM bases",
    )
    text = sub1(
        text,
        "    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:\n"
        "        return self.model.embed_input_ids(input_ids)\n",
        "    def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:\n"
        "        self.model.aux_hidden_state_layers = layers\n"
        "\n"
        "    def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:\n"
        "        num_layers = len(self.model.layers)\n"
        "        return (2, num_layers // 2, num_layers - 3)\n"
        "\n"
        "    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:\n"
        "        return self.model.embed_input_ids(input_ids)\n",
        "DeepseekV2ForCausalLM methods",
    )
    return text


def edit_kimi(text: str, version: str) -> str:
    if version == "0.15.1":
        text = sub1(
            text,
            "from vllm.model_executor.models.interfaces import SupportsMultiModal, SupportsPP\n",
            "from vllm.model_executor.models.interfaces import (\n"
            "    SupportsEagle,\n"
            "    SupportsEagle3,\n"
            "    SupportsMultiModal,\n"
            "    SupportsPP,\n"
            ")\n",
            "kimi interfaces import (0.15.1)",
        )
        text = sub1(
            text,
            "class KimiK25ForConditionalGeneration(nn.Module, SupportsMultiModal, SupportsPP):\n",
            "class KimiK25ForConditionalGeneration(\n"
            "    nn.Module,\n"
            "    SupportsMultiModal,\n"
            "    SupportsPP,\n"
            "    SupportsEagle,\n"
            "    SupportsEagle3,\n"
            "):\n",
            "kimi bases (0.15.1)",
        )
        text = sub1(
            text,
            "    def compute_logits(self, hidden_states: torch.Tensor, **kwargs) -> torch.Tensor:\n"
            "        logits = self.logits_processor(self.lm_head, hidden_states, **kwargs)\n"
            "        return logits\n",
            "    def compute_logits(self, hidden_states: torch.Tensor, **kwargs) -> torch.Tensor:\n"
            "        logits = self.logits_processor(self.lm_head, hidden_states, **kwargs)\n"
            "        return logits\n"
            "\n"
            "    # In this version self.language_model is a bare DeepseekV2Model (there is\n"
            "    # no *ForCausalLM around it), so the EAGLE-3 hooks act on it directly.\n"
            "    def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:\n"
            "        self.language_model.aux_hidden_state_layers = layers\n"
            "\n"
            "    def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:\n"
            "        num_layers = len(self.language_model.layers)\n"
            "        return (2, num_layers // 2, num_layers - 3)\n",
            "kimi methods (0.15.1)",
        )
        return text
    text = sub1(
        text,
        "from vllm.model_executor.models.interfaces import (\n    SupportsMultiModal,\n",
        "from vllm.model_executor.models.interfaces import (\n"
        "    SupportsEagle,\n"
        "    SupportsEagle3,\n"
        "    SupportsMultiModal,\n",
        "kimi interfaces import",
    )
    text = sub1(
        text,
        "class KimiK25ForConditionalGeneration(\n"
        "    nn.Module, SupportsMultiModal, SupportsPP, SupportsQuant\n"
        "):\n",
        "class KimiK25ForConditionalGeneration(\n"
        "    nn.Module,\n"
        "    SupportsMultiModal,\n"
        "    SupportsPP,\n"
        "    SupportsQuant,\n"
        "    SupportsEagle,\n"
        "    SupportsEagle3,\n"
        "):\n",
        "kimi bases",
    )
    text = sub1(
        text,
        "        logits = self.language_model.compute_logits(hidden_states)\n"
        "        return logits\n",
        "        logits = self.language_model.compute_logits(hidden_states)\n"
        "        return logits\n"
        "\n"
        "    def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:\n"
        "        self.language_model.set_aux_hidden_state_layers(layers)\n"
        "\n"
        "    def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:\n"
        "        return self.language_model.get_eagle3_aux_hidden_state_layers()\n",
        "kimi methods",
    )
    return text


def edit_eagle_token(text: str, version: str) -> str:
    anchor = (
        '            elif self.get_model_name(target_model) == "PixtralForConditionalGeneration":\n'
        "                self.model.config.image_token_index = (\n"
        "                    target_model.config.vision_config.image_token_id\n"
        "                )\n"
    )
    return sub1(
        text,
        anchor,
        anchor
        + "            elif self.get_model_name(target_model) == "
        + '"KimiK25ForConditionalGeneration":\n'
        "                # Kimi-K2.5's config has no image_token_index.\n"
        "                self.model.config.image_token_index = (\n"
        "                    target_model.config.media_placeholder_token_id\n"
        "                )\n",
        "eagle image_token_index branch",
    )


def edit_eagle_bare_lm(text: str, version: str) -> str:
    text = sub1(
        text,
        "            target_language_model = target_model.get_language_model()\n"
        "        else:\n"
        "            target_language_model = target_model\n"
        "\n"
        "        # share embed_tokens with the target model if needed\n"
        "        if get_pp_group().world_size == 1:\n"
        '            if hasattr(target_language_model.model, "embed_tokens"):\n'
        "                target_embed_tokens = target_language_model.model.embed_tokens\n"
        '            elif hasattr(target_language_model.model, "embedding"):\n'
        "                target_embed_tokens = target_language_model.model.embedding\n",
        "            target_language_model = target_model.get_language_model()\n"
        "        else:\n"
        "            target_language_model = target_model\n"
        "\n"
        "        # Kimi-K2.5's wrapper returns a bare DeepseekV2Model from\n"
        "        # get_language_model(): embed_tokens sits on it directly (there is no\n"
        "        # `.model`) and lm_head sits on the wrapper itself.\n"
        "        target_embed_owner = getattr(\n"
        '            target_language_model, "model", target_language_model\n'
        "        )\n"
        "        target_lm_head_owner = (\n"
        "            target_language_model\n"
        '            if hasattr(target_language_model, "lm_head")\n'
        "            else target_model\n"
        "        )\n"
        "\n"
        "        # share embed_tokens with the target model if needed\n"
        "        if get_pp_group().world_size == 1:\n"
        '            if hasattr(target_embed_owner, "embed_tokens"):\n'
        "                target_embed_tokens = target_embed_owner.embed_tokens\n"
        '            elif hasattr(target_embed_owner, "embedding"):\n'
        "                target_embed_tokens = target_embed_owner.embedding\n",
        "eagle embed_tokens owner (0.15.1)",
    )
    start = text.index("        target_lm_head_owner = (")
    end = text.index("    def dummy_run(", start)
    seg = text[start:end]
    head, rest = seg.split("        # share embed_tokens", 1)
    n_before = rest.count("target_language_model.lm_head") + rest.count(
        'hasattr(target_language_model, "lm_head")'
    )
    if n_before != 5:
        raise SystemExit(f"eagle lm_head sharing: expected 5 references, found {n_before}")
    rest = rest.replace("target_language_model.lm_head", "target_lm_head_owner.lm_head")
    rest = rest.replace(
        'hasattr(target_language_model, "lm_head")', 'hasattr(target_lm_head_owner, "lm_head")'
    )
    return text[:start] + head + "        # share embed_tokens" + rest + text[end:]


# --------------------------------------------------------------------------- concerns


@dataclass(frozen=True)
class Concern:
    name: str  # patch file name
    target: str
    edit: Callable[[str, str], str]
    versions: tuple[str, ...]
    title: str
    fixes: str


CONCERNS: list[Concern] = [
    Concern(
        "0001-speculative-eagle3-allow-deepseek-kimi.patch",
        SPEC,
        edit_allowlist,
        tuple(PATCH_VERSIONS),
        "speculative config: accept DeepSeek-V2/V3 and Kimi-K2/K2.5 EAGLE-3 targets",
        "SpeculativeConfig refuses method=eagle3 for targets whose hf_text_config.model_type\n"
        '# is not in the allowlist ("Eagle3 is only supported for [...] models"), before any\n'
        "# model code runs. Adds deepseek_v2, deepseek_v3, kimi_k2 and kimi_k25 (substring match).",
    ),
    Concern(
        "0002-deepseek-v2-supports-eagle3.patch",
        DSV2,
        edit_deepseek,
        tuple(PATCH_VERSIONS),
        "deepseek_v2: SupportsEagle3 + auxiliary hidden states at absolute layer indices",
        "DeepseekV2ForCausalLM (and DeepseekV3ForCausalLM, its subclass) lacks SupportsEagle3:\n"
        '# "Model does not support EAGLE3 interface but aux_hidden_state_outputs was\n'
        '# requested". DeepseekV2Model gains aux_hidden_state_layers; forward captures\n'
        "# hidden_states + residual before each listed layer, indexed ABSOLUTELY\n"
        "# (enumerate(..., start=self.start_layer), right under pipeline parallelism), with\n"
        "# layer 0's residual None handled, and returns (hidden_states, aux_hidden_states)\n"
        "# after the final norm. The CausalLM gains set_aux_hidden_state_layers() and\n"
        "# get_eagle3_aux_hidden_state_layers() -> (2, n // 2, n - 3).",
    ),
    Concern(
        "0003-kimi-k25-supports-eagle3.patch",
        KIMI,
        edit_kimi,
        tuple(PATCH_VERSIONS),
        "kimi_k25: the wrapper implements SupportsEagle and SupportsEagle3 by delegation",
        "gpu_model_runner checks isinstance(get_model(), SupportsEagle3) on the OUTER model,\n"
        "# so KimiK25ForConditionalGeneration itself must implement the interface. Both\n"
        "# methods delegate to self.language_model. On 0.15.1 language_model is a bare\n"
        "# DeepseekV2Model, so the methods set/read its aux_hidden_state_layers directly.",
    ),
    Concern(
        "0004-eagle-kimi-k25-image-token-index.patch",
        EAGLE,
        edit_eagle_token,
        tuple(PATCH_VERSIONS),
        "eagle drafter loader: map Kimi-K2.5 media_placeholder_token_id to image_token_index",
        "For a multimodal target the EAGLE loader copies target.config.image_token_index to\n"
        "# the drafter; Kimi-K2.5's config has media_placeholder_token_id instead\n"
        "# (AttributeError: 'KimiK25Config' object has no attribute 'image_token_index').",
    ),
    Concern(
        "0005-eagle-bare-language-model-embed-lm-head.patch",
        EAGLE,
        edit_eagle_bare_lm,
        ("0.15.1",),
        "eagle drafter loader: reach embed_tokens/lm_head when get_language_model() is bare",
        "0.15.1's Kimi-K2.5 wrapper returns a bare DeepseekV2Model from get_language_model().\n"
        "# The loader reads target_language_model.model.embed_tokens (AttributeError: no\n"
        "# `.model`) and shares lm_head only if target_language_model has one (silently\n"
        "# skipped: the drafter would run with an unloaded lm_head). Take embed_tokens from\n"
        "# the bare model and lm_head from the wrapper. No upstream equivalent: 0.16 changed\n"
        "# the wrapper to hold a DeepseekV3ForCausalLM instead.",
    ),
]


def diff_u(old: str, new: str, path: str) -> str:
    with tempfile.TemporaryDirectory() as td:
        a, b = Path(td, "a"), Path(td, "b")
        a.write_text(old, encoding="utf-8")
        b.write_text(new, encoding="utf-8")
        proc = subprocess.run(
            ["diff", "-u", "--label", f"a/{path}", "--label", f"b/{path}", str(a), str(b)],
            capture_output=True,
            text=True,
            check=False,
        )
    if proc.returncode != 1:
        raise SystemExit(f"diff -u {path}: rc={proc.returncode} {proc.stderr}")
    return proc.stdout


def wheel_metadata(version: str) -> str:
    from zipfile import ZipFile

    with ZipFile(wheels.fetch_wheel(version)) as zf:
        for n in zf.namelist():
            if n.endswith(".dist-info/METADATA"):
                return zf.read(n).decode()
    return ""


def torch_pin(version: str) -> str | None:
    m = re.search(r"^Requires-Dist: torch ?==\s*([0-9][^\s;,]*)", wheel_metadata(version), re.M)
    return m.group(1) if m else None


def drafter_training(version: str) -> dict[str, object]:
    """Which speculators fits (scripts/speculators_fit.py), from the wheel's pins."""
    m = re.search(r"^Requires-Dist: transformers ?([^;\n]*)", wheel_metadata(version), re.M)
    has_extract = '"extract_hidden_states"' in wheels.read_member(version, SPEC).decode()
    return speculators_fit.fit(
        version, torch_pin(version), m.group(1).strip() if m else "", has_extract
    )


class _IndentedDumper(yaml.SafeDumper):
    """Indent block sequences under their key (yamllint's indent-sequences: true)."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def build() -> dict[str, bytes]:
    """Return {relative path under patches/vllm: content} for everything generated."""
    files: dict[str, bytes] = {}
    versions: dict[str, dict] = {}
    for v in PATCH_VERSIONS:
        current: dict[str, str] = {}
        pristine: dict[str, bytes] = {}
        series = []
        for c in CONCERNS:
            if v not in c.versions:
                continue
            if c.target not in current:
                raw = wheels.read_member(v, c.target)
                pristine[c.target] = raw
                current[c.target] = raw.decode("utf-8")
            before = current[c.target]
            after = c.edit(before, v)
            if after == before:
                raise SystemExit(f"{v} {c.name}: edit changed nothing")
            header = (
                f"# specdeploy vLLM patch {c.name} (vLLM {v})\n"
                f"# {c.title}\n"
                f"#\n"
                f"# What it fixes: {c.fixes}\n"
                f"#\n"
                f"# Backports: {UPSTREAM}\n"
                f"#\n"
                "# Apply: python -m specdeploy.node.patching.patches apply --site-packages SP"
                " (or patch -p1 -d SP)\n"
            )
            body = header + diff_u(before, after, c.target)
            files[f"{v}/{c.name}"] = body.encode()
            current[c.target] = after
            series.append(
                {
                    "file": c.name,
                    "concern": c.title,
                    "targets": [c.target],
                    "sha256": sha256_bytes(body.encode()),
                }
            )
        # keys come from the PRISTINE file (the patch does not touch the dataclass)
        keys = speckeys.extract_fields(pristine[SPEC].decode())
        versions[v] = {
            "kind": "patch",
            "torch": torch_pin(v),
            "series": series,
            "series_sha256": series_sha256(
                [(s["file"], files[f"{v}/{s['file']}"]) for s in series]
            ),
            "targets": {
                t: {
                    "pristine_sha256": sha256_bytes(pristine[t]),
                    "patched_sha256": sha256_bytes(current[t].encode()),
                }
                for t in sorted(pristine)
            },
            "speculative_config_keys": keys["keys"],
            "speculative_config_internal_keys": keys["internal"],
            "drafter": wheel_facts.drafter_facts_from_wheel(v),
            "serve_shutdown_timeout": wheel_facts.shutdown_timeout_from_wheel(v),
            "drafter_training": drafter_training(v),
        }
    for v in NATIVE_VERSIONS:
        keys = speckeys.extract_fields(wheels.read_member(v, SPEC).decode())
        versions[v] = {
            "kind": "native",
            "torch": torch_pin(v),
            "speculative_config_keys": keys["keys"],
            "speculative_config_internal_keys": keys["internal"],
            "drafter": wheel_facts.drafter_facts_from_wheel(v),
            "serve_shutdown_timeout": wheel_facts.shutdown_timeout_from_wheel(v),
            "drafter_training": drafter_training(v),
            "dynamic_k": wheel_facts.dynamic_k_facts_from_wheel(v),
        }
    manifest = {
        "schema": 1,
        "native_from": NATIVE_FROM,
        "patch_strip": 1,
        "versions": versions,
    }
    head = (
        "# yamllint disable rule:line-length\n"
        "# (generated; holds 64-hex-digit sha256 values)\n"
        "#\n"
        "# vLLM patch manifest: the single source of truth for the patcher\n"
        "# (python -m specdeploy.node.patching.patches), the vllm_patches role, preflight and"
        " tests.\n"
        "# GENERATED by scripts/regen_patches.py from the real wheels; do not edit by hand.\n"
        "#\n"
        "# versions.<X>.kind: patch (series applied by the toolkit) | native (>= native_from:\n"
        "#   nothing patched, native support verified). A version absent here is native when\n"
        "#   >= native_from, else unsupported.\n"
        "# series: ordered patch files in <this dir>/<X>/, -p1 relative to site-packages.\n"
        "# series_sha256: sha256 over (file name, NUL, content, NUL) of each patch, in order.\n"
        "# targets.<path>: sha256 of the pristine wheel file and of the fully patched file.\n"
        "# speculative_config_keys: SpeculativeConfig init fields of that wheel (AST-extracted\n"
        "#   by specdeploy.node.patching.speckeys; the JSON of --speculative-config may use only"
        " these).\n"
        "# serve_shutdown_timeout: whether that wheel's serve CLI has --shutdown-timeout (read\n"
        "#   off vllm/engine/arg_utils.py by specdeploy.node.patching.speckeys): with it\n"
        "#   SIGTERM lets in-flight requests finish up to that many seconds; without it they\n"
        "#   are aborted.\n"
        "# drafter: what specdeploy.controller.drafter checks (from registry.py, the proposer's\n"
        "#   isinstance assert and llama_eagle3.py of that wheel): loadable EAGLE-3 drafter\n"
        "#   architectures, the fixed aux-layer count (fc input = 3 x target hidden) or null,\n"
        "#   and whether eagle_config.eagle_aux_hidden_state_layer_ids is read at all.\n"
        "# drafter_training: for the drafter pipeline: whether the wheel has the\n"
        "#   extract_hidden_states method (then the pipeline extracts through it, else through\n"
        "#   the EAGLE-3 proposer hook) and which speculators releases fit, with the layer\n"
        "#   convention their data generation captures (scripts/speculators_fit.py).\n"
        "# dynamic_k: null, or what the wheel's num_speculative_tokens_per_batch_size (k by\n"
        "#   running batch size) does, read off its source\n"
        "#   (wheel_facts.dynamic_k_facts_from_wheel): the validation rules of\n"
        "#   vllm/v1/spec_decode/dynamic/utils.py and its sha256, what the batch size is,\n"
        "#   whether a k=0 step still runs the drafter's first pass, data parallel and CUDA\n"
        "#   graph behaviour. The first version with it: 0.24.0.\n"
    )
    body = yaml.dump(
        manifest, Dumper=_IndentedDumper, sort_keys=False, default_flow_style=False, width=100
    )
    files["manifest.yml"] = ("---\n" + head + body).encode()
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--check", action="store_true", help="exit 1 if any file would change")
    args = ap.parse_args(argv)
    files = build()
    changed = []
    for rel, content in files.items():
        p = HERE / rel
        if not p.is_file() or p.read_bytes() != content:
            changed.append(rel)
            if not args.check:
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(content)
    for rel in changed:
        print(("would change: " if args.check else "wrote: ") + rel)
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
