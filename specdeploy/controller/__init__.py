"""Controller-side code: plan, drafter check, reports, history, wheels (never on a node).

Not part of a release: editing it never changes a release id.
"""
