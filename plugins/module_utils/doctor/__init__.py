"""Hardware doctor for a GPU node: is it fit to serve a TP-8 MLA model over PCIe?

Read-only, standard library only (it runs on the node, as root for the PCI config space).
Modelled on DeepOps' validation doctor: one line per check, each failure with its fix.

Checks: nvidia-smi answers; GPU count; model and compute capability; driver >= the minimum
for the vLLM release; open kernel modules; persistence mode; no foreign process holding GPU
memory; ECC and retired pages / remapped rows; Xid errors in this boot's kernel log; PCIe ACS
on the bridges above the GPUs and the IOMMU mode; /dev/shm size; free disk; model files.

Derived (recorded by the provisioning role in the node's facts): the MLA attention backend
vLLM picks for the compute capability, and the NCCL choice: P2P on when neither ACS nor a
translating IOMMU sits between the GPUs, else NCCL_P2P_DISABLE=1 and
--disable-custom-all-reduce. Both can be overridden (attention_backend, nccl_p2p).

The logic lives once, here, in the collection's module_utils (a package; its files import each
other relatively): the module specdeploy.toolkit.gpu_doctor (plugins/modules/gpu_doctor.py, what
the gpu_node role runs: one round trip per node) imports it as
ansible_collections.specdeploy.toolkit.plugins.module_utils.doctor and Ansible ships it with
the module; the command line (gpu-doctor, python -m specdeploy.node.doctor) imports the same
files as specdeploy.node.module_utils.doctor. runner.run() runs every check on an Options.
"""
