"""What differs between the two serving engines, vLLM and SGLang (issue 29): one place.

Everything engine-specific the controller needs lives here, so the roles select by
``specdeploy_engine`` and never branch on it in Jinja:

* the SGLang server command line for an EAGLE-3 release (``sglang_argv``);
* how SGLang's acceptance numbers relate to vLLM's (``acceptance_from_sglang``);
* which numbers an engine does not give (per-position acceptance on SGLang) and the gates
  that need them, refused in the preflight (``refused_gates``);
* the aux-layer id convention of the drafter for each engine (``served_aux_layers``,
  ``check_drafter_engine``);
* known-bad combinations on SM120 (RTX PRO 6000 Blackwell workstation) and the custom
  all-reduce default on nodes without PCIe peer-to-peer (``sm120_findings``).

Facts are from SGLang 0.5.15 as recorded on the H200 (shared/gpu-recipe/sglang/recorded/
run3-final: metrics-spec.txt, server-spec.log) and the issue's sources.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

ENGINES = ("vllm", "sglang")

# Architectures whose aux hidden-state ids SGLang shifts by one relative to vLLM: SGLang's
# DeepseekV2/V3 model (and Kimi-K2/K2.5, built on it) captures the hidden state after layer i
# where vLLM captures the input of layer i, so a drafter trained on vLLM's [1, 2, 3] is served
# by SGLang as [2, 3, 4] (seen in the hand run of shared/gpu-recipe/sglang).
SGLANG_SHIFTED_ARCHITECTURES = frozenset(
    {"DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM", "KimiK25ForConditionalGeneration"}
)

# Drafter weights SGLang's LlamaForCausalLMEagle3 does not load: the q/k/v biases, and it has
# no norm_before_residual (it always normalises after the residual add).
SGLANG_IGNORED_DRAFTER_KEYS = ("q_proj.bias", "k_proj.bias", "v_proj.bias")

# Numbers each engine gives. SGLang exports the mean acceptance length and rate (gauges over
# its last logging window, sglang:spec_accept_length / sglang:spec_accept_rate), the verify
# count (sglang:spec_verify_calls_total) and per-request meta_info; it gives no acceptance by
# draft position, which vLLM counts (vllm:spec_decode_num_accepted_tokens_per_pos).
UNAVAILABLE = {"vllm": frozenset(), "sglang": frozenset({"per_position_acceptance"})}
# Gate keys (gates.json) that need a number, by number.
GATES_NEEDING = {"per_position_acceptance": ("per_position_floors",)}

SGLANG_METRICS = {
    "accept_length": "sglang:spec_accept_length",
    "accept_rate": "sglang:spec_accept_rate",
    "num_steps": "sglang:spec_num_steps",
    "num_draft_tokens": "sglang:spec_num_draft_tokens",
    "verify_calls": "sglang:spec_verify_calls_total",
    "gen_throughput": "sglang:gen_throughput",
}
# The scheduler's log line, e.g. "Decode batch, #running-req: 1, ..., accept len: 3.40,
# accept rate: 0.80, cuda graph: True, gen throughput (token/s): 920.57, #queue-req: 0".
ACCEPT_LOG = re.compile(r"accept len: (?P<len>[0-9.]+), accept rate: (?P<rate>[0-9.]+)")


# The SGLang versions a release may pin, with what their wheels require (read off each wheel's
# METADATA, `pip download --no-deps sglang==V`; tests/unit/test_engines.py re-reads them when
# the wheels are cached). 0.5.15-0.5.17 pin torch 2.11.0, the GPU machine's; 0.5.18 and later
# pin 2.13/2.14. The wheels are cp311 manylinux_2_34 (not pure Python: a gRPC extension).
SGLANG_PINS: dict[str, dict[str, str]] = {
    "0.5.15": {"torch": "2.11.0", "sglang-kernel": "0.4.4", "flashinfer_python": "0.6.12",
               "transformers": "5.12.1"},
    "0.5.16": {"torch": "2.11.0", "sglang-kernel": "0.4.5", "flashinfer_python": "0.6.14",
               "transformers": "5.12.1"},
    "0.5.17": {"torch": "2.11.0", "sglang-kernel": "0.4.5",
               "flashinfer_python": "0.6.15.post1", "transformers": "5.12.1"},
}  # fmt: skip


# vLLM's attention backend names (the toolkit's knobs speak them) and SGLang's for the same
# kernels (SGLang 0.5.15 server_args.py ATTENTION_BACKEND_CHOICES). SGLang's default for MLA on
# Hopper is fa3 (server_args.py:4364-4365), which needs sgl_kernel's 1.76 GB flash_ops; Triton
# served the recorded H200 run and needs no SM90-only kernel, so it is the toolkit's default.
SGLANG_BACKEND_OF_VLLM = {
    "TRITON_MLA": "triton",
    "TRITON_ATTN": "triton",
    "FLASHINFER_MLA": "flashinfer",
    "FLASHINFER": "flashinfer",
    "FLASHMLA": "flashmla",
    "CUTLASS_MLA": "cutlass_mla",
    "FLASH_ATTN_MLA": "fa3",
    "FLASH_ATTN": "fa3",
}
SGLANG_DEFAULT_ATTENTION_BACKEND = "triton"


def sglang_backend(name: str) -> str:
    """An attention backend knob (vLLM's name or SGLang's) in SGLang's words; empty: default."""
    if not name:
        return SGLANG_DEFAULT_ATTENTION_BACKEND
    return SGLANG_BACKEND_OF_VLLM.get(name, name)


