"""The deploy's input checks that need the toolkit's knowledge, on the controller, before any
node is touched: the vLLM version against the patch manifest, the speculative config's keys
against that version's SpeculativeConfig, the drafter as one knob, and a forced attention
backend against speculation.

    python -m specdeploy.controller.inputs --vllm-version 0.16.0+cu129 \
        --speculative-config-json '{"method": "eagle3", "num_speculative_tokens": 3}' \
        --drafter-path /srv/models/Kimi-K2.5-eagle3 [--no-speculation] \
        [--attention-backend NAME] [--manifest PATH] [--json]

A version with a local label (``0.16.0+cu129``, as vLLM's wheel index names CUDA builds) is the
release ``0.16.0`` here, in the patcher and in the drafter check (patches.public_version).
The drafter is ``specdeploy_drafter_path`` alone: the served ``--speculative-config`` takes its
``model`` from it; a ``model`` key in ``specdeploy_speculative_config`` that names another
directory is refused (the checked drafter would not be the served one).

Exit codes: 0 the inputs are fine, 1 an input is refused (each finding names the knob),
2 usage or environment error (bad JSON, no manifest). ``--json`` prints the findings and the
manifest's entry for the version (the release plan reads it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from specdeploy.controller import schedule
from specdeploy.node import jsontext
from specdeploy.node.module_utils.attention import is_mla_backend
from specdeploy.node.module_utils.versions import public_version, version_key
from specdeploy.node.patching.patches import Manifest, UsageError


def check(
    manifest: Manifest,
    vllm_version: str,
    speculative_config: dict[str, Any],
    drafter_path: str,
    speculation: bool,
    attention_backend: str,
    schedule_value: object = "off",
    schedule_context: dict[str, Any] | None = None,
) -> tuple[list[dict[str, str]], dict[str, Any]]:
    """(errors, facts): each error is {"knob", "message"}; facts describe the version."""
    errors: list[dict[str, str]] = []
    kind = manifest.kind(vllm_version)
    entry = manifest.entry(vllm_version)
    facts = {
        "version": vllm_version,
        "release": public_version(vllm_version),
        "kind": kind,
        "native": kind == "native",
        "entry": entry,
    }
    if kind == "native" and not entry:
        errors.append(
            {
                "knob": "specdeploy_vllm_version",
                "message": f"specdeploy_vllm_version={vllm_version} is not in the patch manifest "
                f"{manifest.path}: the toolkit has no facts read off its wheel (speculative "
                "config keys, drafter architectures), and its install would fail. Known: "
                f"{', '.join(sorted(manifest.versions(), key=version_key))}; add it with "
                "python -m scripts.regen_patches, or pin a known version.",
            }
        )
    if kind == "unsupported":
        errors.append(
            {
                "knob": "specdeploy_vllm_version",
                "message": f"specdeploy_vllm_version={vllm_version} is not supported: patch series "
                f"exist for {', '.join(manifest.patch_versions())}; {manifest.native_from} and "
                "later support EAGLE-3 on DeepSeek-V3/Kimi natively.",
            }
        )
    facts["schedule"] = schedule.resolve("off", version=vllm_version, entry={},
                                         manifest_versions={})  # fmt: skip
    if not speculation:
        return errors, facts
    errors += speculative_values(speculative_config)
    if kind != "unsupported":
        try:
            facts["schedule"] = schedule.resolve(
                schedule_value,
                version=public_version(vllm_version),
                entry=entry,
                manifest_versions=manifest.versions(),
                **(schedule_context or {}),
            )
        except schedule.ScheduleError as exc:
            errors.append({"knob": "specdeploy_speculative_schedule", "message": str(exc)})
    allowed = list(entry.get("speculative_config_keys") or [])
    unknown = [k for k in speculative_config if allowed and k not in allowed]
    if unknown:
        errors.append(
            {
                "knob": "specdeploy_speculative_config",
                "message": f"specdeploy_speculative_config has keys that vLLM {vllm_version}'s "
                f"SpeculativeConfig does not accept: {', '.join(unknown)}. "
                f"Allowed: {', '.join(allowed)}.",
            }
        )
    model = speculative_config.get("model")
    if model is not None and str(model).rstrip("/") != drafter_path.rstrip("/"):
        errors.append(
            {
                "knob": "specdeploy_speculative_config",
                "message": f"specdeploy_speculative_config.model={model} is not "
                f"specdeploy_drafter_path={drafter_path}: the drafter is one knob. Set "
                "specdeploy_drafter_path (the served --speculative-config takes its model "
                "from it) and leave model out of specdeploy_speculative_config.",
            }
        )
    if attention_backend and is_mla_backend(attention_backend):
        errors.append(
            {
                "knob": "specdeploy_attention_backend",
                "message": f"specdeploy_attention_backend={attention_backend} is an MLA-only "
                "backend, and vLLM applies --attention-backend to the EAGLE-3 drafter too: a "
                'llama-style drafter then fails to load ("non-MLA not supported"). Leave '
                "specdeploy_attention_backend empty (vLLM picks TRITON_MLA on SM120 by itself) "
                "or disable speculation.",
            }
        )
    return errors, facts


def speculative_values(config: dict[str, Any]) -> list[dict[str, str]]:
    """The values the deploy needs in ``specdeploy_speculative_config``: a ``method`` and a
    ``num_speculative_tokens`` that is an integer > 0 (not "three", -2, 2.5 or true)."""
    knob = "specdeploy_speculative_config"
    errors = []
    if not config.get("method"):
        errors.append({"knob": knob, "message": f"{knob} has no method (e.g. eagle3)."})
    k = config.get("num_speculative_tokens")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        shown = "missing" if k is None else f"{k!r}"
        errors.append(
            {
                "knob": knob,
                "message": f"{knob}.num_speculative_tokens is {shown}: want an integer > 0 "
                "(the tokens the drafter proposes per step, e.g. 3).",
            }
        )
    return errors


def _json_object(text: str, flag: str) -> dict[str, Any]:
    try:
        return jsontext.parse_object(text, flag)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _json_value(text: str, flag: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        raise UsageError(f"{flag}: not JSON: {text[:80]!r}") from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="spec-inputs",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--vllm-version", required=True)
    ap.add_argument("--speculative-config-json", default="{}")
    ap.add_argument("--drafter-path", default="")
    ap.add_argument("--no-speculation", action="store_true", help="speculation is disabled")
    ap.add_argument("--attention-backend", default="")
    ap.add_argument("--manifest", type=Path, help="patches/vllm/manifest.yml")
    ap.add_argument(
        "--speculative-schedule-json",
        default='"off"',
        help='specdeploy_speculative_schedule as JSON: "off", "auto" or [[start, end, k], ...]',
    )
    ap.add_argument("--history", default="", help="history DB (for a schedule of auto)")
    ap.add_argument("--node", default="", help="this node's name in the history")
    ap.add_argument("--model", default="", help="the served model name in the history")
    ap.add_argument("--max-num-seqs", type=int, default=256)
    ap.add_argument("--experts", type=int, default=0, help="routed experts of the target")
    ap.add_argument("--top-k", type=int, default=0, help="experts per token")
    ap.add_argument("--data-parallel-size", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        manifest = Manifest.load(args.manifest)
        spec = _json_object(args.speculative_config_json, "--speculative-config-json")
        sched_value = _json_value(args.speculative_schedule_json, "--speculative-schedule-json")
    except UsageError as exc:
        print(f"spec-inputs: error: {exc}", file=sys.stderr)
        return 2
    if not args.vllm_version.strip():
        print("spec-inputs: error: --vllm-version is empty", file=sys.stderr)
        return 2
    errors, facts = check(
        manifest,
        args.vllm_version,
        spec,
        args.drafter_path,
        not args.no_speculation,
        args.attention_backend,
        sched_value,
        {
            "history_db": args.history,
            "node": args.node,
            "model": args.model,
            "max_num_seqs": args.max_num_seqs,
            "experts": args.experts,
            "top_k": args.top_k,
            "data_parallel_size": args.data_parallel_size,
        },
    )
    if args.json:
        print(json.dumps({"ok": not errors, "errors": errors, "vllm": facts}, indent=2))
    else:
        for e in errors:
            print(f"error: {e['message']}")
        if not errors:
            print(f"inputs ok (vLLM {facts['release']}, {facts['kind']})")
            sched = facts.get("schedule") or {}
            if sched.get("mode", "off") != "off":
                print(f"speculative schedule: {sched['message']}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
