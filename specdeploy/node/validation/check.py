"""Node-side validation CLI: smoke checks, acceptance measurement, gates.

Usage::

    python -m specdeploy.node.validation.check smoke|acceptance|all --base-url http://127.0.0.1:PORT
        --served-model-name NAME [--api-key-file F] [--prompts FILE] [--max-requests N]
        [--time-budget S] [--repeats N] [--max-tokens N] [--warmup N] [--concurrency N]
        [--endpoint chat|completions] [--temperature T] [--top-p P]
        [--levels 1,8,32 [--min-window-s S]]
        [--request-timeout S] [--workload-json JSON]
        [--gates FILE] [--baseline-tps X|1=X,8=Y | --baseline-file F]
        [--baseline-source knob|history|serving-release|baseline-start] [--previous-file F]
        [--speed-up-waiver REASON] [--no-spec-baseline] [--wait-ready S] [--node NAME]
        [--release ID] [--label KEY=VALUE ...] [--json] [--out FILE]
    python -m specdeploy.node.validation.check baseline --base-url U --served-model-name M
        --levels 1,8,32 [--endpoint chat] [--min-window-s S] [--repeats N] [--max-tokens T]
        [--prompts FILE] [--workload-json JSON] --out FILE [--json]

The workload flags (and ``--workload-json``, the same fields as one JSON object, which the
validation role passes) are :class:`specdeploy.node.validation.workload.Workload`'s.

``baseline`` measures whatever serves now (no gates) and writes a ``specdeploy.throughput/1``
document (:mod:`specdeploy.node.validation.speed`); exit 0, or 2 when it could not measure.

With ``--levels`` the throughput, speed-up and latency (TTFT, ITL p50/p99 from streamed
responses) are measured per concurrency level by :mod:`specdeploy.node.validation.loadgen` and
gated per
level; without, one level (``--concurrency``) from the acceptance repeats. A speculative run
never passes without a measured speed-up: no baseline -> exit 2 (or WAIVED with a waiver).

The API key is read from ``--api-key-file`` or $SPECDEPLOY_API_KEY / $VLLM_API_KEY (never a
command-line value). Exit codes: 0 pass, 1 a check or gate failed, 2 could not measure (the
server does not answer: port closed, or no HTTP answer to /health; or a usage error). A human
table goes to stdout unless ``--json``; ``--out`` always writes JSON.

JSON result (``schema: "specdeploy.validation/1"``; see docs/validation-schema.md)::

    {
      "schema": "specdeploy.validation/1",
      "run_id": str,                          # unique per run (hex uuid4)
      "mode": "smoke" | "acceptance" | "all",
      "status": "pass" | "waived" | "fail" | "error",  # exit code 0 | 0 | 1 | 2
      "exit_code": int,
      "reasons": [str],                       # why not pass (empty on pass)
      "node": str, "release": str | null, "labels": {str: str},
      "base_url": str, "served_model_name": str, "server_version": str | null,
      "started_at": ISO-8601 UTC, "finished_at": ISO-8601 UTC, "duration_s": float,
      "smoke": null | {"ok": bool, "stages": [
          {"name": "port|health|models|completion|determinism", "ok": bool,
           "status": "pass|fail|skip", "seconds": float, "message": str, "value": str|null}]},
      "acceptance": null | {
          "status": "ok" | "spec_off" | "counter_reset" | "error", "message": str,
          "mode": "spec" | "no_spec_baseline",
          "requests": int, "completion_tokens": int, "wall_s": float, "engines": [str],
          "num_drafts": float|null, "num_draft_tokens": float|null,
          "num_accepted_tokens": float|null, "accepted_per_position": [float]|null,
          "mean_acceptance_length": float|null,      # 1 + accepted/drafts
          "draft_acceptance_rate": float|null,       # accepted/draft_tokens (fraction)
          "per_position_acceptance": [float]|null,   # accepted_i/drafts
          "output_tokens_per_s": Spread|null, "accepted_tokens_per_s": Spread|null,
          "baseline_output_tokens_per_s": float|null, "baseline_source": str|null,
          "speed_up": Spread|null,                   # output tok/s / baseline
          "vllm_log_line": str|null,                 # vLLM's SpecDecoding line, same counters
          "repeats": [{"index", "requests", "completion_tokens", "wall_s", "stopped_by",
                       "output_tokens_per_s", "accepted_tokens_per_s", "spec": {...}}]},
      "speed": null | {"baseline_source": str|null, "speculative": bool, "waiver": str|null,
          "levels": [{"concurrency", "output_tps", "spread", "repeats_tps", "baseline_tps",
                      "speed_up", "min_speed_up", "ttft_p50_s", "ttft_p99_s", "itl_p50_s",
                      "itl_p99_s", "status": "pass|fail|waived|unmeasured|not_applicable"}],
          "status": "pass|fail|waived|unmeasured|not_applicable", "failed_levels": [int],
          "message": str},
      "previous": null | {"release": str|null, "levels": [{"concurrency", "previous_tps",
          "output_tps", "change", "status"}], "max_regression": float,
          "status": "pass|fail|unmeasured", "message": str},
      "gates": null | {"passed": bool, "exit_code": int, "reasons": [str],
          "thresholds": {...},
          "checks": [{"name", "status": "pass|fail|skip|error", "value", "threshold",
                      "message"}]}
    }
    Spread = {"median", "min", "max", "q1", "q3", "n", "values": [float]}
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path

from specdeploy.node import cli
from specdeploy.node.module_utils.specdeploy_fsio import atomic_write
from specdeploy.node.validation import acceptance, gate, loadgen, smoke, speed
from specdeploy.node.validation.result import new_result, now
from specdeploy.node.validation.workload import Workload, WorkloadError


def default_release() -> str | None:
    env = os.environ.get("SPECDEPLOY_RELEASE")
    if env:
        return env
    here = Path(__file__).resolve()
    if here.parents[3].name == "toolkit":  # <release>/toolkit/specdeploy/node/validation/check.py
        manifest = here.parents[4] / "manifest.json"
        try:
            d = json.loads(manifest.read_text(encoding="utf-8"))
            rid = d.get("release_id") or d.get("id")
            if isinstance(rid, str):
                return rid
        except (OSError, ValueError):
            pass
        return here.parents[4].name
    return None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="spec-check", description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=["smoke", "acceptance", "all", "baseline"])
    p.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000")
    p.add_argument("--served-model-name", required=True)
    p.add_argument(
        "--api-key-file",
        help="file holding the API key (else $SPECDEPLOY_API_KEY or $VLLM_API_KEY)",
    )
    Workload.add_arguments(p)
    p.add_argument(
        "--smoke-timeout",
        type=cli.finite_float,
        default=None,
        help="scale: completion/determinism stage timeout in seconds",
    )
    p.add_argument("--no-per-kind", action="store_true", help="no acceptance window per kind")
    p.add_argument("--gates", help="JSON/YAML thresholds mapping")
    b = p.add_mutually_exclusive_group()
    b.add_argument(
        "--baseline-tps", help="no-spec output tokens/s: X for every level, or 1=X,8=Y by level"
    )
    b.add_argument(
        "--baseline-file", help="a specdeploy.throughput/1 file or a no-speculation result JSON"
    )
    p.add_argument("--baseline-source", choices=speed.BASELINE_SOURCES, default=None)
    p.add_argument("--previous-file", help="the replaced release's throughput/1 or result JSON")
    p.add_argument("--speed-up-waiver", default=None, metavar="REASON")
    p.add_argument(
        "--no-spec-baseline",
        action="store_true",
        help="measure output tokens/s only, for a server without speculation",
    )
    p.add_argument(
        "--wait-ready",
        type=cli.finite_float,
        default=0.0,
        metavar="S",
        help="first poll /health up to S seconds (progress on stderr)",
    )
    p.add_argument("--node", default=None, help="node name in the result (default hostname)")
    p.add_argument("--release", default=None, help="release id in the result")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--json", action="store_true", help="JSON on stdout instead of the table")
    p.add_argument("--out", help="also write the JSON result here")
    return p


def _fmt_value(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def render_table(result: dict[str, object]) -> str:
    """One line per check: STATUS  name  value  threshold  message (DeepOps doctor style)."""
    rows: list[tuple[str, str, str, str, str]] = []

    def add(status: str, name: str, value: str, message: str, threshold: str = "") -> None:
        rows.append((status, name, value, threshold, message))

    sm = result.get("smoke")
    if isinstance(sm, dict):
        for s in sm["stages"]:
            add(s["status"].upper(), f"smoke.{s['name']}", f"{s['seconds']:.2f}s", s["message"])
    acc = result.get("acceptance")
    if isinstance(acc, dict):
        st = {"ok": "PASS", "spec_off": "FAIL"}.get(acc["status"], "ERROR")
        add(st, "acceptance.measure", str(acc.get("requests", "")), acc["message"])
        if acc["status"] == "ok":
            tps = acc.get("output_tokens_per_s") or {}
            add(
                "INFO",
                "acceptance.output_tok_s",
                _fmt_value(tps.get("median")),
                f"min {_fmt_value(tps.get('min'))} max {_fmt_value(tps.get('max'))} "
                f"n={tps.get('n')}",
            )
            if acc.get("mode") == "spec":
                per_pos = acc.get("per_position_acceptance") or []
                add(
                    "INFO",
                    "acceptance.draft_rate",
                    _fmt_value(acc.get("draft_acceptance_rate")),
                    "per position " + ", ".join(f"{x:.3f}" for x in per_pos),
                )
        if acc.get("per_position_note"):
            add("INFO", "acceptance.per_position", "-", acc["per_position_note"])
        for kind, k in sorted((acc.get("by_kind") or {}).items()):
            mal = _fmt_value(k.get("mean_acceptance_length"))
            add("INFO", f"acceptance.kind.{kind}", mal, "mean acceptance length")
    sp = result.get("speed")
    if isinstance(sp, dict):
        for lv in sp.get("levels") or []:
            lat = ""
            if lv.get("ttft_p50_s") is not None:
                lat = (
                    f"TTFT p50/p99 {lv['ttft_p50_s'] * 1e3:.0f}/{lv['ttft_p99_s'] * 1e3:.0f} ms, "
                    f"ITL p50/p99 {lv['itl_p50_s'] * 1e3:.1f}/{lv['itl_p99_s'] * 1e3:.1f} ms, "
                )
            unsure = lv.get("verdict_holds") is False
            add(
                "INFO",
                f"speed.c{lv['concurrency']}",
                _fmt_value(lv.get("output_tps")),
                f"{lat}spread {_fmt_value(lv.get('spread'))}, baseline "
                f"{_fmt_value(lv.get('baseline_tps'))} tok/s"
                + (" (gate within the spread: repeat or lengthen to be sure)" if unsure else ""),
            )
    gt = result.get("gates")
    if isinstance(gt, dict):
        for c in gt["checks"]:
            add(
                c["status"].upper(),
                f"gate.{c['name']}",
                _fmt_value(c["value"]),
                c["message"],
                threshold=c["threshold"],
            )
    w = max([len(r[1]) for r in rows] + [10])
    head = (
        f"specdeploy check {result['mode']}  node={result['node']}  "
        f"release={result.get('release') or '-'}  model={result['served_model_name']}  "
        f"{result['base_url']}"
    )
    lines = [head, f"  {'STATUS':10}  {'CHECK':{w}}  {'VALUE':>9}  {'THRESHOLD':10}  MESSAGE"]
    for r in rows:
        lines.append(f"  {r[0]:10}  {r[1]:{w}}  {r[2]:>9}  {r[3]:10}  {r[4]}")
    unsure = result.get("unsure") or []
    shown = "UNSURE" if unsure and result["status"] == "pass" else str(result["status"]).upper()
    lines.append(
        f"RESULT: {shown} (exit {result['exit_code']})"
        + ("" if not result["reasons"] else ": " + "; ".join(result["reasons"]))
        + (": passes the gates, but " + "; ".join(unsure) if shown == "UNSURE" else "")
    )
    return "\n".join(lines)


def _labels(pairs: list[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for kv in pairs:
        k, sep, v = kv.partition("=")
        if not sep or not k:
            raise ValueError(f"--label wants KEY=VALUE, got {kv!r}")
        labels[k] = v
    return labels


def run(args: argparse.Namespace, workload: Workload | None = None) -> dict[str, object]:
    """The checks of ``args.mode`` with ``workload`` (default: the one ``args`` give)."""
    workload = workload or Workload.from_args(args)
    t0 = time.monotonic()
    labels = _labels(args.label)
    result: dict[str, object] = new_result(
        args.mode,
        args.node or socket.gethostname(),
        args.release or default_release(),
        args.base_url,
        args.served_model_name,
        labels,
    )
    waived = False
    reasons: list[str] = []
    exit_code = 0
    with cli.naming("--api-key-file", args.api_key_file):
        api_key = smoke.read_api_key(args.api_key_file)
    client = smoke.Client(args.base_url, api_key)
    with cli.naming("--gates", args.gates):
        thresholds = gate.load_thresholds(args.gates)  # validate before measuring
    if args.speed_up_waiver is not None:  # the inventory knob wins over the gates file
        thresholds.speed_up_waiver = args.speed_up_waiver.strip()
    with cli.naming("--prompts", workload.prompts):
        prompts = acceptance.load_prompts(workload.prompts) if args.mode != "smoke" else []
    levels = workload.measured_levels
    if args.mode != "smoke":  # a gate for a level never measured would be dropped silently
        gate.validate(
            thresholds, 0, levels, flag="--levels" if workload.levels else "--concurrency"
        )
    baseline: dict[int, float] | None = None
    source: str | None = args.baseline_source
    if args.baseline_tps is not None:
        baseline = speed.parse_baseline_tps(args.baseline_tps, levels)
        source = source or "knob"
    elif args.baseline_file:
        with cli.naming("--baseline-file", args.baseline_file):
            bf = speed.read_levels_file(args.baseline_file)
        if bf.speculative:
            raise speed.SpeedInputError(
                f"{args.baseline_file}: measured with speculation on; not a baseline"
            )
        baseline = bf.at(levels)
        source = source or args.baseline_file
    previous: speed.LevelsFile | None = None
    if args.previous_file:
        with cli.naming("--previous-file", args.previous_file):
            previous = speed.read_levels_file(args.previous_file)

    if args.wait_ready > 0:
        _ok, msg = smoke.wait_ready(
            client, args.wait_ready, progress=lambda m: print(m, file=sys.stderr, flush=True)
        )
        print(msg, file=sys.stderr, flush=True)

    if args.mode in ("smoke", "all"):
        cfg = smoke.SmokeConfig(args.served_model_name)
        if args.smoke_timeout:
            cfg.timeouts_s.update(completion=args.smoke_timeout, determinism=args.smoke_timeout)
        stages = smoke.run_smoke(client, cfg)
        sm_ok = all(s.ok for s in stages)
        result["smoke"] = {"ok": sm_ok, "stages": [s.to_dict() for s in stages]}
        if not sm_ok:
            # No answer at all (port closed, /health without any HTTP status, a connection
            # refused or closed without a response: down, hung or gone mid-check) means nothing
            # could be measured: exit 2. An answer that is wrong: exit 1.
            first = next(s for s in stages if s.status == "fail")
            unreachable = smoke.stopped_answering(first)
            exit_code = 2 if unreachable else 1
            gone = " (the server stopped answering)" if first.error_kind in smoke.GONE else ""
            reasons += [
                ("could not measure: " if unreachable else "")
                + f"smoke.{s.name}: {s.message}"
                + (gone if s is first else "")
                for s in stages
                if s.status == "fail"
            ]

    if args.mode in ("acceptance", "all") and exit_code == 0:
        try:
            _, raw = client.request("GET", "/version", None, 5.0)
            v = json.loads(raw).get("version")
            result["server_version"] = v if isinstance(v, str) else None
        except (smoke.HttpError, ValueError, AttributeError):
            pass
        acfg = acceptance.AcceptanceConfig(
            served_model_name=args.served_model_name,
            prompts=prompts,
            workload=workload,
            no_spec_baseline=args.no_spec_baseline,
            per_kind=not args.no_per_kind,
        )
        ares = acceptance.run_acceptance(client, acfg)
        measured: list[dict[str, object]] = []
        if ares.ok:
            one = (baseline or {}).get(workload.concurrency)
            if one:
                ares.set_baseline(one, source or "--baseline-tps")
            if workload.levels:
                try:
                    measured = _measure(args, workload, prompts, api_key)
                except loadgen.LoadgenError as e:
                    ares.status, ares.message = "error", f"could not measure the levels: {e}"
            else:
                measured = gate.levels_from_acceptance(ares, workload.concurrency)
        speed_res = gate.evaluate_speed(
            measured,
            baseline,
            source,
            thresholds,
            speculative=ares.spec_mode,
            waiver=args.speed_up_waiver,
        )
        prev_res = None
        if previous is not None:
            prev_res = gate.evaluate_previous(
                measured,
                previous.at(levels),
                previous.release,
                thresholds.max_regression_vs_previous,
            )
        gres = gate.evaluate(
            ares,
            thresholds,
            speed_res if workload.levels else None,
            prev_res,
            concurrency=workload.concurrency,
        )
        if not workload.levels and gres.speed is not None:
            speed_res = gres.speed
        result["acceptance"] = ares.to_dict()
        result["speed"] = speed_res if ares.ok else None
        result["previous"] = prev_res if ares.ok else None
        result["gates"] = gres.to_dict()
        exit_code = max(exit_code, gres.exit_code)
        reasons += gres.reasons
        waived = gres.waived
        result["unsure"] = gres.unsure

    result["exit_code"] = exit_code
    result["status"] = {0: "waived" if waived else "pass", 1: "fail"}.get(exit_code, "error")
    result["reasons"] = reasons
    result["finished_at"] = now()
    result["duration_s"] = round(time.monotonic() - t0, 3)
    return result


def _measure(
    args: argparse.Namespace,
    workload: Workload,
    prompts: list[acceptance.Prompt],
    api_key: str | None,
) -> list[dict[str, object]]:
    """The workload at each of its concurrency levels (validation and baseline)."""
    return speed.measure(args.base_url, args.served_model_name, workload, prompts, api_key=api_key)


def run_baseline(args: argparse.Namespace, workload: Workload | None = None) -> dict[str, object]:
    """``check baseline``: throughput per level of whatever serves now (no gates)."""
    workload = workload or Workload.from_args(args)
    if not workload.levels:
        raise speed.SpeedInputError("baseline: --levels is required, e.g. --levels 1,8,32")
    with cli.naming("--prompts", workload.prompts):
        prompts = acceptance.load_prompts(workload.prompts)
    with cli.naming("--api-key-file", args.api_key_file):
        api_key = smoke.read_api_key(args.api_key_file)
    client = smoke.Client(args.base_url, api_key)
    try:
        spec = speed.serves_speculatively(client, args.served_model_name)
    except smoke.HttpError as e:
        raise loadgen.LoadgenError(f"/metrics: {e}") from None
    measured = _measure(args, workload, prompts, api_key)
    return speed.throughput_document(
        measured,
        release=args.release or default_release(),
        speculative=spec,
        model=args.served_model_name,
        endpoint=workload.endpoint,
        node=args.node or socket.gethostname(),
        labels=_labels(args.label),
    )


def _write(path: str, text: str) -> int:
    """Write the JSON atomically; 0, or 2 with one line naming --out."""
    try:
        atomic_write(path, text + "\n")
    except OSError as e:
        return cli.usage_error("spec-check", f"--out {path}: {cli.reason(e)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        workload = Workload.from_args(args)
    except WorkloadError as e:
        return cli.usage_error("spec-check", e)
    try:
        cli.check_paths(
            readable=[
                ("--prompts", workload.prompts),
                ("--gates", args.gates),
                ("--api-key-file", args.api_key_file),
                ("--baseline-file", args.baseline_file),
                ("--previous-file", args.previous_file),
            ],
            writable=[("--out", args.out)],
        )
    except cli.PathError as e:
        return cli.usage_error("spec-check", e)
    if args.mode == "baseline":
        try:
            doc = run_baseline(args, workload)
        except cli.PathError as e:
            return cli.usage_error("spec-check", e)
        except (loadgen.LoadgenError, ValueError, OSError) as e:
            print(f"spec-check: could not measure: {e}", file=sys.stderr)
            return 2
        text = json.dumps(doc, indent=2)
        if args.out and _write(args.out, text):
            return 2
        if args.json:
            print(text)
        else:
            print(f"throughput of {args.served_model_name} (speculative: {doc['speculative']})")
            rows = [loadgen.LevelResult(**lv) for lv in doc["levels"].values()]  # type: ignore[attr-defined]
            print(loadgen.render_table(rows))
        return 0
    try:
        result = run(args, workload)
    except cli.PathError as e:
        return cli.usage_error("spec-check", e)
    except (gate.GateConfigError, ValueError, OSError) as e:
        return cli.usage_error("spec-check", e)
    text = json.dumps(result, indent=2, sort_keys=False)
    if args.out and _write(args.out, text):
        return 2
    if args.json:
        print(text)
    else:
        print(render_table(result))
    return int(result["exit_code"])  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
