"""What `pip install tfthroughput` pulls in, as pip sees it in the installed metadata."""

from __future__ import annotations

import configparser
import pathlib
from importlib import metadata

from packaging.requirements import Requirement


def _requirements():
    return [Requirement(text) for text in metadata.requires("tfthroughput") or []]


def test_a_plain_install_never_pulls_tensorflow():
    base = {req.name for req in _requirements() if req.marker is None}
    assert base == {"nvidia-ml-py", "psutil", "tensorboard", "tensorboard-plugin-profile"}


def test_the_tensorflow_extra_brings_a_keras3_tensorflow():
    (tensorflow,) = [
        req
        for req in _requirements()
        if req.marker is not None and req.marker.evaluate({"extra": "tensorflow"})
    ]
    assert tensorflow.name == "tensorflow"
    assert tensorflow.specifier.contains("2.16.0") and not tensorflow.specifier.contains("2.15.1")


def test_the_command_is_installed():
    (script,) = [
        entry
        for entry in metadata.entry_points(group="console_scripts")
        if entry.name == "tfthroughput"
    ]
    assert script.value == "tfthroughput.cli:main"


def test_the_report_extra_brings_matplotlib():
    """Read from setup.cfg: the installed metadata lags until the next `pip install -e`."""
    setup = configparser.ConfigParser()
    setup.read(pathlib.Path(__file__).parents[1] / "setup.cfg")
    report = [Requirement(line) for line in setup["options.extras_require"]["report"].split()]
    assert [req.name for req in report] == ["matplotlib"]
