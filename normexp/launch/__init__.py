"""Starting runs: the thread environment set before torch loads, the pre-flight, the Hydra
job (with its status transitions), torchrun and SLURM, and when the boundary sweeper's runs
start (boundary_schedule.py)."""
