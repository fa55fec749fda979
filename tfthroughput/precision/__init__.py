"""Fixing the arithmetic: precision rules and policy, XLA, GPU memory set-up."""
