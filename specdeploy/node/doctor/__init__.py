"""Hardware doctor for a GPU node: is it fit to serve a TP-8 MLA model over PCIe?

Read-only, standard library only (it runs on the node, as root for the PCI config space).
Modelled on DeepOps' validation doctor: one line per check, each failure with its fix.

The checks live once, in the collection's module_utils (plugins/module_utils/doctor/, imported
here as specdeploy.node.module_utils.doctor); the module specdeploy.toolkit.gpu_doctor runs
the same code (the gpu_node role's preflight: one round trip per node). This package is the
command line and the names tests and tools import:

    python -m specdeploy.node.doctor --expected-gpus 8 --vllm-version 0.16.0 \
        --free-disk /opt/specdeploy=25 --model-dir /srv/models/Kimi-K2.5 [--json]

Checks: nvidia-smi answers; GPU count; model and compute capability; driver >= the minimum
for the vLLM release; open kernel modules; persistence mode; no foreign process holding GPU
memory; ECC and retired pages / remapped rows; Xid errors in this boot's kernel log; PCIe ACS
on the bridges above the GPUs and the IOMMU mode; /dev/shm size; free disk; model files.

Derived (recorded by the provisioning role in the node's facts): the MLA attention backend
vLLM picks for the compute capability, and the NCCL choice: P2P on when neither ACS nor a
translating IOMMU sits between the GPUs, else NCCL_P2P_DISABLE=1 and
--disable-custom-all-reduce. Both can be overridden (--attention-backend, --nccl-p2p).

Test hooks: --root (prefix for /sys, /proc/cmdline, /proc/driver), --kernel-log
(a file instead of `journalctl -k` / `dmesg`), --nvidia-smi (the binary).
Exit codes: 0 every check passed (warnings allowed), 1 a check failed, 2 usage error.
"""

from __future__ import annotations

from specdeploy.node.doctor.cli import build_parser, main
from specdeploy.node.module_utils.attention import mla_backend
from specdeploy.node.module_utils.doctor.derive import derive
from specdeploy.node.module_utils.doctor.model import (
    Check,
    Gpu,
    Options,
    Report,
    UsageError,
    normalize_bdf,
    render_text,
)
from specdeploy.node.module_utils.doctor.parse import (
    acs_control,
    min_driver_for,
    parse_xids,
    version_at_least,
    version_tuple,
)
from specdeploy.node.module_utils.doctor.runner import run

__all__ = [
    "Check",
    "Gpu",
    "Options",
    "Report",
    "UsageError",
    "acs_control",
    "build_parser",
    "derive",
    "main",
    "min_driver_for",
    "mla_backend",
    "normalize_bdf",
    "parse_xids",
    "render_text",
    "run",
    "version_at_least",
    "version_tuple",
]
