"""docs/faults.md is assembled from the fault groups' files (tests/integration/faults/)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import faultlib

REPO = Path(__file__).resolve().parents[2]
FAULTS = REPO / "tests" / "integration" / "faults"


def table_rows(text: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) == 9 and cells[0].isdigit():
            rows.append(cells)
    return rows


def test_every_row_is_recorded_by_its_groups_module():
    recorded: dict[str, set[str]] = {}
    for module in FAULTS.glob("test_faults_*.py"):
        group = module.stem.removeprefix("test_faults_")
        text = module.read_text()
        assert f'GROUP = "{group}"' in text
        keys = set(re.findall(r'record\(\s*"([a-z-]+)"', text))
        keys |= set(re.findall(r'\(\s*"([a-z-]+)",\s*\{', text))  # parametrized: (key, {extra
        recorded[group] = keys
    assert set(recorded) == set(faultlib.GROUPS)
    for key, (group, _fault, _expected) in faultlib.ROWS.items():
        assert key in recorded[group], f"{key} is recorded by no case of group {group}"
    assert len(faultlib.ROWS) == 30


def test_the_table_is_in_a_fixed_order_whatever_order_the_groups_end_in(tmp_path):
    keys = {
        group: [k for k, v in faultlib.ROWS.items() if v[0] == group] for group in faultlib.GROUPS
    }
    for group in reversed(list(faultlib.GROUPS)):  # written in another order than the table's
        rows = {key: {"observed": f"seen {key}"} for key in keys[group]}
        (tmp_path / f"{group}.json").write_text(
            json.dumps({"group": group, "finished": "2026-01-01 00:00 UTC", "rows": rows})
        )
    text = faultlib.render_table(tmp_path)
    rows = table_rows(text)
    assert [r[0] for r in rows] == [str(i) for i in range(1, 31)]
    assert [r[1] for r in rows] == [v[1] for v in faultlib.ROWS.values()]
    assert [r[3] for r in rows] == [f"seen {k}" for k in faultlib.ROWS]
    assert "NOT OBSERVED" not in text
    assert text == faultlib.render_table(tmp_path)  # deterministic


def test_a_group_that_did_not_run_or_a_case_that_failed_shows_as_not_observed(tmp_path):
    first = {k: {"observed": "ok"} for k, v in faultlib.ROWS.items() if v[0] == "first"}
    del first["port-hangs"]  # its case failed: no row recorded
    (tmp_path / "first.json").write_text(
        json.dumps({"group": "first", "finished": "2026-01-01 00:00 UTC", "rows": first})
    )
    rows = {r[1]: r[3] for r in table_rows(faultlib.render_table(tmp_path))}
    assert len(rows) == 30
    assert rows["port open but not answering (requests hang)"].startswith("**NOT OBSERVED**")
    assert rows["node rebooted during the readiness wait"].startswith("**NOT OBSERVED**")
    assert rows["concurrent second deploy"] == "ok"


def test_the_request_columns_show_the_traffic_or_a_dash(tmp_path):
    """Rows with traffic (group `traffic`) show its counts and p99 before / during / after in
    that order, whatever order the JSON keeps them in; the one-node groups' rows show `-`."""
    traffic = {
        "sent": 120, "completed": 119, "failed": 0, "cut": 1, "operation_s": 3.0,
        "p99_ms": {"after": 44, "before": 40, "during": None},
    }  # fmt: skip
    (tmp_path / "traffic.json").write_text(
        json.dumps(
            {
                "group": "traffic",
                "finished": "2026-01-01 00:00 UTC",
                "rows": {"oom-killed": {"observed": "restarted", "traffic": traffic}},
            },
            sort_keys=True,
        )
    )
    (tmp_path / "first.json").write_text(
        json.dumps(
            {
                "group": "first",
                "finished": "2026-01-01 00:00 UTC",
                "rows": {"concurrent-deploy": {"observed": "refused"}},
            }
        )
    )
    rows = {r[1]: r for r in table_rows(faultlib.render_table(tmp_path))}
    oom = rows[faultlib.ROWS["oom-killed"][1]]
    assert oom[3:] == ["restarted", "120", "119", "0", "1", "40 / - / 44"]
    assert rows["concurrent second deploy"][3:] == ["refused", "-", "-", "-", "-", "-"]
