"""Run the steps in order, each skipped when its state file says done; write the drafter.

generate -> extract -> convention -> train -> convert -> provenance. The last step writes
``specdeploy-drafter.json`` next to the weights and puts the drafter into ``output_dir``
(copied beside it, then renamed into place), and the same drafter exported for SGLang into
``<output_dir>-sglang`` (its config in SGLang's convention: see ``sglang_export``).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specdeploy.controller import drafter_provenance as prov
from specdeploy.controller import engines
from specdeploy.controller.drafter_pipeline import convention, extract, generate, train
from specdeploy.controller.drafter_pipeline.checkpoint import drafter_config, write_bootstrap
from specdeploy.controller.drafter_pipeline.config import Config
from specdeploy.controller.drafter_pipeline.stfile import SafetensorsFile
from specdeploy.controller.drafter_pipeline.workdir import StepState
from specdeploy.node.module_utils import progress_line

PROVENANCE = "provenance"
STEPS = ("generate", "extract", "convention", "train", "convert", PROVENANCE)


def speculators_version(cfg: Config) -> str | None:
    """The speculators the training venv holds, if any (recorded, not used by this trainer)."""
    site = Path(cfg.train_python).resolve().parent.parent / "lib"
    for meta in site.glob("python3*/site-packages/speculators-*.dist-info/METADATA"):
        for line in meta.read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    return None


def run_extract(cfg: Config, workdir: Path) -> dict[str, Any]:
    boot = None
    if extract.capture_method(cfg) == "eagle3-hook":
        tcfg = extract.text_config(extract.target_config(cfg))
        ids = [i + cfg.extract_layer_shift for i in cfg.aux_layer_ids]
        boot = workdir / extract.STEP / "bootstrap"
        if not (boot / "model.safetensors").is_file():
            write_bootstrap(boot, drafter_config(tcfg, ids, int(tcfg["vocab_size"])))
    return extract.run(cfg, workdir, boot)


def run_provenance(cfg: Config, workdir: Path) -> dict[str, Any]:
    state = StepState(workdir, PROVENANCE)
    state.begin(cfg.inputs_hash(train.TRAIN) + cfg.inputs_hash(extract.STEP))
    conv = StepState(workdir, train.CONVERT).result
    src = Path(conv["drafter_dir"])
    gen = StepState(workdir, generate.STEP).result
    ex = StepState(workdir, extract.STEP).result
    check = StepState(workdir, convention.STEP).result
    if not check.get("match"):
        raise convention.ConventionMismatch("the convention check has not passed")
    version = speculators_version(cfg)
    p = prov.Provenance(
        target_config_sha256=prov.target_config_sha256(extract.target_config(cfg)),
        aux_layer_ids=list(cfg.aux_layer_ids),
        aux_offset=prov.INPUT_OF_LAYER,  # the convention step passed: what vLLM feeds
        vllm_version=cfg.vllm_version,
        trainer="specdeploy-torch (plain PyTorch: see torch_worker.py for why)",
        speculators_version=version,
        data={
            "responses": gen.get("responses"),
            "completion_tokens": gen.get("completion_tokens"),
            "sequences": ex.get("sequences"),
            "tokens": ex.get("tokens"),
            "hidden_state_bytes": ex.get("bytes"),
            "extract_method": ex.get("method"),
        },
        epochs=cfg.epochs,
        heldout=conv.get("heldout") or {},
        target_model=cfg.target_model_path,
        convention_check=check,
        prompt_format=str(gen.get("prompt_format") or ""),
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
    prov.write(src, p)
    out = Path(cfg.output_dir)
    publish(src, out)
    architecture = str((extract.target_config(cfg).get("architectures") or ["?"])[0])
    sglang_out = out.with_name(out.name + "-sglang")
    why_not = sglang_export(out, sglang_out, architecture)
    result = {
        "output_dir": str(out),
        "sglang_output_dir": "" if why_not else str(sglang_out),
        "sglang_not_exported": why_not,
        "provenance": p.as_dict(),
    }
    state.finish(result)
    return result


def publish(src: Path, out: Path, config: dict[str, Any] | None = None) -> None:
    """``src`` into ``out``: copied beside it, ``config`` (if given) as its config.json, then
    renamed into place."""
    staging = out.with_name(out.name + ".incoming")
    if staging.exists():
        shutil.rmtree(staging)
    shutil.copytree(src, staging)
    if config is not None:
        (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if out.exists():
        shutil.rmtree(out)
    staging.replace(out)


def sglang_export(vllm_dir: Path, out: Path, architecture: str) -> str:
    """The drafter of ``vllm_dir`` exported for SGLang into ``out`` (same weights, config in
    SGLang's convention); "" when written, else why SGLang cannot serve the same drafter (then
    ``out`` is removed: no stale export stays beside the new drafter)."""
    try:
        cfg = json.loads((vllm_dir / "config.json").read_text(encoding="utf-8"))
        names = [
            n
            for f in sorted(vllm_dir.glob("*.safetensors"))
            for n in SafetensorsFile(f).header
            if n != "__metadata__"
        ]
        ignored = engines.sglang_ignored_weights(names)
        if ignored:
            raise ValueError(f"SGLang does not load {', '.join(ignored)}")
        converted = engines.in_sglang_convention(architecture, cfg)
    except (OSError, ValueError) as exc:
        if out.exists():
            shutil.rmtree(out)
        return f"no SGLang export: {exc}"
    publish(vllm_dir, out, converted)
    return ""


RUNNERS: dict[str, Callable[[Config, Path], dict[str, Any]]] = {
    "generate": generate.run,
    "extract": run_extract,
    "convention": convention.run,
    "train": train.run_train,
    "convert": train.run_convert,
    PROVENANCE: run_provenance,
}


def run(cfg: Config, until: str = PROVENANCE) -> dict[str, Any]:
    workdir = Path(cfg.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    for step in STEPS:
        state = StepState(workdir, step)
        if state.done:
            print(f"[drafter] {step}: done earlier, skipped", flush=True)
        t0 = time.monotonic()
        results[step] = RUNNERS[step](cfg, workdir)
        if not state.done:
            took = time.monotonic() - t0
            print(progress_line.done(f"[drafter] {step}", "finished", took), flush=True)
        if step == until:
            break
    return results


def status(cfg: Config) -> dict[str, Any]:
    workdir = Path(cfg.workdir)
    out = {}
    for step in STEPS:
        st = StepState(workdir, step)
        out[step] = {k: st.data.get(k) for k in ("status", "started", "finished")}
        if step in (generate.STEP, extract.STEP):
            suffix = generate.SUFFIX if step == generate.STEP else extract.SUFFIX
            out[step]["chunks_written"] = len(list(st.dir.glob("chunk-*" + suffix)))
    return out


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=1, default=str)
