"""What build_pipeline reads: file lists are checked when the pipeline is built."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tfthroughput.data.pipeline import build_pipeline


def _write(folder, names):
    paths = []
    for name in names:
        path = str(folder / name)
        with tf.io.TFRecordWriter(path) as writer:
            writer.write(name.encode())
        paths.append(path)
    return paths


def test_a_missing_file_in_a_list_fails_at_build_naming_it(tmp_path):
    paths = _write(tmp_path, ["a.tfrecord", "b.tfrecord"])
    missing = str(tmp_path / "gone.tfrecord")
    with pytest.raises(ValueError) as info:
        build_pipeline([paths[0], missing, paths[1]], batch_size=None)
    assert str(info.value).startswith(f"`source` lists 1 file that does not exist: {missing!r}.")
    # Many missing files: the first three are named, the rest counted.
    gone = [str(tmp_path / f"gone{i}.tfrecord") for i in range(5)]
    with pytest.raises(ValueError, match=r"lists 5 files that do not exist: .*gone2.* and 2 more"):
        build_pipeline(paths + gone, batch_size=None)


def test_a_complete_list_of_files_is_read(tmp_path):
    paths = _write(tmp_path, ["a.tfrecord", "b.tfrecord"])
    records = build_pipeline(paths, batch_size=None, deterministic=True, parallel_reads=1)
    assert sorted(r.numpy() for r in records) == [b"a.tfrecord", b"b.tfrecord"]


def test_in_memory_strings_are_not_taken_for_missing_files():
    texts = ["the cat sat", "on the mat"]
    with pytest.raises(ValueError) as info:
        build_pipeline(texts, batch_size=None)
    message = str(info.value)
    assert "none of its 2 strings is an existing file" in message
    assert "pass an array or tensor (e.g. `np.array(texts)`)" in message
    assert "Received: source=['the cat sat', 'on the mat']" in message
    # As the message says: an array of strings is in-memory data.
    batches = build_pipeline(np.array(texts), batch_size=2, deterministic=True)
    assert [b.numpy().tolist() for b in batches] == [[b"the cat sat", b"on the mat"]]
