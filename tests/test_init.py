"""The public surface of `tfthroughput` is explicit, sorted, and cheap to import."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from readme import backend_table

import tfthroughput
from tfthroughput._optional import install_command

ROOT = Path(__file__).resolve().parents[1]

EXPECTED_PUBLIC_NAMES = [
    "DataService",
    "DipTrigger",
    "GPUMonitor",
    "MonitoringWarning",
    "ProfileSteps",
    "autolog",
    "autotune",
    "benchmark_dataset",
    "build_pipeline",
    "configure_gpus",
    "describe_pipeline",
    "diagnose",
    "find_batch_size",
    "jit_compile",
    "lint_pipeline",
    "mixed_precision",
    "recommend_precision",
    "tune",
]
# Each subpackage's face: result and configuration types live there, not at the top level.
FACES = ("hardware", "monitor", "profiling", "report", "data", "precision", "diagnosis", "tuning")


def _faces() -> dict[str, object]:
    return {face: importlib.import_module(f"tfthroughput.{face}") for face in FACES}


def public_names() -> dict[str, str]:
    """Every public name of the package -> the face that offers it (top level first)."""
    names = {name: "tfthroughput" for name in tfthroughput.__all__}
    for face, module in _faces().items():
        for name in module.__all__:
            names.setdefault(name, f"tfthroughput.{face}")
    return names


def test_all_is_pinned_and_sorted():
    assert tfthroughput.__all__ == EXPECTED_PUBLIC_NAMES
    assert (
        len(tfthroughput.__all__) <= 18
    )  # autotune joined autolog: the faces of an unchanged script


def test_every_face_lists_sorted_public_names_that_resolve_to_its_own_modules():
    for face, module in _faces().items():
        assert module.__all__, face
        assert module.__all__ == sorted(module.__all__), face
        for name in module.__all__:
            assert not name.startswith("_"), (face, name)
            value = getattr(module, name)
            assert value.__module__.startswith(f"tfthroughput.{face}."), (face, name)
            assert name in dir(module), (face, name)


def test_top_level_names_are_the_faces_own_objects():
    faces = _faces()
    for name in tfthroughput.__all__:
        offered_by = [face for face, module in faces.items() if name in module.__all__]
        assert len(offered_by) == 1, (name, offered_by)
        assert getattr(tfthroughput, name) is getattr(faces[offered_by[0]], name), name


def test_every_public_name_resolves():
    for name in tfthroughput.__all__:
        assert getattr(tfthroughput, name) is not None, name


def test_unknown_attribute_raises_attribute_error():
    try:
        tfthroughput.not_a_real_name  # noqa: B018
    except AttributeError as error:
        assert "not_a_real_name" in str(error)
    else:
        raise AssertionError("expected AttributeError")


def test_import_touches_neither_tensorflow_nor_nvml():
    code = (
        "import sys, tfthroughput; "
        "print('tensorflow' in sys.modules, 'keras' in sys.modules, 'pynvml' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "False"]


def _readme_backend_rows() -> dict[str, set[str]]:
    """The README's backend table, as written: names (and calls such as
    ``recommend_precision()``) that work without TensorFlow, that import but need it when
    called, and that need it to import."""
    kinds = {"works": set(), "when called": set(), "import": set()}
    for names, without_tensorflow in backend_table():
        if without_tensorflow.startswith("yes"):
            kind = "works"
        elif without_tensorflow.startswith("import;"):
            kind = "when called"
        else:
            assert without_tensorflow == "`ImportError`", without_tensorflow
            kind = "import"
        kinds[kind].update(name for name in names if re.fullmatch(r"[a-zA-Z_]\w*(\(.*\))?", name))
    return kinds


def _public(names: set[str]) -> set[str]:
    return {name.partition("(")[0] for name in names} - {"True", "False"}


# Under Keras's JAX backend with TensorFlow impossible to import: resolves every public name,
# uses those that need no TensorFlow, and calls those that need it.
_WITHOUT_TENSORFLOW = """
import without_tensorflow  # noqa: F401
import json
import os
import sys
import tempfile

import importlib

import keras
import tfthroughput as tt
from tfthroughput import data, diagnosis, precision

