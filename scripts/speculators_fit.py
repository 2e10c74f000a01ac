"""Which ``speculators`` release fits which vLLM, for the drafter pipeline
(scripts/regen_patches.py writes the result into manifest.yml as ``drafter_training``).

The facts below were read off the PyPI wheels of speculators (METADATA and
``speculators/data_generation/``), 2026-12-03:

* 0.3.0 and 0.4.0 generate hidden states INSIDE vLLM with ``data_generation/custom_worker.py``:
  a worker extension that replaces the model's forward and, in its layer loop, calls
  ``hidden_states, residual = layer(...)`` and THEN appends ``hidden_states + residual`` for
  the layer ids: the OUTPUT of layer i (the input of layer i + 1). vLLM's EAGLE-3 serving
  capture appends before calling layer i: its INPUT. A drafter trained with the same ids is
  fed states one layer earlier than it learned from (offset +1), unless the ids are shifted.
  It runs in vLLM's own venv (datagen extra pins vLLM), so torch and transformers must fit.
* 0.5.0 and later read the states vLLM itself writes (``kv_transfer_params`` /
  ``hidden_states_path`` from a server started with ``SpeculativeConfig.method =
  "extract_hidden_states"`` and a hidden-states KV connector): vLLM's own capture, the
  served convention; needs a vLLM with that method (0.17.0 on); training runs in its own
  venv (its torch/transformers pins need not match vLLM's).
"""

from __future__ import annotations

from packaging.specifiers import SpecifierSet
from packaging.version import Version

SPECULATORS: dict[str, dict[str, str]] = {
    "0.3.0": {"route": "custom_worker", "vllm": "==0.11.0", "torch": "", "transformers": ""},
    "0.4.0": {
        "route": "custom_worker",
        "vllm": ">=0.12.0,<=0.16.0",
        "torch": ">=2.9.0,<=2.10.0",
        "transformers": ">=4.56.1,<=4.57.6",
    },
    "0.5.0": {"route": "extract_hidden_states", "torch": ">=2.9.0,<=2.11.0"},
    "0.6.0": {"route": "extract_hidden_states", "torch": ">=2.9.0,<=2.12.0"},
    "0.7.0": {"route": "extract_hidden_states", "torch": ">=2.9.0,<=2.13.0"},
    "0.8.0": {"route": "extract_hidden_states", "torch": ">=2.9.0,<=2.13.0"},
    "0.9.0": {"route": "extract_hidden_states", "torch": ">=2.9.0,<=2.14.1"},
}
CAPTURE = {"custom_worker": "output-of-layer", "extract_hidden_states": "input-of-layer"}
# transformers releases the ranges are tested against (a specifier overlap needs candidates)
TRANSFORMERS = [f"4.{m}.{p}" for m in (56, 57) for p in range(8)] + [
    f"5.{m}.{p}" for m in range(20) for p in range(3)
]


def _overlap(a: str, b: str) -> bool:
    sa, sb = SpecifierSet(a), SpecifierSet(b)
    return any(Version(v) in sa and Version(v) in sb for v in TRANSFORMERS)


def fit(vllm: str, torch: str | None, transformers: str, has_extract: bool) -> dict[str, object]:
    """The ``drafter_training`` entry of one vLLM version."""
    fits = []
    for version, f in SPECULATORS.items():
        if f["route"] == "extract_hidden_states":
            ok = has_extract
        else:  # runs inside vLLM's process: its pins must hold together
            torch_ok = not f["torch"] or (
                torch is not None and Version(torch) in SpecifierSet(f["torch"])
            )
            ok = (
                Version(vllm) in SpecifierSet(f["vllm"])
                and torch_ok
                and (not f["transformers"] or _overlap(f["transformers"], transformers))
            )
        if ok:
            fits.append({"version": version, "data": f["route"], "capture": CAPTURE[f["route"]]})
    return {
        "extract_hidden_states": has_extract,
        "pipeline_capture": "connector" if has_extract else "eagle3-hook",
        "speculators": fits,
    }
