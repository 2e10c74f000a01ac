"""The release venv's build steps (plugins/plugin_utils/release_venv_build.py) and their order in
the action specdeploy.toolkit.release_venv_build: the install step's arguments come from the
knobs, and a linked venv installs nothing."""

from __future__ import annotations

import pytest
from ansible_collections.specdeploy.toolkit.plugins.action.release_venv_build import ActionModule
from ansible_collections.specdeploy.toolkit.plugins.plugin_utils import release_venv_build as steps

RELEASE = {
    "id": "0.16.0-abc",
    "vllm_version": "0.16.0",
    "package": "vllm==0.16.0",
    "venv_dir": "/opt/s/releases/0.16.0-abc/venv",
    "toolkit_dir": "/opt/s/releases/0.16.0-abc/toolkit",
}


def knobs(**changes) -> dict:
    return {
        "specdeploy_root": "/opt/s",
        "specdeploy_release": RELEASE,
        "specdeploy_python": "/usr/bin/python3",
        "specdeploy_node_wheelhouse": "/opt/s/wheelhouse",
        "specdeploy_vllm_install_dependencies": True,
        "specdeploy_venv_installer": "uv",
    } | changes


def test_the_install_step_gets_the_release_the_wheelhouse_and_the_installer_knob() -> None:
    assert steps.install_args(knobs()) == {
        "venv": "/opt/s/releases/0.16.0-abc/venv",
        "python": "/usr/bin/python3",
        "requirements": "/opt/s/releases/0.16.0-abc/toolkit/requirements-node.txt",
        "package": "vllm==0.16.0",
        "no_deps": False,
        "wheelhouse": "/opt/s/wheelhouse",
        "installer": "uv",
        "tools_dir": "/opt/s/tools",
    }
    sandbox = steps.install_args(
        knobs(specdeploy_vllm_install_dependencies=False, specdeploy_node_wheelhouse="",
              specdeploy_venv_installer="pip")
    )  # fmt: skip
    assert (sandbox["no_deps"], sandbox["wheelhouse"], sandbox["installer"]) == (True, "", "pip")


def test_link_and_record_name_the_same_release_and_wheelhouse() -> None:
    linked, recorded = steps.venv_args(knobs(), "linked"), steps.venv_args(knobs(), "recorded")
    assert linked.pop("state") == "linked" and recorded.pop("state") == "recorded"
    assert (
        linked
        == recorded
        == {
            "root": "/opt/s",
            "release_id": "0.16.0-abc",
            "vllm_version": "0.16.0",
            "python": "/usr/bin/python3",
            "requirements": "/opt/s/releases/0.16.0-abc/toolkit/requirements-node.txt",
            "wheelhouse": "/opt/s/wheelhouse",
        }
    )


@pytest.mark.parametrize(("engine", "vllm"), [(None, True), ("vllm", True), ("sglang", False)])
def test_only_a_vllm_release_links_or_records(engine: str | None, vllm: bool) -> None:
    release = dict(RELEASE) if engine is None else dict(RELEASE, engine=engine)
    assert steps.is_vllm(release) is vllm


class FakeAction(ActionModule):
    """The action's step order, with the node's modules answered from a table."""

    def __init__(self, answers: dict[str, dict]) -> None:  # no connection, no task
        self.answers = answers
        self.calls: list[tuple[str, dict]] = []

    def _execute_module(self, module_name=None, module_args=None, task_vars=None, **_):
        self.calls.append((module_name, module_args))
        key = module_name + ("/" + module_args["state"] if "state" in module_args else "")
        key = key if key in self.answers else f"{module_name}#{len(self.calls)}"
        return dict(self.answers.get(key, {"changed": False}))


def called(action: FakeAction) -> list[str]:
    return [
        m.rsplit(".", 1)[-1] + ("/" + a["state"] if "state" in a else "") for m, a in action.calls
    ]


def test_a_venv_without_a_donor_is_installed_recorded_and_compiled() -> None:
    installed = {"changed": True, "installer": "pip", "installer_note": "no wheelhouse to take uv"}
    action = FakeAction({"specdeploy.toolkit.release_venv_install#2": installed})
    result = action._build({}, knobs(), {})
    assert called(action) == [
        "release_venv/linked", "release_venv_install", "release_venv/recorded", "release_bytecode",
    ]  # fmt: skip
    assert action.calls[1][1] == steps.install_args(knobs())
    assert result["changed"] is True and result["linked"] is False
    assert result["steps"] == {"link": False, "install": True, "record": False, "bytecode": False}
    assert result["installer"] == "pip"
    assert result["msg"].endswith("(by pip); pip, not uv: no wheelhouse to take uv")


def test_a_linked_venv_installs_nothing_and_is_still_compiled() -> None:
    action = FakeAction({"specdeploy.toolkit.release_venv/linked": {"changed": True}})
    result = action._build({}, knobs(), {})
    assert called(action) == ["release_venv/linked", "release_bytecode"]
    assert result["changed"] is True and result["linked"] is True


def test_an_sglang_release_is_installed_never_linked_nor_recorded() -> None:
    release = dict(RELEASE, engine="sglang", package="sglang==0.5.0")
    action = FakeAction({})
    result = action._build({}, knobs(specdeploy_release=release), {})
    assert called(action) == ["release_venv_install", "release_bytecode"]
    assert action.calls[0][1]["package"] == "sglang==0.5.0"
    assert result["changed"] is False


def test_the_first_failed_step_ends_the_task_with_its_own_result() -> None:
    failed = {"failed": True, "msg": "No space left on device", "stderr": "OSError"}
    action = FakeAction({"specdeploy.toolkit.release_venv_install#2": failed})
    result = action._build({}, knobs(), {})
    assert called(action) == ["release_venv/linked", "release_venv_install"]  # nothing after it
    assert result["failed"] is True and result["msg"] == "No space left on device"
    assert result["stderr"] == "OSError" and result["step"] == "install"


def test_the_record_step_reuses_the_wheel_digest_the_link_step_took() -> None:
    """The vLLM wheel is 0.5 GB: the build reads it once, not once per step."""
    digest = "ab12  vllm-0.16.0-cp38-abi3-manylinux1_x86_64.whl"
    link = {"changed": False, "reason": "no finished release of this vLLM wheel", "wheel": digest}
    action = FakeAction({"specdeploy.toolkit.release_venv/linked": link})
    action._build({}, knobs(), {})
    record = next(a for m, a in action.calls if a.get("state") == "recorded")
    assert record["wheel"] == digest
    # no digest from the link step (no release to compare with): the record step takes it
    action = FakeAction({})
    action._build({}, knobs(), {})
    record = next(a for m, a in action.calls if a.get("state") == "recorded")
    assert "wheel" not in record
