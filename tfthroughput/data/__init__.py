"""Fixing the input: `tf.data` pipeline building, description and measurement."""
