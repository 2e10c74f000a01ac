"""The measured workload: what every validation measurement sends, in one typed value.

The acceptance run (:mod:`specdeploy.node.validation.acceptance`), the per-level load
(:mod:`specdeploy.node.validation.loadgen`, :mod:`specdeploy.node.validation.speed`) and the
checker's command line (:mod:`specdeploy.node.validation.check`) all take a :class:`Workload`;
its fields, defaults, limits and flags are written here once. The validation role passes it
as one JSON value (``--workload-json``, roles/validation/vars/main.yml) whose keys are the
field names, so no value is spelled both in Jinja and in Python.

Stdlib only (runs on the node).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from specdeploy.node import cli

ENDPOINTS = ("chat", "completions")
# The per-level measurement's tokens per request when the workload leaves max_tokens to each
# prompt (the acceptance run honours the prompt's own; the load generator needs one figure).
LEVEL_MAX_TOKENS = 128


class WorkloadError(ValueError):
    """A workload value that cannot be measured with; one line naming the field's flag."""


class _Flag(NamedTuple):
    names: tuple[str, ...]  # the first is the one errors name
    kind: type  # what argparse converts the text to (levels: parsed by the Workload)
    help: str


# A field's flags. The second spellings are the load generator's older names, kept so that its
# command lines keep working.
_FLAGS: dict[str, _Flag] = {
    "levels": _Flag(("--levels",), str, "concurrency levels to measure and gate, e.g. 1,8,32"),
    "concurrency": _Flag(("--concurrency",), int, "the one level when --levels is not given"),
    "max_requests": _Flag(("--max-requests",), int, "acceptance requests per repeat"),
    "time_budget_s": _Flag(("--time-budget",), float, "seconds for all acceptance repeats"),
    "repeats": _Flag(("--repeats",), int, "repeats (median and spread) per level"),
    "warmup": _Flag(("--warmup",), int, "uncounted warm-up requests"),
    "max_tokens": _Flag(("--max-tokens",), int, "override every prompt's max_tokens"),
    "endpoint": _Flag(("--endpoint",), str, "chat (the model's chat template) or completions"),
    "temperature": _Flag(("--temperature",), float, "0: greedy"),
    "top_p": _Flag(("--top-p",), float, "nucleus sampling cut-off, 1: off"),
    "min_window_s": _Flag(("--min-window-s",), float, "seconds per repeat and level"),
    "request_timeout_s": _Flag(("--request-timeout", "--timeout-s"), float, "seconds per request"),
    "prompts": _Flag(("--prompts", "--prompts-file"), str, "prompt set JSONL (default: shipped)"),
}


def parse_levels(value: object, name: str = "--levels") -> tuple[int, ...]:
    """The concurrency levels, checked: ``"1,8,32"`` (a flag, the role's joined knob) or a
    list (JSON, Python). Each an integer >= 1 (not a bool, not a float: finite by
    construction); distinct, because a level measured twice is keyed once in a throughput
    document and one of the two figures would vanish.

    The one parser of levels lists: the workload's ``levels``, the gates' preflight
    (:mod:`specdeploy.node.validation.gate`) and the baseline plan
    (:mod:`specdeploy.controller.baseline_plan`) all use it. A bad value is a one-line
    :class:`WorkloadError` naming ``name`` (the flag or knob given) and the value."""
    if isinstance(value, str):
        parts = [x.strip() for x in value.split(",") if x.strip()]
        try:
            levels = tuple(int(x) for x in parts)
        except ValueError:
            raise WorkloadError(
                f"{name} {value!r}: comma-separated integers, e.g. 1,8,32"
            ) from None
        for part, c in zip(parts, levels, strict=True):
            if c < 1:
                raise WorkloadError(
                    f"{name} {value!r}: level {part!r} is not a concurrency level (int >= 1)"
                )
        shown = repr(value)
    elif isinstance(value, list | tuple):
        for c in value:
            if isinstance(c, bool) or not isinstance(c, int) or c < 1:
                raise WorkloadError(f"{name} {c!r}: must be an integer >= 1")
        levels = tuple(value)
        shown = repr(list(value))
    else:
        raise WorkloadError(f"{name} {value!r}: a list of integers >= 1")
    if not levels or len(set(levels)) != len(levels):
        raise WorkloadError(f"{name} {shown}: distinct integers >= 1")
    return levels


def flag(name: str) -> str:
    """The command-line flag of the field ``name`` (what its errors are named by)."""
    return _FLAGS[name].names[0]


