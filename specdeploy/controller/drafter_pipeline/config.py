"""The pipeline's config file, checked against spec.yml (types, choices, required, defaults).

Bad input is one line naming the key, before any step runs (``ConfigError``, exit 2).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

from specdeploy.node import cli

SPEC_PATH = Path(__file__).with_name("spec.yml")
# Keys whose change invalidates finished steps (the rest may change between runs: paths of
# pythons, concurrency, the tolerance of the check, ...). Each step records the hash of the
# keys it depends on; a resume with different values refuses instead of mixing data.
STEP_INPUTS: dict[str, tuple[str, ...]] = {
    "generate": (
        "served_model_name",
        "prompts_file",
        "max_prompts",
        "max_tokens",
        "temperature",
        "chunk_size",
    ),
    "extract": ("target_model_path", "aux_layer_ids", "extract_layer_shift", "vllm_version"),
    "train": (
        "heldout_fraction",
        "epochs",
        "learning_rate",
        "batch_sequences",
        "ttt_steps",
        "init_drafter",
        "seed",
    ),
}


class ConfigError(ValueError):
    """One line naming the bad key."""


def load_spec() -> dict[str, dict[str, Any]]:
    return yaml.safe_load(SPEC_PATH.read_text())["options"]


def _typed(key: str, value: Any, opt: dict[str, Any]) -> Any:
    kind = opt["type"]
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if kind in ("str", "path"):
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return str(Path(value).expanduser()) if kind == "path" and value else value
    if kind == "list":
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        if opt.get("elements") == "int" and not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise ConfigError(f"{key}: expected a list of integers, got {value!r}")
        return list(value)
    raise ConfigError(f"{key}: spec type {kind} unknown")  # a broken spec.yml


class Config:
    """The checked knobs; attribute access (``cfg.aux_layer_ids``)."""

    def __init__(self, values: dict[str, Any], source: str) -> None:
        self._values = values
        self.source = source

    def __getattr__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError as exc:
            raise AttributeError(key) from exc

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def inputs_hash(self, step: str) -> str:
        keys = STEP_INPUTS.get(step, ())
        blob = json.dumps({k: self._values[k] for k in keys}, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def parse(raw: dict[str, Any], source: str = "config") -> Config:
    spec = load_spec()
    unknown = sorted(set(raw) - set(spec))
    if unknown:
        raise ConfigError(f"{source}: unknown key {unknown[0]} (known: see {SPEC_PATH.name})")
    values: dict[str, Any] = {}
    for key, opt in spec.items():
        if key not in raw or raw[key] is None:
            if opt.get("required"):
                raise ConfigError(f"{source}: {key} is required ({opt['description']})")
            values[key] = opt.get("default")
            continue
        val = _typed(key, raw[key], opt)
        if "choices" in opt and val not in opt["choices"]:
            raise ConfigError(f"{key}: {val!r} is not one of {opt['choices']}")
        values[key] = val
    _semantic(values)
    return Config(values, source)


def _semantic(v: dict[str, Any]) -> None:
    ids = v["aux_layer_ids"]
    if len(ids) != 3 or len(set(ids)) != 3:
        raise ConfigError(f"aux_layer_ids: {ids}: an EAGLE-3 drafter takes 3 distinct layers")
    for key in (
        "max_tokens",
        "concurrency",
        "chunk_size",
        "epochs",
        "batch_sequences",
        "train_processes",
    ):
        if v[key] < 1:
            raise ConfigError(f"{key}: {v[key]} must be at least 1")
    if not 0.0 <= v["heldout_fraction"] < 1.0:
        raise ConfigError(f"heldout_fraction: {v['heldout_fraction']} must be in [0, 1)")
    if not v["serve_url"].startswith(("http://", "https://")):
        raise ConfigError(f"serve_url: {v['serve_url']!r} is not an http(s) URL")


def load(path: Path) -> Config:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"config file not found: {path}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--config {path}: {cli.reason(exc)}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: not a mapping of knobs")
    return parse(raw, str(path))
