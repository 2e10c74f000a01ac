"""Static verification (AST, no torch import) that vLLM supports EAGLE-3 on DeepSeek/Kimi.

Used after ``specdeploy.node.patching.patches apply`` and for native versions (>= manifest
native_from),
where the same facts must hold in upstream's own code. Checks:

* allowlist: the speculative config accepts deepseek_v2/deepseek_v3/kimi_k2/kimi_k25 targets
  (or has no allowlist at all: 0.24+ rely on the runtime interface check only);
* DeepseekV2ForCausalLM bases include SupportsEagle3 (bound in the module) and it defines
  set_aux_hidden_state_layers / get_eagle3_aux_hidden_state_layers;
* DeepseekV2Model: aux_hidden_state_layers initialised; the layer loop is
  ``enumerate(islice(self.layers, ...), start=self.start_layer)`` (absolute indices), the
  capture guarded by ``idx in self.aux_hidden_state_layers``, layer 0's ``residual is None``
  handled (required for patched versions; upstream relies on default ids >= 2), and
  ``(hidden_states, aux_hidden_states)`` returned;
* KimiK25ForConditionalGeneration bases include SupportsEagle and SupportsEagle3 and both
  methods delegate to ``self.language_model``; where the wrapper holds a bare
  ``DeepseekV2Model`` the drafter loader must reach embed_tokens/lm_head without ``.model``;
* the drafter loader maps Kimi's ``media_placeholder_token_id`` to ``image_token_index``
  (where it reads ``target.config.image_token_index`` at all);
* every touched file byte-compiles and has no NEW undefined names vs pristine (pyflakes).

CLI: ``python -m specdeploy.node.patching.patch_verify --site-packages SP [--version X] [--json]``.
Node-side: stdlib + PyYAML + pyflakes.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specdeploy.node.patching.series import (
    Manifest,
    PatchError,
    UsageError,
    default_backup_dir,
    default_site_packages,
    detect_version,
    pristine_sources,
)

SPEC = "vllm/config/speculative.py"
DSV2 = "vllm/model_executor/models/deepseek_v2.py"
KIMI = "vllm/model_executor/models/kimi_k25.py"
SPEC_DECODE_DIR = "vllm/v1/spec_decode"
REQUIRED_TARGETS = ("deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25")
ALLOWLIST_NAMES = ("eagle3_target_supported", "aux_hidden_states_supported")


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    file: str | None = None


@dataclass
class Report:
    version: str
    kind: str
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def add(self, name: str, ok: bool, detail: str, file: str | None = None) -> None:
        self.checks.append(Check(name, bool(ok), detail, file))

    def as_list(self) -> list[dict[str, Any]]:
        return [asdict(c) for c in self.checks]

    def text(self) -> str:
        lines = [f"vLLM {self.version} ({self.kind}): {'OK' if self.ok else 'FAILED'}"]
        for c in self.checks:
            where = f" ({c.file})" if c.file else ""
            lines.append(f"  [{'ok' if c.ok else 'FAIL'}] {c.name}{where}: {c.detail}")
        return "\n".join(lines)


# --------------------------------------------------------------------------- AST helpers


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return _dotted(node.func) + "()"
    return "?"


def _class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    for n in tree.body:
        if isinstance(n, ast.ClassDef) and n.name == name:
            return n
    return None


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    for n in cls.body:
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name:
            return n  # type: ignore[return-value]
    return None


def _base_names(cls: ast.ClassDef) -> list[str]:
    return [_dotted(b).split(".")[-1] for b in cls.bases]


def _module_bindings(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom | ast.Import):
            for a in n.names:
                names.add((a.asname or a.name).split(".")[0])
    for n in tree.body:
        if isinstance(n, ast.ClassDef | ast.FunctionDef):
            names.add(n.name)
    return names


def _is_self_attr(node: ast.AST, attr: str) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == attr
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def _mentions(node: ast.AST, dotted_prefix: str) -> bool:
    return any(
        isinstance(n, ast.Attribute) and _dotted(n).startswith(dotted_prefix)
        for n in ast.walk(node)
    )


def _parse(sp: Path, rel: str) -> tuple[ast.Module | None, str | None]:
    p = sp / rel
    if not p.is_file():
        return None, f"{rel} not found"
    try:
        return ast.parse(p.read_text(encoding="utf-8"), filename=str(p)), None
    except SyntaxError as exc:
        return None, f"{rel}: SyntaxError: {exc}"


# --------------------------------------------------------------------------- checks


def check_allowlist(rep: Report, tree: ast.Module) -> None:
    found: list[str] | None = None
    for n in ast.walk(tree):
        if (
            isinstance(n, ast.Assign)
            and len(n.targets) == 1
            and isinstance(n.targets[0], ast.Name)
            and n.targets[0].id in ALLOWLIST_NAMES
            and isinstance(n.value, ast.List | ast.Tuple)
        ):
            found = [
                e.value
                for e in n.value.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            ]
            break
    if found is None:
        # 0.24+: no allowlist, only the runtime SupportsEagle3 check.
        refusing = any(
            isinstance(n, ast.Constant)
            and isinstance(n.value, str)
            and "is only supported for" in n.value
            for n in ast.walk(tree)
        )
        rep.add(
            "allowlist",
            not refusing,
            "no eagle3 target allowlist (runtime interface check only)"
            if not refusing
            else "an 'only supported for' refusal exists but its list was not found",
            SPEC,
        )
        return
    missing = [t for t in REQUIRED_TARGETS if t not in found]
    rep.add(
        "allowlist",
        not missing,
        f"accepts {', '.join(REQUIRED_TARGETS)}"
        if not missing
        else f"missing {missing} in allowlist {found}",
        SPEC,
    )


def _find_abs_loop(fn: ast.FunctionDef) -> ast.For | None:
    for n in ast.walk(fn):
        if not (isinstance(n, ast.For) and isinstance(n.iter, ast.Call)):
            continue
        call = n.iter
        if _dotted(call.func) != "enumerate" or not call.args:
            continue
        inner = call.args[0]
        if not (isinstance(inner, ast.Call) and _dotted(inner.func).endswith("islice")):
            continue
        return n
    return None


def check_deepseek(rep: Report, tree: ast.Module, strict_layer0: bool) -> None:
    binds = _module_bindings(tree)
    lm = _class(tree, "DeepseekV2ForCausalLM")
    if lm is None:
        rep.add("deepseek.bases", False, "class DeepseekV2ForCausalLM not found", DSV2)
        return
    bases = _base_names(lm)
    ok = "SupportsEagle3" in bases and "SupportsEagle3" in binds
    rep.add(
        "deepseek.bases",
        ok,
        f"DeepseekV2ForCausalLM bases {bases}"
        + ("" if "SupportsEagle3" in binds else "; SupportsEagle3 is not imported"),
        DSV2,
    )
    s = _method(lm, "set_aux_hidden_state_layers")
    g = _method(lm, "get_eagle3_aux_hidden_state_layers")
    s_ok = s is not None and _mentions(s, "self.model")
    g_ok = g is not None and any(isinstance(n, ast.Return) and n.value for n in ast.walk(g))
    rep.add(
        "deepseek.methods",
        s_ok and g_ok,
        "set_aux_hidden_state_layers -> self.model, get_eagle3_aux_hidden_state_layers returns"
        if s_ok and g_ok
        else f"set_aux_hidden_state_layers={'ok' if s_ok else 'missing/bad'}, "
        f"get_eagle3_aux_hidden_state_layers={'ok' if g_ok else 'missing/bad'}",
        DSV2,
    )
    model = _class(tree, "DeepseekV2Model")
    init = _method(model, "__init__") if model else None
    fwd = _method(model, "forward") if model else None
    init_ok = init is not None and any(
        isinstance(n, ast.Assign | ast.AnnAssign)
        and any(
            _is_self_attr(t, "aux_hidden_state_layers")
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        )
        for n in ast.walk(init)
    )
    rep.add(
        "deepseek.aux_init",
        init_ok,
        "DeepseekV2Model.__init__ sets self.aux_hidden_state_layers"
        if init_ok
        else "DeepseekV2Model.__init__ does not set self.aux_hidden_state_layers",
        DSV2,
    )
    loop = _find_abs_loop(fwd) if fwd else None
    if loop is None:
        rep.add("deepseek.absolute_index_loop", False, "no enumerate(islice(...)) loop", DSV2)
        return
    start = next((k.value for k in loop.iter.keywords if k.arg == "start"), None)  # type: ignore[attr-defined]
    abs_ok = start is not None and _is_self_attr(start, "start_layer")
    idx_name = (
        loop.target.elts[0].id
        if isinstance(loop.target, ast.Tuple) and isinstance(loop.target.elts[0], ast.Name)
        else None
    )
    guard: ast.If | None = None
    for n in loop.body:
        if (
            isinstance(n, ast.If)
            and isinstance(n.test, ast.Compare)
            and isinstance(n.test.left, ast.Name)
            and n.test.left.id == idx_name
            and isinstance(n.test.ops[0], ast.In)
            and _is_self_attr(n.test.comparators[0], "aux_hidden_state_layers")
        ):
            guard = n
    rep.add(
        "deepseek.absolute_index_loop",
        abs_ok and guard is not None,
        "enumerate(islice(self.layers, ...), start=self.start_layer), "
        f"capture when {idx_name} in self.aux_hidden_state_layers"
        if abs_ok and guard is not None
        else (
            "enumerate has no start=self.start_layer (relative indices: wrong under PP)"
            if not abs_ok
            else "no 'if idx in self.aux_hidden_state_layers' capture"
        ),
        DSV2,
    )
    if guard is not None:
        none_ok = any(
            isinstance(n, ast.Compare)
            and any(
                isinstance(x, ast.Name) and x.id == "residual" for x in [n.left, *n.comparators]
            )
            and any(isinstance(op, ast.Is | ast.IsNot) for op in n.ops)
            for n in ast.walk(guard)
        )
        rep.add(
            "deepseek.layer0_residual",
            none_ok or not strict_layer0,
            "capture handles residual None (layer 0)"
            if none_ok
            else (
                "native code adds residual unguarded (upstream's default ids start at 2; the "
                "drafter check refuses id 0)"
                if not strict_layer0
                else "capture computes hidden_states + residual with residual None at layer 0"
            ),
            DSV2,
        )
    ret_ok = any(
        isinstance(n, ast.Return)
        and isinstance(n.value, ast.Tuple)
        and len(n.value.elts) == 2
        and isinstance(n.value.elts[1], ast.Name)
        and "aux" in n.value.elts[1].id
        for n in ast.walk(fwd)  # type: ignore[arg-type]
    )
    rep.add(
        "deepseek.returns_aux",
        ret_ok,
        "forward returns (hidden_states, aux_hidden_states)"
        if ret_ok
        else "forward never returns (hidden_states, aux_hidden_states)",
        DSV2,
    )


def kimi_has_bare_language_model(tree: ast.Module) -> bool:
    cls = _class(tree, "KimiK25ForConditionalGeneration")
    init = _method(cls, "__init__") if cls else None
    if init is None:
        return False
    for n in ast.walk(init):
        if (
            isinstance(n, ast.Assign)
            and any(_is_self_attr(t, "language_model") for t in n.targets)
            and isinstance(n.value, ast.Call)
            and _dotted(n.value.func).endswith("DeepseekV2Model")
        ):
            return True
    return False


def check_kimi(rep: Report, tree: ast.Module) -> None:
    cls = _class(tree, "KimiK25ForConditionalGeneration")
    if cls is None:
        rep.add("kimi.bases", False, "class KimiK25ForConditionalGeneration not found", KIMI)
        return
    binds = _module_bindings(tree)
    bases = _base_names(cls)
    need = ["SupportsEagle", "SupportsEagle3"]
    miss_b = [b for b in need if b not in bases]
    miss_i = [b for b in need if b not in binds]
    rep.add(
        "kimi.bases",
        not miss_b and not miss_i,
        f"KimiK25ForConditionalGeneration bases {bases}"
        + (f"; not in bases: {miss_b}" if miss_b else "")
        + (f"; not imported: {miss_i}" if miss_i else ""),
        KIMI,
    )
    s = _method(cls, "set_aux_hidden_state_layers")
    g = _method(cls, "get_eagle3_aux_hidden_state_layers")
    s_ok = s is not None and _mentions(s, "self.language_model")
    g_ok = g is not None and _mentions(g, "self.language_model")
    bare = kimi_has_bare_language_model(tree)
    rep.add(
        "kimi.delegation",
        s_ok and g_ok,
        ("both methods act on self.language_model" + (" (a bare DeepseekV2Model)" if bare else ""))
        if s_ok and g_ok
        else f"set_aux_hidden_state_layers={'ok' if s_ok else 'missing/not delegating'}, "
        f"get_eagle3_aux_hidden_state_layers={'ok' if g_ok else 'missing/not delegating'}",
        KIMI,
    )


def _spec_decode_trees(sp: Path) -> list[tuple[str, ast.Module]]:
    d = sp / SPEC_DECODE_DIR
    out = []
    for p in sorted(d.glob("*.py")) if d.is_dir() else []:
        try:
            out.append((f"{SPEC_DECODE_DIR}/{p.name}", ast.parse(p.read_text(encoding="utf-8"))))
        except SyntaxError:
            continue
    return out


def check_token_mapping(rep: Report, sp: Path) -> None:
    trees = _spec_decode_trees(sp)
    readers = [
        rel
        for rel, t in trees
        if any(
            isinstance(n, ast.Attribute)
            and n.attr == "image_token_index"
            and isinstance(n.ctx, ast.Load)
            and _dotted(n).endswith("config.image_token_index")
            for n in ast.walk(t)
        )
    ]
    if not readers:
        rep.add(
            "eagle.kimi_token_mapping",
            True,
            "not applicable: the drafter loader never reads target config.image_token_index",
        )
        return
    for rel in readers:
        t = dict(trees)[rel]
        for n in ast.walk(t):
            if not isinstance(n, ast.If):
                continue
            if not any(
                isinstance(c, ast.Constant) and c.value == "KimiK25ForConditionalGeneration"
                for c in ast.walk(n.test)
            ):
                continue
            for a in n.body:
                if (
                    isinstance(a, ast.Assign)
                    and any(
                        isinstance(x, ast.Attribute) and x.attr == "image_token_index"
                        for x in a.targets
                    )
                    and any(
                        isinstance(v, ast.Attribute) and v.attr == "media_placeholder_token_id"
                        for v in ast.walk(a.value)
                    )
                ):
                    rep.add(
                        "eagle.kimi_token_mapping",
                        True,
                        "KimiK25ForConditionalGeneration: image_token_index = "
                        "config.media_placeholder_token_id",
                        rel,
                    )
                    return
    rep.add(
        "eagle.kimi_token_mapping",
        False,
        "no KimiK25ForConditionalGeneration branch mapping media_placeholder_token_id "
        "(AttributeError: 'KimiK25Config' object has no attribute 'image_token_index')",
        readers[0],
    )


def check_bare_lm_access(rep: Report, sp: Path) -> None:
    """Where get_language_model() returns a bare model, .model must not be assumed."""
    for rel, t in _spec_decode_trees(sp):
        uses = any(
            isinstance(n, ast.Call) and _dotted(n.func).endswith("get_language_model")
            for n in ast.walk(t)
        )
        if not uses:
            continue
        unguarded = [
            n.lineno
            for n in ast.walk(t)
            if isinstance(n, ast.Attribute)
            and n.attr == "model"
            and isinstance(n.value, ast.Name)
            and n.value.id == "target_language_model"
        ]
        lm_fallback = any(
            isinstance(n, ast.IfExp | ast.If)
            and "lm_head" in ast.dump(n.test)
            and any(isinstance(x, ast.Name) and x.id == "target_model" for x in ast.walk(n))
            for n in ast.walk(t)
        )
        ok = not unguarded and lm_fallback
        rep.add(
            "eagle.bare_language_model",
            ok,
            "embed_tokens taken without assuming `.model`, lm_head falls back to the wrapper"
            if ok
            else f"target_language_model.model at lines {unguarded}"
            if unguarded
            else "lm_head is not taken from the wrapper when the language model has none",
            rel,
        )
        return
    rep.add("eagle.bare_language_model", False, "drafter loader not found")


class _Collect:
    def __init__(self) -> None:
        self.messages: list[Any] = []
        self.errors: list[str] = []

    def flake(self, message: Any) -> None:
        self.messages.append(message)

    def syntaxError(self, filename: str, msg: str, lineno: int, offset: int, text: str) -> None:
        self.errors.append(f"{filename}:{lineno}: {msg}")

    def unexpectedError(self, filename: str, msg: str) -> None:
        self.errors.append(f"{filename}: {msg}")


UNDEFINED_KINDS = ("UndefinedName", "UndefinedExport", "UndefinedLocal")


def undefined_names(source: str, filename: str) -> Counter[str]:
    """Multiset of undefined names pyflakes reports (line numbers ignored)."""
    from pyflakes import api

    rep = _Collect()
    api.check(source, filename, rep)
    if rep.errors:
        raise SyntaxError("; ".join(rep.errors))
    out: Counter[str] = Counter()
    for m in rep.messages:
        kind = type(m).__name__
        if kind in UNDEFINED_KINDS:
            out[f"{kind}:{m.message_args[0]}"] += 1
    return out


def check_compile_and_names(
    rep: Report, sp: Path, files: list[str], pristine: dict[str, bytes] | None
) -> None:
    for rel in files:
        p = sp / rel
        src = p.read_text(encoding="utf-8")
        try:
            compile(src, str(p), "exec", dont_inherit=True)
            rep.add("compile", True, "byte-compiles", rel)
        except SyntaxError as exc:
            rep.add("compile", False, f"SyntaxError: {exc}", rel)
            continue
        try:
            now = undefined_names(src, rel)
        except ImportError:
            rep.add("undefined_names", False, "pyflakes is not installed in this python", rel)
            continue
        base: Counter[str] = Counter()
        if pristine is not None and rel in pristine:
            base = undefined_names(pristine[rel].decode("utf-8"), rel)
        new = now - base
        rep.add(
            "undefined_names",
            not new,
            "no new undefined names"
            + (f" vs pristine ({sum(base.values())} pre-existing)" if pristine else "")
            if not new
            else "new undefined names: " + ", ".join(sorted(n.split(":", 1)[1] for n in new)),
            rel,
        )


# --------------------------------------------------------------------------- entry


def verify(site_packages: Path, version: str, manifest: Manifest | None = None) -> Report:
    m = manifest or Manifest.load(None)
    kind = m.kind(version)
    rep = Report(version, kind)
    sp = Path(site_packages)
    trees: dict[str, ast.Module] = {}
    for rel in (SPEC, DSV2, KIMI):
        t, err = _parse(sp, rel)
        if t is None:
            rep.add("parse", False, err or "unparsable", rel)
        else:
            trees[rel] = t
    if SPEC in trees:
        check_allowlist(rep, trees[SPEC])
    if DSV2 in trees:
        check_deepseek(rep, trees[DSV2], strict_layer0=(kind == "patch"))
    if KIMI in trees:
        check_kimi(rep, trees[KIMI])
        if kimi_has_bare_language_model(trees[KIMI]):
            check_bare_lm_access(rep, sp)
    check_token_mapping(rep, sp)

    if kind == "patch":
        targets = sorted(m.targets(version))
        pristine: dict[str, bytes] | None
        try:
            pristine = pristine_sources(m, sp, version, default_backup_dir(sp))
        except (PatchError, OSError, UnicodeDecodeError) as exc:
            rep.add("pristine", False, f"cannot obtain pristine sources to compare: {exc}")
            pristine = None
        check_compile_and_names(rep, sp, targets, pristine)
    else:
        files = [SPEC, DSV2, KIMI] + [
            r for r, _ in _spec_decode_trees(sp) if r.endswith(("eagle.py", "llm_base_proposer.py"))
        ]
        check_compile_and_names(rep, sp, [f for f in files if (sp / f).is_file()], None)
    return rep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="vllm-patch-verify", description=__doc__)
    ap.add_argument("--site-packages")
    ap.add_argument("--version")
    ap.add_argument("--manifest")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        sp = Path(args.site_packages) if args.site_packages else default_site_packages()
        version = args.version or detect_version(sp)
        m = Manifest.load(Path(args.manifest) if args.manifest else None)
        if m.kind(version) == "unsupported":
            raise UsageError(m.unsupported_message(version))
    except UsageError as exc:
        print(f"vllm-patch-verify: error: {exc}", file=sys.stderr)
        return 2
    rep = verify(sp, version, m)
    if args.json:
        print(
            json.dumps(
                {"version": version, "kind": rep.kind, "verified": rep.ok, "checks": rep.as_list()},
                indent=2,
            )
        )
    else:
        print(rep.text())
    return 0 if rep.ok else 1


if __name__ == "__main__":
    sys.exit(main())
