"""The collection's ``plugins/module_utils`` as ``specdeploy.node.module_utils``.

The stdlib-only code shared by the collection's modules and the node package lives once, in
``plugins/module_utils/`` (the file deploy lock, the release ledger, the steady-node check,
the hardware doctor's checks (the package ``doctor``), atomic writes, the safetensors header,
vLLM's version strings and MLA backends). A module imports it as
``ansible_collections.specdeploy.toolkit.plugins.module_utils.<name>`` and Ansible ships it
with the module; the node package imports it as ``specdeploy.node.module_utils.<name>``. In the
source tree this package's path is that directory; in a release (and in a node_zipapp file)
the files are packed here, under ``specdeploy/node/module_utils/``
(``specdeploy.controller.toolkit_archive.node_files``). Between themselves they import
relatively, which works both ways.
"""

from pathlib import Path

_SOURCE = Path(__file__).resolve().parents[3] / "plugins" / "module_utils"
if _SOURCE.is_dir():
    __path__.append(str(_SOURCE))
