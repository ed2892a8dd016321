"""Training: the loop, the data-parallel step, the schedule, checkpoints, stopping on a signal."""
