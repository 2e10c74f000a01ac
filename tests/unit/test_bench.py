"""make bench's parsing and table (tests/testbed/bench.py); the runs themselves are make bench."""

from __future__ import annotations

from testbed import bench

RECAP = """
PLAY RECAP *********************************************************************
sandbox-node1              : ok=93   changed=0    unreachable=0    failed=0    skipped=38

TASKS RECAP ********************************************************************
Wednesday 02 December 2026  23:30:01 +0000 (0:00:00.258)       0:00:30.869 ****
===============================================================================
gpu_node : Write the kernel settings a large server needs (applied now on a host) --- 2.01s
gpu_node : Create the unprivileged service user ------------------------- 1.34s
vllm_service : Render the systemd unit ---------------------------------- 0.96s
Take the node's deploy lock ---------------------------------------------- 0.05s
"""


def test_role_seconds_adds_up_each_role_from_the_profile_tasks_recap():
    assert bench.role_seconds(RECAP) == {
        "gpu_node": 3.35,
        "vllm_service": 0.96,
        "(play tasks)": 0.05,
    }
    assert bench.changed(RECAP) == 0


def test_host_tasks_per_node_counts_ok_failed_and_skipped_of_the_nodes_only():
    recap = RECAP.replace(
        "\nTASKS RECAP",
        "sandbox-node2              : ok=90   changed=1    unreachable=0    failed=1    skipped=30"
        "   rescued=0    ignored=0\n"
        "localhost                  : ok=2    changed=0    unreachable=0    failed=0    skipped=1"
        "\n\nTASKS RECAP",
    )
    assert bench.host_tasks_per_node(recap) == (93 + 38 + 90 + 1 + 30) / 2


def test_the_table_gives_medians_spread_and_the_ratio_to_one_node():
    one = {
        "nodes": 1,
        "times": {"no-op re-deploy": bench.median_spread([20.0, 22.0, 30.0])},
        "server_start": {},
        "noop_profile": {"gpu_node": 9.0},
    }
    four = {
        "nodes": 4,
        "times": {"no-op re-deploy": bench.median_spread([30.0, 33.0, 31.0])},
        "server_start": {},
        "noop_host_tasks": 62.0,
        "noop_profile": {"gpu_node": 12.0},
    }
    text = bench.render([one, four], bench.machine(), "2026-12-02 23:00 UTC")
    assert "| 1 | no-op re-deploy | 22.0 s (20.0-30.0, n=3) | - |" in text
    assert "| 4 | no-op re-deploy | 31.0 s (30.0-33.0, n=3) | 1.41 |" in text
    assert "- 4 node(s): 62 host-tasks per node; gpu_node 12.0 s" in text
    assert "- 1 node(s): gpu_node 9.0 s" in text


def test_a_new_table_keeps_the_hand_written_notes_below_the_marker():
    old = f"# old table\n| 1 | 99 s |\n\n{bench.NOTES_MARKER}\n\n## mitogen\nmeasured by hand\n"
    text = bench.with_notes("# new table\n| 1 | 9 s |\n", old)
    assert text.startswith("# new table") and "99 s" not in text
    assert text.endswith(f"{bench.NOTES_MARKER}\n\n## mitogen\nmeasured by hand\n")
    assert bench.with_notes("# new\n", "# old without notes\n") == "# new\n"
