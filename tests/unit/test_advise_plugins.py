"""`make advise`'s plugins: the target's MoE shape (plugins/filter/advise.py), the command
lines (plugins/plugin_utils/advise.py), the node action that reads the serving release and runs
its checker (plugins/action/advise_node.py) and the controller action that writes the node's
inputs and runs the advisor (plugins/action/advise.py), both through real ansible-playbook on a
local connection."""

from __future__ import annotations

import base64
import functools
import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible_collections.specdeploy.toolkit.plugins.filter.advise import advise_moe_shape, moe_shape
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import advise

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def slurped(config: dict) -> dict:
    return {"content": base64.b64encode(json.dumps(config).encode()).decode()}


def test_the_shape_reads_deepseek_qwen_and_multimodal_configs():
    assert moe_shape({"n_routed_experts": 384, "num_experts": 1, "num_experts_per_tok": 8}) == {
        "experts": 384,
        "top_k": 8,
    }
    assert moe_shape({"num_experts": 128, "num_experts_per_tok": 8}) == {"experts": 128, "top_k": 8}
    kimi = {
        "model_type": "kimi_k25",
        "text_config": {"n_routed_experts": 384, "num_experts_per_tok": 8},
    }
    assert advise_moe_shape(slurped(kimi)) == {"experts": 384, "top_k": 8}
    assert advise_moe_shape(slurped({"hidden_size": 4096})) == {"experts": 0, "top_k": 0}


def test_a_config_that_was_not_read_is_a_dense_target():
    # slurp skipped (advise_experts given) or failed (no config.json): no content
    assert advise_moe_shape({"skipped": True}) == {"experts": 0, "top_k": 0}
    assert advise_moe_shape({"failed": True, "msg": "file not found"}) == {"experts": 0, "top_k": 0}


KNOBS = {
    "inventory_hostname": "node1",
    "playbook_dir": "/repo/playbooks",
    "specdeploy_served_model_name": "kimi-k2.5",
    "advise_inputs": {"metrics": "", "spec": {}, "shape": {"experts": 384, "top_k": 8}},
}


def test_the_argument_list_is_the_one_the_play_built():
    directory = advise.advice_dir(KNOBS)
    assert directory == "/repo/playbooks/../reports/advice"
    assert advise.advisor_args(KNOBS, directory, "{}") == [
        "--metrics", "/repo/playbooks/../reports/advice/node1.metrics.txt",
        "--model", "kimi-k2.5",
        "--spec-file", "/repo/playbooks/../reports/advice/node1.spec.json",
        "--history", "/repo/playbooks/../reports/history.sqlite",
        "--node", "node1",
        "--experts", "384", "--top-k", "8", "--k-max", "6",
        "--load-profile", "{}",
        "--title", "node1",
    ]  # fmt: skip


def test_the_knobs_win_over_the_shape_the_node_read():
    knobs = KNOBS | {"advise_experts": 0, "advise_k_max": 4, "advise_history_db": "/h.sqlite"}
    args = advise.advisor_args(knobs, "/out", '{"1": 0.5}')
    assert args[args.index("--experts") + 1] == "0"
    assert args[args.index("--top-k") + 1] == "8"  # not given: the node's
    assert args[args.index("--k-max") + 1] == "4"
    assert args[args.index("--history") + 1] == "/h.sqlite"
    assert args[args.index("--load-profile") + 1] == '{"1": 0.5}'


def test_the_action_writes_the_inputs_and_returns_the_advisors_answer(tmp_path):
    spec = {"speculative": True, "levels": [{"concurrency": 1, "tps": 10.0}]}
    hosts = {
        "gpu_nodes": {
            "hosts": {
                "node1": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": sys.executable,
                    "specdeploy_served_model_name": "m",
                    "advise_out_dir": str(tmp_path / "advice"),
                    "advise_history_db": str(tmp_path / "missing.sqlite"),
                    "advise_inputs": {"metrics": "# no metrics\n", "spec": spec, "shape": {}},
                }
            }
        }
    }
    (tmp_path / "hosts.json").write_text(json.dumps(hosts))
    (tmp_path / "play.yml").write_text(
        "- hosts: gpu_nodes\n  gather_facts: false\n  tasks:\n"
        "    - specdeploy.toolkit.advise:\n      failed_when: false\n      register: table\n"
        "    - ansible.builtin.debug:\n        var: table\n"
    )
    env = os.environ | {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"),
    }
    run = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "hosts.json", "play.yml"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    plays = json.JSONDecoder().raw_decode(run.stdout[run.stdout.index("{") :])[0]["plays"]
    table = plays[0]["tasks"][0]["hosts"]["node1"]
    advice = tmp_path / "advice"
    assert (advice / "node1.metrics.txt").read_text() == "# no metrics\n"
    assert (advice / "node1.spec.json").read_text() == json.dumps(spec, indent=4, sort_keys=True)
    assert oct((advice / "node1.spec.json").stat().st_mode & 0o777) == "0o644"
    assert table["changed"] is True
    # the advisor's refusal (no drafts in these /metrics) is its answer, not an error of the task
    assert table["rc"] == 2 and "no speculative drafts for model 'm'" in table["stderr"], table
    assert table["cmd"][1:3] == ["-m", "specdeploy.controller.advisor"]
    assert table["cmd"][table["cmd"].index("--experts") + 1] == "0"


