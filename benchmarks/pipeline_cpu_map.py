"""A CPU-bound per-example map, epoch by epoch: how many cores does each pipeline really use?

Workload: 512 in-memory examples, a per-example map that runs a chain of FFTs (about 1.2 ms of
one core each), batches of 32; one epoch is one fresh iterator over the data (as ``fit`` makes
one per epoch), so tf.data's autotuner starts again every epoch. For every run the script
records examples/s, the cores the process kept busy (CPU seconds per wall second) and what the
autotuning model had set when the epoch ended (``tf.data.experimental.get_model_proto``, the
same model the profiler's trace reports). Variants, alternated run by run:

- ``sequential``: ``map(f) -> batch -> prefetch``, tf.data's own ``map_parallelization`` off;
- ``hand``: ``map(f, AUTOTUNE) -> batch -> prefetch(AUTOTUNE)``, the tf.data guide's pipeline;
- ``hand+pbatch``: the same with ``batch(num_parallel_calls=AUTOTUNE)``;
- ``hand+pbatch+opts``: that plus the builder's options (``map_fusion``,
  ``deterministic=False``);
- ``builder``: ``build_pipeline(x, preprocess_fn=f, batch_size=32)``;
- candidates for the builder: each ``autotune_algorithm``; ``num_parallel_calls`` fixed at the
  schedulable cores; no parallel batch; ``autotune.cpu_budget`` set to the cores.

Prints every run (not only medians), the distribution per variant and the autotuner's chosen
values, and ends with a one-line summary. The machine is shared: an epoch during which other
processes took more than ``--max-others`` cores (``/proc/stat`` less this process's own CPU
time) is printed but not counted, and run again.

Run: ``python benchmarks/pipeline_cpu_map.py [--runs 20] [--variants builder,hand]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from collections import Counter

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfthroughput import build_pipeline  # noqa: E402
from tfthroughput.data._rewrites import schedulable_cores  # noqa: E402
from tfthroughput.hardware.cpu_share import CpuShareMeter  # noqa: E402

EXAMPLES = 512
BATCH_SIZE = 32
LENGTH = 4096
FFT_ROUNDS = 30  # about 1.2 ms of one core per example on the 2-core development machine
AUTOTUNE = tf.data.AUTOTUNE


def fft_chain(x):
    """Deterministic, CPU-bound, per-example work: FFT and inverse FFT, several times over."""
    signal = tf.cast(x, tf.complex64)
    for _ in range(FFT_ROUNDS):
        signal = tf.signal.ifft(tf.signal.fft(signal) * tf.cast(1.0001, tf.complex64))
    return tf.math.real(signal)


def _source() -> tf.data.Dataset:
    data = np.random.default_rng(0).standard_normal((EXAMPLES, LENGTH)).astype("float32")
    return tf.data.Dataset.from_tensor_slices(data)


def _with(dataset: tf.data.Dataset, **settings) -> tf.data.Dataset:
    """``dataset`` with the given ``tf.data.Options`` fields set (``a__b`` for ``a.b``)."""
    options = tf.data.Options()
    for name, value in settings.items():
        target = options
        *path, leaf = name.split("__")
        for part in path:
            target = getattr(target, part)
        setattr(target, leaf, value)
    return dataset.with_options(options)


def _hand(parallel_batch: bool = False, calls=AUTOTUNE) -> tf.data.Dataset:
    dataset = _source().map(fft_chain, num_parallel_calls=calls)
    batch_calls = AUTOTUNE if parallel_batch else None
    return dataset.batch(BATCH_SIZE, num_parallel_calls=batch_calls).prefetch(AUTOTUNE)


def _builder_options(dataset: tf.data.Dataset) -> tf.data.Dataset:
    return _with(dataset, deterministic=False, experimental_optimization__map_fusion=True)


def variants() -> dict[str, callable]:
    cores = schedulable_cores()
    algorithms = tf.data.experimental.AutotuneAlgorithm
    found = {
        # tf.data parallelises a stateless map by itself (map_parallelization): switched off.
        "sequential": lambda: _with(
            _source().map(fft_chain).batch(BATCH_SIZE).prefetch(2),
            experimental_optimization__map_parallelization=False,
        ),
        "hand": _hand,
        "hand+pbatch": lambda: _hand(parallel_batch=True),
        "hand+pbatch+opts": lambda: _builder_options(_hand(parallel_batch=True)),
        "builder": lambda: build_pipeline(_source(), preprocess_fn=fft_chain, batch_size=32),
        f"builder calls={cores}": lambda: _builder_options(_hand(parallel_batch=True, calls=cores)),
        "builder no pbatch": lambda: _builder_options(_hand()),
        f"builder cpu_budget={cores}": lambda: _with(
            build_pipeline(_source(), preprocess_fn=fft_chain, batch_size=32),
            autotune__cpu_budget=cores,
        ),
    }
    for algorithm in ("HILL_CLIMB", "GRADIENT_DESCENT", "MAX_PARALLELISM", "STAGE_BASED"):
        found[f"builder {algorithm.lower()}"] = lambda a=algorithm: _with(
            build_pipeline(_source(), preprocess_fn=fft_chain, batch_size=32),
            autotune__autotune_algorithm=getattr(algorithms, a),
        )
    return found


def chosen(iterator) -> str:
    """The autotuner's settings in force, source last: ``ParallelMapV2(parallelism=1) ...``."""
    try:
        model = tf.data.experimental.get_model_proto(iterator)
    except Exception as error:  # noqa: BLE001 - a model the runtime does not keep
        return f"(no model: {type(error).__name__})"
    parts, node_id = [], model.output
    while node_id is not None and node_id in model.nodes:
        node = model.nodes[node_id]
        params = {p.name: p.state_value for p in node.parameters}
        shown = {k: f"{v:g}" for k, v in params.items() if k in ("parallelism", "buffer_size")}
        label = ",".join(f"{k}={v}" for k, v in shown.items())
        parts.append(f"{node.name.split('(')[0]}({label})" if label else node.name)
        node_id = node.inputs[0] if node.inputs else None
    return " <- ".join(parts)


