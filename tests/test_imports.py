"""The package's import structure: no import cycle anywhere (function-local imports included),
and `tfthroughput.hardware` usable with TensorFlow and Keras impossible to import."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tfthroughput"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(package: Path) -> dict[str, set[str]]:
    """``{module: package modules it imports}`` for every module under ``package``."""
    modules = {module_name(path, package.parent): path for path in sorted(package.rglob("*.py"))}
    return {name: imported_modules(path, name, modules) for name, path in modules.items()}


def imported_modules(path: Path, this: str, modules: dict[str, Path]) -> set[str]:
    """Every package module that importing or running ``path`` imports, at any depth of the
    code: top-level and function-local imports alike, parent packages included."""
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names)
    found = set()
    for target in targets:
        parts = target.split(".")
        found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    # Python initialises a module's own parent packages before the module, so reaching one of
    # them through a sibling's dotted name (``tfthroughput._optional`` from ``tfthroughput._lazy``)
    # is no import of the package: a parent is an edge only where it is imported by name.
    ancestors = {this.rsplit(".", i)[0] for i in range(1, this.count(".") + 1)}
    named = {target for target in targets if target in ancestors}
    return {
        name
        for name in found
        if name in modules and name != this and (name not in ancestors or name in named)
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    visiting: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> list[str] | None:
        if node in visiting:
            return visiting[visiting.index(node) :] + [node]
        if node in done:
            return None
        visiting.append(node)
        for neighbour in sorted(graph[node]):
            cycle = visit(neighbour)
            if cycle:
                return cycle
        visiting.pop()
        done.add(node)
        return None

    for node in sorted(graph):
        cycle = visit(node)
        if cycle:
            return cycle
    return None


def test_the_import_graph_has_no_cycle():
    graph = import_graph(PACKAGE)
    assert "tfthroughput.monitor.monitor_lifecycle" in graph["tfthroughput.monitor.gpu_monitor"]
    assert {"tfthroughput.hardware.discovery", "tfthroughput.monitor.fit_watch"} <= graph[
        "tfthroughput.monitor.monitor_lifecycle"
    ]
    assert find_cycle(graph) is None


def test_the_cycle_check_sees_function_local_and_relative_imports(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("def later():\n    from .a import name\n")
    (package / "c.py").write_text("import pkg.b\n")
    graph = import_graph(package)
    assert graph == {
        "pkg": set(),
        "pkg.a": {"pkg", "pkg.b"},
        "pkg.b": {"pkg.a"},  # its parent `pkg` is reached, not imported by name
        "pkg.c": {"pkg.b"},
    }
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.a"]


# Imports every module of tfthroughput.hardware, then runs discovery, the sampler and the GPU
# utilization probe, with `tensorflow` and `keras` refused by an import hook.
_WITHOUT_TENSORFLOW = """
import importlib
import json
import pkgutil
import sys

BLOCKED = {"tensorflow", "keras"}


class RefuseTensorFlow:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ImportError(f"{name} is blocked in this test")
        return None


sys.meta_path.insert(0, RefuseTensorFlow())
import tfthroughput.hardware as hardware

names = sorted(info.name for info in pkgutil.iter_modules(hardware.__path__))
for name in names:
    importlib.import_module(f"tfthroughput.hardware.{name}")

from tfthroughput.hardware.discovery import default_sources
from tfthroughput.hardware.sampler import SampleKey, Sampler
from tfthroughput.hardware.utilization import gpu_utilization

with Sampler(default_sources(["ram_used_percent"]), interval=0.05) as sampler:
    stats = sampler.collect(sample_now=True)
with gpu_utilization(0.05) as mean_utilization:
    pass
