"""Shipped to every sandbox node (never to a real one): zipimport's compiled code, cached.

Each Ansible module run ships its module_utils in a fresh zip (AnsiballZ) and Python's
zipimport compiles them from source every time: about a third of a module run's CPU on a
node, and `make test` is CPU-bound (docs/test-time.md). A `.pth` line imports this on the
node's system Python; it keeps each compiled code object in a cache keyed by the source's
hash and Python's bytecode magic, so a node compiles each source once. What runs is
unchanged: the same source gives the same code, and its file name is set to the new zip's,
as importlib does for a .pyc. Any failure falls back to compiling. The release venvs do not
see the `.pth` (no system site-packages), so the product's own Python is untouched.
"""

import _imp
import importlib.util
import marshal
import os
import zipimport

CACHE = "/var/cache/specdeploy-sandbox-zipimport"  # files.py creates it, mode 1777
_compile_source = zipimport._compile_source


def _cached_compile_source(pathname, source):
    import contextlib
    import hashlib  # here, not above: every python3 on the node imports this file

    key = hashlib.sha256(importlib.util.MAGIC_NUMBER + source).hexdigest()
    path = os.path.join(CACHE, key)
    try:
        with open(path, "rb") as handle:
            code = marshal.loads(handle.read())
        _imp._fix_co_filename(code, pathname)
        return code
    except Exception:  # absent, unreadable or torn: compile, then try to keep it
        pass
    code = _compile_source(pathname, source)
    tmp = f"{path}.{os.getpid()}"
    try:
        with open(tmp, "wb") as handle:
            handle.write(marshal.dumps(code))
        os.replace(tmp, path)  # atomic: a reader sees the whole file or none
    except Exception:  # a full or read-only disk (the fault cases): no cache, same result
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return code


zipimport._compile_source = _cached_compile_source