class EngineError(ValueError):
    """Bad engine input: the message is the one-line error the CLI prints (exit 2)."""


def engine(name: str) -> str:
    if name not in ENGINES:
        raise EngineError(f"specdeploy_engine is {name!r}, not one of {', '.join(ENGINES)}")
    return name


def sglang_pins(version: str) -> dict[str, str]:
    """What the pinned SGLang's wheel requires; an unknown version is a one-line error."""
    if version not in SGLANG_PINS:
        raise EngineError(
            f"specdeploy_sglang_version is {version!r}, not one of {', '.join(SGLANG_PINS)}"
        )
    return SGLANG_PINS[version]


def engine_requirement(eng: str, vllm_version: str, sglang_version: str) -> str:
    """The package the release venv installs for its engine (``name==version``)."""
    if engine(eng) == "sglang":
        sglang_pins(sglang_version)
        return f"sglang=={sglang_version}"
    return f"vllm=={vllm_version}"


@dataclass(frozen=True)
class SpecConfig:
    draft_model: str
    num_steps: int
    topk: int = 1
    num_draft_tokens: int | None = None  # topk 1: steps + 1

    def draft_tokens(self) -> int:
        if self.num_draft_tokens is not None:
            return self.num_draft_tokens
        if self.topk != 1:
            raise EngineError("speculative topk > 1 needs num_draft_tokens")
        return self.num_steps + 1


def sglang_argv(
    server: list[str],
    model: str,
    served_name: str,
    host: str,
    port: int,
    tp_size: int,
    context_length: int,
    mem_fraction: float,
    spec: SpecConfig | None,
    attention_backend: str = "",
    disable_custom_all_reduce: bool = False,
    trust_remote_code: bool = False,
    extra: list[str] | None = None,
) -> list[str]:
    """The ``sglang.launch_server`` line of a release; spec None is the no-speculation baseline."""
    if not (0 < mem_fraction < 1) or math.isnan(mem_fraction):
        raise EngineError(f"mem fraction {mem_fraction!r} is not in (0, 1)")
    argv = [*server, "--model-path", model, "--served-model-name", served_name,
            "--host", host, "--port", str(port), "--tp-size", str(tp_size),
            "--context-length", str(context_length),
            "--mem-fraction-static", str(mem_fraction), "--enable-metrics"]  # fmt: skip
    if trust_remote_code:
        argv.append("--trust-remote-code")
    if spec is not None:
        argv += ["--speculative-algorithm", "EAGLE3",
                 "--speculative-draft-model-path", spec.draft_model,
                 "--speculative-num-steps", str(spec.num_steps),
                 "--speculative-eagle-topk", str(spec.topk),
                 "--speculative-num-draft-tokens", str(spec.draft_tokens())]  # fmt: skip
    argv += ["--attention-backend", sglang_backend(attention_backend)]
    if disable_custom_all_reduce:
        argv.append("--disable-custom-all-reduce")
    return argv + list(extra or [])


