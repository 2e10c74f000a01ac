"""The model directory's cheap content fingerprint (plugins/module_utils/model_fingerprint.py):
the node probe reports it and the release plan puts it into the release id, so model files
changed under the same path make a new release."""

from __future__ import annotations

import os
from pathlib import Path

from ansible_collections.specdeploy.toolkit.plugins.module_utils import (
    model_fingerprint as mf,
)


def model(tmp_path: Path, name: str = "m") -> Path:
    directory = tmp_path / name
    directory.mkdir()
    (directory / "config.json").write_text('{"model_type": "deepseek_v3"}')
    (directory / "model-00001-of-00001.safetensors").write_bytes(b"\x01" * (mf.WHOLE_MAX + 4096))
    return directory


def test_the_same_files_elsewhere_have_the_same_fingerprint_whatever_their_mtimes(tmp_path):
    first, second = model(tmp_path, "a"), model(tmp_path, "b")
    os.utime(second / "config.json", (1, 1))  # copied to another node at another time
    assert mf.model_fingerprint(str(first)) == mf.model_fingerprint(str(second))
    assert len(mf.model_fingerprint(str(first))) == 16


def test_a_changed_config_a_new_file_or_other_weights_of_the_same_size_change_it(tmp_path):
    directory = model(tmp_path)
    seen = {mf.model_fingerprint(str(directory))}
    (directory / "config.json").write_text('{"model_type": "deepseek_v3", "x": 1}')
    seen.add(mf.model_fingerprint(str(directory)))
    (directory / "tokenizer.json").write_text("{}")
    seen.add(mf.model_fingerprint(str(directory)))
    shard = directory / "model-00001-of-00001.safetensors"
    shard.write_bytes(b"\x02" * shard.stat().st_size)  # a fine-tune: same shapes, other bytes
    seen.add(mf.model_fingerprint(str(directory)))
    assert len(seen) == 4


def test_large_files_are_sampled_not_read_whole(tmp_path, monkeypatch):
    directory = model(tmp_path)
    reads = []
    real_open = open

    class Counting:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def seek(self, offset):
            return self.handle.seek(offset)

        def read(self, size=-1):
            data = self.handle.read(size)
            reads.append(len(data))
            return data

    monkeypatch.setattr(mf, "open", lambda p, m: Counting(real_open(p, m)), raising=False)
    entries = mf.model_files(str(directory))
    shard = next(e for e in entries if e["path"].endswith(".safetensors"))
    assert shard["size"] == mf.WHOLE_MAX + 4096
    assert sum(reads) <= mf.SAMPLES * mf.WINDOW + len('{"model_type": "deepseek_v3"}')


def test_hidden_files_are_left_out_and_no_directory_is_empty(tmp_path):
    directory = model(tmp_path)
    before = mf.model_fingerprint(str(directory))
    (directory / ".cache").mkdir()
    (directory / ".cache" / "download.lock").write_text("x")
    assert mf.model_fingerprint(str(directory)) == before
    assert mf.model_fingerprint(str(tmp_path / "absent")) == ""
