"""Lookup plugin: the monitoring role's Prometheus or Grafana files, as items for the
specdeploy.toolkit.files module (plugins/plugin_utils/monitoring_files.py), so that each block
of the role is one task that writes its directories and files in one module run."""

from __future__ import annotations

DOCUMENTATION = r"""
name: monitoring_files
short_description: The monitoring role's Prometheus or Grafana files, for specdeploy.toolkit.files
description:
  - C(prometheus) returns C(monitoring_prometheus_dir), the files
    C(specdeploy.controller.monitoring --json) rendered into it (option O(rendered)) and, when
    C(monitoring_prometheus_config) is not empty, that complete prometheus.yml (the role's
    template C(prometheus.yml.j2)).
  - C(grafana) returns C(monitoring_grafana_dashboards_dir) and
    C(monitoring_grafana_provisioning_dir), the dashboard (the role's file
    C(specdeploy-dashboard.json)) and its file provider (the role's template
    C(grafana-dashboards.yml.j2)).
  - Each item has C(path), C(state), C(content), C(owner) and C(group) (C(monitoring_owner),
    C(monitoring_group)) and C(mode) (0755 directories, 0644 files). The templates are rendered
    by C(ansible.builtin.template)'s lookup, with the task's variables.
author: specdeploy maintainers (!UNKNOWN)
version_added: 0.1.0
options:
  _terms:
    description: C(prometheus) or C(grafana).
    required: true
  rendered:
    description:
      - The standard output of C(specdeploy.controller.monitoring - --json) (a JSON object whose
        C(files) maps each file's name to its content). Required for C(prometheus).
    type: str
"""

EXAMPLES = r"""
- name: Install the Prometheus files
  specdeploy.toolkit.files:
    items: "{{ lookup('specdeploy.toolkit.monitoring_files', 'prometheus', rendered=_out.stdout) }}"
"""

RETURN = r"""
_raw:
  description: The items, each a dict of path, state, content, owner, group and mode.
  type: list
  elements: dict
"""

import json
from pathlib import Path

from ansible.errors import AnsibleError
from ansible.plugins.loader import lookup_loader
from ansible.plugins.lookup import LookupBase
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import monitoring_files
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import require_all

TERMS = ("prometheus", "grafana")


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        if len(terms) != 1 or terms[0] not in TERMS:
            raise AnsibleError(f"monitoring_files: prometheus or grafana, got {terms!r}")
        variables = variables if variables is not None else {}
        self.set_options(var_options=variables, direct=kwargs)
        knobs = require_all(self._templar, monitoring_files.KNOBS, "monitoring_files")
        if terms[0] == "prometheus":
            return [self._prometheus(knobs, variables)]
        dashboard = self._file("specdeploy-dashboard.json", variables)
        provider = self._template("grafana-dashboards.yml.j2", {}, variables)
        return [monitoring_files.grafana_items(knobs, dashboard, provider)]

    def _prometheus(self, knobs: dict, variables) -> list[dict[str, str]]:
        stdout = self.get_option("rendered")
        if not stdout:
            raise AnsibleError("monitoring_files: prometheus needs rendered= (the render's stdout)")
        try:
            rendered = json.loads(stdout)["files"]
        except (ValueError, KeyError, TypeError) as error:
            raise AnsibleError(
                f"monitoring_files: rendered: not the render's JSON: {error}"
            ) from error
        # prometheus.yml.j2 includes the scrape jobs of the rendered files.
        config = (
            self._template("prometheus.yml.j2", {"_monitoring_files": rendered}, variables)
            if knobs["monitoring_prometheus_config"]
            else None
        )
        return monitoring_files.prometheus_items(knobs, rendered, config)

    def _file(self, name: str, variables) -> str:
        """A file of the role's files/, as ansible.builtin.copy's src finds it (UTF-8 text:
        the files module writes the content encoded as UTF-8, so the bytes are the same)."""
        path = self.find_file_in_search_path(variables, "files", name)
        if not path:
            raise AnsibleError(f"monitoring_files: the file {name} could not be found")
        return Path(path).read_bytes().decode("utf-8")

    def _template(self, name: str, context: dict, variables) -> str:
        """A template of the role's templates/, rendered as ansible.builtin.template renders it
        (search path, template_* variables, ansible_managed, trim_blocks), ``context`` on top."""
        template = lookup_loader.get("ansible.builtin.template", self._loader, self._templar)
        return template.run([name], variables, template_vars=context)[0]
