"""EAGLE-3 drafter compatibility check: target config.json + drafter config.json + vLLM version.

    python -m specdeploy.controller.drafter --target DIR|config.json --drafter DIR|config.json \\
        --vllm-version X [--manifest PATH] [--require-provenance] [--json]
    (or --target-config-json TEXT / --drafter-config-json TEXT: the files' content inline, with
    --drafter-weights-json TEXT: the drafter's tensors as the node probe read them from the
    safetensors headers, without weights to read an unconfirmed d2t is only a warning; and
    --provenance-json TEXT gives the drafter's specdeploy-drafter.json, "" for none)

Checks (what vLLM X will do with this pair, per the facts in patches/vllm/manifest.yml,
which are read off each wheel):

* the drafter architecture is one that version can load as EAGLE-3 (llama-style only
  before 0.18: ``Eagle3LlamaForCausalLM`` / ``LlamaForCausalLMEagle3``; MLA drafters
  ``Eagle3DeepseekV2/V3ForCausalLM`` from 0.18.0 on);
* ``target_hidden_size`` (default: the drafter's ``hidden_size``) equals the target's hidden
  size (the fc input is 3 x target hidden);
* vocabulary: the drafter's ``vocab_size`` equals the target's; a smaller ``draft_vocab_size``
  needs a ``d2t`` tensor (draft id -> target id offset) of that length in the weights;
* auxiliary layers: the top-level ``eagle_aux_hidden_state_layer_ids`` is honoured; a list
  only inside ``eagle_config`` is ignored by versions that do not read it (the target then
  feeds its default layers (2, n//2, n-3), collapsing acceptance): reported with the fix;
  every id must be inside 1..num_layers-1; the count must match the fc input (3);
* provenance (``specdeploy-drafter.json`` next to the weights, written by the drafter
  pipeline; see specdeploy.controller.drafter_provenance): the drafter is refused when the
  target config hash, the auxiliary layer ids or the offset convention it was trained on
  differ from what this node will serve; without the file a warning (published drafters
  carry none), an error with --require-provenance.

Exit: 0 no errors (warnings allowed), 1 at least one error, 2 usage/environment error.
Node-side safe: stdlib + PyYAML.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specdeploy.controller import drafter_provenance as provenance
from specdeploy.controller import engines
from specdeploy.node import cli, jsontext
from specdeploy.node.module_utils.specdeploy_weights import tensor_shapes
from specdeploy.node.module_utils.versions import version_key
from specdeploy.node.patching.patches import Manifest, UsageError

LLAMA_STYLE = ("Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3")
MLA_STYLE = ("Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM")


@dataclass
class Finding:
    level: str  # error | warning | info
    code: str
    message: str


@dataclass
class Result:
    vllm_version: str
    findings: list[Finding] = field(default_factory=list)
    aux_layers_served: list[int] | None = None
    target: dict[str, Any] = field(default_factory=dict)
    drafter: dict[str, Any] = field(default_factory=dict)

    def add(self, level: str, code: str, message: str) -> None:
        self.findings.append(Finding(level, code, message))

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "error"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_dict(self) -> dict[str, Any]:
        return {
            "vllm_version": self.vllm_version,
            "ok": self.ok,
            "errors": len(self.errors),
            "warnings": sum(f.level == "warning" for f in self.findings),
            "aux_layers_served": self.aux_layers_served,
            "target": self.target,
            "drafter": self.drafter,
            "findings": [asdict(f) for f in self.findings],
        }

    def text(self) -> str:
        head = f"drafter check for vLLM {self.vllm_version}: " + (
            "OK" if self.ok else f"{len(self.errors)} error(s)"
        )
        return "\n".join(
            [head] + [f"  {f.level.upper():7} {f.code}: {f.message}" for f in self.findings]
        )


# --------------------------------------------------------------------------- inputs


def load_config(path: Path, flag: str = "") -> tuple[dict[str, Any], Path]:
    """(config dict, model dir) from a model directory or a config.json path."""
    p = path / "config.json" if path.is_dir() else path
    where = f"{flag} {p}".strip()
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise UsageError(f"{where}: config not found") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{where}: {cli.reason(exc)}") from exc
    return parse_inline(text, where), p.parent


def parse_inline(text: str, what: str) -> dict[str, Any]:
    try:
        return jsontext.parse_object(text, what)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The language-model part: ``text_config`` for multimodal wrappers (Kimi-K2.5)."""
    tc = cfg.get("text_config")
    return tc if isinstance(tc, dict) else cfg


