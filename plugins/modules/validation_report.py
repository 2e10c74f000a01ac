#!/usr/bin/python
"""Documentation of the action plugin specdeploy.toolkit.validation_report (plugins/action)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: validation_report
short_description: Name, fill and report a make validate run's report directory on the controller
description:
  - Two steps of C(playbooks/validate.yml), on the controller.
  - O(step=prepare) names this run's report directory from C(validation_report_root) (default
    the repository's C(reports/), made absolute), C(validation_report_dir) (default
    C(<root>/<UTC timestamp>)) and C(validation_history_db) (default C(<root>/history.sqlite)),
    creates its C(results/) and sets the facts C(validate_report_root), C(validate_report_dir)
    and C(validate_history_db).
  - O(step=report) writes a could-not-measure result for each node of the run
    (C(validate_targets)) that produced none, runs the report tool C(specdeploy.controller.report)
    (table, JSON, JUnit XML, Prometheus textfile, HTML, history with the regression check against
    C(validation_regression_tolerance), default 0.1; the textfile also into
    C(validation_textfile_dir) when set), points C(<root>/latest) at the run when the run's
    directory is in the root, and writes the report's exit code into C(<dir>/exit-code) and
    C(validation_exit_file) when set.
  - The report's non-zero exit code does not fail the task; RV(verdict) says it.
version_added: 0.1.0
author: specdeploy maintainers (!UNKNOWN)
options:
  step:
    description: Which step.
    type: str
    required: true
    choices: [prepare, report]
attributes:
  check_mode:
    support: partial
    description: O(step=prepare) creates nothing in check mode; O(step=report) records into the
      history and is skipped.
  diff_mode:
    support: none
    description: No diff.
  action:
    support: full
    description: Runs on the controller only.
"""

EXAMPLES = r"""
- name: Name this run's report directory and create its results directory
  specdeploy.toolkit.validation_report:
    step: prepare

- name: Write the reports, record the history and the exit code
  specdeploy.toolkit.validation_report:
    step: report
  register: validate_report
"""

RETURN = r"""
validate_report_dir:
  description: This run's report directory (O(step=prepare), also a fact).
  type: str
  returned: O(step=prepare)
rc:
  description: The report's exit code (0 pass, 1 a check, gate or regression failed, 2 not
    measured).
  type: int
  returned: O(step=report)
lines:
  description: The report's table and errors, then where the reports and the history are.
  type: list
  elements: str
  returned: O(step=report)
verdict:
  description: What a non-zero exit code means, naming the HTML report.
  type: str
  returned: O(step=report)
not_measured:
  description: The nodes a could-not-measure result was written for.
  type: list
  elements: str
  returned: O(step=report)
"""
