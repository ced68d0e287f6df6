"""Training one run: the loop (loop.py), the instruments, TensorBoard writing (logbook.py),
learning-rate schedules, the flat AdamW, threads and data-parallel training."""
