"""configure_gpus: real on this GPU-less machine, and against a fake tf.config with GPUs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import tensorflow as tf

from tfthroughput.precision.gpu_configuration import (
    GPUConfiguration,
    GPUsAlreadyInitializedError,
    _configure,
    _translate,
    configure_gpus,
)

_INITIALISED = "Physical devices cannot be modified after being initialized"


class FakeConfig:
    """The slice of ``tf.config`` that configure_gpus uses, recording every call."""

    LogicalDeviceConfiguration = tf.config.LogicalDeviceConfiguration

    def __init__(self, num_gpus: int, error: RuntimeError | None = None):
        self.gpus = [
            tf.config.PhysicalDevice(name=f"/physical_device:GPU:{i}", device_type="GPU")
            for i in range(num_gpus)
        ]
        self.calls: list[tuple] = []
        self.error = error
        self.experimental = SimpleNamespace(set_memory_growth=self._set_memory_growth)

    def list_physical_devices(self, device_type):
        assert device_type == "GPU"
        return list(self.gpus)

    def set_visible_devices(self, devices, device_type):
        self.calls.append(("visible", tuple(d.name[-1] for d in devices), device_type))

    def set_logical_device_configuration(self, device, configs):
        self.calls.append(("limit", device.name[-1], configs[0].memory_limit))

    def _set_memory_growth(self, device, enable):
        if self.error is not None:
            raise self.error
        self.calls.append(("growth", device.name[-1], enable))


def _run(config, memory_growth=True, memory_limit_mib=None, visible=None):
    return _configure(
        config, memory_growth=memory_growth, memory_limit_mib=memory_limit_mib, visible=visible
    )


def test_no_gpu_is_safe_and_says_so():
    result = configure_gpus()
    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this machine has a GPU")
    assert result == GPUConfiguration((), (), ())
    assert str(result) == "no GPU visible to TensorFlow: nothing configured"
    # Asking for GPU 0 or a limit without any GPU is harmless, too.
    assert configure_gpus(memory_limit_mib=1024, visible=[0]) == GPUConfiguration((), (), ())


def test_memory_growth_on_every_gpu():
    config = FakeConfig(2)
    result = _run(config)
    assert config.calls == [("growth", "0", True), ("growth", "1", True)]
    assert result.visible == ("/physical_device:GPU:0", "/physical_device:GPU:1")
    assert result.memory_growth == result.visible
    assert result.memory_limits_mib == ()


def test_visible_subset_is_set_first():
    config = FakeConfig(3)
    result = _run(config, visible=[2, 0])
    assert config.calls == [
        ("visible", ("0", "2"), "GPU"),
        ("growth", "0", True),
        ("growth", "2", True),
    ]
    assert result.visible == ("/physical_device:GPU:0", "/physical_device:GPU:2")


def test_memory_limits_replace_growth_on_those_gpus():
    config = FakeConfig(2)
    result = _run(config, memory_limit_mib={1: 4096})
    assert config.calls == [("growth", "0", True), ("limit", "1", 4096)]
    assert result.memory_limits_mib == (("/physical_device:GPU:1", 4096),)
    assert str(result) == (
        "2 GPU(s) visible: /physical_device:GPU:0, /physical_device:GPU:1\n"
        "memory growth on: /physical_device:GPU:0\n"
        "memory limit 4096 MiB: /physical_device:GPU:1"
    )
    config = FakeConfig(2)
    _run(config, memory_growth=False, memory_limit_mib=2048)
    assert config.calls == [("limit", "0", 2048), ("limit", "1", 2048)]


def test_no_growth_requested_changes_nothing():
    config = FakeConfig(1)
    assert _run(config, memory_growth=False).memory_growth == ()
    assert config.calls == []


def test_arguments_are_validated():
    with pytest.raises(ValueError, match=r"in \[0, 2\).*Received: visible=\[2\]"):
        _run(FakeConfig(2), visible=[2])
    with pytest.raises(TypeError, match="Received: visible='0'"):
        _run(FakeConfig(2), visible="0")
    with pytest.raises(ValueError, match="Received: memory_limit_mib=0"):
        _run(FakeConfig(2), memory_limit_mib=0)
    with pytest.raises(ValueError, match="names GPU 1, which is not visible"):
        _run(FakeConfig(2), visible=[0], memory_limit_mib={1: 512})
    with pytest.raises(TypeError, match="Received: memory_growth='yes'"):
        _run(FakeConfig(2), memory_growth="yes")


# Each mistake, with the error it must raise on any machine, GPUs or not.
BAD_ARGUMENTS = [
    ({"memory_limit_mib": -5}, ValueError, "Received: memory_limit_mib=-5"),
    ({"memory_limit_mib": 0}, ValueError, "Received: memory_limit_mib=0"),
    ({"memory_limit_mib": {0: -1}}, ValueError, r"Received: memory_limit_mib=\{0: -1\}"),
    ({"memory_limit_mib": "1024"}, TypeError, "Received: memory_limit_mib='1024'"),
    ({"memory_limit_mib": 1.5}, TypeError, r"Received: memory_limit_mib=1\.5"),
    ({"memory_limit_mib": True}, TypeError, "Received: memory_limit_mib=True"),
    ({"memory_limit_mib": {0: "512"}}, TypeError, "Received: memory_limit_mib="),
    ({"memory_limit_mib": {"0": 512}}, TypeError, "must use int GPU indices"),
    ({"memory_limit_mib": {-1: 512}}, ValueError, "indices of 0 or more"),
    ({"visible": [-1]}, ValueError, r"indices of 0 or more\. Received: visible=\[-1\]"),
    ({"visible": [0.0]}, TypeError, r"Received: visible=\[0\.0\]"),
    ({"visible": [True]}, TypeError, "must use int GPU indices"),
    ({"visible": 0}, TypeError, "Received: visible=0"),
    ({"memory_growth": 1}, TypeError, "Received: memory_growth=1"),
]


@pytest.mark.parametrize("num_gpus", [0, 2])
@pytest.mark.parametrize(("kwargs", "error", "match"), BAD_ARGUMENTS)
def test_mistakes_fail_with_or_without_gpus(num_gpus, kwargs, error, match):
    with pytest.raises(error, match=match):
        _run(FakeConfig(num_gpus), **kwargs)


@pytest.mark.parametrize(("kwargs", "error", "match"), BAD_ARGUMENTS)
def test_mistakes_fail_on_this_machine(kwargs, error, match):
    with pytest.raises(error, match=match):
        configure_gpus(**kwargs)


def test_already_initialised_error_is_translated():
    config = FakeConfig(1, error=RuntimeError(_INITIALISED))
    with pytest.raises(GPUsAlreadyInitializedError, match="restart the kernel") as info:
        _run(config)
    assert isinstance(info.value.__cause__, RuntimeError)
    other = RuntimeError("something else")
    with pytest.raises(RuntimeError, match="something else"):
        _run(FakeConfig(1, error=other))


def test_translation_matches_what_tensorflow_really_raises():
    tf.constant(1.0)  # make sure the runtime has created its devices
    cpu = tf.config.list_physical_devices("CPU")[0]
    with pytest.raises(RuntimeError) as info:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2
        )
    assert isinstance(_translate(info.value), GPUsAlreadyInitializedError)
