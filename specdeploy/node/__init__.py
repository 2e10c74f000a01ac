"""Node-side code: runs on the GPU node from the release's toolkit copy.

Its hash is part of the release id.
"""