def one_epoch(make) -> tuple[float, float, float, str]:
    """Examples/s, cores this process kept busy, cores other processes took meanwhile (the
    package's own :class:`CpuShareMeter`, as ``diagnose`` reads them), and the autotuner's
    settings at the end of one fresh epoch."""
    dataset = make()
    iterator = iter(dataset)
    examples = 0
    meter = CpuShareMeter()
    meter.start()
    for batch in iterator:
        examples += int(batch.shape[0])
    meter.stop()
    share = meter.share()
    assert examples == EXAMPLES, examples
    return examples / share.seconds, share.own_cores, share.other_cores or 0.0, chosen(iterator)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--variants", default="", help="comma-separated names (default: all)")
    parser.add_argument(
        "--hog",
        type=int,
        default=0,
        help="start this many processes that each keep one core busy, to show what another "
        "program on the machine does to the pipelines (every epoch is then counted)",
    )
    parser.add_argument(
        "--max-others",
        type=float,
        default=0.1,
        help="an epoch during which other processes took more cores than this is run again "
        "(default: %(default)s)",
    )
    args = parser.parse_args(argv)
    # Another program: its own session, so the scheduler shares the cores between it and this
    # process as it would between two programs a user started (autogroups), not thread by thread.
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(args.hog)
    ]
    if hogs:
        args.max_others = float("inf")
    makers = variants()
    if args.variants:
        makers = {name: makers[name] for name in args.variants.split(",")}
    print(f"schedulable cores: {schedulable_cores()}; load average {os.getloadavg()[0]:.2f}")
    for make in makers.values():  # warm-up: tracing, first allocations
        one_epoch(make)
    rates = {name: [] for name in makers}
    cores = {name: [] for name in makers}
    settings = {name: Counter() for name in makers}
    disturbed = Counter()
    while min(len(values) for values in rates.values()) < args.runs:
        for name, make in makers.items():
            if len(rates[name]) >= args.runs:
                continue
            rate, busy, others, tuned = one_epoch(make)
            kept = others <= args.max_others
            print(
                f"{name:<28} {rate:7,.0f} ex/s {busy:5.2f} cores, others {others:4.2f}"
                f"{'' if kept else ' (not counted)'}  {tuned}"
            )
            if not kept:  # another process took cores this epoch: not this pipeline's doing
                disturbed[name] += 1
                continue
            rates[name].append(rate)
            cores[name].append(busy)
            settings[name][tuned] += 1
    for hog in hogs:
        hog.kill()
    print(f"\nload average {os.getloadavg()[0]:.2f}" + (f"; {args.hog} hog(s) ran" if hogs else ""))
    sequential = statistics.median(rates["sequential"]) if "sequential" in rates else None
    for name in makers:
        values = sorted(cores[name])
        fast = sum(busy > 1.6 for busy in values)
        over = (
            f", {sum(r >= 1.6 * sequential for r in rates[name])}/{len(values)} runs >= 1.6x "
            "the sequential median"
            if sequential
            else ""
        )
        print(
            f"{name:<28} median {statistics.median(rates[name]):7,.0f} ex/s, cores "
            f"{' '.join(f'{v:.2f}' for v in values)}; {fast}/{len(values)} runs > 1.6 cores{over}"
            f"; {disturbed[name]} disturbed epochs run again"
        )
        for tuned, count in settings[name].most_common():
            print(f"{'':<30}{count:>3} x {tuned}")
    if sequential and "builder" in rates and "hand" in rates:
        builder_fast = sum(r >= 1.6 * sequential for r in rates["builder"])
        hand_fast = sum(r >= 1.6 * sequential for r in rates["hand"])
        print(
            f"SUMMARY cpu map: builder >= 1.6x the sequential map in {builder_fast}/{args.runs} "
            f"epochs (target >= 19), hand-written map(AUTOTUNE) in {hand_fast}/{args.runs}; "
            f"load average {os.getloadavg()[0]:.2f}"
        )


if __name__ == "__main__":
    main()
