from __future__ import annotations

import os

import numpy as np
import pytest

from tfthroughput._validation import check_positive_int, check_writable_folder


@pytest.mark.parametrize("value", [1, 7, np.int64(3)])
def test_positive_ints_pass_and_come_back_as_plain_ints(value):
    result = check_positive_int("size", value)
    assert result == value
    assert type(result) is int


def test_none_passes_only_when_allowed():
    assert check_positive_int("size", None, allow_none=True) is None
    with pytest.raises(TypeError, match=r"`size` must be a positive int\. Received: size=None"):
        check_positive_int("size", None)


@pytest.mark.parametrize(
    ("value", "error"),
    [(0, ValueError), (-3, ValueError), (2.0, TypeError), (True, TypeError), ("4", TypeError)],
)
def test_bad_values_name_the_argument_and_value(value, error):
    with pytest.raises(error, match=f"Received: size={value!r}"):
        check_positive_int("size", value, allow_none=True, also="(examples)")
    with pytest.raises(error, match=r"must be a positive int or None \(examples\)"):
        check_positive_int("size", value, allow_none=True, also="(examples)")


def test_writable_folder_is_created_and_left_empty(tmp_path):
    folder = tmp_path / "runs" / "a"
    assert check_writable_folder("log_dir", folder) == str(folder)
    assert folder.is_dir()
    assert os.listdir(folder) == []  # the write probe leaves nothing behind
    assert check_writable_folder("log_dir", str(folder)) == str(folder)  # existing: fine


def test_folder_under_a_regular_file_is_refused_with_the_reason(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(
        ValueError,
        match=r"`--log-dir` must be a folder this process can create and write to\. "
        rf"Received: --log-dir='{blocker}/x' \(\[Errno 20\] Not a directory",
    ):
        check_writable_folder("--log-dir", blocker / "x")
    with pytest.raises(ValueError, match=r"\[Errno 17\] File exists"):
        check_writable_folder("log_dir", blocker)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only folder")
def test_read_only_folder_is_refused(tmp_path):
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(ValueError, match=r"Permission denied"):
            check_writable_folder("log_dir", folder)
    finally:
        folder.chmod(0o700)


def test_folder_must_be_a_path():
    with pytest.raises(TypeError, match="Received: log_dir=3"):
        check_writable_folder("log_dir", 3)
