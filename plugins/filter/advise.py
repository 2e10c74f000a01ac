"""The target's MoE shape for `make advise` (playbooks/advise.yml), as a filter.

``advise_moe_shape`` reads the routed experts and experts per token from the target's
config.json as the node slurped it: a multimodal target (Kimi K2.5, Qwen3-VL) keeps its text
model's configuration under ``text_config``; a dense target, or a config.json that could not be
read, is 0 and 0. Pure functions: no node is contacted here.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any


def moe_shape(config: Mapping[str, Any]) -> dict[str, Any]:
    """{"experts", "top_k"} of a parsed config.json (DeepSeek-style n_routed_experts, else the
    Qwen/Mixtral-style num_experts)."""
    text = config.get("text_config", config)
    if not isinstance(text, Mapping):
        text = {}
    experts = text["n_routed_experts"] if "n_routed_experts" in text else text.get("num_experts", 0)
    return {"experts": experts, "top_k": text.get("num_experts_per_tok", 0)}


def advise_moe_shape(slurped: Mapping[str, Any]) -> dict[str, Any]:
    """The shape from a registered ansible.builtin.slurp of config.json; a slurp that failed or
    was skipped (no content) reads as a dense target."""
    if "content" not in slurped:
        return moe_shape({})
    return moe_shape(json.loads(base64.b64decode(slurped["content"])))


class FilterModule:
    def filters(self):
        return {"advise_moe_shape": advise_moe_shape}
