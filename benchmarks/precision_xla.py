"""Training-step throughput: float32 vs mixed_bfloat16 vs XLA vs both, on a small dense and a
small convolutional model.

The four variants of each model are built once, warmed up (tracing and XLA compilation are not
timed), then timed in turn, alternating, for several rounds; the medians are compared. Run:

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/precision_xla.py [--repeats 5] [--steps 20]

On a CPU, bfloat16 only pays where the CPU has native bfloat16 instructions (AVX512-BF16,
AMX); the script prints what `recommend_precision()` says about this machine.
"""

from __future__ import annotations

import argparse
import statistics
import time

import keras
import numpy as np
import tensorflow as tf

from tfthroughput import mixed_precision, recommend_precision

VARIANTS = (
    ("float32", "float32", False),
    ("bf16", "mixed_bfloat16", False),
    ("xla", "float32", True),
    ("bf16+xla", "mixed_bfloat16", True),
)


def dense_model() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((784,)),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(10, dtype="float32"),  # logits stay float32
        ]
    )


def conv_model() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((32, 32, 3)),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(10, dtype="float32"),
        ]
    )


def dataset(shape: tuple[int, ...], batch_size: int) -> tf.data.Dataset:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch_size * 4, *shape)).astype("float32")
    y = rng.integers(0, 10, size=(batch_size * 4,))
    # In memory and repeated: the input pipeline is not what is measured here.
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size).cache().repeat()


def build(builder, policy: str, xla: bool) -> keras.Model:
    with mixed_precision(policy):
        model = builder()
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=xla,
    )
    return model


def steps_per_second(model: keras.Model, data: tf.data.Dataset, steps: int) -> float:
    start = time.perf_counter()
    model.fit(data, epochs=1, steps_per_epoch=steps, verbose=0, shuffle=False)
    return steps / (time.perf_counter() - start)


def measure(name, builder, shape, batch_size, repeats, steps) -> dict[str, float]:
    data = dataset(shape, batch_size)
    models = {label: build(builder, policy, xla) for label, policy, xla in VARIANTS}
    for model in models.values():
        steps_per_second(model, data, 3)  # trace, compile, warm caches
    rates: dict[str, list[float]] = {label: [] for label in models}
    for _ in range(repeats):
        for label, model in models.items():
            rates[label].append(steps_per_second(model, data, steps))
    medians = {label: statistics.median(values) for label, values in rates.items()}
    base = medians["float32"]
    print(f"\n{name} model, batch {batch_size}, {steps} steps x {repeats} rounds (median):")
    for label, rate in medians.items():
        spread = f"{min(rates[label]):.1f}-{max(rates[label]):.1f}"
        print(
            f"  {label:9s} {rate:8.1f} steps/s  ({spread})  "
            f"{rate * batch_size:9.0f} examples/s  x{rate / base:.2f} vs float32"
        )
    return {label: rate / base for label, rate in medians.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    # Eight models are traced once each at warm-up; TensorFlow's retracing notice is noise here.
    tf.get_logger().setLevel("ERROR")
    print(recommend_precision())
    dense = measure("dense", dense_model, (784,), 256, args.repeats, args.steps)
    conv = measure("conv", conv_model, (32, 32, 3), 64, args.repeats, args.steps)
    summary = ", ".join(
        f"{model} {label} x{ratio:.2f}"
        for model, ratios in (("dense", dense), ("conv", conv))
        for label, ratio in ratios.items()
        if label != "float32"
    )
    print(f"\nSUMMARY (CPU, vs float32 steps/s): {summary}")


if __name__ == "__main__":
    main()
