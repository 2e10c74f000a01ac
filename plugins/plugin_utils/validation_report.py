"""`make validate`'s report on the controller and a node's result, computed from the play's
variables (playbooks/validate.yml, roles/validation/tasks/main.yml).

- ``report_paths``: this run's report directory, the reports root and the history database
  (the knobs validation_report_root, validation_report_dir, validation_history_db);
- ``not_measured_argv``: the one result builder's could-not-measure command line
  (specdeploy.node.validation.result), for a node without a result;
- ``report_argv``: the report tool's command line (specdeploy.controller.report): table, JSON,
  JUnit, Prometheus textfile, HTML, history;
- ``shown_lines``, ``report_verdict``, ``gate_verdict``: what the play says.

They were Jinja in the playbook and the role, templated again for every task and loop item;
here each is one function over the values (issue 25: no programs in Jinja).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

RESULT_TOOL = "specdeploy.node.validation.result"
REPORT_TOOL = "specdeploy.controller.report"
STAMP = "%Y%m%dT%H%M%SZ"  # a run's directory name, in UTC
PROM_NAME = "specdeploy_validation.prom"
UNREACHED = "the node was unreachable or its play failed before the checks (see above)"

# The controller's knobs of the report (validate.yml's header); all optional.
REPORT_KNOBS = (
    "validation_report_root",
    "validation_report_dir",
    "validation_history_db",
    "validation_regression_tolerance",
    "validation_textfile_dir",
    "validation_exit_file",
)
# What the report step reads: the paths the prepare step set, the nodes of the run.
PATHS_KNOBS = ("validate_report_root", "validate_report_dir", "validate_history_db")
# What a node's could-not-measure result names.
RESULT_KNOBS = (
    "inventory_hostname",
    "validation_release_id",
    "validation_out",
    "specdeploy_local_url",
    "specdeploy_served_model_name",
)


def report_paths(
    knobs: Mapping[str, Any], playbook_dir: str, now: datetime | None = None
) -> dict[str, str]:
    """validate_report_root (realpath), validate_report_dir (<root>/<UTC stamp> unless given)
    and validate_history_db (<root>/history.sqlite unless given)."""
    root = os.path.realpath(str(knobs.get("validation_report_root", f"{playbook_dir}/../reports")))
    stamp = (now or datetime.now(UTC)).strftime(STAMP)
    return {
        "validate_report_root": root,
        "validate_report_dir": str(knobs.get("validation_report_dir", f"{root}/{stamp}")),
        "validate_history_db": str(knobs.get("validation_history_db", f"{root}/history.sqlite")),
    }


def result_path(report_dir: str, node: str) -> str:
    return f"{report_dir}/results/{node}.json"


def not_measured_argv(
    python: str, *, node: str, model: str, reason: str, out: str | None = None, **labels: str
) -> list[str]:
    """The could-not-measure result: into ``out`` (kept if there is one) or on stdout.
    ``labels``: release and base_url, where known."""
    argv = [python, "-m", RESULT_TOOL, "not-measured", "--node", node]
    for name in ("release", "base_url"):
        if name in labels:
            argv += ["--" + name.replace("_", "-"), str(labels[name])]
    argv += ["--served-model-name", model, "--reason", reason]
    if out is not None:
        argv += ["--out", out, "--keep"]
    return argv


def checker_failure_reason(run: Mapping[str, Any]) -> str:
    """Why a node has no result: the checker's exit status and its last stderr lines."""
    tail = " / ".join(str(run.get("stderr") or "").splitlines()[-3:])
    return f"the checker wrote no result (exit {run.get('rc')}): {tail}"


def report_argv(python: str, paths: Mapping[str, str], knobs: Mapping[str, Any]) -> list[str]:
    """The report over this run's results, recorded in the history; the Prometheus textfile
    also into node_exporter's textfile directory when validation_textfile_dir is set (an empty
    --prom is skipped)."""
    report_dir = paths["validate_report_dir"]
    textfile_dir = knobs.get("validation_textfile_dir") or ""
    return [
        python, "-m", REPORT_TOOL,
        f"{report_dir}/results",
        "--history", paths["validate_history_db"],
        "--record",
        "--regression-tolerance", str(knobs.get("validation_regression_tolerance", 0.1)),
        "--json", f"{report_dir}/summary.json",
        "--junit", f"{report_dir}/junit.xml",
        "--prom", f"{report_dir}/{PROM_NAME}",
        "--html", f"{report_dir}/report.html",
        "--prom", f"{textfile_dir}/{PROM_NAME}" if textfile_dir else "",
    ]  # fmt: skip


def latest_link(paths: Mapping[str, str]) -> str | None:
    """<root>/latest when this run's directory is in the reports root, else None."""
    root = paths["validate_report_root"]
    if os.path.dirname(paths["validate_report_dir"]) == root:
        return f"{root}/latest"
    return None


def exit_files(paths: Mapping[str, str], knobs: Mapping[str, Any]) -> list[str]:
    """Where the exit code goes: the run's directory, and validation_exit_file (make's)."""
    files = [f"{paths['validate_report_dir']}/exit-code"]
    if "validation_exit_file" in knobs:
        files.append(str(knobs["validation_exit_file"]))
    return files


def shown_lines(answer: Mapping[str, Any], paths: Mapping[str, str]) -> list[str]:
    """The report's table and errors, then where the reports and the history are."""
    return [
        *str(answer.get("stdout") or "").splitlines(),
        *str(answer.get("stderr") or "").splitlines(),
        f"reports: {paths['validate_report_dir']}"
        "/{report.html,summary.json,junit.xml,specdeploy_validation.prom}",
        f"history: {paths['validate_history_db']}",
    ]


def report_verdict(rc: int, report_dir: str) -> str:
    """The run's failure, by the report's exit code (1 failed, else could not measure)."""
    said = (
        "FAILED (exit 1: a check, gate or regression failed)"
        if rc == 1
        else "COULD NOT MEASURE (exit 2: a server did not answer or the run broke)"
    )
    return f"validation {said}; see the table above and {report_dir}/report.html"


def gate_verdict(result: Mapping[str, Any], release: str, node: str) -> str:
    """A node's failed gate, in the words of the gate task."""
    code = result.get("exit_code")
    said = "failed a check or gate" if code == 1 else "could not measure"
    reasons = "; ".join(str(reason) for reason in result.get("reasons") or [])
    return f"validation of release {release} on {node} {said} (exit {code}): {reasons}"


def nodes(targets: Sequence[Any] | None) -> list[str]:
    return [str(node) for node in targets or []]
