"""The patch series on a release's vLLM: the manifest, applying and reverting it
(patches), verifying it on the installed files (patch_verify), the speculative-config keys a
vLLM accepts (speckeys).
"""
