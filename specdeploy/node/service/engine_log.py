"""Read what a vLLM engine log says it chose and measured (stdlib only; runs on the node).

vLLM (0.15 .. 0.20 at least) logs, per attention layer kind it builds::

    (EngineCore pid=799) INFO 12-02 18:19:00 [cuda.py:368] Using FLASH_ATTN_MLA attention backend
        out of potential backends: ['FLASH_ATTN_MLA', 'FLASHMLA', 'TRITON_MLA'].

when it picks one itself, and, when ``--attention-backend`` forced one::

    (EngineCore pid=1219) INFO 12-02 18:36:55 [cuda.py:308] Using AttentionBackendEnum.TRITON_MLA
        backend.

A forced backend that does not fit a layer (an MLA-only backend for a llama-style EAGLE-3
drafter) ends the engine with::

    ValueError: Selected backend AttentionBackendEnum.TRITON_MLA is not valid for this
        configuration. Reason: ['non-MLA not supported']

The periodic stats logger prints, for each interval with speculative work::

    SpecDecoding metrics: Mean acceptance length: 3.00, Accepted throughput: 31.31 tokens/s,
        Drafted throughput: 46.97 tokens/s, Accepted: 344 tokens, Drafted: 516 tokens,
        Per-position acceptance rate: 0.802, 0.651, 0.547, Avg Draft acceptance rate: 66.7%

CLI::

    python -m specdeploy.node.service.engine_log ENGINE.log [--json]     # backends, aux layers,
    spec lines

Exit codes: 0 parsed (something found), 1 the log names no attention backend, 2 usage error.
"""

from __future__ import annotations

import ast
import contextlib
import itertools
import json
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from specdeploy.node import cli
from specdeploy.node.cli import reason, usage_error
from specdeploy.node.module_utils.attention import is_mla_backend

_PREFIX = r"(?:\((?P<proc>[A-Za-z_]+)(?: pid=(?P<pid>\d+))?\)\s+)?"
_AUTO_RE = re.compile(
    _PREFIX + r".*?Using (?P<name>[A-Z0-9_]+) attention backend out of potential backends: "
    r"(?P<cands>\[[^\]]*\])"
)
_FORCED_RE = re.compile(
    _PREFIX + r".*?Using (?:AttentionBackendEnum\.)?(?P<name>[A-Z0-9_]+) backend\.\s*$"
)
_INVALID_RE = re.compile(
    r"Selected backend (?:AttentionBackendEnum\.)?(?P<name>[A-Z0-9_]+) is not valid for this "
    r"configuration\. Reason: (?P<reasons>\[.*\])"
)
# SGLang prints its resolved arguments once: server_args=ServerArgs(..., attention_backend='triton',
# ...) (tests/fixtures/sglang-0.5.15-h200, the recorded H200 run's server log).
_SGLANG_ARGS_RE = re.compile(
    r"server_args=ServerArgs\(.*?\battention_backend='(?P<name>[a-z0-9_]+)'"
)
# SGLang backends that serve MLA (server_args.py ATTENTION_BACKEND_CHOICES; triton does both).
SGLANG_MLA_BACKENDS = frozenset(
    {"triton", "flashinfer", "flashmla", "cutlass_mla", "fa3", "trtllm_mla", "cutedsl_mla"}
)
_AUX_RE = re.compile(
    r"Using auxiliary layers from speculative config: (?P<layers>[\[(][^\])]*[\])])"
)
_FA_VERSION_RE = re.compile(r"Using FlashAttention version (?P<v>\d+)")
_MOE_RE = re.compile(r"Using (?P<name>.+?) (?:Unquantized )?MoE backend out of potential backends")
_STARTUP_RES = {
    "model_loading_s": re.compile(
        r"Model loading took [0-9.]+ GiB(?: memory)? and (?P<v>[0-9.]+) seconds"
    ),
    "torch_compile_s": re.compile(r"torch\.compile took (?P<v>[0-9.]+) s in total"),
    "graph_capture_s": re.compile(r"Graph capturing finished in (?P<v>[0-9.]+) secs"),
    "init_engine_s": re.compile(
        r"init engine \(profile, create kv cache, warmup model\) took (?P<v>[0-9.]+) s"
    ),
    "init_engine_compilation_s": re.compile(
        r"init engine \(profile, create kv cache, warmup model\) took [0-9.]+ s "
        r"\(compilation: (?P<v>[0-9.]+) s"
    ),
}
_CACHE_HIT_RE = re.compile(r"Directly load the compiled graph")
_SPEC_RE = re.compile(
    r"SpecDecoding metrics: Mean acceptance length: (?P<mal>[0-9.]+), "
    r"Accepted throughput: (?P<acc_tp>[0-9.]+) tokens/s, "
    r"Drafted throughput: (?P<dr_tp>[0-9.]+) tokens/s, "
    r"Accepted: (?P<acc>\d+) tokens, Drafted: (?P<dr>\d+) tokens, "
    r"Per-position acceptance rate: (?P<pos>[0-9., ]*?), "
    r"Avg Draft acceptance rate: (?P<rate>[0-9.]+)%"
)