@dataclass(frozen=True)
class Acceptance:
    """Acceptance in vLLM's terms, from SGLang's numbers.

    Both engines define the mean acceptance length as tokens emitted per target verify step:
    accepted draft tokens + the one bonus token. vLLM: 1 + num_accepted_tokens / num_drafts;
    SGLang: spec_accept_length, the same quantity. SGLang's accept rate is
    (accept_length - 1) / num_steps, vLLM's draft acceptance rate accepted / drafted tokens:
    equal for topk 1 (drafted = num_steps per step).
    """

    mean_length: float
    rate: float
    per_position: list[float] | None  # None: unavailable on this engine


def acceptance_from_sglang(accept_length: float, num_steps: int) -> Acceptance:
    if not math.isfinite(accept_length) or accept_length < 1 or accept_length > num_steps + 1:
        raise EngineError(f"SGLang accept length {accept_length!r} not in [1, {num_steps + 1}]")
    return Acceptance(accept_length, (accept_length - 1) / num_steps, None)


def parse_sglang_metrics(text: str) -> dict[str, float]:
    """SGLang's /metrics (Prometheus text) -> our names, summed over label sets."""
    by_name = {v: k for k, v in SGLANG_METRICS.items()}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in by_name:
            value = float(line.rsplit(" ", 1)[1])
            if not math.isfinite(value):
                raise EngineError(f"SGLang metric {name} is {value!r}")
            out[by_name[name]] = out.get(by_name[name], 0.0) + value
    return out


def refused_gates(eng: str, gates: dict[str, object]) -> list[str]:
    """One line per gate the engine cannot judge: refused before the load, not failed after."""
    lines = []
    for number in sorted(UNAVAILABLE[engine(eng)]):
        for key in GATES_NEEDING.get(number, ()):
            if gates.get(key):  # an empty list or None: the gate is off
                lines.append(f"gate {key} needs {number.replace('_', '-')}, unavailable on {eng}")
    return lines


def served_aux_layers(eng: str, architecture: str, ids: list[int]) -> list[int]:
    """The target layers an engine feeds the drafter for the drafter's listed aux ids."""
    shift = 1 if engine(eng) == "sglang" and architecture in SGLANG_SHIFTED_ARCHITECTURES else 0
    return [i + shift for i in ids]


AUX_ID_KEYS = ("eagle_aux_hidden_state_layer_ids",)


def drafter_built_for(drafter_cfg: dict[str, object]) -> str:
    """The engine convention a drafter was exported in (``specdeploy_engine`` in its
    config.json, written by the drafter pipeline; absent: vLLM's, the published layout)."""
    return str(drafter_cfg.get("specdeploy_engine", "vllm"))


def in_vllm_convention(architecture: str, drafter_cfg: dict[str, object]) -> dict[str, object]:
    """The drafter's config with its aux ids in vLLM's convention, for the checks that speak it:
    an SGLang export for a shifted architecture lists ids one lower than vLLM's."""
    if (
        drafter_built_for(drafter_cfg) != "sglang"
        or architecture not in SGLANG_SHIFTED_ARCHITECTURES
    ):
        return drafter_cfg

    return _with_aux_ids(drafter_cfg, lambda ids: [i + 1 for i in ids])


