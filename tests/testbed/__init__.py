"""Test tooling: the sandbox GPU nodes, make bench and make demo. Never part of a release."""
