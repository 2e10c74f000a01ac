"""`make monitoring` (playbooks/monitoring.yml, roles/monitoring) run by real Ansible on this
machine into a temporary directory: the files it writes pass `promtool check config` (which
loads the rules too), the targets come from the inventory, the alert floors from the nodes'
specdeploy_gates, a second run changes nothing, and bad input stops before anything is written.
The dashboard's queries are valid PromQL (promtool) and use only metrics that the recorded real
vLLM /metrics (tests/fixtures/vllm-0.20.2) or spec-report's textfile hold."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fleet_history import fleet

from specdeploy.controller import monitoring, report
from specdeploy.node.validation import metrics

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "roles" / "monitoring" / "files" / "specdeploy-dashboard.json"
RECORDED = ROOT / "tests" / "fixtures" / "vllm-0.20.2"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool not installed (Debian package prometheus: make setup)")
    return found


def install(tmp_path: Path, inventory: dict, *extra: str) -> subprocess.CompletedProcess[str]:
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump(inventory))
    out = tmp_path / "out"
    knobs = {
        "monitoring_become": False,
        "monitoring_prometheus_dir": str(out / "prometheus"),
        "monitoring_prometheus_config": str(out / "prometheus.yml"),
        "monitoring_grafana_dashboards_dir": str(out / "dashboards"),
        "monitoring_grafana_provisioning_dir": str(out / "provisioning"),
    }
    env = os.environ | {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(inv),
            str(ROOT / "playbooks" / "monitoring.yml"),
            "-e",
            json.dumps(knobs),
            *extra,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=240,
    )


def _recap(stdout: str) -> dict[str, int]:
    m = re.search(
        r"localhost\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", stdout
    )
    assert m, stdout[-2000:]
    return dict(zip(("ok", "changed", "unreachable", "failed"), map(int, m.groups()), strict=True))


def test_install_writes_a_valid_prometheus_config_from_the_inventory(tmp_path):
    inventory = {
        "all": {
            "children": {
                "gpu_nodes": {
                    "hosts": {
                        "gpu-01": {"ansible_host": "127.0.0.1"},
                        "gpu-02": {
                            "ansible_host": "127.0.0.2",
                            "specdeploy_speculative_enabled": False,
                        },
                    },
                    "vars": {
                        "specdeploy_port": 8011,
                        "specdeploy_gates": {
                            "min_mean_acceptance_length": 2.2,
                            "per_position_floors": [0.6, 0.4],
                        },
                    },
                }
            }
        }
    }
    first = install(tmp_path, inventory)
    assert first.returncode == 0, first.stdout[-3000:]
    assert _recap(first.stdout)["changed"] > 0
    out = tmp_path / "out"
    check = subprocess.run(
        [promtool(), "check", "config", str(out / "prometheus.yml")], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 12 rules found" in check.stdout  # 10 + one per position floor
    targets = json.loads((out / "prometheus" / f"{monitoring.VLLM_JOB}.json").read_text())
    assert [(t["targets"], t["labels"]["node"], t["labels"]["speculative"]) for t in targets] == [
        (["127.0.0.1:8011"], "gpu-01", "true"),
        (["127.0.0.2:8011"], "gpu-02", "false"),
    ]
    rules = yaml.safe_load((out / "prometheus" / monitoring.RULES_FILE).read_text())
    exprs = {
        r["alert"] + r["labels"].get("position", ""): r["expr"] for r in rules["groups"][0]["rules"]
    }
    assert exprs["SpecdeployAcceptanceLengthLow"].endswith("< 2.2")
    assert exprs["SpecdeployPositionAcceptanceLow1"].endswith("< 0.4")
    provider = yaml.safe_load((out / "provisioning" / "specdeploy.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == str(out / "dashboards")
    assert json.loads((out / "dashboards" / "specdeploy.json").read_text())["uid"] == "specdeploy"

    second = install(tmp_path, inventory)
    assert second.returncode == 0 and _recap(second.stdout)["changed"] == 0, second.stdout[-3000:]


def test_install_refuses_nodes_with_different_gates(tmp_path):
    inventory = {
        "all": {
            "children": {
                "gpu_nodes": {
                    "hosts": {
                        "gpu-01": {"specdeploy_gates": {"min_mean_acceptance_length": 2.0}},
                        "gpu-02": {"specdeploy_gates": {"min_mean_acceptance_length": 1.5}},
                    }
                }
            }
        }
    }
    run = install(tmp_path, inventory)
    assert run.returncode != 0
    assert "have 2 different specdeploy_gates" in run.stdout
    assert not (tmp_path / "out").exists()  # refused before anything was written


# --------------------------------------------------------------------------- the dashboard


def dashboard_queries() -> list[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            out.append((panel["title"], target["expr"]))
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            m = re.fullmatch(r"label_values\((.*), (\w+)\)", var["query"]["query"], re.S)
            assert m, var
            out.append((f"variable {var['name']}", m.group(1)))
    return out


def _promql(expr: str) -> str:
    """Grafana's variables as Prometheus would see them after Grafana substitutes them."""
    return expr.replace("$__rate_interval", "2m").replace("$node", ".*")


KEYWORDS = {"by", "on", "without", "ignoring", "group_left", "group_right", "and", "or", "unless",
            "bool", "offset", "le"}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """Metric names an expression reads: identifiers that are not functions (followed by "("),
    label lists, matchers, strings, durations or keywords."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    e = re.sub(r"\b(by|on|without|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    names = set()
    for m in re.finditer(r"(?<![\w:.])([A-Za-z_:][\w:]*)(\s*\()?", e):
        if m.group(2) or m.group(1) in KEYWORDS:
            continue
        names.add(m.group(1))
    return names


def known_metrics() -> set[str]:
    names = set()
    for f in ("metrics-spec.txt", "metrics-nospec.txt"):
        names |= {s.name for s in metrics.parse_exposition((RECORDED / f).read_text())}
    names |= {s.name for s in metrics.parse_exposition(report.prom_textfile(fleet()))}
    return names | {"up"}  # `up`: Prometheus' own series for every target


def test_dashboard_queries_are_valid_promql(tmp_path):
    queries = dashboard_queries()
    assert len(queries) >= 15
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{i}", "expr": _promql(e)}
                    for i, (_, e) in enumerate(queries)
                ],
            }
        ]
    }
    (tmp_path / "q.yml").write_text(yaml.safe_dump(rules))
    check = subprocess.run(
        [promtool(), "check", "rules", str(tmp_path / "q.yml")], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(queries)} rules found" in check.stdout


def test_dashboard_reads_only_recorded_metrics():
    known = known_metrics()
    used = {n: t for t, e in dashboard_queries() for n in metric_names(e)}
    assert {"vllm:spec_decode_num_accepted_tokens_per_pos_total", "specdeploy_level_speed_up",
            "vllm:time_to_first_token_seconds_bucket"} <= set(used)  # fmt: skip
    unknown = {n: t for n, t in used.items() if n not in known}
    assert unknown == {}, f"metrics in no recording (name: panel): {unknown}"


def test_metric_name_check_can_fail():
    assert metric_names('sum by (node) (rate(vllm:made_up_total{job="x"}[5m])) / up') == {
        "vllm:made_up_total",
        "up",
    }
    assert "vllm:made_up_total" not in known_metrics()
