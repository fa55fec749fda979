from __future__ import annotations

import os

import numpy as np
import pytest

from tfthroughput._validation import check_model, check_positive_int, check_writable_folder


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


def _dense(compiled: bool):
    import keras

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)], name="tiny")
    if compiled:
        model.compile(optimizer="sgd", loss="mse")
    return model


def test_one_model_check_names_what_the_user_passed():
    model = _dense(compiled=True)
    assert check_model(model) is model
    assert check_model(model, returned_by="build_model") is model
    with pytest.raises(TypeError, match=r"^`model` must be a keras\.Model\. Received: model=3 of"):
        check_model(3)
    with pytest.raises(
        TypeError, match=r"^`build_model` must return a compiled keras\.Model\. Received: 'x' of"
    ):
        check_model("x", returned_by="build_model")
    with pytest.raises(ValueError, match=r"call model\.compile\(\.\.\.\) first\. .*'tiny'"):
        check_model(_dense(compiled=False))
    with pytest.raises(ValueError, match=r"^`build_model` must return compiled .* inside it"):
        check_model(_dense(compiled=False), returned_by="build_model")


def test_a_model_for_predict_needs_no_compile():
    model = _dense(compiled=False)
    assert check_model(model, compiled=False) is model
    with pytest.raises(TypeError, match=r"^`model` must be a keras\.Model\."):
        check_model(None, compiled=False)
