"""Node-side validation CLI: smoke checks, acceptance measurement, gates.

Usage::

    python -m specdeploy.node.check smoke|acceptance|all --base-url http://127.0.0.1:PORT
        --served-model-name NAME [--api-key-file F] [--prompts FILE] [--max-requests N]
        [--time-budget S] [--repeats N] [--max-tokens N] [--warmup N] [--concurrency N]
        [--request-timeout S] [--gates FILE] [--baseline-tps X | --baseline-file F]
        [--no-spec-baseline] [--wait-ready S] [--node NAME] [--release ID]
        [--label KEY=VALUE ...] [--json] [--out FILE]

The API key is read from ``--api-key-file`` or $SPECDEPLOY_API_KEY / $VLLM_API_KEY (never a
command-line value). Exit codes: 0 pass, 1 a check or gate failed, 2 could not measure (the
server does not answer: port closed, or no HTTP answer to /health; or a usage error). A human
table goes to stdout unless ``--json``; ``--out`` always writes JSON.

JSON result (``schema: "specdeploy.validation/1"``; see docs/validation-schema.md)::

    {
      "schema": "specdeploy.validation/1",
      "run_id": str,                          # unique per run (hex uuid4)
      "mode": "smoke" | "acceptance" | "all",
      "status": "pass" | "fail" | "error",    # exit code 0 | 1 | 2
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

from specdeploy.node import acceptance, cli, gate, smoke
from specdeploy.node.module_utils.specdeploy_fsio import atomic_write
from specdeploy.node.result import new_result, now


def default_release() -> str | None:
    env = os.environ.get("SPECDEPLOY_RELEASE")
    if env:
        return env
    here = Path(__file__).resolve()
    if here.parents[2].name == "toolkit":  # <release>/toolkit/specdeploy/node/check.py
        manifest = here.parents[3] / "manifest.json"
        try:
            d = json.loads(manifest.read_text(encoding="utf-8"))
            rid = d.get("release_id") or d.get("id")
            if isinstance(rid, str):
                return rid
        except (OSError, ValueError):
            pass
        return here.parents[3].name
    return None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="spec-check", description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=["smoke", "acceptance", "all"])
    p.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000")
    p.add_argument("--served-model-name", required=True)
    p.add_argument(
        "--api-key-file",
        help="file holding the API key (else $SPECDEPLOY_API_KEY or $VLLM_API_KEY)",
    )
    p.add_argument("--prompts", help="prompt set JSONL (default: the shipped set)")
    p.add_argument("--max-requests", type=int, default=20, help="per repeat (default 20)")
    p.add_argument(
        "--time-budget",
        type=float,
        default=300.0,
        help="seconds for the whole acceptance run, all repeats (default 300)",
    )
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--max-tokens", type=int, help="override every prompt's max_tokens")
    p.add_argument("--warmup", type=int, default=1, help="uncounted warm-up requests")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--request-timeout", type=float, default=120.0)
    p.add_argument(
        "--smoke-timeout",
        type=float,
        default=None,
        help="scale: completion/determinism stage timeout in seconds",
    )
    p.add_argument("--gates", help="JSON/YAML thresholds mapping")
    b = p.add_mutually_exclusive_group()
    b.add_argument("--baseline-tps", type=float, help="no-spec output tokens/s on this node")
    b.add_argument("--baseline-file", help="result JSON of a --no-spec-baseline run")
    p.add_argument(
        "--no-spec-baseline",
        action="store_true",
        help="measure output tokens/s only, for a server without speculation",
    )
    p.add_argument(
        "--wait-ready",
        type=float,
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
    sm = result.get("smoke")
    if isinstance(sm, dict):
        for s in sm["stages"]:
            rows.append(
                (
                    s["status"].upper(),
                    f"smoke.{s['name']}",
                    f"{s['seconds']:.2f}s",
                    "",
                    s["message"],
                )
            )
    acc = result.get("acceptance")
    if isinstance(acc, dict):
        st = {"ok": "PASS", "spec_off": "FAIL"}.get(acc["status"], "ERROR")
        rows.append((st, "acceptance.measure", str(acc.get("requests", "")), "", acc["message"]))
        if acc["status"] == "ok":
            tps = acc.get("output_tokens_per_s") or {}
            rows.append(
                (
                    "INFO",
                    "acceptance.output_tok_s",
                    _fmt_value(tps.get("median")),
                    "",
                    f"min {_fmt_value(tps.get('min'))} max {_fmt_value(tps.get('max'))} "
                    f"n={tps.get('n')}",
                )
            )
            if acc.get("mode") == "spec":
                rows.append(
                    (
                        "INFO",
                        "acceptance.draft_rate",
                        _fmt_value(acc.get("draft_acceptance_rate")),
                        "",
                        "per position "
                        + ", ".join(f"{x:.3f}" for x in acc.get("per_position_acceptance") or []),
                    )
                )
    gt = result.get("gates")
    if isinstance(gt, dict):
        for c in gt["checks"]:
            rows.append(
                (
                    c["status"].upper(),
                    f"gate.{c['name']}",
                    _fmt_value(c["value"]),
                    c["threshold"],
                    c["message"],
                )
            )
    w = max([len(r[1]) for r in rows] + [10])
    head = (
        f"specdeploy check {result['mode']}  node={result['node']}  "
        f"release={result.get('release') or '-'}  model={result['served_model_name']}  "
        f"{result['base_url']}"
    )
    lines = [head, f"  {'STATUS':6}  {'CHECK':{w}}  {'VALUE':>9}  {'THRESHOLD':10}  MESSAGE"]
    for r in rows:
        lines.append(f"  {r[0]:6}  {r[1]:{w}}  {r[2]:>9}  {r[3]:10}  {r[4]}")
    lines.append(
        f"RESULT: {str(result['status']).upper()} (exit {result['exit_code']})"
        + ("" if not result["reasons"] else ": " + "; ".join(result["reasons"]))
    )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict[str, object]:
    t0 = time.monotonic()
    labels: dict[str, str] = {}
    for kv in args.label:
        k, sep, v = kv.partition("=")
        if not sep or not k:
            raise ValueError(f"--label wants KEY=VALUE, got {kv!r}")
        labels[k] = v
    result: dict[str, object] = new_result(
        args.mode,
        args.node or socket.gethostname(),
        args.release or default_release(),
        args.base_url,
        args.served_model_name,
        labels,
    )
    reasons: list[str] = []
    exit_code = 0
    with cli.naming("--api-key-file", args.api_key_file):
        api_key = smoke.read_api_key(args.api_key_file)
    client = smoke.Client(args.base_url, api_key)
    with cli.naming("--gates", args.gates):
        thresholds = gate.load_thresholds(args.gates)  # validate before measuring
    with cli.naming("--prompts", args.prompts):
        prompts = acceptance.load_prompts(args.prompts) if args.mode != "smoke" else []
    baseline: tuple[float, str] | None = None
    if args.baseline_tps is not None:
        baseline = (args.baseline_tps, "--baseline-tps")
    elif args.baseline_file:
        with cli.naming("--baseline-file", args.baseline_file):
            baseline = (acceptance.baseline_from_result(args.baseline_file), args.baseline_file)

    if args.wait_ready > 0:
        _ok, msg = smoke.wait_ready(
            client, args.wait_ready, progress=lambda m: print(m, file=sys.stderr, flush=True)
        )
        print(msg, file=sys.stderr, flush=True)

    if args.mode in ("smoke", "all"):
        cfg = smoke.SmokeConfig(args.served_model_name)
        if args.smoke_timeout:
            cfg.completion_timeout_s = cfg.determinism_timeout_s = args.smoke_timeout
        stages = smoke.run_smoke(client, cfg)
        sm_ok = all(s.ok for s in stages)
        result["smoke"] = {"ok": sm_ok, "stages": [s.to_dict() for s in stages]}
        if not sm_ok:
            # No answer at all (port closed, or /health without any HTTP status: down or
            # hung) means nothing could be measured: exit 2. An answer that is wrong: exit 1.
            first = next(s for s in stages if s.status == "fail")
            unreachable = first.name in ("port", "health") and first.value is None
            exit_code = 2 if unreachable else 1
            reasons += [
                ("could not measure: " if unreachable else "") + f"smoke.{s.name}: {s.message}"
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
            max_requests=args.max_requests,
            time_budget_s=args.time_budget,
            repeats=args.repeats,
            request_timeout_s=args.request_timeout,
            warmup=args.warmup,
            concurrency=args.concurrency,
            max_tokens=args.max_tokens,
            no_spec_baseline=args.no_spec_baseline,
        )
        ares = acceptance.run_acceptance(client, acfg)
        if baseline and ares.ok:
            ares.set_baseline(*baseline)
        gres = gate.evaluate(ares, thresholds)
        result["acceptance"] = ares.to_dict()
        result["gates"] = gres.to_dict()
        exit_code = max(exit_code, gres.exit_code)
        reasons += gres.reasons

    result["exit_code"] = exit_code
    result["status"] = {0: "pass", 1: "fail"}.get(exit_code, "error")
    result["reasons"] = reasons
    result["finished_at"] = now()
    result["duration_s"] = round(time.monotonic() - t0, 3)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.max_requests < 1 or args.concurrency < 1:
        parser.error("--repeats, --max-requests and --concurrency must be >= 1")
    try:
        cli.check_paths(
            readable=[
                ("--prompts", args.prompts),
                ("--gates", args.gates),
                ("--api-key-file", args.api_key_file),
                ("--baseline-file", args.baseline_file),
            ],
            writable=[("--out", args.out)],
        )
        result = run(args)
    except cli.PathError as e:
        return cli.usage_error("spec-check", e)
    except (gate.GateConfigError, ValueError, OSError) as e:
        return cli.usage_error("spec-check", e)
    text = json.dumps(result, indent=2, sort_keys=False)
    if args.out:
        try:
            atomic_write(args.out, text + "\n")
        except OSError as e:
            return cli.usage_error("spec-check", f"--out {args.out}: {cli.reason(e)}")
    if args.json:
        print(text)
    else:
        print(render_table(result))
    return int(result["exit_code"])  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