@dataclass(frozen=True)
class Workload:
    """Defaults are the checker's; another command passes its own to :meth:`add_arguments`."""

    levels: tuple[int, ...] | None = None  # None: the one level ``concurrency``
    concurrency: int = 1
    max_requests: int = 20
    time_budget_s: float = 300.0
    repeats: int = 1
    warmup: int = 1  # one request warms the server's caches before anything is counted
    max_tokens: int | None = None  # None: each prompt's own (acceptance), LEVEL_MAX_TOKENS
    endpoint: str = "chat"
    temperature: float = 0.0
    top_p: float = 1.0
    min_window_s: float = 5.0
    request_timeout_s: float = 120.0
    prompts: str | None = None  # a JSONL path on the node; None: the shipped set

    def __post_init__(self) -> None:
        if self.levels is not None:
            object.__setattr__(self, "levels", parse_levels(self.levels))
        for name in ("concurrency", "max_requests", "repeats"):
            _count(name, getattr(self, name), minimum=1)
        _count("warmup", self.warmup, minimum=0)
        if self.max_tokens is not None:
            _count("max_tokens", self.max_tokens, minimum=1)
        if self.endpoint not in ENDPOINTS:
            raise WorkloadError(f"--endpoint {self.endpoint!r}: one of {', '.join(ENDPOINTS)}")
        # Stored as floats, so that a workload read from JSON (where 0 and 0.0 differ) equals
        # the one it was written from.
        floats = {
            "time_budget_s": _number("time_budget_s", self.time_budget_s, positive=True),
            "request_timeout_s": _number(
                "request_timeout_s", self.request_timeout_s, positive=True
            ),
            "min_window_s": _number("min_window_s", self.min_window_s, at_least=0.0),
            "temperature": _number("temperature", self.temperature, at_least=0.0),
            "top_p": _number("top_p", self.top_p),
        }
        if not 0.0 < floats["top_p"] <= 1.0:
            raise WorkloadError(f"--top-p {self.top_p!r}: must be > 0 and <= 1")
        for name, x in floats.items():
            object.__setattr__(self, name, x)
        if self.prompts is not None and not isinstance(self.prompts, str):
            raise WorkloadError(f"--prompts {self.prompts!r}: a file path")

    @property
    def measured_levels(self) -> list[int]:
        """The concurrency levels measured: ``levels``, else the one ``concurrency``."""
        return list(self.levels) if self.levels else [self.concurrency]

    @property
    def level_max_tokens(self) -> int:
        return self.max_tokens or LEVEL_MAX_TOKENS

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_mapping(cls, values: Mapping[str, object], base: Workload | None = None) -> Workload:
        """``base`` (default: the defaults) with ``values`` by field name; an unknown name is
        refused, so a misspelt knob is never silently the default."""
        unknown = sorted(set(values) - set(_FLAGS))
        if unknown:
            raise WorkloadError(f"unknown workload field(s) {', '.join(unknown)}")
        return dataclasses.replace(base or cls(), **values)  # type: ignore[arg-type]

    @classmethod
    def from_json(cls, text: str, base: Workload | None = None) -> Workload:
        try:
            values = json.loads(text)
        except ValueError as e:
            raise WorkloadError(f"--workload-json: not JSON ({cli.reason(e)})") from None
        if not isinstance(values, dict):
            raise WorkloadError("--workload-json: not a JSON object")
        try:
            return cls.from_mapping(values, base)
        except WorkloadError as e:
            raise WorkloadError(f"--workload-json: {e}") from None

    @staticmethod
    def add_arguments(
        parser: argparse.ArgumentParser,
        defaults: Workload | None = None,
        fields: Collection[str] | None = None,
    ) -> None:
        """The flags of ``fields`` (default: all) and ``--workload-json``. A flag left out keeps
        None here, so :meth:`from_args` can tell it from a value given, and a flag overrides
        the JSON's value of its field."""
        shown = defaults or Workload()
        for name in fields if fields is not None else _FLAGS:
            spec = _FLAGS[name]
            default = getattr(shown, name)
            if isinstance(default, tuple):
                default = ",".join(map(str, default))
            parser.add_argument(
                *spec.names,
                dest=name,
                type=spec.kind,
                choices=ENDPOINTS if name == "endpoint" else None,
                default=None,
                help=f"{spec.help} (default {default})",
            )
        parser.add_argument(
            "--workload-json",
            metavar="JSON",
            help="the whole workload as one JSON object of field names (flags override it)",
        )

    @classmethod
    def from_args(cls, ns: argparse.Namespace, defaults: Workload | None = None) -> Workload:
        base = defaults or cls()
        if getattr(ns, "workload_json", None):
            base = cls.from_json(ns.workload_json, base)
        given = {n: getattr(ns, n) for n in _FLAGS if getattr(ns, n, None) is not None}
        return dataclasses.replace(base, **given)


def _count(name: str, value: object, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise WorkloadError(f"{flag(name)} {value!r}: must be an integer >= {minimum}")
    return value


def _number(
    name: str, value: object, *, positive: bool = False, at_least: float | None = None
) -> float:
    try:
        x = cli.finite(flag(name), value, positive=positive)
    except ValueError as e:
        raise WorkloadError(str(e)) from None
    if at_least is not None and x < at_least:
        raise WorkloadError(f"{flag(name)} {value!r}: must be >= {at_least:g}")
    return x
