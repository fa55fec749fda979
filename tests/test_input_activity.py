from __future__ import annotations

import threading
import time

import tensorflow as tf

from tfthroughput.monitor.input_activity import InputActivitySource


def test_reads_100_while_a_py_function_runs_and_0_otherwise():
    source = InputActivitySource()
    started, release = threading.Event(), threading.Event()

    def wait_in_python(value):
        started.set()
        release.wait(10)
        return value

    # The way tf.data runs it: a tf.py_function inside a pipeline, on tf.data's own thread.
    pipeline = tf.data.Dataset.range(1).map(lambda i: tf.py_function(wait_in_python, [i], tf.int64))
    consumer = threading.Thread(target=lambda: list(pipeline))
    assert source.read() == {"python_percent": 0.0}
    consumer.start()
    try:
        assert started.wait(10)
        assert source.read() == {"python_percent": 100.0}
    finally:
        release.set()
        consumer.join(10)
    deadline = time.monotonic() + 5
    while source.read()["python_percent"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert source.read() == {"python_percent": 0.0}
    source.close()
    assert source.name == "input"


def test_the_reading_thread_itself_does_not_count():
    readings = []
    tf.py_function(lambda: readings.append(InputActivitySource().read()) or 0, [], tf.int64)
    assert readings == [{"python_percent": 0.0}]


def test_a_stack_link_that_is_not_a_frame_reads_as_not_busy():
    from tfthroughput.monitor.input_activity import _inside_script_ops

    assert _inside_script_ops(object()) is False
