"""Knowing the bottleneck: `diagnose`, its verdict and report, and `find_batch_size`."""
