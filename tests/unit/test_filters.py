"""The collection's filter plugins (plugins/filter): the fleet table, a failure's reason, the
rollout note. Imported as Ansible loads them, through the collection's package path."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from ansible_collections.specdeploy.toolkit.plugins.filter import (
    balancer,
    downtime,
    preflight,
    release,
    rollout,
    status,
    steady,
)
from ansible_collections.specdeploy.toolkit.plugins.filter.compile_cache import compile_cache_items


def slurped(manifest: dict) -> dict:
    return {"content": base64.b64encode(json.dumps(manifest).encode()).decode()}


def test_the_status_table_has_a_row_per_node_and_says_who_was_unreachable() -> None:
    hostvars = {
        "node1": {
            "status_releases": {"current": "0.16.0-abc"},
            "status_service": {"stdout": "active\n"},
            "status_manifest": slurped(
                {
                    "vllm_version": "0.16.0",
                    "patches": {"state": "applied"},
                    "inputs": {
                        "speculative_config": {
                            "method": "eagle3",
                            "num_speculative_tokens": 3,
                            "num_speculative_tokens_per_batch_size": [[1, 4, 0], [5, 64, 3]],
                        }
                    },
                    "last_validation": {
                        "status": "passed",
                        "at": "2026-12-04T01:00:00Z",
                        "mean_acceptance_length": 2.4567,
                    },
                }
            ),
        },
        "node2": {"status_releases": {"unreachable": True}},
    }
    starts = [json.dumps({"node": "node1", "window_s": 12.3, "action": "deploy"})]
    rows = status.status_rows(["node1", "node2"], hostvars, starts)
    assert rows[0] == {
        "node": "node1",
        "release": "0.16.0-abc",
        "engine": "vllm==0.16.0",
        "patches": "applied",
        "service": "active",
        "downtime": "12.3 s (deploy)",
        "validation": "passed 2026-12-04T01:00:00Z acceptance 2.46",
        "deploy": "-",
        "schedule": [[1, 4, 0], [5, 64, 3]],
    }
    assert rows[1]["service"] == "unreachable" and rows[1]["release"] == "-"
    # an SGLang release names its engine, not the vLLM version its id still carries
    hostvars["node1"]["status_manifest"] = slurped(
        {"vllm_version": "0.26.0", "inputs": {"engine": "sglang", "engine_version": "0.5.15"}}
    )
    assert status.status_rows(["node1"], hostvars, starts)[0]["engine"] == "sglang==0.5.15"
    lines = status.status_table(rows)
    assert lines[0].split()[:3] == ["NODE", "RELEASE", "ENGINE"]
    assert lines[1].split()[:4] == ["node1", "0.16.0-abc", "vllm==0.16.0", "applied"]
    assert lines[-2] == "fleet: 2 node(s); releases served: 0.16.0-abc"
    # only the node that serves a schedule gets its line, after the fleet line
    assert lines[-1] == (
        "k schedule on node1 (running requests: [first, last, k]): [[1, 4, 0], [5, 64, 3]]"
    )


def test_the_fleet_line_says_when_every_node_serves_one_release_and_when_not() -> None:
    one = [{"release": "r1"}, {"release": "r1"}]
    assert status.fleet_line(one) == "fleet: 2 node(s); every node serves r1"
    two = [{"release": "r1"}, {"release": "r2"}]
    assert status.fleet_line(two).endswith("one rollout serves one release: run deploy.yml again")
    assert status.fleet_line([{"release": "-"}]) == "fleet: 1 node(s); releases served: none"


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ({"msg": "non-zero return code", "stdout": '{"error": "gate failed: tok/s"}'},
         "Gate: gate failed: tok/s"),
        ({"msg": "boom", "stdout_lines": ["a", "b", "c"],
          "stderr_lines": ["x", "Shared connection to n closed."]},
         "Gate: boom / b / c / x"),
        ({}, "Gate: failed"),
        # a loop: its first failed item says why (a file task names the path), not Ansible's
        # "One or more items failed"
        ({"msg": "One or more items failed", "results": [
            {"failed": False, "msg": ""},
            {"failed": True, "msg": "There was an issue creating /r/x as requested: [Errno 30] "
                                    "Read-only file system: '/r/x'"},
            {"failed": True, "msg": "There was an issue creating /r/y"}]},
         "Gate: There was an issue creating /r/x as requested: [Errno 30] Read-only file "
         "system: '/r/x' / (and 1 more items failed)"),
        ({"msg": "One or more items failed", "results": [{"failed": True}]},
         "Gate: One or more items failed"),
        # unarchive (recorded: a read-only destination): the cause is tar's, in extract_results
        ({"msg": "failed to unpack /t/source to /r/toolkit", "changed": False,
          "extract_results": {"rc": 2, "out": "", "cmd": ["/usr/bin/tar", "--extract"],
                              "err": "/usr/bin/tar: a.txt: Cannot open: Read-only file system\n"
                                     "/usr/bin/tar: Exiting with failure status due to previous "
                                     "errors\n"}},
         "Gate: failed to unpack /t/source to /r/toolkit / /usr/bin/tar: a.txt: Cannot open: "
         "Read-only file system"),
    ],
)  # fmt: skip
def test_a_failure_reason_keeps_what_says_why(result: dict, expected: str) -> None:
    assert rollout.failure_reason(result, "Gate") == expected


def test_a_long_reason_is_cut_at_a_word() -> None:
    reason = rollout.failure_reason({"msg": "word " * 400}, "T")
    assert len(reason) <= len("T: ") + rollout.REASON_LIMIT and reason.endswith("...")


def test_the_rollout_note_says_where_the_rollout_stands() -> None:
    hostvars = {
        "a": {"deploy_rollout_result": "serving"},
        "b": {"deploy_rollout_result": "failed"},
        "c": {},
        "d": {},
        "e": {},
    }
    note = rollout.rollout_note("r1", "c", ["a", "b", "c", "d", "e"], ["c", "d"], hostvars, 25)
    assert note == (
        "Rollout of r1: it serves on a; failed too: b; still running in this stage: d; "
        "not reached yet: e (the rollout stops after this stage when more than "
        "specdeploy_rollout_max_fail_percentage=25% of its nodes failed; those are then not "
        "touched)."
    )
    assert rollout.rollout_note("r1", "a", ["a"], ["a"], {"a": {}}) == ""
    last = rollout.rollout_note("r1", "b", ["a", "b"], ["b"], hostvars)
    assert last == "Rollout of r1: it serves on a; this is the last stage."


def test_a_release_s_paths_are_the_layout_the_node_side_ledger_uses(tmp_path: Path) -> None:
    from specdeploy.node.module_utils import release as ledger

    paths = release.FilterModule().filters()["release_paths"](str(tmp_path), "0.16.0-abc")
    assert paths["dir"] == str(tmp_path / "releases" / "0.16.0-abc")
    assert paths["manifest"] == str(ledger.manifest_path(tmp_path, "0.16.0-abc"))
    assert paths["python"] == f"{paths['venv_dir']}/bin/python"
    assert {paths["toolkit_dir"], paths["config_dir"]} == {
        f"{paths['dir']}/toolkit",
        f"{paths['dir']}/config",
    }


def test_the_starts_of_a_run_carry_the_validation_of_the_same_release_only() -> None:
    window = {"window_s": 41.2}
    hostvars = {
        "n1": {
            "vllm_service_downtime": {
                "release": "r2",
                "action": "deploy",
                "restarted": "true",
                "window": window,
            },
            "validation_result": {
                "release": "r2",
                "run_id": "run-7",
                "acceptance": {
                    "output_tokens_per_s": {"median": 812.5},
                    "speed_up": {"median": 1.9},
                },
                "speed": {"levels": [{"concurrency": 1, "speed_up": 1.9}]},
            },
        },
        "n2": {
            "vllm_service_downtime": {
                "release": "r2",
                "action": "deploy",
                "restarted": False,
                "window": None,
            },
            "validation_result": {"release": "r1", "run_id": "old"},
        },
        "n3": {},
    }
    starts = downtime.downtime_starts(["n1", "n2", "n3"], hostvars, "2026-12-04T03:00:00Z")
    assert [s["node"] for s in starts] == ["n1", "n2"]
    assert starts[0] == {
        "node": "n1",
        "release": "r2",
        "action": "deploy",
        "at": "2026-12-04T03:00:00Z",
        "restarted": True,
        "window": window,
        "output_tps": 812.5,
        "speed_up": 1.9,
        "levels": [{"concurrency": 1, "speed_up": 1.9}],
        "baseline": None,
        "validation_run_id": "run-7",
    }
    assert starts[1]["restarted"] is False and starts[1]["validation_run_id"] is None
    assert starts[1]["output_tps"] is None and starts[1]["speed_up"] is None
    assert starts[1]["levels"] == []


def test_a_baseline_start_is_its_own_entry_with_its_measurement_not_the_validation() -> None:
    baseline_doc = {"schema": "specdeploy.throughput/1", "levels": [{"concurrency": 1}]}
    windows = [
        {"release": "r2", "action": "baseline-start", "restarted": True, "window": None},
        {"release": "r2", "action": "deploy", "restarted": True, "window": None},
    ]
    hostvars = {
        "n1": {
            "vllm_service_downtime": windows[-1],
            "vllm_service_downtimes": windows,
            "validation_result": {"release": "r2", "run_id": "v1", "speed": {"levels": [1]}},
            "validation_baseline_start_run": {"rc": 0, "stdout": json.dumps(baseline_doc)},
        }
    }
    first, second = downtime.downtime_starts(["n1"], hostvars, "t")
    assert (first["action"], first["baseline"], first["levels"]) == (
        "baseline-start",
        baseline_doc,
        [],
    )
    assert first["validation_run_id"] is None
    assert (second["baseline"], second["levels"], second["validation_run_id"]) == (None, [1], "v1")
    # a baseline run that failed or printed no JSON carries nothing
    hostvars["n1"]["validation_baseline_start_run"] = {"rc": 2, "stdout": "{}"}
    assert downtime.downtime_starts(["n1"], hostvars, "t")[0]["baseline"] is None


def test_rollout_stage_lines_count_the_stages_and_take_the_eta_from_the_done_ones() -> None:
    from ansible_collections.specdeploy.toolkit.plugins.filter.rollout import (
        rollout_stage,
        rollout_stage_line,
        stage_sizes,
    )

    assert stage_sizes([1, "50%"], 4) == [1, 2, 1]  # deploy.yml's default stages on 4 nodes
    assert stage_sizes([1, "50%"], 1) == [1]
    assert stage_sizes(["100%"], 3) == [3]
    assert stage_sizes(1, 3) == [1, 1, 1]
    hosts = ["n1", "n2", "n3", "n4"]
    hv: dict = {h: {} for h in hosts}
    serial = [1, "50%"]
    first = rollout_stage("rollout_changing", ["n1"], hosts, hv, 1000.0)
    hv["n1"]["deploy_rollout_stage"] = first
    line = rollout_stage_line(first, "canary first, then stages", ["n1"], hosts, serial, hv)
    assert line == (
        "rollout, canary first, then stages: stage 1/3 starts (n1) "
        "(0.0 s in; no ETA: no stage finished yet in this run)"
    )
    second = rollout_stage("rollout_changing", ["n2", "n3"], hosts, hv, 1090.0)
    assert second["stage"] == 2 and second["rollout_began"] == 1000.0
    hv["n2"]["deploy_rollout_stage"] = hv["n3"]["deploy_rollout_stage"] = second
    line = rollout_stage_line(second, "stages", ["n2", "n3"], hosts, serial, hv)
    # one stage done in 90 s; this one and the last left: 180 s
    assert line == (
        "rollout, stages: stage 2/3 starts (n2, n3) "
        "(90.0 s in; ETA 3 min 00 s from the 1 stage(s) done in this run, 90 s each)"
    )
    # another play of the same run (the drifted nodes) counts its own stages
    other = rollout_stage("rollout_drifted", ["n4"], hosts, hv, 1200.0)
    assert other["stage"] == 1 and other["rollout_began"] == 1200.0


def test_stage_servers_names_each_nodes_haproxy_server_or_its_inventory_name() -> None:
    from ansible_collections.specdeploy.toolkit.plugins.filter.rollout import stage_servers

    class Broken(dict):
        def get(self, key, default=None):
            raise RuntimeError("an undefined variable in the template")

    hostvars = {"gpu-01": {}, "gpu-02": {"specdeploy_haproxy_server": "srv-2"}, "gpu-03": Broken()}
    assert stage_servers(["gpu-01", "gpu-02", "gpu-03", "gpu-09"], hostvars) == (
        "gpu-01,srv-2,gpu-03,gpu-09"
    )
    assert stage_servers(None, hostvars) == ""


def test_preflight_warnings_name_only_the_nodes_that_have_some_in_the_play_s_order() -> None:
    hostvars = {
        "n1": {
            "preflight_input_checks": {"messages": []},
            "preflight_node_checks": {"messages": []},
        },
        "n2": {
            "preflight_input_checks": {"messages": ["speed-up gate waived"]},
            # a skipped validation preflight registers no messages
            "validation_input_checks": {"skipped": True},
            "preflight_node_checks": {"messages": ["drafter: vocabulary differs"]},
        },
        "n3": {"validation_input_checks": {"messages": ["levels 1 and 64 only"]}},
    }
    found = preflight.preflight_warnings(["n3", "n1", "n2"], hostvars)
    assert found == [
        {"node": "n3", "messages": ["levels 1 and 64 only"]},
        {"node": "n2", "messages": ["speed-up gate waived", "drafter: vocabulary differs"]},
    ]
    assert preflight.preflight_warnings(["n1"], hostvars) == []


def test_steady_lines_say_what_drifted_and_why_a_steady_release_is_not_measured() -> None:
    release = {
        "id": "0.16.0-abc",
        "last_validation": {"at": "2026-12-05T10:00:00Z", "mean_acceptance_length": 2.4},
    }
    hostvars = {
        "n1": {"specdeploy_release": release, "vllm_service_steady": True},
        "n2": {
            "specdeploy_release": release,
            "vllm_service_steady": False,
            "vllm_service_steady_drifts": ["unit: content differs", "service: inactive"],
        },
        "n3": {"specdeploy_release": release},  # failed before its check: nothing to say
    }
    said = steady.steady_lines(["n1", "n2", "n3"], hostvars)
    assert [item["node"] for item in said] == ["n1", "n2"]
    lines = [item["line"] for item in said]
    assert lines[0].startswith("n1: release 0.16.0-abc serves unchanged (no restart)")
    assert "2026-12-05T10:00:00Z, mean acceptance length 2.4" in lines[0]
    assert lines[1].startswith("n2 serves release 0.16.0-abc but not as this deploy leaves it: ")
    assert "unit: content differs; service: inactive" in lines[1] and len(lines) == 2
    # check mode: only what drifted is said
    assert steady.steady_lines(["n1", "n2"], hostvars, True) == [said[1]]
    long = {"n": {**hostvars["n2"], "vllm_service_steady_drifts": ["x " * 1000]}}
    assert len(steady.steady_lines(["n"], long)[0]["line"]) < 1100


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (
            {"rc": 0, "stdout": '{"kind": "haproxy", "message": "node1 drained"}\n', "stderr": ""},
            {"ok": True, "kind": "haproxy", "message": "node1 drained"},
        ),
        (
            {
                "rc": 0,
                "stdout": '{"kind": "none", "message": "no balancer: skipped"}',
                "stderr": "",
            },
            {"ok": True, "kind": "none", "message": "no balancer: skipped"},
        ),
        (  # refused, with its JSON answer
            {"rc": 1, "stdout": '{"kind": "haproxy", "message": "socket refused"}', "stderr": ""},
            {"ok": False, "kind": "haproxy", "message": "socket refused"},
        ),
        (  # could not start: no JSON, the error output says why
            {"rc": 2, "stdout": "", "stderr": "Traceback ...\nOSError: boom\n"},
            {"ok": False, "kind": "none", "message": "Traceback ...\nOSError: boom"},
        ),
        (
            {"rc": 1, "stdout": "{not json", "stderr": ""},
            {"ok": False, "kind": "none", "message": "{not json"},
        ),
        ({"skipped": True}, {"ok": True, "kind": "none", "message": "skipped"}),
    ],
)
def test_the_balancer_s_answer_is_read_from_its_json_else_its_error_output(
    result: dict, expected: dict
) -> None:
    assert balancer.balancer_answer(result) == expected


def test_the_rollout_summary_counts_the_serving_nodes_and_says_the_k_schedule() -> None:
    release = {"id": "0.16.0-abc", "speculative_config": {"num_speculative_tokens": 3}}
    schedule = {"message": "auto: batch 1-4 k=3, then off"}
    serving = {
        "deploy_rollout_result": "serving",
        "specdeploy_release": release,
        "preflight_speculative_schedule": schedule,
    }
    hostvars = {"n1": serving, "n2": {"deploy_rollout_result": "failed"}, "n3": serving}
    lines = rollout.rollout_summary(["n1", "n2", "n3", "limited-out"], hostvars)
    assert lines == [
        "rollout of release 0.16.0-abc: 2 of 3 node(s) serve it (n1, n3); the others were"
        " limited out or failed earlier.",
        "k schedule by running requests: auto: batch 1-4 k=3, then off",
    ]
    every = rollout.rollout_summary(["n1"], hostvars)
    assert every[0] == "rollout of release 0.16.0-abc: 1 of 1 node(s) serve it (n1)."
    plain = {"n1": {**serving, "specdeploy_release": {"id": "x", "speculative_config": None}}}
    assert (
        rollout.rollout_summary(["n1"], plain)[1]
        == "k schedule by running requests: off (no speculation)"
    )
    assert rollout.rollout_summary(["n2"], hostvars) == []  # none serves: nothing to say


def test_the_compile_cache_layout_is_one_files_run_with_the_marker_last() -> None:
    release = {
        "cache_dir": "/var/cache/s/compile/fp1",
        "cache_marker": "/var/cache/s/compile/fp1/.complete",
        "fingerprint": "fp1",
        "vllm_version": "0.16.0",
        "series_sha256": "ab",
        "speculative_config": {"method": "eagle3", "num_speculative_tokens": 3},
    }
    items = compile_cache_items(release, ["vllm", "triton"], "vllm", "vllm")
    assert [i["path"] for i in items] == [
        "/var/cache/s/compile", "/var/cache/s/compile/fp1", "/var/cache/s/compile/fp1/vllm",
        "/var/cache/s/compile/fp1/triton", "/var/cache/s/compile/fp1/.complete",
    ]  # fmt: skip
    assert all(i["owner"] == "vllm" and i["mode"] == "0750" for i in items[:-1])
    marker = items[-1]
    assert "owner" not in marker and marker["mode"] == "0644"  # root's, as before
    assert json.loads(marker["content"]) == {
        "fingerprint": "fp1", "vllm_version": "0.16.0", "series_sha256": "ab",
        "speculative_config": {"method": "eagle3", "num_speculative_tokens": 3},
    }  # fmt: skip
    assert marker["content"].startswith('{\n    "fingerprint": "fp1",')  # to_nice_json's text
