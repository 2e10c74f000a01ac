"""Run the REAL (patched) ``DeepseekV2Model.forward`` of each wheel with stand-in layers.

The function is taken from the patched ``deepseek_v2.py`` by AST and executed as it is; only
what it calls is replaced: ``get_pp_group()`` (which rank this is), ``IntermediateTensors``
(a dict), the decoder layers (callables that return markers) and the final norm. Numbers
stand in for tensors, so ``hidden_states + residual`` stays meaningful: a layer with absolute
index i returns ``hidden = 1000 * (i + 1)`` and ``residual = 1``, so the value captured before
layer j is ``1000 * j + 1`` and names the layer whose input it is.

This is what pipeline parallelism does to the capture: a later rank starts at
``start_layer > 0`` and must still capture by absolute index (the hand-written patch of the
seed documents, ``enumerate`` without ``start=``, captures the wrong layers there).
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from patchtest_util import PATCH_VERSIONS, run_cli

pytestmark = pytest.mark.patches

DSV2 = "vllm/model_executor/models/deepseek_v2.py"


class _T:  # stands in for torch.Tensor / IntermediateTensors in annotations
    pass


def load_forward(path: Path) -> Any:
    tree = ast.parse(path.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "DeepseekV2Model")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
    fn.decorator_list = []
    mod = ast.Module(body=[fn], type_ignores=[])
    return compile(mod, str(path), "exec")


def run_forward(
    code: Any,
    *,
    first: bool,
    last: bool,
    start: int,
    end: int,
    aux: tuple,
    n_layers: int = 61,
    intermediate: dict | None = None,
) -> Any:
    calls: list[int] = []

    def make_layer(i: int):
        def layer(positions, hidden_states, residual, llama_4_scaling):
            calls.append(i)
            return 1000 * (i + 1), 1

        return layer

    pp = SimpleNamespace(is_first_rank=first, is_last_rank=last)
    ns: dict[str, Any] = {
        "get_pp_group": lambda: pp,
        "islice": itertools.islice,
        "IntermediateTensors": dict,
        "torch": SimpleNamespace(Tensor=_T),
        "_get_llama_4_scaling": None,
    }
    exec(code, ns)  # defines forward() from the wheel's own source
    model = SimpleNamespace(
        layers=[make_layer(i) for i in range(n_layers)],
        start_layer=start,
        end_layer=end,
        aux_hidden_state_layers=aux,
        config=SimpleNamespace(),  # no llama_4_scaling
        norm=lambda h, r: (("normed", h), None),
        embed_input_ids=lambda ids: 7,
    )
    out = ns["forward"](model, [1, 2, 3], None, intermediate, None)
    assert calls == list(range(start, end))
    return out


@pytest.fixture(params=PATCH_VERSIONS)
def patched_forward(request, site) -> tuple[str, Any]:
    version = request.param
    sp = site(version)
    assert run_cli("apply", "--site-packages", str(sp)).returncode == 0
    return version, load_forward(sp / DSV2)


def test_single_rank_captures_the_default_layers(patched_forward) -> None:
    _, code = patched_forward
    hidden, aux = run_forward(code, first=True, last=True, start=0, end=61, aux=(2, 30, 58))
    assert hidden == ("normed", 61000)
    assert aux == [2001, 30001, 58001]  # inputs of layers 2, 30, 58


def test_last_pipeline_rank_captures_by_absolute_index(patched_forward) -> None:
    _, code = patched_forward
    hidden, aux = run_forward(
        code,
        first=False,
        last=True,
        start=30,
        end=61,
        aux=(2, 30, 58),
        intermediate={"hidden_states": 30000, "residual": 1},
    )
    assert aux == [30001, 58001]  # layers 30 and 58, not 32 and 60
    assert hidden == ("normed", 61000)


def test_layer0_capture_without_a_residual(patched_forward) -> None:
    _, code = patched_forward
    hidden, aux = run_forward(code, first=True, last=True, start=0, end=4, aux=(0, 2), n_layers=4)
    assert aux == [7, 2001]  # the embedding itself for layer 0; no None dereference
    assert hidden == ("normed", 4000)


def test_no_aux_layers_returns_a_plain_tensor(patched_forward) -> None:
    _, code = patched_forward
    assert run_forward(code, first=True, last=True, start=0, end=61, aux=()) == ("normed", 61000)


def test_pristine_forward_captures_nothing(site) -> None:
    """The same harness on a pristine 0.16.0 file: no aux states (the test can fail)."""
    sp = site("0.16.0")
    out = run_forward(
        load_forward(sp / DSV2), first=True, last=True, start=0, end=61, aux=(2, 30, 58)
    )
    assert out == ("normed", 61000)


@pytest.mark.parametrize("version", ["0.18.1", "0.20.2"])
def test_native_forward_is_absolute_too(site, version: str) -> None:
    code = load_forward(site(version) / DSV2)
    _, aux = run_forward(
        code,
        first=False,
        last=True,
        start=30,
        end=61,
        aux=(2, 30, 58),
        intermediate={"hidden_states": 30000, "residual": 1},
    )
    assert aux == [30001, 58001]


def load_methods(path: Path, cls_name: str) -> dict[str, Any]:
    """The EAGLE-3 methods of a class, from the file's own source."""
    tree = ast.parse(path.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name)
    fns = [
        n
        for n in cls.body
        if isinstance(n, ast.FunctionDef)
        and n.name in ("set_aux_hidden_state_layers", "get_eagle3_aux_hidden_state_layers")
    ]
    ns: dict[str, Any] = {}
    exec(compile(ast.Module(body=fns, type_ignores=[]), str(path), "exec"), ns)
    return {f.name: ns[f.name] for f in fns}


@pytest.mark.parametrize("version", PATCH_VERSIONS)
def test_kimi_wrapper_delegates_to_the_deepseek_model(site, version: str) -> None:
    """Kimi's set/get reach the DeepseekV2Model's aux_hidden_state_layers, in both layouts."""
    sp = site(version)
    assert run_cli("apply", "--site-packages", str(sp)).returncode == 0
    kimi = load_methods(
        sp / "vllm/model_executor/models/kimi_k25.py", "KimiK25ForConditionalGeneration"
    )
    causal = load_methods(sp / DSV2, "DeepseekV2ForCausalLM")
    inner = SimpleNamespace(layers=list(range(61)), aux_hidden_state_layers=())
    if version == "0.15.1":  # the wrapper holds the bare DeepseekV2Model
        language_model: Any = inner
    else:  # the wrapper holds a DeepseekV3ForCausalLM (methods from deepseek_v2.py)
        lm = SimpleNamespace(model=inner)
        language_model = SimpleNamespace(
            set_aux_hidden_state_layers=lambda layers: causal["set_aux_hidden_state_layers"](
                lm, layers
            ),
            get_eagle3_aux_hidden_state_layers=lambda: causal["get_eagle3_aux_hidden_state_layers"](
                lm
            ),
        )
    wrapper = SimpleNamespace(language_model=language_model)
    assert kimi["get_eagle3_aux_hidden_state_layers"](wrapper) == (2, 30, 58)
    kimi["set_aux_hidden_state_layers"](wrapper, (1, 29, 57))
    assert inner.aux_hidden_state_layers == (1, 29, 57)