# The phases of a start, in order, and the lines that open them: systemd's own for the old
# server's stop and the new process, then vLLM 0.20.2's words (tests/fixtures/
# vllm-0.20.2-gpu-tier/runs/*/engine.log). A phase lasts until a later one opens.
PHASES = ("stop", "start", "weights", "compile", "graphs", "api", "ready")
PHASE_TITLES = {
    "stop": "stopping the old server",
    "start": "process started (imports, config)",
    "weights": "loading weights",
    "compile": "torch.compile",
    "graphs": "CUDA graph capture",
    "api": "starting the API server",
    "ready": "ready",
}
_PHASE_RES = (
    ("stop", re.compile(r"^Stopping \S+\.service\b")),
    ("start", re.compile(r"^Start(?:ing|ed) \S+\.service\b")),
    (
        "weights",
        re.compile(
            r"Starting to load model|Loading safetensors checkpoint shards|Loading weights took"
            r"|Loading drafter model"
        ),
    ),
    (
        "compile",
        re.compile(
            r"for vLLM's torch\.compile|Compiling a graph for compile range"
            r"|Directly load (?:the compiled graph|AOT compilation)|torch\.compile took"
        ),
    ),
    ("graphs", re.compile(r"Profiling CUDA graph memory|Capturing CUDA graphs")),
    (
        "api",
        re.compile(
            r"init engine \(profile, create kv cache, warmup model\) took|Starting vLLM server on"
        ),
    ),
    ("ready", re.compile(r"Application startup complete\.")),
)
# The weights' progress bar of each safetensors loader of vLLM 0.20.2: default and `eager`
# strategy, `enable_multithread_load`, `--load-format runai_streamer` (it counts tensors)
# (tests/fixtures/vllm-0.20.2-loads/runs/*/engine.log).
_SHARDS_RE = re.compile(
    r"(?:Loading safetensors checkpoint shards(?: \(\w+\))?|Multi-thread loading shards"
    r"|Loading safetensors using Runai Model Streamer):\s+(?P<pct>\d+)% Completed"
    r" \| (?P<done>\d+)/(?P<total>\d+)"
)


@dataclass(frozen=True)
class PhaseEvent:
    """A phase of a start opened at ``at`` (the log line's time, seconds)."""

    phase: str  # one of PHASES
    at: float
    message: str  # the line that opened it


def parse_phases(entries: list[tuple[float, str]]) -> tuple[list[PhaseEvent], int | None]:
    """The phases a start went through, from (time, message) log entries in order, and the
    weights' last logged percentage (None before any shard progress). Phases only move
    forward: a line of an earlier phase (the drafter's weights) does not reopen it."""
    events: list[PhaseEvent] = []
    percent: int | None = None
    for at, message in entries:
        for part in message.split("\r"):
            index = len(events) and PHASES.index(events[-1].phase)
            for phase, rx in _PHASE_RES:
                if rx.search(part):
                    if not events or PHASES.index(phase) > index:
                        events.append(PhaseEvent(phase, at, part.strip()[:200]))
                    break
            m = _SHARDS_RE.search(part)
            if m and events and events[-1].phase == "weights":
                percent = int(m.group("pct"))
    return events, percent


def downtime_window(events: list[PhaseEvent]) -> dict[str, object] | None:
    """The window from the old server's stop (or the new process's start, when nothing ran
    before) to readiness, and its parts (seconds per phase); None before readiness."""
    if not events or events[-1].phase != "ready":
        return None
    first = events[0]
    parts = {a.phase: round(b.at - a.at, 2) for a, b in itertools.pairwise(events)}
    return {
        "from": first.phase,
        "window_s": round(events[-1].at - first.at, 2),
        "parts": parts,
    }


