"""vLLM's MLA attention backends: the one table the doctor, the engine-log reader and the input
check share.

Which backend vLLM auto-selects for a compute capability (platforms/cuda.py
``_get_backend_priorities``, 0.16 and 0.20.2: the first in priority order that supports the GPU
wins), and which names are MLA-only: forced with ``--attention-backend``, vLLM applies the
backend to the EAGLE-3 drafter too, and a llama-style (non-MLA) drafter then fails at load with
"non-MLA not supported" (measured on vLLM 0.20.2).

Runs on the node and the controller: stdlib only. The collection's module_utils (shipped with
the gpu_doctor module); the node package and the controller import it as
specdeploy.node.module_utils.attention.
"""

from __future__ import annotations

MLA_PRIORITY_SM100 = ("FLASHINFER_MLA", "CUTLASS_MLA", "FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA")
MLA_PRIORITY_OTHER = ("FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA")
# Compute-capability majors each MLA backend supports (None: any).
MLA_SUPPORTED_MAJOR: dict[str, tuple[int, ...] | None] = {
    "FLASH_ATTN_MLA": (9,),
    "FLASHMLA": (9, 10),
    "FLASHINFER_MLA": (10,),
    "CUTLASS_MLA": (10,),
    "TRITON_MLA": None,
    "FLASHMLA_SPARSE": (9, 10),  # sparse-attention models only; never auto-selected here
}
# Backends vLLM adds later follow its naming: an MLA backend's name ends in one of these.
MLA_SUFFIXES = ("_MLA", "MLA_SPARSE")


def backend_name(text: str) -> str:
    """``AttentionBackendEnum.TRITON_MLA`` or ``triton_mla`` -> ``TRITON_MLA``."""
    return text.strip().rsplit(".", 1)[-1].upper()


def is_mla_backend(text: str) -> bool:
    """An MLA-only backend: it serves MLA layers (the DeepSeek/Kimi target) and nothing else."""
    name = backend_name(text)
    return name in MLA_SUPPORTED_MAJOR or name.endswith(MLA_SUFFIXES)


def mla_backend(compute_cap: str) -> str:
    """The MLA backend vLLM auto-selects for a compute capability ('' when none fits)."""
    try:
        major = int(compute_cap.split(".")[0])
    except ValueError:
        return ""
    order = MLA_PRIORITY_SM100 if major == 10 else MLA_PRIORITY_OTHER
    for backend in order:
        supported = MLA_SUPPORTED_MAJOR[backend]
        if supported is None or major in supported:
            return backend
    return ""
