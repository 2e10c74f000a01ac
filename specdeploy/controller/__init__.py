"""Controller-side code: plan, drafter check, drafter pipeline, reports, history, wheels
(never on a node).

Not part of a release: editing it never changes a release id.
"""
