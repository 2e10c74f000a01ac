"""The pure-Python unified-diff engine of specdeploy.node.patching.patches, against GNU diff's
output."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from specdeploy.node.patching.patches import PatchError, apply_hunks, parse_unified_diff

CASES = {
    "edit-middle": ("a\nb\nc\nd\ne\nf\ng\nh\n", "a\nb\nc\nD\nD2\ne\nf\ng\nh\n"),
    "insert-at-start": ("x\ny\n", "new\nx\ny\n"),
    "append-at-end": ("x\ny\n", "x\ny\nz\n"),
    "no-newline-at-eof": ("x\ny", "x\ny\nz"),
    "delete-all-but-one": ("1\n2\n3\n4\n", "1\n"),
    "two-hunks": (
        "".join(f"l{i}\n" for i in range(40)),
        "".join(f"l{i}\n" if i not in (3, 30) else f"L{i}\n" for i in range(40)),
    ),
}


def gnu_diff(tmp: Path, old: str, new: str) -> str:
    (tmp / "a").write_text(old)
    (tmp / "b").write_text(new)
    proc = subprocess.run(
        ["diff", "-u", "--label", "a/vllm/x.py", "--label", "b/vllm/x.py", "a", "b"],
        cwd=tmp,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    return "# a header line\n# another\n" + proc.stdout


@pytest.mark.skipif(shutil.which("diff") is None, reason="no diff binary")
@pytest.mark.parametrize("case", sorted(CASES))
def test_apply_and_reverse_round_trip(tmp_path: Path, case: str) -> None:
    old, new = CASES[case]
    (fp,) = parse_unified_diff(gnu_diff(tmp_path, old, new))
    assert fp.target(1) == "vllm/x.py"
    assert apply_hunks(old, fp) == new
    assert apply_hunks(new, fp, reverse=True) == old


@pytest.mark.skipif(shutil.which("diff") is None, reason="no diff binary")
def test_context_mismatch_is_refused(tmp_path: Path) -> None:
    old, new = CASES["edit-middle"]
    (fp,) = parse_unified_diff(gnu_diff(tmp_path, old, new))
    with pytest.raises(PatchError, match="does not match"):
        apply_hunks(old.replace("c\n", "C\n"), fp)
    with pytest.raises(PatchError, match="does not match"):
        apply_hunks(new, fp)  # applying twice is not silently accepted


def test_text_without_a_diff_is_refused() -> None:
    with pytest.raises(PatchError):
        parse_unified_diff("# only a header\n")
