"""What a pinned vLLM version accepts, read off its cached wheel (controller side only).

The parsing lives in specdeploy.node.patching.speckeys (stdlib, runs on the node too); this module
only fetches the wheel (specdeploy.controller.wheels) and hands the sources to it, so node
code never imports controller code. ``python -m specdeploy.controller.wheel_facts 0.16.0``
prints the SpeculativeConfig keys. Exit codes: 0 ok, 2 usage or I/O error.
"""

from __future__ import annotations

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
