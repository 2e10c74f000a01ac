#!/usr/bin/env python3
"""What vLLM itself says of a staged version and of the toolkit's rendered units, before any
server starts (the first device call of the k-schedule plan; also runs on a CPU machine).

1. the version (``importlib.metadata`` and ``vllm.__version__``);
2. imports the serving path (the OpenAI server, the CLI, the DeepSeek-V3 and EAGLE-3 models,
   the engine core, the GPU model runner, the scheduler). Kernel libraries that have not
   arrived yet (the staging sends them in later calls) are stubbed and listed as such, so a
   missing Python dependency shows in the first call (with stubs, only a module missing outside
   vLLM fails the check; any other error is listed as inconclusive for the full check);
3. for each rendered unit: its ExecStart parsed by vLLM's own ``vllm serve`` parser and
   validator, ``EngineArgs.from_cli_args``, the ``--speculative-config`` vLLM got, and for a
   schedule vLLM's own expansion (``build_dynamic_sd_schedule_lookup``) at each level;
4. with ``--engine-config`` (on the GPU machine, models built), for each unit with a schedule:
   ``create_engine_config()``, i.e. vLLM's whole config post-init, with the CUDA graph mode it
   settles on and its warnings (0.26.0 moves FULL graphs to PIECEWISE under a schedule).

    python3 tests/gpu/vllm_check.py --units DIR [--expect-version 0.26.0] [--levels 1,4,16,64]
        [--engine-config] [--cpu] [--json OUT]

Exit codes: 0 every check passed, 1 one failed (the JSON says which), 2 usage.
Stdlib only, plus vLLM on the path.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import io
import json
import logging
import re
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import unitexec  # noqa: E402  (tests/gpu/unitexec.py)

KERNELS = (
    "vllm._C_stable_libtorch",
    "vllm._moe_C_stable_libtorch",
    "vllm.vllm_flash_attn._vllm_fa3_C",
)
SERVING = (
    "vllm.entrypoints.openai.api_server",
    "vllm.entrypoints.cli.main",
    "vllm.entrypoints.cli.serve",
    "vllm.model_executor.models.deepseek_v2",
    "vllm.model_executor.models.llama_eagle3",
    "vllm.v1.engine.core",
    "vllm.v1.worker.gpu_model_runner",
    "vllm.v1.core.sched.scheduler",
    "vllm.v1.spec_decode.dynamic.utils",
)
KEY = "num_speculative_tokens_per_batch_size"


def first_line(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}"
    return text.splitlines()[0][:300] if text else type(e).__name__


def missing_dependency(error: str) -> bool:
    """A ModuleNotFoundError for a module outside vLLM: a dependency the staging lacks."""
    m = re.match(r"ModuleNotFoundError: No module named '([^']+)'", error or "")
    return bool(m) and not m.group(1).startswith("vllm")


def stub_missing_kernels() -> list[str]:
    """Stub the kernel libraries that are not on the path yet; returns their names."""
    stubbed = []
    for name in KERNELS:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            sys.modules[name] = types.ModuleType(name)
            stubbed.append(name)
    return stubbed


def serve_args(argv: list[str]):
    """vLLM's own parser and validator for ``vllm serve ARGS`` (as vllm.entrypoints.cli.main)."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(description="vLLM CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    cmd = ServeSubcommand()
    cmd.subparser_init(subparsers)
    args = parser.parse_args(argv)
    cmd.validate(args)
    return args


