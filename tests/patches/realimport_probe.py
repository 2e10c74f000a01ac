"""Run INSIDE a real vLLM venv (subprocess of test_import_real.py). Prints one JSON line.

Checks, with vLLM's own code: supports_eagle3() on the three target classes, and the
SpeculativeConfig target validation (the allowlist) for given model types.

What is stubbed, and why (nothing else is):
* SpeculativeConfig instance: built with object.__new__ (no __init__/pydantic validation) and
  only the attributes that _verify_args reads are set; the target ModelConfig is a
  SimpleNamespace carrying hf_text_config.model_type, because building a real ModelConfig
  needs a model directory with weights/config from a hub. _verify_args itself is vLLM's
  unmodified method (the function pydantic runs as the model_validator(mode="after")).
"""

from __future__ import annotations

import json
import sys
import time
import types


def main() -> int:
    model_types = sys.argv[1:] or ["deepseek_v3", "kimi_k2"]
    t0 = time.monotonic()
    import vllm
    from vllm.config.speculative import SpeculativeConfig
    from vllm.model_executor.models.deepseek_v2 import (
        DeepseekV2ForCausalLM,
        DeepseekV3ForCausalLM,
    )
    from vllm.model_executor.models.interfaces import supports_eagle3
    from vllm.model_executor.models.kimi_k25 import KimiK25ForConditionalGeneration

    out: dict = {
        "vllm_version": vllm.__version__,
        "vllm_file": vllm.__file__,
        "import_s": round(time.monotonic() - t0, 2),
        "supports_eagle3": {
            c.__name__: bool(supports_eagle3(c))
            for c in (DeepseekV2ForCausalLM, DeepseekV3ForCausalLM, KimiK25ForConditionalGeneration)
        },
        "spec_validation": {},
    }
    import torch

    out["torch"] = torch.__version__
    verify = SpeculativeConfig._verify_args
    verify = getattr(verify, "__func__", verify)  # plain function either way
    for mt in model_types:
        obj = object.__new__(SpeculativeConfig)
        attrs = {
            "tensor_parallel_size": None,
            "num_speculative_tokens": 3,
            "draft_model_config": None,
            "disable_by_batch_size": None,
            "method": "eagle3",
            "model": "drafter",
            "target_model_config": types.SimpleNamespace(
                hf_text_config=types.SimpleNamespace(model_type=mt)
            ),
        }
        for k, v in attrs.items():
            object.__setattr__(obj, k, v)
        try:
            verify(obj)
            out["spec_validation"][mt] = "accepted"
        except ValueError as exc:
            out["spec_validation"][mt] = f"refused: {exc}"
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
