"""The sandbox nodes' wheelhouse: vLLM's wheels without kernels, everything else as it came."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import zipfile
from pathlib import Path

import pytest
from testbed.sandbox import node_wheelhouse

FILES = {
    "vllm/__init__.py": b"__version__ = '0.16.0'\n",
    "vllm/model_executor/models/deepseek_v2.py": b"class DeepseekV2ForCausalLM: ...\n" * 50,
    "vllm/_C.abi3.so": b"\x7fELF" + os.urandom(4096),
    "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so": b"\x7fELF" + os.urandom(2048),
    # a name with a comma: RECORD is CSV and must quote it (uv refuses the wheel otherwise)
    "vllm/third_party/a,b.py": b"x = 1\n",
    "vllm-0.16.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: vllm\nVersion: 0.16.0\n",
}


def record_of(files: dict[str, bytes], dist_info: str) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow([name, f"sha256={digest}", len(data)])
    writer.writerow([f"{dist_info}/RECORD", "", ""])
    return out.getvalue()


def make_wheel(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr("vllm-0.16.0.dist-info/RECORD", record_of(files, "vllm-0.16.0.dist-info"))
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEPLOY_CACHE", str(tmp_path))
    source = tmp_path / "wheelhouse"
    source.mkdir()
    make_wheel(source / "vllm-0.16.0-cp38-abi3-manylinux_2_31_x86_64.whl", FILES)
    (source / "uv-0.13.9-py3-none-any.whl").write_bytes(b"not really a wheel, linked as is")
    return source


def members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as wheel:
        return {info.filename: wheel.read(info) for info in wheel.infolist()}


def test_vllm_wheel_keeps_every_file_but_its_kernels(cache):
    target = node_wheelhouse.ensure_node_wheelhouse()
    derived = members(target / "vllm-0.16.0-cp38-abi3-manylinux_2_31_x86_64.whl")
    for name, data in FILES.items():
        assert derived[name] == (b"" if name.endswith(".so") else data), name
    # RECORD says what the wheel now holds, so an installer that checks it accepts the wheel
    rows = list(csv.reader(io.StringIO(derived["vllm-0.16.0.dist-info/RECORD"].decode())))
    assert (
        rows[:-1]
        == list(
            csv.reader(
                io.StringIO(
                    record_of({name: derived[name] for name in FILES}, "vllm-0.16.0.dist-info")
                )
            )
        )[:-1]
    )
    assert [row[0] for row in rows if "," in row[0]] == ["vllm/third_party/a,b.py"]
    # the other wheels are the very same files
    assert os.path.samefile(
        target / "uv-0.13.9-py3-none-any.whl", cache / "uv-0.13.9-py3-none-any.whl"
    )
    assert "empty" in (target / "README").read_text()


def test_up_to_date_is_left_alone_and_a_changed_source_is_derived_again(cache):
    target = node_wheelhouse.ensure_node_wheelhouse()
    wheel = target / "vllm-0.16.0-cp38-abi3-manylinux_2_31_x86_64.whl"
    first = wheel.stat()
    node_wheelhouse.ensure_node_wheelhouse()
    assert wheel.stat().st_mtime_ns == first.st_mtime_ns and wheel.stat().st_ino == first.st_ino
    changed = dict(FILES, **{"vllm/__init__.py": b"__version__ = '0.16.0'  # a local hotfix\n"})
    make_wheel(cache / wheel.name, changed)
    node_wheelhouse.ensure_node_wheelhouse()
    assert members(wheel)["vllm/__init__.py"].endswith(b"# a local hotfix\n")


def test_a_wheel_gone_from_the_source_goes_from_the_nodes(cache):
    target = node_wheelhouse.ensure_node_wheelhouse()
    (cache / "uv-0.13.9-py3-none-any.whl").unlink()
    node_wheelhouse.ensure_node_wheelhouse()
    assert not (target / "uv-0.13.9-py3-none-any.whl").exists()
    assert (target / "vllm-0.16.0-cp38-abi3-manylinux_2_31_x86_64.whl").is_file()


def test_a_wheel_without_record_is_refused_and_leaves_nothing_half_written(cache):
    broken = cache / "vllm-0.17.1-cp38-abi3-manylinux_2_31_x86_64.whl"
    with zipfile.ZipFile(broken, "w") as wheel:
        wheel.writestr("vllm/__init__.py", b"")
    with pytest.raises(node_wheelhouse.SandboxError, match=r"no \.dist-info/RECORD"):
        node_wheelhouse.ensure_node_wheelhouse()
    assert not list(node_wheelhouse.node_wheelhouse().glob("*vllm-0.17.1*"))


def test_a_corrupt_wheel_is_one_line_naming_it(cache):
    corrupt = cache / "vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    corrupt.write_bytes(b"<html>a proxy's error page, not a zip</html>")
    with pytest.raises(node_wheelhouse.SandboxError, match="not a readable wheel") as raised:
        node_wheelhouse.ensure_node_wheelhouse()
    assert corrupt.name in str(raised.value) and "\n" not in str(raised.value)
    assert not list(node_wheelhouse.node_wheelhouse().glob("*vllm-0.26.0*"))


def test_the_real_vllm_wheel_loses_only_its_kernels(tmp_path) -> None:
    # The wheel `make setup` downloaded (make test runs it first), derived into tmp_path.
    real = sorted((node_wheelhouse.source_wheelhouse()).glob("vllm-*.whl"))
    if not real:
        pytest.skip("no vLLM wheel in the cache: `make prefetch` downloads them")
    with zipfile.ZipFile(real[0]) as wheel:
        kernels = [i.filename for i in wheel.infolist() if i.filename.endswith(".so")]
        kept = {i.filename: wheel.read(i) for i in wheel.infolist()
                if not i.filename.endswith((".so", "/RECORD"))}  # fmt: skip
    derived = tmp_path / real[0].name
    node_wheelhouse.without_kernels(real[0], derived)
    got = members(derived)
    assert kernels and all(got[name] == b"" for name in kernels)
    assert {name: got[name] for name in kept} == kept  # the Python files, byte for byte
    assert set(got) == set(kept) | set(kernels) | {n for n in got if n.endswith("/RECORD")}


def test_make_bench_can_ask_for_the_real_wheels_and_a_typo_is_refused(cache, monkeypatch):
    monkeypatch.setenv(node_wheelhouse.SWITCH, "real")
    assert node_wheelhouse.ensure_node_wheelhouse() == cache  # the real ones, nothing derived
    assert not (cache.parent / "node-wheelhouse").exists()
    monkeypatch.setenv(node_wheelhouse.SWITCH, "slim")
    with pytest.raises(node_wheelhouse.SandboxError, match="kernelless or real, not 'slim'"):
        node_wheelhouse.node_wheelhouse()


def test_a_wheel_cut_short_is_one_line_and_leaves_nothing_half_written(cache):
    whole = (cache / "vllm-0.16.0-cp38-abi3-manylinux_2_31_x86_64.whl").read_bytes()
    cut = cache / "vllm-0.17.1-cp38-abi3-manylinux_2_31_x86_64.whl"
    # the central directory intact, a member's compressed bytes overwritten
    cut.write_bytes(whole[:60] + b"\xff" * 200 + whole[260:])
    with pytest.raises(node_wheelhouse.SandboxError, match="not a readable wheel"):
        node_wheelhouse.ensure_node_wheelhouse()
    assert not list(node_wheelhouse.node_wheelhouse().glob("*vllm-0.17.1*"))
