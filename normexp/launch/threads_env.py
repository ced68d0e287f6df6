"""How idle OpenMP threads wait: set in the environment before torch loads its OpenMP runtime.

torch's CPU wheels run intra-op parallelism (and MKL's and oneDNN's) on GNU OpenMP
(libgomp). Between parallel regions libgomp's worker threads spin for a while before they
sleep (GOMP_SPINCOUNT, 300,000 spins by default). On a machine where another process keeps
a core busy, the spinning worker takes the time slices the other thread of the same step
needs, and a 2-thread run drops to about a third of its idle speed (issue 31).
`OMP_WAIT_POLICY=PASSIVE` (OpenMP spec, §6.7; honoured by libgomp and by Intel's libiomp)
makes idle workers sleep at once, so a busy neighbour costs about what losing its core costs.

libgomp reads its environment once, when the library is loaded, i.e. on `import torch`:
later changes to os.environ do nothing in this process. So `configure()` runs first thing in
`normexp.cli` (every `normexp` command and `python -m normexp.cli`, which torchrun starts)
and in `normexp/__main__.py`. Processes started afterwards (joblib's worker processes,
submitit's jobs, torchrun's ranks) inherit the variable from this process's environment.

A value the user set (OMP_WAIT_POLICY, or GOMP_SPINCOUNT, which libgomp prefers over the
policy) is left alone: `OMP_WAIT_POLICY=ACTIVE normexp train ...` brings back spinning.
"""

from __future__ import annotations

import os

WAIT_POLICY = "PASSIVE"
USER_KNOBS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def configure(environ=os.environ) -> None:
    """Set OMP_WAIT_POLICY=PASSIVE unless the user chose how OpenMP threads wait."""
    if not any(knob in environ for knob in USER_KNOBS):
        environ["OMP_WAIT_POLICY"] = WAIT_POLICY
