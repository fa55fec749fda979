"""`tfthroughput tune MODULE:FUNCTION`: the workload contract and one real run of the command."""

from __future__ import annotations

import json
import textwrap

import pytest

from tfthroughput.cli import main
from tfthroughput.cli.workload import load_workload

WORKLOAD = textwrap.dedent(
    """
    import keras
    import numpy as np

    def build():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
        return model

    def as_dict():
        x = np.ones((64, 4), "float32")
        return {"build_model": build, "data": (x, x[:, :1]), "batch_size": 8}

    def as_tuple():
        return build, "data", 8

    def under_strategy():
        import tensorflow as tf

        return {**as_dict(), "strategy": tf.distribute.OneDeviceStrategy("/cpu:0")}

    def wrong():
        return build

    def for_predict():
        plain = lambda: keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        return plain, np.ones((64, 4), "float32"), 8
    """
)


@pytest.fixture
def workload_file(tmp_path):
    path = tmp_path / "my_workload.py"
    path.write_text(WORKLOAD)
    return path


def test_the_contract_accepts_a_dict_or_a_tuple(workload_file):
    assert sorted(load_workload(f"{workload_file}:as_dict")) == [
        "batch_size",
        "build_model",
        "data",
    ]
    assert load_workload(f"{workload_file}:as_tuple")["batch_size"] == 8


def test_the_contract_names_what_is_wrong(workload_file):
    with pytest.raises(ValueError, match=r"`workload` must be MODULE:FUNCTION"):
        load_workload("no_colon")
    with pytest.raises(ValueError, match=r"names no function 'missing'"):
        load_workload(f"{workload_file}:missing")
    with pytest.raises(TypeError, match=r"must return a dict with 'build_model' and 'data'"):
        load_workload(f"{workload_file}:wrong")


def test_a_wrong_return_is_described_without_the_users_values(tmp_path):
    path = tmp_path / "arrays_only.py"
    path.write_text(
        "import numpy as np\ndef arrays():\n    return {'data': np.full((4, 3), 0.123456)}\n"
    )
    with pytest.raises(TypeError) as raised:
        load_workload(f"{path}:arrays")
    assert str(raised.value).endswith("Received: a dict with keys ['data']")
    assert "0.123" not in str(raised.value)


def test_the_command_prints_the_table_and_writes_json(workload_file, tmp_path, capsys):
    out = tmp_path / "tune.json"
    status = main(
        ["tune", f"{workload_file}:as_dict", "--budget", "2", "--steps", "8", "--json", str(out)]
    )

    printed, said = capsys.readouterr()
    assert status == 0, said
    assert printed.splitlines()[0].startswith("setting")
    assert "as given: steps_per_execution=1" in printed and "chosen:" in printed
    assert json.loads(out.read_text())["baseline"]["batch_size"] == 8


def test_the_inference_flag_tunes_predict(workload_file, tmp_path, capsys):
    out = tmp_path / "tune.json"
    argv = ["tune", "--inference", f"{workload_file}:for_predict", "--budget", "2"]
    status = main(argv + ["--steps", "4", "--max-batch-latency-ms", "1000", "--json", str(out)])

    printed = capsys.readouterr().out
    assert status == 0, printed
    assert printed.splitlines()[0].startswith("predict setting")
    assert "as given: steps_per_execution=1, XLA off, float32, batch 8" in printed
    assert "latency limit 1000 ms per batch (p95)" in printed
    written = json.loads(out.read_text())
    assert (written["mode"], written["max_batch_latency_ms"]) == ("inference", 1000.0)
    # The limit is checked against the given batch's own latency first: it is measured.
    assert written["trials"][0]["latency_p95_ms"] > 0


def test_a_latency_limit_without_inference_is_refused(workload_file, capsys):
    argv = ["tune", f"{workload_file}:as_dict", "--max-batch-latency-ms", "5"]
    assert main(argv) == 1
    assert capsys.readouterr().err.strip() == (
        "tfthroughput tune: error: --max-batch-latency-ms applies to --inference only"
    )


def test_a_workload_may_give_the_strategy_to_tune_under(workload_file, tmp_path, capsys):
    pytest.importorskip("tensorflow")
    out = tmp_path / "tune.json"
    arguments = ["--budget", "2", "--steps", "8", "--json", str(out)]
    status = main(["tune", f"{workload_file}:under_strategy", *arguments])
    printed, said = capsys.readouterr()
    assert status == 0, said
    assert "strategy: OneDeviceStrategy over 1 replica: global batch 8 (8 per replica)" in printed
    assert json.loads(out.read_text())["distribution"]["replicas"] == 1


def test_a_bad_workload_is_one_line_on_stderr(capsys):
    assert main(["tune", "nothing_here"]) == 1
    assert capsys.readouterr().err.strip() == (
        "tfthroughput tune: error: `workload` must be MODULE:FUNCTION, e.g. "
        "train.py:tune_inputs or my_project.train:tune_inputs. Received: workload='nothing_here'"
    )
