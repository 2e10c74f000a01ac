"""The one JSONL reader behind the prompt sets of acceptance, loadgen and the drafter pipeline."""

from __future__ import annotations

import pytest

from specdeploy.node import jsontext
from specdeploy.node.validation import acceptance, loadgen


def test_objects_come_with_their_line_numbers_and_blank_lines_are_skipped(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "a"}\n\n  \n{"prompt": "b"}\n')
    assert jsontext.read_objects(f) == [(1, {"prompt": "a"}), (4, {"prompt": "b"})]


@pytest.mark.parametrize(
    ("line", "reason"),
    [("{oops", r"p.jsonl:2: not JSON \("), ("[1, 2]", "p.jsonl:2: not a JSON object")],
)
def test_a_bad_line_is_named_alike_by_every_prompt_reader(tmp_path, line, reason):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "fine"}\n' + line + "\n")
    with pytest.raises(ValueError, match=reason):
        jsontext.read_objects(f)
    with pytest.raises(ValueError, match=reason):
        acceptance.load_prompts(f)
    with pytest.raises(loadgen.LoadgenError, match="prompts file .*" + reason):
        loadgen.load_prompts_file(f)


def test_a_missing_file_is_an_oserror(tmp_path):
    with pytest.raises(FileNotFoundError):
        jsontext.read_objects(tmp_path / "absent.jsonl")
