"""The node's copy of the wheelhouse (plugins/filter/wheelhouse.py): which wheels a build ships."""

from __future__ import annotations

from ansible_collections.specdeploy.toolkit.plugins.filter import wheelhouse

WANTED = {"vllm-0.16.0-py3-none-any.whl": "aa", "numpy-2.0-cp311.whl": "bb"}


def test_a_node_without_a_copy_lacks_every_wheel() -> None:
    assert wheelhouse.wheels_lacking(wheelhouse.sha256sums_parse(""), WANTED) == sorted(WANTED)
    assert wheelhouse.wheels_lacking(wheelhouse.sha256sums_parse(None), WANTED) == sorted(WANTED)


def test_a_wheel_with_another_digest_is_shipped_again_and_torn_lines_are_ignored() -> None:
    text = "aa  vllm-0.16.0-py3-none-any.whl\nzz  numpy-2.0-cp311.whl\ntorn-line\n\n"
    held = wheelhouse.sha256sums_parse(text)
    assert held == {"vllm-0.16.0-py3-none-any.whl": "aa", "numpy-2.0-cp311.whl": "zz"}
    assert wheelhouse.wheels_lacking(held, WANTED) == ["numpy-2.0-cp311.whl"]


def test_the_record_reads_back_as_what_it_was_written_from() -> None:
    text = wheelhouse.sha256sums_text(WANTED)
    assert text == "bb  numpy-2.0-cp311.whl\naa  vllm-0.16.0-py3-none-any.whl\n"
    assert wheelhouse.sha256sums_parse(text) == WANTED
    assert wheelhouse.wheels_lacking(wheelhouse.sha256sums_parse(text), WANTED) == []