def _with_aux_ids(
    drafter_cfg: dict[str, object], change: Callable[[list[int]], list[int]]
) -> dict[str, object]:
    """The config with ``change`` applied to every list of aux layer ids it holds (top level
    and ``eagle_config``); a value that is not a list of ints is left as it is."""

    def apply(ids: object) -> object:
        ok = isinstance(ids, list) and all(isinstance(i, int) for i in ids)
        return change(ids) if ok else ids  # type: ignore[arg-type]

    out = dict(drafter_cfg)
    for key in AUX_ID_KEYS:
        if key in out:
            out[key] = apply(out[key])
    eagle = out.get("eagle_config")
    if isinstance(eagle, dict):
        out["eagle_config"] = {k: (apply(v) if k in AUX_ID_KEYS else v) for k, v in eagle.items()}
    return out


def in_sglang_convention(architecture: str, drafter_cfg: dict[str, object]) -> dict[str, object]:
    """A vLLM export's config as SGLang's export of the same drafter: marked
    ``specdeploy_engine: sglang`` and, on an architecture SGLang shifts, its aux ids one lower,
    so SGLang feeds it the layers it was trained on. ValueError where SGLang cannot serve the
    same drafter (norm_before_residual; an aux id of 0 on a shifted architecture)."""
    if drafter_built_for(drafter_cfg) == "sglang":
        return dict(drafter_cfg)
    if drafter_cfg.get("norm_before_residual"):
        raise ValueError("the drafter sets norm_before_residual, which SGLang's EAGLE-3 lacks")
    shift = 1 if architecture in SGLANG_SHIFTED_ARCHITECTURES else 0

    def lowered(ids: list[int]) -> list[int]:
        if any(i - shift < 0 for i in ids):
            raise ValueError(
                f"aux layer ids {ids}: SGLang cannot express {min(ids)} on {architecture}"
            )
        return [i - shift for i in ids]

    return {**_with_aux_ids(drafter_cfg, lowered), "specdeploy_engine": "sglang"}


def sglang_ignored_weights(names: list[str]) -> list[str]:
    """The drafter's tensors SGLang would not load (a different drafter if any are there)."""
    return sorted(n for n in names if n.endswith(SGLANG_IGNORED_DRAFTER_KEYS))


def check_drafter_engine(
    eng: str, architecture: str, drafter_cfg: dict[str, object], target_layers: int | None = None
) -> list[str]:
    """Errors for a drafter exported for the other engine's convention (before the load).

    The drafter pipeline writes ``specdeploy_engine`` into the drafter's config.json; a drafter
    without it is the llama-style vLLM export. On an architecture SGLang shifts, a vLLM drafter
    on SGLang (or the reverse) feeds the drafter layers it was not trained on.
    """
    built = drafter_built_for(drafter_cfg)
    if built not in ENGINES:
        return [f"drafter config specdeploy_engine is {built!r}, not one of {', '.join(ENGINES)}"]
    errors = []
    if built != engine(eng) and architecture in SGLANG_SHIFTED_ARCHITECTURES:
        errors.append(
            f"drafter was exported for {built} (aux layer ids in {built}'s convention) but "
            f"specdeploy_engine is {eng}: {architecture} aux ids shift by one between them; "
            f"export the drafter for {eng}"
        )
    eagle = drafter_cfg.get("eagle_config")
    ids = (eagle.get(AUX_ID_KEYS[0]) if isinstance(eagle, dict) else None) or drafter_cfg.get(
        AUX_ID_KEYS[0]
    )
    if eng == "sglang" and built == "vllm" and target_layers and isinstance(ids, list):
        served = served_aux_layers(eng, architecture, [int(i) for i in ids])
        beyond = [i for i in served if i >= target_layers]
        if beyond:  # the recorded H200 run's case: [1, 2, 3] served as [2, 3, 4] of 4 layers
            errors.append(
                f"SGLang would feed this drafter target layers {served} for its ids {ids}: "
                f"{beyond} do not exist in the {target_layers}-layer target"
            )
    if eng == "sglang" and drafter_cfg.get("norm_before_residual"):
        errors.append(
            "drafter sets norm_before_residual, which SGLang's EAGLE-3 drafter does not have"
        )
    return errors


@dataclass(frozen=True)
class Sm120Finding:
    level: str  # "error" or "info"
    message: str
    source: str


