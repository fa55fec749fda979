"""Seeing the hardware: NVML and psutil sources, discovery, background sampling, statistics.

Nothing here imports TensorFlow or Keras, so the core runs under plain Python (and is checked
on machines that have a GPU but no TensorFlow).
"""
