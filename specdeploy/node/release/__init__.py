"""A node's releases: the command lines over the collection's module_utils (ledger: releases,
`current` and the activation ledger; deploy_lock; steady: the no-op deploy's one-run check).
"""
