"""One word for one thing across the public API: the argument names of every public callable
(top level and each subpackage's face) are pinned, and the naming rules hold for all of them."""

from __future__ import annotations

import importlib
import inspect
import re

import pytest

import tfthroughput

FACES = (
    "hardware",
    "monitor",
    "sinks",
    "profiling",
    "report",
    "data",
    "precision",
    "diagnosis",
    "tuning",
)

# Public callable -> its parameter names, in order. A change here is an API change: update the
# docs and the rules below with it.
PINNED = {
    "InferenceTrial": (
        "setup",
        "label",
        "status",
        "examples_per_second",
        "ratio",
        "ratio_low",
        "ratio_high",
        "noise",
        "rounds_won",
        "rounds",
        "latency_p50_ms",
        "latency_p95_ms",
        "warmup_seconds",
        "memory_mib",
        "gpu_utilization",
        "sm_activity",
        "output_check",
        "reason",
    ),
    "InferenceTuneResult": (
        "baseline",
        "chosen",
        "trials",
        "seconds",
        "time_budget",
        "stopped_by_budget",
        "max_batch_latency_ms",
        "notes",
        "confirmation",
    ),
    "Confirmation": (
        "pick",
        "setup",
        "label",
        "work",
        "rounds",
        "seconds",
        "ratio",
        "ratio_low",
        "ratio_high",
        "noise",
        "rounds_won",
        "examples_per_second",
        "baseline_examples_per_second",
        "outcome",
    ),
    "OutputCheck": (
        "max_abs_difference",
        "max_rel_difference",
        "same_arithmetic",
        "tolerance",
        "examples",
    ),
    "LossCheck": ("baseline_loss", "loss", "same_arithmetic", "tolerance", "basis"),
    "TuneResult": (
        "baseline",
        "chosen",
        "trials",
        "seconds",
        "time_budget",
        "stopped_by_budget",
        "pipeline_kwargs",
        "notes",
        "distribution",
        "confirmation",
    ),
    "TuneDistribution": (
        "strategy",
        "replicas",
        "devices",
        "baseline_batch_size",
        "chosen_batch_size",
    ),
    "TuneSetup": (
        "steps_per_execution",
        "jit_compile",
        "policy",
        "pipeline",
        "batch_size",
        "augment_on_device",
    ),
    "TuneTrial": (
        "setup",
        "label",
        "status",
        "examples_per_second",
        "ratio",
        "ratio_low",
        "ratio_high",
        "noise",
        "rounds_won",
        "rounds",
        "warmup_seconds",
        "memory_mib",
        "gpu_utilization",
        "sm_activity",
        "loss_check",
        "reason",
    ),
    "tune": (
        "build_model",
        "data",
        "batch_size",
        "steps_per_epoch",
        "time_budget",
        "steps",
        "rounds",
        "confirm_rounds",
        "callbacks",
        "strategy",
        "precision",
        "pipeline",
        "xla",
        "allow_batch_change",
        "max_steps_per_execution",
        "loss_tolerance",
        "seed",
        "log_dir",
        "clock",
        "mode",
        "max_batch_latency_ms",
        "output_tolerance",
    ),
    "BatchSizeSearch": ("largest_fitting", "fastest", "trials", "reached_max", "complete"),
    "BatchSizeTrial": ("batch_size", "fits", "examples_per_second", "reason", "memory_mib"),
    "benchmark_dataset": ("dataset", "num_batches", "batched", "clock"),
    "build_pipeline": (
        "source",
        "batch_size",
        "read_fn",
        "labels",
        "preprocess_fn",
        "augment_fn",
        "batch_fn",
        "augment_on",
        "cache",
        "shuffle_buffer",
        "repeat",
        "drop_remainder",
        "deterministic",
        "parallel_reads",
        "ram_budget_mib",
        "threadpool_size",
        "seed",
        "service",
    ),
    "check_mixed_precision_outputs": ("model", "strict"),
    "compare_runs": ("log_dir",),
    "configure_gpus": ("memory_growth", "memory_limit_mib", "visible"),
    "DataService": ("address", "processing_mode", "job_name", "timeout"),
    "DatasetBenchmark": (
        "num_batches",
        "num_elements",
        "total_seconds",
        "first_batch_seconds",
        "first_batch_elements",
    ),
    "default_sources": ("metrics",),
    "describe_devices": (),
    "DeviceAugmented": ("model", "dataset", "kwargs"),
    "describe_pipeline": ("dataset", "measure"),
    "DeviceDescription": ("kind", "name", "compute_capability", "cpu_flags"),
    "diagnose": (
        "model",
        "dataset",
        "y",
        "batch_size",
        "steps",
        "repeats",
        "thresholds",
        "utilization_probe",
        "clock",
        "precision",
        "mode",
    ),
    "DiagnosisReport": (
        "batch_size",
        "steps",
        "repeats",
        "input_batches_per_second",
        "compute_batches_per_second",
        "fit_batches_per_second",
        "input_bound_fraction",
        "verdict",
        "recommendations",
        "gpu_utilization_percent",
        "thresholds",
        "sm_activity_percent",
        "mode",
        "input_cpu",
    ),
    "DiagnosisThresholds": (
        "input_bound_fraction",
        "compute_bound_fraction",
        "launch_overhead_step_seconds",
    ),
    "DipTrigger": (
        "monitor",
        "threshold_percent",
        "windows",
        "steps",
        "cooldown",
        "warmup_epochs",
        "clock",
    ),
    "discover_sources": ("metrics", "host"),
    "Discovery": ("sources", "gpus_off", "skipped"),
    "CpuShare": ("seconds", "cores", "own_cores", "other_cores"),
    "CpuShareMeter": ("read_machine", "read_own", "clock", "cores", "machine_cores"),
    "find_batch_size": (
        "build_model",
        "data",
        "y",
        "min_batch_size",
        "max_batch_size",
        "steps",
        "max_trials",
        "memory_limit_mib",
        "trial",
        "clock",
    ),
    "autolog": ("log_dir", "disable", "monitor_options"),
    "autotune": ("disable", "tune_options"),
    "find_gpus": (),
    "GPUConfiguration": ("visible", "memory_growth", "memory_limits_mib"),
    "GPUDevice": ("index", "nvml_index", "uuid", "name", "mig_index"),
    "GPUMonitor": (
        "log_dir",
        "interval",
        "update_freq",
        "hardware_metrics",
        "statistics",
        "batch_size",
        "input_wait",  # added: the wait share's cost can be left out of launch-bound fits
        "update_logs",
        "run_name",
        "sources",
        "clock",
        "sinks",
    ),
    "MonitoredCall": ("kind", "name", "log_dir", "own_monitor"),
    "monitored_calls": (),
    "HostSource": ("metrics", "process", "clock"),
    "jit_compile": ("fn", "fallback", "function_kwargs"),
    "JitChange": ("previous", "current"),
    "lint_pipeline": ("dataset",),
    "LocalDataService": ("workers", "port", "worker_port", "host", "processes", "timeout"),
    "loss_scale_optimizer": ("optimizer", "policy"),
    "measure_pipeline": ("dataset", "num_batches", "log_dir"),
    "Measurement": (
        "kind",
        "epoch",
        "step",
        "steps",
        "seconds",
        "batch_size",
        "scalars",
        "figures",
        "stats",
        "wait_percent",
    ),
    "Metric": ("name", "unit"),
    "MLflowSink": ("run_id", "start_run", "tracking_uri", "flush_interval", "close_timeout"),
    "mlflow_metric_name": ("kind", "tag", "task"),
    "log_report": ("report", "run_id", "name"),
    "PrometheusSink": ("port", "address", "run"),
    "RunInfo": ("run_dir", "log_dir", "task", "is_chief", "batch_size", "statistics"),
    "Sink": ("args", "kwargs"),
    "MetricStats": ("mean", "min", "max", "p95", "count", "samples"),
    "mixed_precision": ("policy", "devices"),
    "NVMLGPUSource": ("pynvml", "device", "metrics"),
    "PipelineDescription": (
        "source",
        "stages",
        "options",
        "element_spec",
        "measurement",
        "bytes_per_batch",
        "device_functions",
        "model_bytes_per_batch",
    ),
    "PipelineLint": ("stages", "findings", "runtime"),
    "PipelineMeasurement": ("num_batches", "seconds", "stages", "runtime"),
    "PipelineStage": ("transformation", "function", "arguments", "reason"),
    "PolicyChange": ("previous", "current", "recommendation", "_previous_policy"),
    "PrecisionRecommendation": (
        "policy",
        "loss_scaling",
        "xla",
        "policy_reason",
        "loss_scaling_reason",
        "xla_reason",
        "devices",
    ),
    "ProfileSteps": ("log_dir", "step_range", "run_name", "on_dip"),
    "recommend_precision": ("devices",),
    "Recommendation": ("action", "reason"),
    "RunComparison": ("log_dir", "runs", "rows", "tunings"),
    "Speedup": ("run", "baseline", "ratio", "unit", "label", "low", "high", "epochs", "overlap"),
    "SampleKey": ("args", "kwargs"),
    "Sampler": ("sources", "interval", "keep_running", "on_abandoned", "on_sample", "clock"),
    "Source": ("args", "kwargs"),
    "StageMeasurement": (
        "iterator",
        "path",
        "datasets",
        "positions",
        "tuned",
        "tuned_range",
        "fixed",
        "calls",
        "busy_seconds",
        "wait_seconds",
        "share",
    ),
    "TimedSamples": ("args", "kwargs"),
    "WindowStats": ("stats", "start", "end", "buffer_samples", "totals"),
    "with_gradient_accumulation": ("optimizer", "gradient_accumulation_steps"),
    "write_report": ("log_dir", "output"),
    "xla_auto_clustering": ("enabled",),
    "xla_compile_kwargs": ("enabled",),
}


