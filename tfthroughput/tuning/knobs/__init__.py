"""What the search tries, by what it changes: the batch size, ``steps_per_execution``, XLA and
the policy, the input pipeline; each a strategy that proposes setups and is sent back their
judged trials."""
