"""Node-side code: what a release runs on a GPU node (standard library only)."""
