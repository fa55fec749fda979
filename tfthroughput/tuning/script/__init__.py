"""A running script's call tuned: the model rebuilt from the call, ``tune`` on it, the chosen
setup put on the script's own model and calls; ``autotune()``, its face for notebooks."""
