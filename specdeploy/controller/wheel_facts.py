"""What a pinned vLLM version accepts, read off its cached wheel (controller side only).

The parsing lives in specdeploy.node.patching.speckeys (stdlib, runs on the node too); this module
only fetches the wheel (specdeploy.controller.wheels) and hands the sources to it, so node
code never imports controller code. ``python -m specdeploy.controller.wheel_facts 0.16.0``
prints the SpeculativeConfig keys. Exit codes: 0 ok, 2 usage or I/O error.
"""

from __future__ import annotations

import hashlib
import re
import sys
import zipfile

from specdeploy.controller import wheels
from specdeploy.node import cli
from specdeploy.node.patching import speckeys
from specdeploy.node.patching.speckeys import eagle3_drafter_architectures, extract_fields

SPECULATIVE_CONFIG = "vllm/config/speculative.py"
PROPOSERS = ("vllm/v1/spec_decode/eagle.py", "vllm/v1/spec_decode/llm_base_proposer.py")


def extract_from_wheel(version: str) -> dict[str, list[str]]:
    """SpeculativeConfig's keys of a version (downloads its wheel once)."""
    return extract_fields(wheels.read_member(version, SPECULATIVE_CONFIG).decode())


def shutdown_timeout_from_wheel(version: str) -> bool:
    """Whether that version's serve CLI has ``--shutdown-timeout`` (a drain on SIGTERM)."""
    return speckeys.has_shutdown_timeout(wheels.read_member(version, speckeys.ARG_UTILS).decode())


def drafter_facts_from_wheel(version: str) -> dict[str, object]:
    """Facts the drafter check needs, read off the cached wheel."""
    with zipfile.ZipFile(wheels.fetch_wheel(version)) as zf:
        names = set(zf.namelist())

        def read(member: str) -> str:
            return zf.read(member).decode("utf-8") if member in names else ""

        proposers = [read(m) for m in PROPOSERS if m in names]
        archs = eagle3_drafter_architectures(
            read("vllm/model_executor/models/registry.py"), proposers
        )
        llama = read("vllm/model_executor/models/llama_eagle3.py")
    return {
        "eagle3_architectures": archs,
        # 0.15-0.20: fc input is target_hidden_size * 3, so exactly three aux layers
        "aux_layer_count_fixed": 3 if "target_hidden_size * 3" in llama else None,
        # later versions also read eagle_config["eagle_aux_hidden_state_layer_ids"]
        "eagle_config_aux_ids_honoured": bool(
            re.search(r"eagle_config\.get\(\s*\"eagle_aux_hidden_state_layer_ids\"", llama)
        ),
    }


DYNAMIC_KEY = "num_speculative_tokens_per_batch_size"
DYNAMIC_UTILS = "vllm/v1/spec_decode/dynamic/utils.py"


def dynamic_k_facts_from_wheel(version: str) -> dict[str, object] | None:
    """What a wheel's dynamic speculative decoding (k by batch size) does, read off its source;
    None when the version has no ``num_speculative_tokens_per_batch_size``."""
    with zipfile.ZipFile(wheels.fetch_wheel(version)) as zf:
        names = set(zf.namelist())

        def read(member: str) -> str:
            return zf.read(member).decode("utf-8") if member in names else ""

        if DYNAMIC_KEY not in read(SPECULATIVE_CONFIG) or DYNAMIC_UTILS not in names:
            return None
        utils = read(DYNAMIC_UTILS)
        config = read("vllm/config/vllm.py")
        scheduler = read("vllm/v1/core/sched/scheduler.py")
        proposer = "".join(read(m) for m in PROPOSERS)
    # the rules the toolkit's schedule.validate mirrors, as the wheel states them
    rules = {
        "inclusive_ranges": "list of inclusive ranges" in utils,
        "first_range_starts_at_1": "must start at 1" in utils,
        "k_zero_allowed": "values must be >= 0" in utils,
        "sorted_non_overlapping": "non-overlapping and sorted" in utils,
        "gaps_carry_previous_k": "carrying forward" in utils,
    }
    if "_maybe_disable_dynamic_sd_for_data_parallel" in config:
        dp = "disabled with a warning when data_parallel_size > 1 (static max k instead)"
    else:
        dp = "no guard: data parallel ranks may pick different k (the guard came later)"
    if "_maybe_override_dynamic_sd_cudagraph_mode" in config:
        graphs = "full CUDA graphs overridden to PIECEWISE" + (
            " (not with VLLM_USE_V2_MODEL_RUNNER=1)"
            if "VLLM_USE_V2_MODEL_RUNNER=1 if you want" in config
            else ""
        )
    else:
        graphs = "no override in vllm/config/vllm.py"
    return {
        "key": DYNAMIC_KEY,
        "validation_sha256": hashlib.sha256(utils.encode()).hexdigest(),
        "rules": rules,
        # the scheduler indexes its lookup with the number of requests scheduled in the step
        "batch_size": (
            "requests scheduled in the step"
            if "dynamic_sd_lookup[\n" in scheduler or "len(num_scheduled_tokens)" in scheduler
            else "unknown"
        ),
        # k = 0: the drafter's first pass still runs (keeps its KV cache in sync); None: the
        # V1 proposer that says so is not in this wheel (not read further)
        "k0_drafter_pass": True if "Dynamic SD decided K=0" in proposer else None,
        "data_parallel": dp,
        "cuda_graphs": graphs,
    }


def main(argv: list[str] | None = None) -> int:
    prog = "python -m specdeploy.controller.wheel_facts"
    ap = cli.parser(prog, __doc__)
    ap.add_argument("version", help="vLLM version (read from the cached wheel)")
    args = ap.parse_args(argv)
    return speckeys.print_keys(
        lambda: extract_from_wheel(args.version), f"{prog}: error: vLLM {args.version}", args.json
    )


if __name__ == "__main__":
    sys.exit(main())