def public_signatures() -> dict[str, tuple[str, ...]]:
    modules = [tfthroughput] + [importlib.import_module(f"tfthroughput.{face}") for face in FACES]
    signatures: dict[str, tuple[str, ...]] = {}
    for module in modules:
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isclass(value) and issubclass(value, BaseException):
                continue
            target = value.__init__ if inspect.isclass(value) else value
            if name in signatures or not callable(value):
                continue
            parameters = inspect.signature(target).parameters
            signatures[name] = tuple(p for p in parameters if p != "self")
    return signatures


def test_public_argument_names_are_pinned():
    assert public_signatures() == PINNED


def _all_parameters(signatures: dict[str, tuple[str, ...]]) -> set[tuple[str, str]]:
    return {(name, parameter) for name, params in signatures.items() for parameter in params}


MEMORY_QUANTITY = re.compile(r"(memory|ram)_(limit|budget)|_(mb|bytes|gb|gib|kib)$|^memory$")


def naming_offences(signatures: dict[str, tuple[str, ...]]) -> list[str]:
    """The rules: ``log_dir`` for a log folder; memory in MiB wherever a user types or reads it
    in Python (arguments, limits and budgets, and the fields of the result types alike, all
    named ``..._mib``); ``num_batches`` for a count of batches; and no ``metrics`` argument on
    a Keras callback (it would read as Keras's ``compile(metrics=...)``)."""
    offences = []
    for name, parameter in sorted(_all_parameters(signatures)):
        if parameter in {"logdir", "log_folder", "logs_dir"}:
            offences.append(f"{name}({parameter}): say log_dir")
        if MEMORY_QUANTITY.search(parameter) and not parameter.endswith("_mib"):
            offences.append(f"{name}({parameter}): memory is in MiB, named ..._mib")
        if parameter in {"batches", "n_batches", "batch_count"}:
            offences.append(f"{name}({parameter}): say num_batches")
    callbacks = {"GPUMonitor", "ProfileSteps", "DipTrigger"}
    offences += [
        f"{name}(metrics): clashes with Keras's compile(metrics=...)"
        for name in sorted(callbacks & set(signatures))
        if "metrics" in signatures[name]
    ]
    return offences


