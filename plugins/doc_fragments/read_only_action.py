"""The attributes every read-only controller-side action of the collection shares."""

from __future__ import annotations


class ModuleDocFragment:
    # One place for what the plan's actions have in common (they were four copies).
    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
    description: Runs in check mode too; it changes nothing.
  diff_mode:
    support: none
    description: Changes nothing.
  action:
    support: full
    description: Runs on the controller only.
"""