def check_unit(unit_dir: Path, levels: list[int], engine_config: bool) -> dict:
    out: dict = {"unit": unit_dir.name, "ok": False}
    unit = unitexec.parse_unit((unit_dir / "vllm.service").read_text())
    argv = unit.exec_start
    if Path(argv[0]).name != "vllm" or argv[1:2] != ["serve"]:
        out["error"] = f"ExecStart is not '.../vllm serve ...': {argv[:2]}"
        return out
    try:
        args = serve_args(argv[1:])
        from vllm.engine.arg_utils import EngineArgs

        ea = EngineArgs.from_cli_args(args)
    except SystemExit as e:
        out["error"] = f"vllm serve's parser exited {e.code}"
        return out
    except Exception as e:  # any refusal of vLLM's is the finding
        out["error"] = first_line(e)
        return out
    spec = ea.speculative_config
    out["speculative_config"] = spec
    out["max_model_len"] = ea.max_model_len
    out["max_num_seqs"] = ea.max_num_seqs  # None: vLLM's default for the GPU (1024 on an H200)
    if isinstance(spec, dict) and spec.get(KEY) is not None:
        from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

        try:
            dense = build_dynamic_sd_schedule_lookup(
                spec[KEY], ea.max_num_seqs or 1024, int(spec["num_speculative_tokens"])
            )
        except Exception as e:
            out["error"] = f"vLLM refused the schedule: {first_line(e)}"
            return out
        out["k_at_level"] = {str(c): dense[c] for c in levels if c < len(dense)}
    if engine_config and isinstance(spec, dict) and spec.get(KEY) is not None:
        buf = io.StringIO()
        handler = logging.StreamHandler(buf)
        handler.setLevel(logging.WARNING)
        vlog = logging.getLogger("vllm")
        vlog.addHandler(handler)
        try:
            cfg = ea.create_engine_config()
            sc = cfg.speculative_config
            out["engine_config"] = {
                "cudagraph_mode": str(cfg.compilation_config.cudagraph_mode),
                "max_num_seqs": cfg.scheduler_config.max_num_seqs,
                "num_speculative_tokens": getattr(sc, "num_speculative_tokens", None),
                KEY: getattr(sc, KEY, None),
            }
        except Exception as e:
            out["error"] = f"create_engine_config: {first_line(e)}"
            return out
        finally:
            vlog.removeHandler(handler)
            out["warnings"] = [x for x in buf.getvalue().splitlines() if x.strip()][:20]
    out["ok"] = True
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--units", type=Path, required=True, help="rendered units, one folder each")
    p.add_argument("--expect-version", default="")
    p.add_argument("--levels", default="1,2,4,8,16,32,64")
    p.add_argument("--engine-config", action="store_true", help="also create_engine_config()")
    p.add_argument(
        "--cpu",
        action="store_true",
        help="a dry run off the GPU machine: vLLM's CPU platform (as `vllm bench` does), so "
        "that its parser can be built without a GPU",
    )
    p.add_argument("--json", type=Path, help="write the result here too")
    a = p.parse_args(argv)
    try:
        levels = [int(x) for x in a.levels.split(",") if x.strip()]
    except ValueError:
        print(f"vllm_check: --levels {a.levels!r}: want integers like 1,4,16", file=sys.stderr)
        return 2
    if not a.units.is_dir():
        print(f"vllm_check: --units {a.units}: not a folder", file=sys.stderr)
        return 2
    res: dict = {"stubbed": stub_missing_kernels(), "platform": "detected"}
    if a.cpu:
        from vllm import platforms
        from vllm.platforms.cpu import CpuPlatform

        platforms.current_platform = CpuPlatform()
        res["platform"] = "cpu (--cpu dry run)"
    try:
        res["version"] = importlib.metadata.version("vllm")
        import vllm

        res["vllm.__version__"] = getattr(vllm, "__version__", None)
    except Exception as e:
        res["version_error"] = first_line(e)
    res["imports"] = {}
    for mod in SERVING:
        try:
            importlib.import_module(mod)
            res["imports"][mod] = "ok"
        except Exception as e:
            res["imports"][mod] = first_line(e)
    res["units"] = [
        check_unit(d, levels, a.engine_config)
        for d in sorted(a.units.iterdir())
        if (d / "vllm.service").is_file()
    ]
    failed = [m for m, v in res["imports"].items() if v != "ok"]
    failed += [u["unit"] for u in res["units"] if not u["ok"]]
    if res["stubbed"]:
        # with kernel libraries stubbed only a missing dependency is a sure failure; anything
        # else may be the stub (the full check of step 3 decides)
        sure = {m for m, v in res["imports"].items() if missing_dependency(v)}
        sure |= {u["unit"] for u in res["units"] if missing_dependency(u.get("error", ""))}
        res["inconclusive"] = [x for x in failed if x not in sure]
        failed = [x for x in failed if x in sure]
    if a.expect_version and res.get("version") != a.expect_version:
        failed.append(f"version {res.get('version')} != {a.expect_version}")
    res["failed"] = failed
    text = json.dumps(res, indent=1, sort_keys=True, default=str)
    if a.json:
        a.json.write_text(text + "\n")
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