resolved, refused = [], {}
for name, face in json.loads(sys.argv[1]).items():
    try:
        getattr(importlib.import_module(face), name)
        resolved.append(name)
    except ImportError as error:
        refused[name] = str(error)

model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
with tt.mixed_precision("mixed_bfloat16") as change:
    inside = keras.config.dtype_policy().name
h200 = precision.DeviceDescription("GPU", "H200", (9, 0))
report = diagnosis.DiagnosisReport(
    batch_size=8, steps=2, repeats=1, input_batches_per_second=1.0,
    compute_batches_per_second=2.0, fit_batches_per_second=1.0, input_bound_fraction=0.5,
    verdict="input-bound", recommendations=(), gpu_utilization_percent=23.6,
    sm_activity_percent=0.5,
)
works = {
    "mixed_precision": [inside, keras.config.dtype_policy().name],
    "check_mixed_precision_outputs": list(precision.check_mixed_precision_outputs(model)),
    "loss_scale_optimizer": type(
        precision.loss_scale_optimizer(keras.optimizers.SGD(), policy="mixed_float16")
    ).__name__,
    "with_gradient_accumulation": precision.with_gradient_accumulation(
        keras.optimizers.SGD(), 2
    ).gradient_accumulation_steps,
    "xla_compile_kwargs": precision.xla_compile_kwargs(False),
    "recommend_precision": tt.recommend_precision(devices=[h200]).policy,
    "DiagnosisReport": "SM activity 0.5%" in str(report),
}
report_dir = tempfile.mkdtemp()
report.write_to_tensorboard(report_dir)  # the package's own event writer: no TensorFlow
works["DiagnosisReport.write_to_tensorboard"] = [
    name.rpartition(".")[2] for name in os.listdir(report_dir)
]
calls = {
    "configure_gpus": lambda: tt.configure_gpus(),
    "describe_devices": lambda: precision.describe_devices(),
    "xla_auto_clustering": lambda: precision.xla_auto_clustering(True),
    "jit_compile": lambda: tt.jit_compile(lambda x: x),
    "LocalDataService": lambda: data.LocalDataService(),
    "recommend_precision()": lambda: tt.recommend_precision(),
    'mixed_precision("auto")': lambda: tt.mixed_precision("auto"),
    'xla_compile_kwargs("auto")': lambda: precision.xla_compile_kwargs("auto"),
}
called = {}
for name, call in calls.items():
    try:
        call()
        called[name] = None
    except ImportError as error:
        called[name] = str(error)
print(json.dumps({
    "backend": keras.config.backend(),
    "tensorflow": "tensorflow" in sys.modules,
    "resolved": resolved,
    "refused": refused,
    "works": works,
    "called": called,
}))
"""


def test_without_tensorflow_the_readme_backend_table_holds():
    kinds = _readme_backend_rows()
    works, when_called, needs_it = (_public(kinds[k]) for k in ("works", "when called", "import"))
    names = public_names()
    assert works | when_called | needs_it == set(names)
    assert not needs_it & (works | when_called)
    path = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_TENSORFLOW, json.dumps(names)],
        capture_output=True,
        text=True,
        env={**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": path},
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert (out["backend"], out["tensorflow"]) == ("jax", False)
    assert set(out["resolved"]) == works | when_called
    assert set(out["refused"]) == needs_it
    for name, message in out["refused"].items():
        assert message.startswith(
            f"`{names[name]}.{name}` needs TensorFlow, which is not installed: "
            f"{install_command('tensorflow')}."
        ), message
    assert out["works"] == {
        "mixed_precision": ["mixed_bfloat16", "float32"],  # scoped, then restored
        "check_mixed_precision_outputs": [],
        "loss_scale_optimizer": "LossScaleOptimizer",
        "with_gradient_accumulation": 2,
        "xla_compile_kwargs": {"jit_compile": False},
        "recommend_precision": "mixed_bfloat16",
        "DiagnosisReport": True,
        "DiagnosisReport.write_to_tensorboard": ["v2"],
    }
    # Every call the README says needs TensorFlow was made, and each said so.
    assert set(out["called"]) == kinds["when called"]
    for call, message in out["called"].items():
        assert message is not None, f"{call} ran without TensorFlow"
        assert "needs TensorFlow, which is not installed" in message, message
