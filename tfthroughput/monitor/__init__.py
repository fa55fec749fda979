"""The Keras adapter: `GPUMonitor` and what it writes for TensorBoard."""