@dataclass
class Sm120Plan:
    findings: list[Sm120Finding] = field(default_factory=list)
    disable_custom_all_reduce: bool = False
    attention_backend: str = ""


# Known-bad on SM120 (compute capability 12.0), with where it is reported.
SM120_BAD_BACKENDS = {
    (
        "sglang",
        "trtllm_mla",
    ): "sgl-project/sglang issue 24633 (prefill fails on RTX PRO 6000, 0.5.10)",
    ("sglang", "fa3"): "FA3 kernels are built for SM90 only (sgl_kernel flash_ops)",
}
# Triton: no SM90-only kernel (the recorded H200 run served with it); FlashInfer's fa2 MLA path
# is also reported working on RTX PRO 6000 (sgl-project/sglang issue 12325).
SM120_WORKING_MLA_BACKEND = {"sglang": SGLANG_DEFAULT_ATTENTION_BACKEND}


def sm120_findings(
    eng: str, capability: tuple[int, int], p2p: bool, tp_size: int, attention_backend: str
) -> Sm120Plan:
    plan = Sm120Plan(attention_backend=attention_backend)
    if tp_size > 1 and not p2p:
        # Custom all-reduce writes through peer mappings; without PCIe P2P it is the known
        # hang class (the seeds' deadlock). Both engines spell the flag the same way.
        plan.disable_custom_all_reduce = True
        plan.findings.append(
            Sm120Finding(
                "info",
                f"PCIe peer-to-peer is off: {eng} runs with --disable-custom-all-reduce (NCCL)",
                "custom all-reduce needs P2P; sglang server_args disable_custom_all_reduce",
            )
        )
    if capability != (12, 0):
        return plan
    source = SM120_BAD_BACKENDS.get((engine(eng), attention_backend))
    if source:
        plan.findings.append(
            Sm120Finding("error", f"attention backend {attention_backend} fails on SM120", source)
        )
    if not attention_backend and eng in SM120_WORKING_MLA_BACKEND:
        plan.attention_backend = SM120_WORKING_MLA_BACKEND[eng]
        plan.findings.append(
            Sm120Finding(
                "info",
                f"SM120: attention backend {plan.attention_backend} (the working MLA path)",
                "Triton kernels have no SM90-only build; sgl-project/sglang issue 12325 (fa2)",
            )
        )
    plan.findings.append(
        Sm120Finding(
            "info", "SM120: DeepGEMM has no SM120 kernels; not used", "deepseek-ai/DeepGEMM"
        )
    )
    return plan


def main(argv: list[str] | None = None) -> int:
    """Preflight: refuse gates the engine cannot judge (exit 2, one line each), before any load."""
    import argparse
    import json
    import sys

    ap = argparse.ArgumentParser(prog="engine-check", description=main.__doc__)
    ap.add_argument("--engine", required=True)
    ap.add_argument("--gates-json", required=True, help="the release's gates (gates.json content)")
    ap.add_argument(
        "--sglang-version", default="", help="specdeploy_sglang_version (engine sglang)"
    )
    ap.add_argument("--api-key-set", choices=["true", "false"], default="false")
    args = ap.parse_args(argv)
    try:
        if engine(args.engine) == "sglang":
            sglang_pins(args.sglang_version)
            if args.api_key_set == "true":
                # SGLang 0.5.15 reads its key only from --api-key (server_args.py api_key; no
                # environment variable): it would sit in the unit and in every `ps` listing.
                raise EngineError(
                    "specdeploy_engine sglang with an API key is not supported yet: SGLang "
                    "takes the key only on its command line (--api-key), readable in ps"
                )
        gates = json.loads(args.gates_json)
        if not isinstance(gates, dict):
            raise EngineError("--gates-json is not a JSON object")
        lines = refused_gates(args.engine, gates)
    except (EngineError, json.JSONDecodeError) as exc:
        print(f"engine-check: error: {exc}", file=sys.stderr)
        return 2
    for line in lines:
        print(f"engine-check: error: {line}", file=sys.stderr)
    return 2 if lines else 0


if __name__ == "__main__":
    raise SystemExit(main())
