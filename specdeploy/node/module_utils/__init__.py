"""Stdlib-only helpers shared by the Python package and the roles' Ansible modules.

ansible.cfg names this directory as a module_utils path, so a module imports a file here as
``ansible.module_utils.<name>`` and Ansible ships it with the module; the package imports it as
``specdeploy.node.module_utils.<name>``. One copy of each helper, two ways in. The file names
carry a ``specdeploy_`` prefix so they never shadow one of Ansible's own module_utils.
"""
