"""Lookup plugin: the release's server files (unit, environment, gates, hook), rendered on the
controller in one call.

The command line and the environment are computed in Python (plugins/plugin_utils/
service_files.py, per engine), not in Jinja vars; the templates (templates/*.j2) are rendered as
ansible.builtin.template renders them, with one difference that is the point: ansible-core's
template lookup deep-copies the task's whole variable set before each file (its own FIXME asks
why it is not a ChainMap), and the Jinja vars it replaces were compiled again for every node and
task. Measured on four sandbox nodes, the steady check's module run cost 0.24 CPU-s more than a
`stat` on the controller, most of it those two (docs/scale.md).
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: service_files
short_description: Render the release's server files (unit, environment, gates, on-failure hook)
description:
  - Returns the files of the named sets as a list of C(path), C(mode) and C(content), ready for
    the C(specdeploy.toolkit.files) and C(specdeploy.toolkit.steady) modules.
  - C(config) is what goes into the release's config directory (the environment file, the unit,
    the gates; a speculative release's unit without speculation; the sandbox stand-in's profile),
    C(installed) the installed unit (a copy of the release's) and the on-failure hook, C(hook)
    the on-failure hook alone (it needs no planned release; activation installs it for any).
  - The command line and the environment come from the engine the release carries
    (C(specdeploy_release.engine)); the templates are rendered as C(ansible.builtin.template)
    renders them (search path, C(template_*) variables, C(ansible_managed), trim_blocks).
author: specdeploy maintainers (!UNKNOWN)
version_added: 0.1.0
options:
  _terms:
    description: >-
      The sets, C(config) and/or C(installed), in the order to return them; or C(hook) alone.
    required: true
"""

EXAMPLES = r"""
- name: Write the release's config files
  specdeploy.toolkit.files:
    items: "{{ lookup('specdeploy.toolkit.service_files', 'config') }}"

- name: Install the on-failure hook
  specdeploy.toolkit.files:
    items: "{{ lookup('specdeploy.toolkit.service_files', 'hook') }}"
"""

RETURN = r"""
_raw:
  description: The files, each a dict of path, mode and content.
  type: list
  elements: dict
"""

import json
import os
from collections import ChainMap

from ansible._internal._templating import _template_vars
from ansible._internal._templating._engine import TemplateOptions, TemplateOverrides
from ansible.errors import AnsibleError
from ansible.plugins.filter.core import to_nice_json
from ansible.plugins.lookup import LookupBase
from ansible.template import trust_as_template
from ansible_collections.specdeploy.toolkit.plugins.filter.engines import sglang_argv, vllm_argv
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import service_files
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils.variables import (
    require_all,
    resolve_all,
)

BUILDERS = {"vllm": vllm_argv, "sglang": sglang_argv}
SETS = ("config", "installed", "hook")
# ansible.builtin.template's defaults (trim_blocks on).
OVERRIDES = TemplateOverrides.from_kwargs(
    dict(
        variable_start_string="{{",
        variable_end_string="}}",
        comment_start_string="{#",
        comment_end_string="#}",
        trim_blocks=True,
    )
)


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        variables = variables if variables is not None else {}
        unknown = [term for term in terms if term not in SETS]
        if unknown or not terms:
            raise AnsibleError(
                f"service_files: sets {unknown or '(none)'}; known: {', '.join(SETS)}"
            )
        if "hook" in terms and len(terms) > 1:
            raise AnsibleError("service_files: the set hook goes alone (installed has it)")
        try:
            if terms == ["hook"]:
                knobs = require_all(self._templar, service_files.HOOK_KNOBS, "service_files")
                plan = {"hook": [service_files.hook_file(knobs)]}
            else:
                # templated as a task's Jinja would read them (the raw variables hold templates)
                knobs = resolve_all(self._templar, service_files.KNOBS)
                plan = service_files.file_plan(knobs, BUILDERS)
        except (KeyError, ValueError) as error:
            raise AnsibleError(f"service_files: {type(error).__name__}: {error}") from error
        rendered: dict[str, str] = {}  # the same template and context render once
        files = []
        for term in terms:
            for entry in plan[term]:
                if "json" in entry:
                    content = to_nice_json(entry["json"])
                else:
                    key = json.dumps(
                        [entry["template"], entry["context"]], sort_keys=True, default=str
                    )
                    if key not in rendered:
                        rendered[key] = self._render(entry["template"], entry["context"], variables)
                    content = rendered[key]
                files.append({"path": entry["path"], "mode": entry["mode"], "content": content})
        return [files]

    def _render(self, term: str, context: dict, variables) -> str:
        path = self.find_file_in_search_path(variables, "templates", term)
        if not path:
            raise AnsibleError(f"service_files: the template file {term} could not be found")
        text = trust_as_template(self._loader.get_text_file_contents(path))
        # Jinja's include path, as the built-in template lookup builds it.
        searchpath = [os.path.dirname(path)]
        for entry in variables.get("ansible_search_path", []):
            searchpath += [os.path.join(entry, "templates"), entry]
        top = dict(
            _template_vars.generate_ansible_template_vars(
                path=term, fullpath=path, include_ansible_managed="ansible_managed" not in variables
            )
        )
        # The task's variables are read through the ChainMap, never copied nor changed.
        templar = self._templar.copy_with_new_env(
            available_variables=ChainMap(top | context, variables), searchpath=searchpath
        )
        options = TemplateOptions(escape_backslashes=False, overrides=OVERRIDES)
        return templar._engine.template(text, options=options)