@dataclass(frozen=True)
class BackendChoice:
    """One attention backend vLLM said it uses."""

    name: str  # e.g. FLASH_ATTN_MLA, FLASH_ATTN, TRITON_MLA
    forced: bool  # True when chosen by --attention-backend ("Using X backend.")
    candidates: tuple[str, ...]  # the valid candidates vLLM listed (empty when forced)
    mla: bool  # an MLA backend (the DeepSeek/Kimi target's kind)
    process: str  # "EngineCore", "APIServer", "Worker_TP0", ... or "" when not prefixed
    pid: int | None
    line: int  # 1-based line number in the log


@dataclass(frozen=True)
class BackendRefusal:
    """A forced backend that vLLM refused for some layer (the engine then fails)."""

    name: str
    reasons: tuple[str, ...]
    line: int


@dataclass(frozen=True)
class SpecDecodingLine:
    """One ``SpecDecoding metrics:`` line (one stats interval)."""

    mean_acceptance_length: float
    accepted_throughput: float
    drafted_throughput: float
    accepted: int
    drafted: int
    per_position: tuple[float, ...]
    draft_acceptance_rate: float  # percent, as logged
    line: int

    @property
    def num_drafts(self) -> float:
        """Drafts in the interval: drafted tokens / k (k = number of positions)."""
        k = len(self.per_position)
        return self.drafted / k if k else 0.0


@dataclass
class EngineLogSummary:
    backends: list[BackendChoice] = field(default_factory=list)
    refusals: list[BackendRefusal] = field(default_factory=list)
    aux_layers: tuple[int, ...] | None = None
    flash_attn_version: int | None = None
    moe_backends: list[str] = field(default_factory=list)
    spec_lines: list[SpecDecodingLine] = field(default_factory=list)
    # start-up phases as logged (first occurrence each; seconds) and compile-cache hits
    startup: dict[str, float] = field(default_factory=dict)
    compile_cache_hits: int = 0

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["spec_total"] = combine_spec_lines(self.spec_lines)
        return d


def _choice(
    m: re.Match[str], *, forced: bool, cands: tuple[str, ...], lineno: int
) -> BackendChoice:
    pid = m.group("pid")
    return BackendChoice(
        name=m.group("name"),
        forced=forced,
        candidates=cands,
        mla=is_mla_backend(m.group("name")),
        process=m.group("proc") or "",
        pid=int(pid) if pid else None,
        line=lineno,
    )


def _literal_list(text: str) -> tuple[str, ...]:
    try:
        val = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return ()
    if isinstance(val, list | tuple):
        return tuple(str(v) for v in val)
    return ()


def parse_backends(text: str) -> list[BackendChoice]:
    """Every attention backend the log says was chosen, in log order.

    A line repeated by several processes (tensor-parallel workers) gives one entry per line.
    """
    out: list[BackendChoice] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if "backend" not in line:
            continue
        m = _AUTO_RE.search(line)
        if m:
            out.append(
                _choice(m, forced=False, cands=_literal_list(m.group("cands")), lineno=lineno)
            )
            continue
        m = _FORCED_RE.search(line)
        if m and "MoE" not in line:
            out.append(_choice(m, forced=True, cands=(), lineno=lineno))
            continue
        m = _SGLANG_ARGS_RE.search(line)
        if m:
            name = m.group("name")
            out.append(BackendChoice(name, True, (), name in SGLANG_MLA_BACKENDS, "", None, lineno))
    return out


def parse_refusals(text: str) -> list[BackendRefusal]:
    """Forced backends vLLM refused ("Selected backend X is not valid ..."), de-duplicated."""
    seen: set[tuple[str, tuple[str, ...]]] = set()
    out: list[BackendRefusal] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        m = _INVALID_RE.search(line)
        if not m:
            continue
        key = (m.group("name"), _literal_list(m.group("reasons")))
        if key in seen:
            continue
        seen.add(key)
        out.append(BackendRefusal(name=key[0], reasons=key[1], line=lineno))
    return out


def parse_spec_lines(text: str) -> list[SpecDecodingLine]:
    """Every ``SpecDecoding metrics:`` line, in log order."""
    out: list[SpecDecodingLine] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        m = _SPEC_RE.search(line)
        if not m:
            continue
        pos = tuple(float(p) for p in m.group("pos").split(",") if p.strip())
        out.append(
            SpecDecodingLine(
                mean_acceptance_length=float(m.group("mal")),
                accepted_throughput=float(m.group("acc_tp")),
                drafted_throughput=float(m.group("dr_tp")),
                accepted=int(m.group("acc")),
                drafted=int(m.group("dr")),
                per_position=pos,
                draft_acceptance_rate=float(m.group("rate")),
                line=lineno,
            )
        )
    return out


