"""How idle OpenMP threads wait: chosen from how busy the machine is, before torch loads OpenMP.

torch's CPU wheels run intra-op parallelism (and MKL's and oneDNN's) on GNU OpenMP
(libgomp). Between parallel regions libgomp's worker threads spin for a while before they
sleep (GOMP_SPINCOUNT, 300,000 spins by default). Measured on 2 cores (issue 31, docs/speed.md):

- on an idle machine spinning pays: a sleeping worker's wake-up at every one of a step's many
  small parallel regions made `OMP_WAIT_POLICY=PASSIVE` (spin count 0) ~20 % slower;
- when another process keeps a core busy, the spinning worker takes the time slices the other
  thread of the same step needs, and a 2-thread run fell to 0.28× of its idle speed, against
  0.48× with passive waiting (about what losing one of two cores costs).

So `configure()` looks at the machine first: over SAMPLE_SECONDS it reads how many cores other
processes kept busy (psutil's system-wide CPU times, on Linux, macOS and Windows alike). At BUSY_CORES or more it
sets OMP_WAIT_POLICY=PASSIVE (OpenMP spec §6.7; libgomp and Intel's libiomp both honour it);
otherwise it leaves OpenMP's default. The choice holds for the process's life (OpenMP reads its
environment once) and never changes a number, only how threads wait.

libgomp reads its environment when the library is loaded, i.e. on `import torch`, so
`configure()` runs first thing in `normexp.cli` (every `normexp` command and `python -m
normexp.cli`, which torchrun starts) and in `normexp/__main__.py`. A process started later
(joblib's workers, submitit's jobs, torchrun's ranks) inherits the environment; a policy this
module set is marked (CHOSEN_BY) so that such a process looks at the machine again itself.

A value the user set (OMP_WAIT_POLICY, or GOMP_SPINCOUNT, which libgomp prefers over the policy)
is left alone: `OMP_WAIT_POLICY=PASSIVE normexp train ...` always waits passively,
`OMP_WAIT_POLICY=ACTIVE` always spins.
"""

from __future__ import annotations

import os

WAIT_POLICY = "PASSIVE"
USER_KNOBS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
CHOSEN_BY = "NORMEXP_OMP_WAIT"     # marks a policy normexp chose (inherited, not the user's)
BUSY_CORES = 0.5                   # others' use, in cores, from which spinning costs more than it saves
SAMPLE_SECONDS = 0.1
CHOICE = None  # what configure() decided in this process, for the run's log (see current_choice)


def others_busy_cores(seconds: float = SAMPLE_SECONDS) -> float:
    """How many cores other processes keep busy: the machine's CPU use over `seconds` while this
    process sleeps (psutil.cpu_percent: the share of all cores' time not idle), in cores."""
    import psutil

    return (psutil.cpu_count() or 1) * psutil.cpu_percent(interval=seconds) / 100


def configure(environ=os.environ, busy_cores=None) -> str:
    """Choose how OpenMP threads wait, unless the user chose; returns (and keeps in CHOICE) what
    holds and why. `busy_cores`: the other processes' use in cores (measured when None)."""
    global CHOICE
    CHOICE = _choose(environ, busy_cores)
    return CHOICE


def _choose(environ, busy_cores) -> str:
    if environ.get(CHOSEN_BY):  # inherited from the normexp process that started this one: look again
        for knob in USER_KNOBS:
            environ.pop(knob, None)
        environ.pop(CHOSEN_BY)
    if any(knob in environ for knob in USER_KNOBS):
        return "as set by the user (" + ", ".join(f"{k}={environ[k]}" for k in USER_KNOBS if k in environ) + ")"
    busy = others_busy_cores() if busy_cores is None else busy_cores
    if busy >= BUSY_CORES:
        environ["OMP_WAIT_POLICY"] = WAIT_POLICY
        environ[CHOSEN_BY] = f"{busy:.2f}"
        return f"passive (other processes kept {busy:.1f} cores busy at start)"
    return f"spinning, OpenMP's default (the machine was idle at start: {busy:.1f} cores busy)"


def current_choice(environ=os.environ) -> str:
    """What holds for this process's OpenMP threads, for the run's log: configure()'s decision
    when it ran here, else what the environment this process was started with says (joblib's
    and submitit's workers load torch before any normexp code of theirs runs, so they keep the
    policy of the process that started them)."""
    if CHOICE is not None:
        return CHOICE
    if environ.get(CHOSEN_BY):
        return f"passive, inherited (the process that started this one saw {environ[CHOSEN_BY]} cores busy)"
    if any(knob in environ for knob in USER_KNOBS):
        return "as set by the user (" + ", ".join(f"{k}={environ[k]}" for k in USER_KNOBS if k in environ) + ")"
    return "spinning, OpenMP's default (inherited: the process that started this one set nothing)"
