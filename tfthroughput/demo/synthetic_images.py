"""The demo's data: synthetic JPEGs of three classes of shapes under noise, written locally.

Stored larger than the model's input, so decoding and resizing cost what they cost on real
photos; no network is needed.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import tensorflow as tf

CLASSES = ("disc", "square", "stripes")
STORED_SIZE = 192  # JPEGs are stored larger than the model input, so decoding+resizing costs


def write_images(
    folder: str, count: int, seed: int = 0, echo: Callable[[str], None] = print
) -> list[str]:
    """Write ``count`` JPEGs, cycling through the classes; returns their paths (sorted)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:STORED_SIZE, 0:STORED_SIZE]
    for label in CLASSES:
        os.makedirs(os.path.join(folder, label), exist_ok=True)
    step = max(1, count // 4)
    for index in range(count):
        label = CLASSES[index % len(CLASSES)]
        cx, cy = rng.integers(STORED_SIZE // 4, 3 * STORED_SIZE // 4, size=2)
        radius = rng.integers(STORED_SIZE // 10, STORED_SIZE // 5)
        if label == "disc":
            mask = (xx - cx) ** 2 + (yy - cy) ** 2 < radius**2
        elif label == "square":
            mask = (abs(xx - cx) < radius) & (abs(yy - cy) < radius)
        else:
            mask = (yy // max(2, radius // 3)) % 2 == 0
        image = rng.normal(90, 40, size=(STORED_SIZE, STORED_SIZE, 3))
        image[mask] += rng.uniform(80, 140, size=3)
        jpeg = tf.io.encode_jpeg(np.clip(image, 0, 255).astype(np.uint8), quality=90)
        tf.io.write_file(os.path.join(folder, label, f"{index:05d}.jpg"), jpeg)
        if (index + 1) % step == 0 or index + 1 == count:
            echo(f"  {index + 1}/{count} images")
    return image_paths(folder)


def image_paths(folder: str) -> list[str]:
    return sorted(tf.io.gfile.glob(os.path.join(folder, "*", "*.jpg")))


def labels_of(paths: list[str]) -> np.ndarray:
    return np.array([CLASSES.index(os.path.basename(os.path.dirname(p))) for p in paths], "int32")
