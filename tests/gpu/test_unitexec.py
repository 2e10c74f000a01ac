"""The GPU driver starts exactly the flags the toolkit renders (runs on the controller, no GPU).

.venv/bin/python -m pytest tests/gpu/test_unitexec.py
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

import unitexec  # noqa: E402

RAN = REPO / "tests" / "fixtures" / "vllm-0.20.2-gpu-tier" / "units"


def test_parse_recorded_units_roundtrip() -> None:
    units = sorted(RAN.glob("*/vllm.service"))
    assert units, "recorded units missing"
    for path in units:
        u = unitexec.parse_unit(path.read_text())
        argv, note = unitexec.substitute_program(u.exec_start, "python3")
        assert argv[:3] == ["python3", "-m", unitexec.VLLM_CLI_MODULE]
        assert argv[3:] == u.exec_start[1:], "only the program may change"
        assert u.exec_start[1] == "serve" and "venv/bin/vllm" in note
        assert unitexec.flag_value(argv, "--port") == "8011"
        assert u.environment_files[0][0].endswith("/config/vllm.env")
        assert u.environment_files[1][1] is True  # the secrets file is optional ("-")
        env = unitexec.parse_env_file((path.parent / "vllm.env").read_text())
        assert env["VLLM_CACHE_ROOT"].startswith(env["XDG_CACHE_HOME"])
        spec = unitexec.flag_value(argv, "--speculative-config")
        assert (spec is not None) == path.parent.name.startswith("spec-")


def test_systemd_quoting_and_escapes() -> None:
    text = (
        "[Unit]\nDescription=x\n[Service]\n"
        'Environment="A=one two" B=3\n'
        'ExecStart=-/v/bin/vllm serve /m --x \'{"k": "50%%"}\' --y $$HOME \\\n'
        "  --z 1\n"
    )
    u = unitexec.parse_unit(text)
    assert u.exec_start == [
        "/v/bin/vllm",
        "serve",
        "/m",
        "--x",
        '{"k": "50%"}',
        "--y",
        "$HOME",
        "--z",
        "1",
    ]
    assert u.environment == {"A": "one two", "B": "3"}
    assert unitexec.substitute_program(["/r/venv/bin/python3", "-m", "x"], "py")[0] == [
        "py",
        "-m",
        "x",
    ]
    with pytest.raises(ValueError):
        unitexec.substitute_program(["/usr/bin/env", "vllm"], "py")
    with pytest.raises(ValueError):
        unitexec.parse_unit("[Service]\nType=exec\n")


def test_env_file_quotes_and_comments() -> None:
    env = unitexec.parse_env_file("# c\n; c\nA=1\nB=\"x y\"\nC='z'\n\n")
    assert env == {"A": "1", "B": "x y", "C": "z"}


@pytest.mark.skipif(
    not (REPO / ".venv" / "bin" / "ansible-playbook").exists()
    or not (REPO / "playbooks" / "render-unit.yml").exists()
    or shutil.which("bash") is None,
    reason="needs the controller venv's ansible-playbook and playbooks/render-unit.yml",
)
def test_rendering_now_gives_the_flags_that_ran(tmp_path: Path) -> None:
    """Rendering again through the toolkit gives the command line the recorded runs used."""
    d = tmp_path / "r"
    d.mkdir()  # render-unit.yml does not create it
    (tmp_path / "etc").mkdir()  # nor the config dir (on a node the gpu_node role does)
    src = RAN / "spec-fa" / "overrides.yml"
    over = tmp_path / "o.yml"
    over.write_text(
        src.read_text()
        + f"specdeploy_root: {tmp_path}/root\nspecdeploy_config_dir: {tmp_path}/etc\n"
    )
    subprocess.run(
        [
            str(REPO / ".venv/bin/ansible-playbook"),
            "playbooks/render-unit.yml",
            "-e",
            f"render_dir={d}",
            "-e",
            f"@{over}",
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=300,
    )
    now = unitexec.parse_unit((d / "vllm.service").read_text()).exec_start
    ran = unitexec.parse_unit((RAN / "spec-fa" / "vllm.service").read_text()).exec_start
    assert now[1:] == ran[1:], shlex.join(now)

    # The compile caches are keyed by the code fingerprint: render-unit.yml now plans a real
    # release (the recorded runs used a fixed "gpu-tier" key), so compare with the key masked.
    def env(path: Path) -> dict[str, str]:
        return {
            k: re.sub(r"/compile/[^/]+", "/compile/<fingerprint>", v)
            for k, v in unitexec.parse_env_file(path.read_text()).items()
        }

    assert env(d / "vllm.env") == env(RAN / "spec-fa" / "vllm.env")
