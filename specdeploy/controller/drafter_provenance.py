"""The drafter's provenance file: what a trained EAGLE-3 drafter was trained on.

``specdeploy-drafter.json`` lies next to the drafter's weights (written by the drafter
pipeline, ``python -m specdeploy.controller.drafter_pipeline``); the deploy's drafter check
(``specdeploy.controller.drafter``) reads it and refuses a drafter whose target, auxiliary layers or
hidden-state offset differ from what the node will serve.

Definitions (one home for each):

* **target config hash** (``target_config_sha256``): sha256 of the target's ``config.json``
  in canonical form: parsed as JSON, the fields that do not change the model
  (``NON_MODEL_FIELDS``: the transformers version that wrote the file, its source path and
  commit, ``use_cache``) left out, re-serialised with sorted keys, ``(",", ":")`` separators
  and ``ensure_ascii=False``, UTF-8. Whitespace, key order and those fields do not change it;
  any other value does (a different model, size, layer count or vocabulary). A provenance
  written before those fields were left out (the hash of the whole file) still matches
  (``target_config_matches``).
* **prompt format** (``prompt_format``): how the prompts the drafter was trained on reached
  the target: ``chat-template`` (chat messages, the served chat template applied) or ``raw``
  (completion text as is); ``mixed`` when both. The largest acceptance loss measured so far
  was this mismatch (docs/drafter-gpu.md: mean acceptance length 1.50 with the chat template
  against 2.50 raw); the drafter check warns when the served workload's format differs.
* **offset convention** (``aux_offset``): which tensor "layer i" names.
  ``input-of-layer`` is what vLLM hands an EAGLE-3 drafter for layer id i: in
  ``DeepseekV2Model.forward`` (native 0.18+, and the toolkit's patch 0002 on 0.15-0.17) the
  capture ``if idx in self.aux_hidden_state_layers: aux_hidden_states.append(hidden_states +
  residual)`` runs BEFORE ``layer(...)`` is called for absolute index ``idx``; so it is the
  residual stream entering decoder layer i (before its input RMSNorm), which equals the
  output of layer i-1 after its residual add, and for i = 0 the token embedding.
  (tests/patches/test_aux_capture_behaviour.py runs that forward of every wheel and asserts
  it.) ``output-of-layer`` (the stream after layer i, i.e. the input of layer i+1) is the
  other convention a training tool can use, e.g. Hugging Face ``hidden_states[i + 1]``.

Stdlib only.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specdeploy.node import cli, jsontext

FILE_NAME = "specdeploy-drafter.json"
SCHEMA = 1
INPUT_OF_LAYER = "input-of-layer"
OUTPUT_OF_LAYER = "output-of-layer"
OFFSETS = (INPUT_OF_LAYER, OUTPUT_OF_LAYER)
# What every vLLM the toolkit supports feeds the drafter (see the module docstring).
SERVED_OFFSET = INPUT_OF_LAYER


class ProvenanceError(ValueError):
    """A provenance file that cannot be read or lacks a field (the message names it)."""


# config.json fields that do not change the model (module docstring), at any nesting level.
NON_MODEL_FIELDS = frozenset({"transformers_version", "_name_or_path", "_commit_hash", "use_cache"})
CHAT_TEMPLATE = "chat-template"
RAW = "raw"
PROMPT_FORMATS = (CHAT_TEMPLATE, RAW, "mixed")


def _model_fields(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _model_fields(v) for k, v in value.items() if k not in NON_MODEL_FIELDS}
    if isinstance(value, list):
        return [_model_fields(v) for v in value]
    return value


def canonical_config_bytes(cfg: dict[str, Any], *, whole: bool = False) -> bytes:
    body = cfg if whole else _model_fields(cfg)
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def target_config_sha256(cfg: dict[str, Any]) -> str:
    """sha256 of the target's config.json in canonical form (module docstring)."""
    return hashlib.sha256(canonical_config_bytes(cfg)).hexdigest()


def target_config_matches(sha: str, cfg: dict[str, Any]) -> bool:
    """The provenance's hash names this target: the model fields' hash, or the whole file's
    (a provenance written before NON_MODEL_FIELDS were left out)."""
    whole = hashlib.sha256(canonical_config_bytes(cfg, whole=True)).hexdigest()
    return sha in (target_config_sha256(cfg), whole)


@dataclass
class Provenance:
    target_config_sha256: str
    aux_layer_ids: list[int]
    aux_offset: str
    vllm_version: str
    trainer: str  # "speculators X.Y.Z" or "specdeploy-torch" (plain PyTorch, with the reason)
    data: dict[str, Any] = field(default_factory=dict)  # prompts, tokens, bytes of states
    epochs: int = 0
    heldout: dict[str, Any] = field(default_factory=dict)  # acceptance per position, held out
    target_model: str = ""
    speculators_version: str | None = None
    convention_check: dict[str, Any] = field(default_factory=dict)
    prompt_format: str = ""  # chat-template | raw | mixed; "" = not recorded (older files)
    created: str = ""
    schema: int = SCHEMA

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


REQUIRED: dict[str, type | tuple[type, ...]] = {
    "schema": int,
    "target_config_sha256": str,
    "aux_layer_ids": list,
    "aux_offset": str,
    "vllm_version": str,
    "trainer": str,
}


def parse(text: str, where: str = FILE_NAME) -> Provenance:
    """A Provenance from the file's text; ProvenanceError names the first bad field."""
    try:
        data = jsontext.parse_object(text, where)
    except ValueError as exc:
        raise ProvenanceError(str(exc)) from None
    for key, kind in REQUIRED.items():
        if key not in data:
            raise ProvenanceError(f"{where}: field {key} is missing")
        if not isinstance(data[key], kind) or isinstance(data[key], bool):
            raise ProvenanceError(f"{where}: field {key} has the wrong type")
    if data["schema"] != SCHEMA:
        raise ProvenanceError(f"{where}: field schema is {data['schema']}, this reads {SCHEMA}")
    ids = data["aux_layer_ids"]
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise ProvenanceError(f"{where}: field aux_layer_ids holds a non-integer")
    if data["aux_offset"] not in OFFSETS:
        raise ProvenanceError(
            f"{where}: field aux_offset is {data['aux_offset']!r}, not one of {', '.join(OFFSETS)}"
        )
    fmt = data.get("prompt_format", "")
    if fmt not in ("", *PROMPT_FORMATS):
        raise ProvenanceError(
            f"{where}: field prompt_format is {fmt!r}, not one of {', '.join(PROMPT_FORMATS)}"
        )
    sha = data["target_config_sha256"]
    if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        raise ProvenanceError(f"{where}: field target_config_sha256 is not 64 hex digits")
    known = {f for f in Provenance.__dataclass_fields__}
    return Provenance(**{k: v for k, v in data.items() if k in known})


def read(drafter_dir: Path) -> Provenance | None:
    """The drafter directory's provenance, or None when it has none."""
    path = drafter_dir / FILE_NAME
    if not path.is_file():
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ProvenanceError(f"{path}: {cli.reason(exc)}") from None
    if not text.strip():
        raise ProvenanceError(f"{path}: empty file")
    return parse(text, str(path))


def write(drafter_dir: Path, prov: Provenance) -> Path:
    """Write atomically (temp file, fsync, rename)."""
    path = drafter_dir / FILE_NAME
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        json.dump(prov.as_dict(), fh, indent=1, sort_keys=True)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)
    return path