print(json.dumps({
    "modules": names,
    "ram_samples": stats[SampleKey("host", "ram_used_percent")].count,
    "gpu_utilization": mean_utilization(),
    "loaded": sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED),
}))
"""


def test_the_hardware_package_runs_with_tensorflow_and_keras_blocked():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TFTHROUGHPUT_DISABLE_NVML": "1"}
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_TENSORFLOW],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    expected = sorted(
        path.stem for path in (PACKAGE / "hardware").glob("*.py") if path.stem != "__init__"
    )
    assert out["modules"] == expected
    assert out["ram_samples"] >= 1
    assert out["gpu_utilization"] is None  # NVML switched off: nothing measured, no error
    assert out["loaded"] == []


# The rooms each room may import (the guide's layering): the hardware core and the fixing
# rooms stand alone; the Keras adapters sit on the hardware core; knowing and tuning sit on
# what they measure and fix; only the command line and the demo see everything. Private
# top-level helpers (`_validation`, `_optional`, `_lazy`, `_startup`) are open to all.
ALLOWED_ROOMS = {
    "hardware": set(),
    "data": set(),
    "precision": set(),
    "sinks": {"hardware"},
    "monitor": {"hardware", "sinks"},
    "profiling": {"hardware", "monitor"},
    "report": {"hardware", "monitor"},
    "diagnosis": {"hardware", "data", "precision", "monitor"},
    "tuning": {"hardware", "data", "precision", "monitor", "diagnosis"},
    "tfthroughput": set(),
}
EVERYTHING = {"cli", "demo"}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layering_offences(graph: dict[str, set[str]]) -> list[str]:
    """``"module imports name"`` for each import that runs against ``ALLOWED_ROOMS``."""
    offences = []
    for module, imported in sorted(graph.items()):
        room = _room(module)
        rooms_imported = {_room(name) for name in imported} - {room}
        if room in EVERYTHING:
            continue
        if room.startswith("_"):
            allowed: set[str] = set()
        else:
            assert room in ALLOWED_ROOMS, f"{room}/ is a new room: declare what it may import"
            allowed = ALLOWED_ROOMS[room]
        for name in sorted(imported):
            target = _room(name)
            if target in rooms_imported and not target.startswith("_") and target not in allowed:
                offences.append(f"{module} imports {name}")
    return offences


def test_rooms_import_only_the_rooms_below_them():
    assert layering_offences(import_graph(PACKAGE)) == []


def test_the_layering_check_catches_an_upward_import():
    graph = {
        "tfthroughput.data.pipeline": {"tfthroughput.monitor.gpu_monitor", "tfthroughput._lazy"},
        "tfthroughput._validation": {"tfthroughput.hardware.source"},
        "tfthroughput.monitor.events": {"tfthroughput.hardware.source"},
    }
    assert layering_offences(graph) == [
        "tfthroughput._validation imports tfthroughput.hardware.source",
        "tfthroughput.data.pipeline imports tfthroughput.monitor.gpu_monitor",
    ]


def private_import_offences(package: Path) -> list[str]:
    """``"module imports target"`` for each import of another room's private module
    (``<room>._x``) or private name (``from <room>.x import _y``), relative, function-local and
    ``import a.b`` forms alike. A room is a subpackage; the top-level private helpers
    (``tfthroughput._validation``, ...) are open to every room, and each room's own privates
    to itself."""
    offences = []
    for path in sorted(package.rglob("*.py")):
        this = module_name(path, package.parent)
        room = _room(this)
        parent = this if path.name == "__init__.py" else this.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imports = [(alias.name, None) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = parent.rsplit(".", node.level - 1)[0] if node.level > 1 else parent
                    base = f"{anchor}.{base}" if base else anchor
                imports = [(base, alias.name) for alias in node.names]
            else:
                continue
            for target, name in imports:
                parts = target.split(".")
                if parts[0] != package.name or len(parts) < 2 or _room(target) == room:
                    continue
                if not (package / parts[1]).is_dir():
                    continue  # a top-level module: its helpers serve every room
                private = any(part.startswith("_") for part in parts[2:])
                if private or (name is not None and name.startswith("_")):
                    offences.append(f"{this} imports {target}{'.' + name if name else ''}")
    return offences


def test_no_room_imports_another_rooms_private_module_or_name():
    offences = private_import_offences(PACKAGE)
    assert offences == []


def test_the_private_import_check_sees_every_form(tmp_path):
    package = tmp_path / "pkg"
    for room in ("low", "high"):
        (package / room).mkdir(parents=True)
        (package / room / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "_shared.py").write_text("def helper(): ...\n")
    (package / "low" / "_inner.py").write_text("from pkg.low.face import _own\n")
    (package / "high" / "use.py").write_text(
        "import pkg.low._inner\n"
        "from pkg._shared import helper\n"
        "from pkg.low.face import public, _hidden\n"
        "def later():\n"
        "    from ..low._inner import thing\n"
    )
    assert private_import_offences(package) == [
        "pkg.high.use imports pkg.low._inner",
        "pkg.high.use imports pkg.low.face._hidden",
        "pkg.high.use imports pkg.low._inner.thing",
    ]
