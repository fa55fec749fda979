"""``tune``'s training mode: the data ``fit`` takes, the fit runner, its workload with the loss
check on replayed batches, the rebuilt pipeline, whole-epoch confirmation, strategies."""
