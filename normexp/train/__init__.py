"""Training one run: the loop (loop.py), the instruments, TensorBoard writing (logbook.py),
learning-rate schedules, the flat AdamW, stop signals (SIGINT/SIGTERM, preemption), threads
and data-parallel training."""