# --------------------------------------------------------------------------- facts


def drafter_facts(manifest: Manifest, version: str, res: Result) -> dict[str, Any]:
    kind = manifest.kind(version)
    if kind == "unsupported":
        raise UsageError(manifest.unsupported_message(version))
    entry = manifest.entry(version)
    if "drafter" in entry:
        return dict(entry["drafter"])
    known = sorted((v for v, e in manifest.versions().items() if "drafter" in e), key=version_key)
    newest = known[-1]
    res.add(
        "warning",
        "vllm.version_unknown",
        f"vLLM {version} is not in the manifest; assuming the drafter facts of {newest}",
    )
    return dict(manifest.entry(newest)["drafter"])


# --------------------------------------------------------------------------- the check


def check(
    target_cfg: dict[str, Any],
    drafter_cfg: dict[str, Any],
    version: str,
    manifest: Manifest,
    drafter_dir: Path | None = None,
    drafter_weights: dict[str, Any] | None = None,
) -> Result:
    """``drafter_weights``: what the preflight's probe read of the drafter's weights on the node
    ({"tensors": {name: shape}, "where": str}, specdeploy_weights.drafter_tensors); else the
    weights are read from ``drafter_dir`` when given."""
    res = Result(version)
    facts = drafter_facts(manifest, version, res)
    tc = text_config(target_cfg)
    t_hidden = tc.get("hidden_size")
    t_vocab = tc.get("vocab_size", target_cfg.get("vocab_size"))
    t_layers = tc.get("num_hidden_layers")
    res.target = {
        "architectures": target_cfg.get("architectures"),
        "model_type": target_cfg.get("model_type"),
        "text_model_type": tc.get("model_type"),
        "hidden_size": t_hidden,
        "vocab_size": t_vocab,
        "num_hidden_layers": t_layers,
    }
    for name, val in (
        ("hidden_size", t_hidden),
        ("vocab_size", t_vocab),
        ("num_hidden_layers", t_layers),
    ):
        if not isinstance(val, int):
            res.add(
                "error",
                "target.config",
                f"target config has no integer {name} (text_config or top level)",
            )
    if res.errors:
        return res

    # -- architecture
    archs = drafter_cfg.get("architectures") or []
    loadable = list(facts.get("eagle3_architectures") or [])
    res.drafter = {
        "architectures": archs,
        "hidden_size": drafter_cfg.get("hidden_size"),
        "target_hidden_size": drafter_cfg.get("target_hidden_size"),
        "vocab_size": drafter_cfg.get("vocab_size"),
        "draft_vocab_size": drafter_cfg.get("draft_vocab_size"),
    }
    usable = [a for a in archs if a in loadable]
    if not archs:
        res.add("error", "drafter.architecture", "drafter config.json has no 'architectures'")
    elif not usable:
        if any(a in MLA_STYLE for a in archs):
            res.add(
                "error",
                "drafter.architecture",
                f"{archs[0]} is an MLA (DeepSeek-style) EAGLE-3 drafter: vLLM {version} loads "
                f"only {', '.join(loadable)} (llama-style); MLA drafters need vLLM >= 0.18.0, "
                "or use a llama-style drafter",
            )
        else:
            res.add(
                "error",
                "drafter.architecture",
                f"architectures {archs} is not an EAGLE-3 drafter vLLM {version} can load "
                f"(loadable: {', '.join(loadable)})",
            )
    else:
        res.add("info", "drafter.architecture", f"{usable[0]} is loadable by vLLM {version}")

    # -- hidden size
    d_hidden = drafter_cfg.get("hidden_size")
    tgt_hidden = drafter_cfg.get("target_hidden_size")
    eff = tgt_hidden if tgt_hidden is not None else d_hidden
    src = "target_hidden_size" if tgt_hidden is not None else "hidden_size (no target_hidden_size)"
    if not isinstance(eff, int):
        res.add(
            "error",
            "drafter.target_hidden_size",
            "drafter has neither target_hidden_size nor hidden_size",
        )
    elif eff != t_hidden:
        res.add(
            "error",
            "drafter.target_hidden_size",
            f"drafter {src} is {eff} but the target's hidden size is {t_hidden}: the fc layer "
            f"expects 3 x {eff} inputs and gets 3 x {t_hidden} (a drafter trained for another "
            "target?)",
        )
    else:
        res.add("info", "drafter.target_hidden_size", f"{src} {eff} == target hidden size")

    # -- vocabulary
    d_vocab = drafter_cfg.get("vocab_size")
    dv = drafter_cfg.get("draft_vocab_size") or d_vocab
    if d_vocab is not None and d_vocab != t_vocab:
        res.add(
            "error",
            "drafter.vocab_size",
            f"drafter vocab_size {d_vocab} != target vocab_size {t_vocab}: the drafter's token "
            "ids (and the embeddings it shares with the target) do not match",
        )
    if isinstance(dv, int) and isinstance(t_vocab, int):
        if dv > t_vocab:
            res.add(
                "error",
                "drafter.draft_vocab_size",
                f"draft_vocab_size {dv} > target vocab {t_vocab}",
            )
        elif dv < t_vocab:
            if drafter_weights is not None:
                weights, where = drafter_weights.get("tensors"), str(drafter_weights.get("where"))
            elif drafter_dir is not None:
                weights, where = tensor_shapes(drafter_dir)
            else:
                weights, where = None, ""
            if weights is None:
                res.add(
                    "warning",
                    "drafter.d2t",
                    f"draft_vocab_size {dv} < target vocab {t_vocab}: a d2t tensor is required; "
                    "no weights found next to the config to confirm it",
                )
            elif "d2t" not in weights:
                res.add(
                    "error",
                    "drafter.d2t",
                    f"draft_vocab_size {dv} < target vocab {t_vocab} but the weights ({where}) "
                    "have no d2t tensor: draft ids would be taken as target ids",
                )
            else:
                shape = weights["d2t"]
                if shape is not None and shape != [dv]:
                    res.add(
                        "error",
                        "drafter.d2t",
                        f"d2t has shape {shape}, expected [{dv}] (draft_vocab_size)",
                    )
                else:
                    res.add("info", "drafter.d2t", f"d2t present ({where}) for draft vocab {dv}")

    # -- auxiliary layers
    ec = (
        drafter_cfg.get("eagle_config") if isinstance(drafter_cfg.get("eagle_config"), dict) else {}
    )
    top = drafter_cfg.get("eagle_aux_hidden_state_layer_ids")
    inner = ec.get("eagle_aux_hidden_state_layer_ids")
    honoured_inner = bool(facts.get("eagle_config_aux_ids_honoured"))
    default = [2, t_layers // 2, t_layers - 3]
    if ec.get("use_aux_hidden_state") is False:
        res.add(
            "info",
            "drafter.aux_layers",
            "eagle_config.use_aux_hidden_state is false: no aux layers",
        )
        res.aux_layers_served = []
        return res
    if top is not None:
        served = list(top)
        if inner is not None and list(inner) != served:
            res.add(
                "warning",
                "drafter.aux_layers.conflict",
                f"top-level eagle_aux_hidden_state_layer_ids {served} differs from "
                f"eagle_config's {list(inner)}; vLLM uses the top-level list",
            )
    elif inner is not None:
        if honoured_inner:
            served = list(inner)
            res.add(
                "info", "drafter.aux_layers", f"vLLM {version} reads eagle_config's list {served}"
            )
        else:
            served = default
            res.add(
                "error",
                "drafter.aux_layers.eagle_config_ignored",
                f"the aux layer ids {list(inner)} are only inside eagle_config, which vLLM "
                f"{version} ignores: the target would feed its default layers {default} and "
                "acceptance collapses. Fix: add the top-level key "
                f'"eagle_aux_hidden_state_layer_ids": {json.dumps(list(inner))} to the drafter\'s '
                "config.json",
            )
            _check_ids(res, list(inner), t_layers, facts, label="eagle_config ids", served=False)
            res.aux_layers_served = served
            return res
    else:
        served = default
        res.add(
            "warning",
            "drafter.aux_layers.default",
            f"the drafter names no aux layers; vLLM uses the target default {default}: make "
            "sure the drafter was trained on these",
        )
    res.aux_layers_served = served
    _check_ids(res, served, t_layers, facts, label="aux layer ids")
    return res


def _check_ids(
    res: Result,
    ids: list[Any],
    n_layers: int,
    facts: dict[str, Any],
    label: str,
    served: bool = True,
) -> None:
    bad = [
        i
        for i in ids
        if not isinstance(i, int) or isinstance(i, bool) or not 1 <= i <= n_layers - 1
    ]
    if bad:
        res.add(
            "error",
            "drafter.aux_layers.range",
            f"{label} {ids}: {bad} outside 1..{n_layers - 1} (the target has {n_layers} layers; "
            "layer 0 has no residual yet and the last id must name a real layer)",
        )
    if len(set(map(str, ids))) != len(ids):
        res.add("error", "drafter.aux_layers.duplicate", f"{label} {ids} contain duplicates")
    fixed = facts.get("aux_layer_count_fixed")
    if fixed and len(ids) != fixed:
        res.add(
            "error",
            "drafter.aux_layers.count",
            f"{label} {ids}: {len(ids)} layers, but this vLLM's EAGLE-3 fc takes exactly "
            f"{fixed} x target hidden",
        )
    if served and not bad and (not fixed or len(ids) == fixed):
        res.add("info", "drafter.aux_layers", f"target layers {ids} feed the drafter")


def check_provenance(
    res: Result,
    target_cfg: dict[str, Any],
    prov_text: str | None,
    require: bool = False,
    served_prompt_format: str = "",
) -> None:
    """Compare the drafter's provenance with what this node will serve (adds findings).

    ``prov_text``: the file's text, None when the drafter has no such file. A file that is
    there but empty, or not UTF-8 (read with U+FFFD for the bytes that are not), is an error
    whatever ``require`` says: the file claims a provenance it does not give."""
    if prov_text is not None and (not prov_text.strip() or "\ufffd" in prov_text):
        res.add(
            "error",
            "provenance.invalid",
            f"{provenance.FILE_NAME}: "
            + ("empty file" if not prov_text.strip() else "not UTF-8 text")
            + "; write it again (make drafter) or remove it",
        )
        return
    if prov_text is None:
        res.add(
            "error" if require else "warning",
            "provenance.missing",
            f"the drafter has no {provenance.FILE_NAME}: nothing says which target, layers "
            "and offset it was trained on"
            + (
                " (required by specdeploy_drafter_require_provenance)"
                if require
                else " (published drafters carry none; trained ones get it from make drafter)"
            ),
        )
        return
    try:
        prov = provenance.parse(prov_text)
    except provenance.ProvenanceError as exc:
        res.add("error", "provenance.invalid", str(exc))
        return
    res.drafter["provenance"] = prov.as_dict()
    want_sha = provenance.target_config_sha256(target_cfg)
    if not provenance.target_config_matches(prov.target_config_sha256, target_cfg):
        res.add(
            "error",
            "provenance.target_config_sha256",
            f"provenance target_config_sha256 {prov.target_config_sha256[:12]} differs from the "
            f"served target's config {want_sha[:12]}: the drafter was trained for another target"
            + (f" ({prov.target_model})" if prov.target_model else ""),
        )
    served = res.aux_layers_served
    if served is not None and list(prov.aux_layer_ids) != list(served):
        res.add(
            "error",
            "provenance.aux_layer_ids",
            f"provenance aux_layer_ids {prov.aux_layer_ids} differ from the layers vLLM "
            f"{res.vllm_version} will feed this drafter {served}: it would draft from states it "
            "was not trained on",
        )
    if prov.aux_offset != provenance.SERVED_OFFSET:
        res.add(
            "error",
            "provenance.aux_offset",
            f"provenance aux_offset {prov.aux_offset} differs from what vLLM feeds the drafter "
            f"({provenance.SERVED_OFFSET}: the stream entering layer i)",
        )
    if prov.vllm_version != res.vllm_version:
        res.add(
            "warning",
            "provenance.vllm_version",
            f"trained on hidden states of vLLM {prov.vllm_version}, served by "
            f"{res.vllm_version}: numerics may differ (layers and offset match)",
        )
    if served_prompt_format and prov.prompt_format and prov.prompt_format != served_prompt_format:
        res.add(
            "warning",
            "provenance.prompt_format",
            f"the drafter was trained on {prov.prompt_format} prompts, the served workload is "
            f"{served_prompt_format}: acceptance may be far lower than trained (measured: mean "
            "acceptance length 1.50 with the chat template against 2.50 raw, "
            "docs/drafter-gpu.md); train on the served format",
        )
    if not any(f.code.startswith("provenance.") and f.level == "error" for f in res.findings):
        acc = prov.heldout.get("per_position_acceptance")
        res.add(
            "info",
            "provenance",
            f"trained for this target on layers {prov.aux_layer_ids} ({prov.aux_offset}) with "
            f"{prov.trainer}" + (f"; held-out per-position acceptance {acc}" if acc else ""),
        )


def _check_engine(
    res: Result, engine: str, target_cfg: dict[str, Any], drafter_cfg: dict[str, Any]
) -> None:
    """The drafter's engine convention (issue 29): refused before the load, naming it."""
    arch = (target_cfg.get("architectures") or [""])[0]
    layers = target_cfg.get("num_hidden_layers")
    layers = layers if isinstance(layers, int) else None
    for message in engines.check_drafter_engine(engine, str(arch), drafter_cfg, layers):
        res.add("error", "drafter.engine", message)
    eagle = drafter_cfg.get("eagle_config")
    own = (eagle.get("eagle_aux_hidden_state_layer_ids") if isinstance(eagle, dict) else None) or (
        drafter_cfg.get("eagle_aux_hidden_state_layer_ids")
    )
    if engine == "sglang" and isinstance(own, list) and all(isinstance(i, int) for i in own):
        served = engines.served_aux_layers(engine, str(arch), own)
        if served != own:
            res.add(
                "info",
                "drafter.aux_layers.sglang",
                f"SGLang feeds the drafter target layers {served} for its ids {own} "
                f"({arch}: SGLang captures layer i's input at id i - 1)",
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="drafter-check",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    tgt = ap.add_mutually_exclusive_group(required=True)
    tgt.add_argument("--target", type=Path, help="target model dir or config.json")
    tgt.add_argument("--target-config-json", help="the target's config.json content, inline")
    drf = ap.add_mutually_exclusive_group(required=True)
    drf.add_argument("--drafter", type=Path, help="drafter model dir or config.json")
    drf.add_argument("--drafter-config-json", help="the drafter's config.json content, inline")
    ap.add_argument(
        "--drafter-weights-json",
        help='the drafter\'s tensors read on the node: {"tensors": {name: shape}, "where": str}',
    )
    ap.add_argument("--vllm-version", required=True, help="the vLLM version that will serve")
    ap.add_argument(
        "--provenance-json",
        help=f"the drafter's {provenance.FILE_NAME} content, inline (leave the flag out when "
        "the drafter has none; '' is an empty file); default: read it from the --drafter directory",
    )
    ap.add_argument(
        "--require-provenance",
        nargs="?",
        const="true",
        default="false",
        choices=["true", "false"],
        help="true: a drafter without a provenance file is an error, not a warning",
    )
    ap.add_argument(
        "--served-prompt-format",
        default="",
        choices=["", *provenance.PROMPT_FORMATS],
        help="how the served workload's prompts reach the target (chat-template: the chat "
        "endpoint; raw: completions); warns when the drafter was trained on another",
    )
    ap.add_argument("--manifest", type=Path, help="patches/vllm/manifest.yml")
    ap.add_argument(
        "--engine",
        choices=engines.ENGINES,
        default="vllm",
        help="the engine that will serve: a drafter exported for the other one is refused",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        manifest = Manifest.load(args.manifest)
        if args.target is not None:
            tcfg, _ = load_config(args.target, "--target")
        else:
            tcfg = parse_inline(args.target_config_json, "--target-config-json")
        ddir: Path | None = None
        if args.drafter is not None:
            dcfg, ddir = load_config(args.drafter, "--drafter")
        else:
            dcfg = parse_inline(args.drafter_config_json, "--drafter-config-json")
        weights = None  # null: the probe found no weights to read
        if args.drafter_weights_json and args.drafter_weights_json.strip() != "null":
            weights = parse_inline(args.drafter_weights_json, "--drafter-weights-json")
        # an SGLang export lists its aux ids in SGLang's convention: checked in vLLM's
        arch = str((tcfg.get("architectures") or [""])[0])
        res = check(
            tcfg, engines.in_vllm_convention(arch, dcfg), args.vllm_version, manifest, ddir, weights
        )
        _check_engine(res, args.engine, tcfg, dcfg)
        prov_text = args.provenance_json
        if prov_text is None and ddir is not None:
            pfile = ddir / provenance.FILE_NAME
            prov_text = pfile.read_bytes().decode(errors="replace") if pfile.is_file() else None
        if res.aux_layers_served is not None:
            check_provenance(
                res,
                tcfg,
                prov_text,
                args.require_provenance == "true",
                args.served_prompt_format,
            )
    except UsageError as exc:
        if args.json:
            print(json.dumps({"error": str(exc), "exit": 2}))
        else:
            print(f"drafter-check: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(res.as_dict(), indent=2) if args.json else res.text())
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(main())