CHECKER = """#!/bin/sh
# the release's checker, as the advise_node action runs it: its argv and PYTHONPATH as JSON
printf '{"speculative": true, "pythonpath": "%s", "argv": "%s"}' "$PYTHONPATH" "$*"
"""


def node_layout(tmp_path: Path, manifest: dict, model_config: dict | None) -> Path:
    """A node's files as a deploy leaves them: root/current -> a release with its manifest and a
    stand-in checker; the target's config.json; no API key file."""
    release = tmp_path / "root" / "releases" / "0.16.0-abc"
    (release / "venv" / "bin").mkdir(parents=True)
    (release / "manifest.json").write_text(json.dumps(manifest))
    python = release / "venv" / "bin" / "python"
    python.write_text(CHECKER)
    python.chmod(0o755)
    (tmp_path / "root" / "current").symlink_to(release)
    (tmp_path / "model").mkdir()
    if model_config is not None:
        (tmp_path / "model" / "config.json").write_text(json.dumps(model_config))
    (tmp_path / "metrics").mkdir(exist_ok=True)
    (tmp_path / "metrics" / "metrics").write_text("vllm:spec_decode_num_drafts_total 3\n")
    return tmp_path


@pytest.fixture
def metrics_url(tmp_path) -> Iterator[str]:
    """The serving release's /metrics: tmp_path/metrics/metrics over HTTP, as uri reads it."""
    handler = functools.partial(
        http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "metrics")
    )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def run_node_play(tmp_path: Path, url: str, extra: dict) -> tuple[int, dict, str]:
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "specdeploy_root": str(tmp_path / "root"),
        "specdeploy_model_path": str(tmp_path / "model"),
        "specdeploy_local_url": url,
        "specdeploy_config_dir": str(tmp_path / "etc"),
        "specdeploy_service_name": "vllm",
        "specdeploy_served_model_name": "m",
        "advise_levels": [1, 8],
    } | extra
    (tmp_path / "hosts.json").write_text(json.dumps({"gpu_nodes": {"hosts": {"node1": host}}}))
    (tmp_path / "play.yml").write_text(
        "- hosts: gpu_nodes\n  gather_facts: false\n  tasks:\n"
        "    - specdeploy.toolkit.advise_node:\n"
        "    - ansible.builtin.debug:\n        var: advise_inputs\n"
    )
    env = os.environ | {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"),
    }
    run = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "hosts.json", "play.yml"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    plays = json.JSONDecoder().raw_decode(run.stdout[run.stdout.index("{") :])[0]["plays"]
    return run.returncode, plays[0]["tasks"][-1]["hosts"]["node1"], run.stdout + run.stderr


SPECULATIVE = {"inputs": {"speculative_config": {"num_speculative_tokens": 3}}}
KIMI = {"text_config": {"n_routed_experts": 384, "num_experts_per_tok": 8}}


def test_the_node_action_reads_metrics_shape_and_the_checkers_answer(tmp_path, metrics_url):
    rc, last, out = run_node_play(node_layout(tmp_path, SPECULATIVE, KIMI), metrics_url, {})
    assert rc == 0, out
    inputs = last["advise_inputs"]
    assert inputs["metrics"] == "vllm:spec_decode_num_drafts_total 3\n"
    assert inputs["shape"] == {"experts": 384, "top_k": 8}
    release = f"{tmp_path}/root/current"
    assert inputs["spec"]["pythonpath"] == f"{release}/toolkit"  # the checker's own package
    assert inputs["spec"]["argv"] == (
        f"-m specdeploy.node.validation.check baseline --base-url {metrics_url}"
        " --served-model-name m --levels 1,8 --min-window-s 5 --repeats 2 --node node1 --json"
    )
    # given knobs win; the API key file is passed where it exists
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "vllm.api-key").write_text("k\n")
    rc, last, out = run_node_play(tmp_path, metrics_url, {"advise_experts": 0, "advise_repeats": 1})
    assert rc == 0, out
    assert last["advise_inputs"]["shape"] == {"experts": 0, "top_k": 0}  # config not read
    argv = last["advise_inputs"]["spec"]["argv"]
    assert "--repeats 1 " in argv and argv.endswith(f"--api-key-file {tmp_path}/etc/vllm.api-key")


def test_the_node_action_refuses_nothing_deployed_and_a_release_without_speculation(
    tmp_path, metrics_url
):
    layout = node_layout(tmp_path, {"inputs": {"speculative_config": None}}, None)
    rc, _, out = run_node_play(layout, metrics_url, {})
    assert rc != 0
    assert (
        "node1 serves without speculation: the advisor needs the per-position acceptance of a"
        " speculative release"
    ) in out
    (tmp_path / "root" / "current").unlink()
    rc, _, out = run_node_play(layout, metrics_url, {})
    assert rc != 0
    assert "no release is deployed on node1 (no current symlink): run make deploy first" in out
