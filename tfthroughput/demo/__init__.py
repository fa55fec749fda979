"""The demo behind ``tfthroughput demo``, in its own room above every other.

- :mod:`~tfthroughput.demo.run`: the whole demo (:func:`run_demo`), what it prints and writes;
- :mod:`~tfthroughput.demo.training`: one monitored training run, and both pipelines' runs;
- :mod:`~tfthroughput.demo.image_task`: decoding, augmentation, the naive pipeline and
  ``build_pipeline``'s, and the small CNN (the quickstart notebook uses them too);
- :mod:`~tfthroughput.demo.synthetic_images`: the synthetic JPEGs, written locally;
- :mod:`~tfthroughput.demo.comparison`: the comparison of the two runs;
- :mod:`~tfthroughput.demo.previous_runs`: the runs an earlier demo wrote, replaced before
  TensorFlow loads.

Names resolve lazily, so the command checks its folders before TensorFlow is imported.
"""

from __future__ import annotations

from tfthroughput._lazy import lazy_exports

# Public name -> module that defines it.
_EXPORTS: dict[str, str] = {
    "CLASSES": "tfthroughput.demo.synthetic_images",
    "COMPARISON_TAG": "tfthroughput.demo.run",
    "RunSummary": "tfthroughput.demo.comparison",
    "augment": "tfthroughput.demo.image_task",
    "decode": "tfthroughput.demo.image_task",
    "gpu_status": "tfthroughput.demo.run",
    "image_paths": "tfthroughput.demo.synthetic_images",
    "labels_of": "tfthroughput.demo.synthetic_images",
    "naive_pipeline": "tfthroughput.demo.image_task",
    "replace_previous_runs": "tfthroughput.demo.previous_runs",
    "run_demo": "tfthroughput.demo.run",
    "small_cnn": "tfthroughput.demo.image_task",
    "tuned_pipeline": "tfthroughput.demo.image_task",
    "write_images": "tfthroughput.demo.synthetic_images",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
