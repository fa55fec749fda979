from __future__ import annotations

from fakes import FakeSource

from tfthroughput.hardware.utilization import gpu_utilization


def test_mean_over_every_gpu_and_sample_is_available_after_the_block():
    sources = [
        FakeSource("gpu0", {"utilization_percent": 30.0}),
        FakeSource("gpu1", {"utilization_percent": 50.0}),
    ]
    with gpu_utilization(0.05, sources=sources) as mean_utilization:
        assert mean_utilization() is None  # not known before the block ends
    assert mean_utilization() == 40.0
    assert all(source.closed for source in sources)


def test_sm_activity_is_the_mean_over_the_gpus_that_report_it():
    sources = [
        FakeSource("gpu0", {"utilization_percent": 23.6, "sm_activity_percent": 0.5}),
        FakeSource("gpu1", {"utilization_percent": 47.8, "sm_activity_percent": 27.5}),
        FakeSource("gpu2", {"utilization_percent": 95.5}),  # no GPM (before Hopper)
    ]
    with gpu_utilization(0.05, sources=sources) as reading:
        assert reading.sm_activity() is None
    assert reading() == (23.6 + 47.8 + 95.5) / 3
    assert reading.sm_activity() == (0.5 + 27.5) / 2


def test_without_gpm_sm_activity_is_none():
    with gpu_utilization(0.05, sources=[FakeSource("gpu0", {"utilization_percent": 30.0})]) as r:
        pass
    assert (r(), r.sm_activity()) == (30.0, None)


def test_without_nvml_it_measures_nothing_and_stays_quiet(recwarn):
    # This machine has no NVML library.
    with gpu_utilization(0.05) as mean_utilization:
        pass
    assert mean_utilization() is None
    assert len(recwarn) == 0


def test_default_sources_read_every_visible_gpu_through_nvml(fake_nvml_dir):
    from fake_nvml import run_json_with_fake_nvml

    out = run_json_with_fake_nvml(
        """
        import time
        from tfthroughput.hardware.utilization import gpu_utilization

        with gpu_utilization(0.05) as mean_utilization:
            time.sleep(0.2)
        emit({"mean": mean_utilization(), "warned": warned()})
        """,
        fake_nvml_dir,
        env={"FAKE_NVML_DEVICE_COUNT": "2"},
    )
    assert out == {"mean": 40.5, "warned": []}  # the fake's GPUs report 40 % and 41 %


def test_default_sources_read_sm_activity_where_gpm_exists_and_stay_quiet_where_not(
    fake_nvml_dir,
):
    from fake_nvml import run_json_with_fake_nvml

    code = """
        import time
        from tfthroughput.hardware.utilization import gpu_utilization

        with gpu_utilization(0.05) as reading:
            time.sleep(0.2)
        emit({"mean": reading(), "sm": reading.sm_activity(), "warned": warned()})
        """
    env = {"FAKE_NVML_DEVICE_COUNT": "2"}
    with_gpm = run_json_with_fake_nvml(
        code, fake_nvml_dir, env={**env, "FAKE_NVML_GPM_SUPPORTED": "1"}
    )
    assert with_gpm == {"mean": 40.5, "sm": 60.5, "warned": []}  # GPM SM_UTIL 60 % and 61 %
    without_gpm = run_json_with_fake_nvml(code, fake_nvml_dir, env=env)
    assert without_gpm == {"mean": 40.5, "sm": None, "warned": []}


def test_diagnose_measures_gpu_utilization_with_it_by_default():
    import inspect

    from tfthroughput.diagnosis.training_diagnosis import diagnose

    default = inspect.signature(diagnose).parameters["utilization_probe"].default
    assert default is gpu_utilization