def combine_spec_lines(lines: list[SpecDecodingLine]) -> dict[str, object] | None:
    """Sum several intervals into one: what vLLM would have logged for their union.

    Accepted/drafted add up; per-position rates are weighted by each interval's drafts
    (drafted / k); mean acceptance length = 1 + accepted / drafts. Rounded per-position rates
    in the log make the combination exact only to about 1e-3.
    """
    if not lines:
        return None
    k = len(lines[0].per_position)
    if any(len(x.per_position) != k for x in lines) or k == 0:
        return None
    accepted = sum(x.accepted for x in lines)
    drafted = sum(x.drafted for x in lines)
    drafts = drafted / k
    per_pos = [
        sum(x.per_position[i] * x.num_drafts for x in lines) / drafts if drafts else 0.0
        for i in range(k)
    ]
    return {
        "intervals": len(lines),
        "accepted": accepted,
        "drafted": drafted,
        "num_drafts": drafts,
        "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
        "draft_acceptance_rate": accepted / drafted if drafted else None,
        "per_position": per_pos,
    }


def parse(text: str) -> EngineLogSummary:
    """Everything this module reads from one engine log."""
    s = EngineLogSummary(
        backends=parse_backends(text),
        refusals=parse_refusals(text),
        spec_lines=parse_spec_lines(text),
    )
    for line in text.splitlines():
        if s.aux_layers is None:
            m = _AUX_RE.search(line)
            if m:
                with contextlib.suppress(ValueError, SyntaxError, TypeError):
                    s.aux_layers = tuple(int(v) for v in ast.literal_eval(m.group("layers")))
        if s.flash_attn_version is None:
            m = _FA_VERSION_RE.search(line)
            if m:
                s.flash_attn_version = int(m.group("v"))
        m = _MOE_RE.search(line)
        if m and m.group("name") not in s.moe_backends:
            s.moe_backends.append(m.group("name"))
        for key, rx in _STARTUP_RES.items():
            if key not in s.startup:
                m = rx.search(line)
                if m:
                    s.startup[key] = float(m.group("v"))
        if _CACHE_HIT_RE.search(line):
            s.compile_cache_hits += 1
    return s


def target_and_drafter(backends: list[BackendChoice]) -> tuple[str | None, str | None]:
    """(first MLA backend, first non-MLA backend): the target's and, for a llama-style EAGLE-3
    drafter on an MLA target, the drafter's attention backend."""
    mla = next((b.name for b in backends if b.mla), None)
    plain = next((b.name for b in backends if not b.mla), None)
    return mla, plain


def main(argv: list[str] | None = None) -> int:
    ap = cli.parser("engine-log", __doc__)
    ap.add_argument("log", help="engine log file (journal text or vLLM's stdout)")
    args = ap.parse_args(argv)
    try:
        text = Path(args.log).read_text(errors="replace")
    except OSError as e:
        return usage_error("engine-log", f"LOG {args.log}: {reason(e)}")
    if not text.strip():
        return usage_error("engine-log", f"LOG {args.log}: empty file")
    s = parse(text)
    if args.json:
        print(json.dumps(s.to_dict(), indent=1))
    else:
        for b in s.backends:
            how = "forced" if b.forced else "chosen from " + ",".join(b.candidates)
            print(f"attention backend {b.name} ({'MLA' if b.mla else 'non-MLA'}; {how})")
        for r in s.refusals:
            print(f"REFUSED forced backend {r.name}: {', '.join(r.reasons)}")
        if s.aux_layers is not None:
            print(f"EAGLE-3 auxiliary layers: {list(s.aux_layers)}")
        tot = combine_spec_lines(s.spec_lines)
        if tot:
            print(
                f"SpecDecoding over {tot['intervals']} interval(s): accepted {tot['accepted']}"
                f" / drafted {tot['drafted']}, mean acceptance length"
                f" {tot['mean_acceptance_length']:.3f}"
            )
    if not s.backends:  # exit 1: the log answers "no backend chosen"; say so
        print(
            f"engine-log: LOG {args.log}: no attention backend choice in it (not a vLLM engine "
            "log, or the engine stopped before choosing one)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
