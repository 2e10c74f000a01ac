"""specdeploy: roll EAGLE-3 speculative decoding out to vLLM GPU nodes.

Modules that run ON the node (patches, patch_verify, drafter, checks) use only the
standard library plus PyYAML and pyflakes, because they run with the release venv's Python.
"""