def test_public_arguments_follow_the_naming_rules():
    assert naming_offences(public_signatures()) == []


def test_memory_charts_are_in_gib_and_say_so():
    """TensorBoard's memory charts keep GiB (their tags are what dashboards, MLflow metric
    histories, Prometheus series and reports of older runs are keyed by); each names its unit."""
    from tfthroughput.hardware.metrics import GPU_METRICS, HOST_METRICS

    memory = [m for m in GPU_METRICS + HOST_METRICS if re.search(r"memory|rss", m.name)]
    amounts = [m for m in memory if not m.name.endswith("_percent")]
    assert {m.name for m in amounts} == {
        "memory_used_gib",
        "process_memory_used_gib",
        "memory_reserved_gib",
        "process_rss_gib",
    }
    assert all(m.unit == "GiB" and m.name.endswith("_gib") for m in amounts)


@pytest.mark.parametrize(
    ("signature", "offence"),
    [
        ({"measure_pipeline": ("dataset", "logdir")}, "measure_pipeline(logdir): say log_dir"),
        ({"configure_gpus": ("memory_limit_mb",)}, "configure_gpus(memory_limit_mb)"),
        ({"build_pipeline": ("ram_budget",)}, "build_pipeline(ram_budget)"),
        ({"BatchSizeTrial": ("memory_bytes",)}, "BatchSizeTrial(memory_bytes): memory is in MiB"),
        ({"TuneTrial": ("memory",)}, "TuneTrial(memory): memory is in MiB"),
        ({"measure_pipeline": ("batches",)}, "measure_pipeline(batches): say num_batches"),
        ({"GPUMonitor": ("log_dir", "metrics")}, "GPUMonitor(metrics): clashes"),
    ],
)
def test_the_naming_rules_catch_the_old_names(signature, offence):
    assert any(line.startswith(offence) for line in naming_offences(signature))
