"""Valid ``--speculative-config`` keys of a vLLM version, read off its source by AST.

vLLM parses ``--speculative-config`` JSON into ``SpeculativeConfig(**d)``, a pydantic dataclass
with ``extra="forbid"``: any key that is not an init field is an error. The set of fields
changes between versions, so the keys are extracted from ``vllm/config/speculative.py`` of
the real wheel (``python -m specdeploy.node.patching.speckeys --file PATH``; from a cached wheel:
``python -m specdeploy.controller.wheel_facts 0.16.0``) and recorded in
``patches/vllm/manifest.yml``; a test keeps the manifest equal to the extraction.

Runs on the node too: stdlib only, and nothing from specdeploy.controller.
"""

from __future__ import annotations

import ast
import json
import sys
from collections.abc import Callable
from pathlib import Path

from specdeploy.node import cli
from specdeploy.node.cli import reason

CLASS_NAME = "SpeculativeConfig"


ARG_UTILS = "vllm/engine/arg_utils.py"


def has_shutdown_timeout(arg_utils_source: str) -> bool:
    """True when the serve CLI of that vLLM accepts ``--shutdown-timeout``.

    With it, SIGTERM lets in-flight requests finish for up to that many seconds
    (vllm/entrypoints/launcher.py passes ``vllm_config.shutdown_timeout`` to the engine's
    shutdown; its default 0 aborts them). 0.15-0.17 have neither flag nor drain. Read off
    ``vllm/engine/arg_utils.py`` (EngineArgs.add_cli_args adds the flag), by AST: a string
    constant ``"--shutdown-timeout"`` passed to a call.
    """
    for node in ast.walk(ast.parse(arg_utils_source)):
        if isinstance(node, ast.Call) and any(
            isinstance(a, ast.Constant) and a.value == "--shutdown-timeout" for a in node.args
        ):
            return True
    return False


def _annotation_head(node: ast.expr) -> str:
    """'ClassVar' for ClassVar[...], 'SkipValidation' for SkipValidation[...], etc."""
    if isinstance(node, ast.Subscript):
        return _annotation_head(node.value)
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return _annotation_head(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return ""
    return ""


def _init_false(value: ast.expr | None) -> bool:
    """True for ``field(init=False)`` / ``Field(init=False)``."""
    if not isinstance(value, ast.Call):
        return False
    for kw in value.keywords:
        if kw.arg == "init" and isinstance(kw.value, ast.Constant) and kw.value.value is False:
            return True
    return False


def extract_fields(source: str) -> dict[str, list[str]]:
    """Return ``{"keys": [...], "internal": [...]}`` for class SpeculativeConfig.

    ``keys``: every init field, in declaration order (what pydantic accepts).
    ``internal``: the subset annotated ``SkipValidation[...]`` (objects vLLM fills in itself,
    e.g. ``target_model_config``; not meaningful in a JSON config).
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as e:  # not Python: a garbage file, or the wrong one
        raise ValueError(f"not Python source (line {e.lineno}: {e.msg})") from None
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == CLASS_NAME), None)
    if cls is None:
        raise ValueError(f"class {CLASS_NAME} not found")
    keys: list[str] = []
    internal: list[str] = []
    for stmt in cls.body:
        if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
            continue
        name = stmt.target.id
        head = _annotation_head(stmt.annotation)
        if head == "ClassVar":
            continue
        if _init_false(stmt.value):
            continue
        keys.append(name)
        if head == "SkipValidation":
            internal.append(name)
    if not keys:
        raise ValueError(f"no fields found in {CLASS_NAME}")
    return {"keys": keys, "internal": internal}


def extract_from_file(path: Path) -> dict[str, list[str]]:
    return extract_fields(path.read_text(encoding="utf-8"))


def eagle3_drafter_architectures(registry_src: str, proposer_srcs: list[str]) -> list[str]:
    """EAGLE-3 drafter architectures a version can load.

    From ``_SPECULATIVE_DECODING_MODELS`` in ``model_executor/models/registry.py``: every
    entry whose module ends in ``_eagle3``, restricted to the classes the proposer asserts
    (``assert isinstance(self.model, (Eagle3LlamaForCausalLM, ...))`` in the eagle3 branch of
    ``v1/spec_decode/eagle.py`` / ``llm_base_proposer.py``) when such an assert exists.
    """
    tree = ast.parse(registry_src)
    entries: dict[str, str] = {}
    for n in ast.walk(tree):
        targets = (
            n.targets
            if isinstance(n, ast.Assign)
            else [n.target]
            if isinstance(n, ast.AnnAssign)
            else []
        )
        if not any(
            isinstance(t, ast.Name) and t.id == "_SPECULATIVE_DECODING_MODELS" for t in targets
        ):
            continue
        value = n.value
        if isinstance(value, ast.Dict):
            for k, v in zip(value.keys, value.values, strict=True):
                if (
                    isinstance(k, ast.Constant)
                    and isinstance(v, ast.Tuple)
                    and len(v.elts) == 2
                    and all(isinstance(e, ast.Constant) for e in v.elts)
                    and str(v.elts[0].value).endswith("_eagle3")  # type: ignore[attr-defined]
                ):
                    entries[str(k.value)] = str(v.elts[1].value)  # type: ignore[attr-defined]
    asserted: set[str] = set()
    for src in proposer_srcs:
        for n in ast.walk(ast.parse(src)):
            if not (isinstance(n, ast.Assert) and isinstance(n.test, ast.Call)):
                continue
            call = n.test
            if not (isinstance(call.func, ast.Name) and call.func.id == "isinstance"):
                continue
            if len(call.args) != 2 or "self.model" not in ast.unparse(call.args[0]):
                continue
            classes = call.args[1]
            elts = classes.elts if isinstance(classes, ast.Tuple) else [classes]
            names = {ast.unparse(e).split(".")[-1] for e in elts}
            if any(x.startswith("Eagle3") for x in names):
                asserted |= names
    return sorted(a for a, cls in entries.items() if not asserted or cls in asserted)


def main(argv: list[str] | None = None) -> int:
    ap = cli.parser("vllm-spec-keys", __doc__)
    ap.add_argument("--file", type=Path, required=True, help="path of a vllm/config/speculative.py")
    args = ap.parse_args(argv)
    return print_keys(
        lambda: extract_from_file(args.file),
        f"vllm-spec-keys: error: --file {args.file}",
        args.json,
    )


def print_keys(extract: Callable[[], dict[str, list[str]]], source: str, as_json: bool) -> int:
    """Prints the keys ``extract`` finds as JSON, or one a line with the internal ones marked;
    exit code 0, or 2 with one line ``SOURCE: reason`` when they cannot be read."""
    try:
        res = extract()
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        print(f"{source}: {reason(exc)}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps(res, indent=2))
    else:
        for k in res["keys"]:
            print(k + ("  (internal)" if k in res["internal"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
