"""The release plan (plugins/plugin_utils/release_plan.py): one object per rollout, its id from
everything that defines it, and the lines `make plan` prints. The action release_plan runs it
in every deploy (test_deploy and the fleet tests check the plans it makes on real nodes)."""

from __future__ import annotations

from ansible_collections.specdeploy.toolkit.plugins.filter.release import (
    differing_inputs,
)
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import (
    release_plan,
)

SERIES = "faf87f6fc96bc62053a541ce45792c61a166db610c90e712d441578de71c40d8"
TOOLKIT = "976348b6975e9c62e14041dbc891ce32452bf484ee52f12e39b3b5cdd14422bd"
GATES = {"min_mean_acceptance_length": 1.5, "per_position_floors": [], "min_speed_up": 1.0,
         "max_regression_vs_previous": 0.05}  # fmt: skip
# The production inventory's defaults (roles/specdeploy/defaults) for vLLM 0.16.0.
KNOBS = {
    "specdeploy_root": "/opt/specdeploy",
    "specdeploy_cache_dir": "/var/cache/specdeploy",
    "specdeploy_engine": "vllm",
    "specdeploy_vllm_version": "0.16.0",
    "specdeploy_sglang_version": "0.5.15",
    "specdeploy_speculative_enabled": True,
    "specdeploy_speculative_config": {"method": "eagle3", "num_speculative_tokens": 3},
    "specdeploy_drafter_path": "/srv/models/Kimi-K2.5-eagle3",
    "specdeploy_model_path": "/srv/models/Kimi-K2.5",
    "specdeploy_served_model_name": "kimi-k2.5",
    "specdeploy_tensor_parallel_size": 8,
    "specdeploy_pipeline_parallel_size": 1,
    "specdeploy_max_model_len": 32768,
    "specdeploy_gpu_memory_utilization": 0.9,
    "specdeploy_attention_backend": "",
    "specdeploy_extra_args": [],
    "specdeploy_environment": {},
    "specdeploy_port": 8000,
    "specdeploy_server_standin": False,
    "specdeploy_standin_profile": {},
    "specdeploy_shutdown_timeout_s": 30,
    "specdeploy_release_gates": GATES,
    "preflight_version_entry": {"series_sha256": SERIES},
    "preflight_version_native": False,
}  # fmt: skip
HARDWARE = {"nccl_environment": {}, "server_extra_args": []}


def plan(**changes):
    return release_plan.plan({**KNOBS, **changes}, TOOLKIT, "", HARDWARE)


def test_the_id_is_what_the_earlier_jinja_plan_made_of_the_same_inputs():
    # ids of deployed releases must not change with the move to Python: these two were planned
    # by roles/preflight/tasks/plan.yml's Jinja (2026-12-04) from exactly these inputs
    assert plan()["id"] == "0.16.0-3cc16e0b0678"
    assert plan()["fingerprint"] == "adf90235afc3ce27"
    off = plan(specdeploy_speculative_enabled=False)
    assert off["id"] == "0.16.0-8d270a502be8" and off["speculative_config"] is None


def test_every_input_changes_the_id_and_the_paths_follow_it():
    base = plan()
    for change in ({"specdeploy_port": 8001}, {"specdeploy_extra_args": ["--x"]},
                   {"specdeploy_engine": "sglang"}):  # fmt: skip
        other = plan(**change)
        assert other["id"] != base["id"], change
        assert other["dir"] == f"/opt/specdeploy/releases/{other['id']}"
        assert other["python"] == f"{other['dir']}/venv/bin/python"
    assert plan(specdeploy_engine="sglang")["id"].startswith("sglang-0.5.15-0.16.0-")
    assert plan(specdeploy_engine="sglang")["package"] == "sglang==0.5.15"
    # the gates are not part of the id (a new threshold re-validates, it does not rebuild)
    assert plan(specdeploy_release_gates={"min_speed_up": 2.0})["id"] == base["id"]


