"""Controller-side tools: run where Ansible runs, never on a node (outside the release id)."""
