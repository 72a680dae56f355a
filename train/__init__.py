"""The accumulation-aware DDP trainer: launch, rendezvous, data, targets, checkpoints, evaluation."""