def probe(serving: str, status: str = "pass", gates=GATES, pid: int = 42) -> dict:
    manifest = {"status": "active", "last_validation": {"status": status},
                "starts": [{"stop_to_ready_s": 61.4}, {"stop_to_ready_s": 44.5}]}  # fmt: skip
    return {
        "service_main_pid": pid,
        "current": {"islnk": True, "target": serving, "manifest": manifest, "gates": gates},
    }


def test_what_deploying_means_on_the_node():
    release_id = plan()["id"]
    steady = plan(preflight_probe=probe(release_id), preflight_serving_release=release_id)
    assert steady["built"] and steady["steady"] and not steady["restart"]
    assert steady["last_start_s"] == 44.5
    failed = plan(preflight_probe=probe(release_id, status="fail"),
                  preflight_serving_release=release_id)  # fmt: skip
    assert failed["built"] and not failed["steady"]
    stopped = plan(preflight_probe=probe(release_id, pid=0), preflight_serving_release=release_id)
    assert stopped["restart"]
    new = plan(preflight_probe=probe("0.16.0-000000000000"),
               preflight_serving_release="0.16.0-000000000000")  # fmt: skip
    assert not new["built"] and new["restart"] and new["last_validation"] == {}


def test_the_plan_lines_say_what_a_deploy_would_do():
    release_id = plan()["id"]
    steady = plan(preflight_probe=probe(release_id), preflight_serving_release=release_id)
    lines = release_plan.describe(steady, {"message": "k=3 up to 16, then off"}, None)
    assert lines[0].startswith(f"release {release_id}: vLLM 0.16.0 (patch series faf87f6fc96b)")
    assert lines[1] == "k schedule by running requests: k=3 up to 16, then off"
    assert lines[2] == "on this node: serves it already, validated, same gates: only checked"
    assert lines[3] == "server restarts: no; expected downtime: none"
    new = plan(preflight_probe=probe("x"), preflight_serving_release="x")
    lines = release_plan.describe(new, None, {"source": "history", "message": "1200 tok/s"})
    assert lines[2] == "on this node: would be built (serving now: x)"
    assert lines[3] == (
        "server restarts: yes; expected downtime: about 45 s (the last start of the serving "
        "release on this node)"
    )
    assert lines[4] == "baseline for the speed-up gate: history: 1200 tok/s"


def test_the_inputs_that_differ_between_nodes_are_named():
    a, b = plan(), plan(specdeploy_port=9000)
    assert differing_inputs([a, a]) == []
    assert differing_inputs([a, b]) == ["port"]


def test_the_model_files_fingerprint_is_part_of_the_id():
    """Model files changed under the same path (the node probe's fingerprint of each model
    directory) make a new release; the same files make the same release again (a second deploy
    changes nothing); a plan without a probe keeps the id it had."""

    def with_models(target: str, drafter: str) -> dict:
        configs = [{"path": "/srv/models/Kimi-K2.5", "fingerprint": target},
                   {"path": "/srv/models/Kimi-K2.5-eagle3", "fingerprint": drafter}]  # fmt: skip
        return plan(preflight_probe={**probe("x"), "model_configs": configs})

    served = with_models("1111111111111111", "2222222222222222")
    assert served["id"] == with_models("1111111111111111", "2222222222222222")["id"]
    assert served["inputs"]["model_files"] == {
        "/srv/models/Kimi-K2.5": "1111111111111111",
        "/srv/models/Kimi-K2.5-eagle3": "2222222222222222",
    }
    assert with_models("3333333333333333", "2222222222222222")["id"] != served["id"]
    assert with_models("1111111111111111", "3333333333333333")["id"] != served["id"]
    assert served["id"] != plan()["id"] and served["dir"].endswith(served["id"])
    assert "model_files" not in plan(preflight_probe=probe("x"))["inputs"]
    assert plan(preflight_probe=probe("x"))["id"] == "0.16.0-3cc16e0b0678"
    other = with_models("3333333333333333", "2222222222222222")
    assert differing_inputs([served, other]) == ["model_files"]
