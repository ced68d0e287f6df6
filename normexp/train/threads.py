"""Threads, in one place: how many a training process uses, and how its idle OpenMP threads wait.

How many (`set_threads`, at the start of every job). `threads=auto` takes the process's cores
÷ the jobs a sweep runs at once (`threads_per_job`): `normexp train -m hydra/launcher=joblib
hydra.launcher.n_jobs=2 ...` runs two jobs at once on this machine, so each takes cores ÷ 2;
under submitit (SLURM or `submitit_local`) a job takes `hydra.launcher.cpus_per_task`; under
torchrun the node's processes share its cores. joblib reuses its worker processes, so the count
is set again at the start of every job, never once per process.

How idle threads wait (`configure`, before torch loads OpenMP), chosen from how busy the machine is.
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

libgomp reads its environment when the library is loaded, i.e. on `import torch` (which is
why this module imports torch only inside `set_threads`), so `configure()` runs first thing in
`normexp.cli` (every `normexp` command and `python -m normexp.cli`, which torchrun starts) and
in `normexp/__main__.py`. A process started later
(joblib's workers, submitit's jobs, torchrun's ranks) inherits the environment; a policy this
module set is marked (CHOSEN_BY) so that such a process looks at the machine again itself.

A value the user set (OMP_WAIT_POLICY, or GOMP_SPINCOUNT, which libgomp prefers over the policy)
is left alone: `OMP_WAIT_POLICY=PASSIVE normexp train ...` always waits passively,
`OMP_WAIT_POLICY=ACTIVE` always spins.
"""

from __future__ import annotations

import os

import psutil

WAIT_POLICY = "PASSIVE"
USER_KNOBS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
CHOSEN_BY = "NORMEXP_OMP_WAIT"     # marks a policy normexp chose (inherited, not the user's)
BUSY_CORES = 0.5                   # others' use, in cores, from which spinning costs more than it saves
SAMPLE_SECONDS = 0.1
CHOICE = None  # what configure() decided in this process, for the run's log (see current_choice)


def others_busy_cores(seconds: float = SAMPLE_SECONDS) -> float:
    """How many cores other processes keep busy: the machine's CPU use over `seconds` while this
    process sleeps (psutil.cpu_percent: the share of all cores' time not idle), in cores."""
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


# ------------------------------------------------------------------ how many threads


def available_cores() -> int:
    """CPUs this process may run on: a SLURM allocation or `taskset` mask, not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def parallel_jobs(n_jobs: int | None, cores: int) -> int:
    """joblib's meaning of n_jobs: N > 0 jobs at once; -1 one per core, -2 all but one, ..."""
    if not n_jobs:
        return 1
    return n_jobs if n_jobs > 0 else max(1, cores + 1 + n_jobs)


def threads_per_job(launcher=None) -> int:
    """Threads for one training process when `threads=auto`.

    submitit (SLURM, submitit_local) with `cpus_per_task` set: that many. Otherwise the
    process's cores ÷ the jobs a joblib launcher runs at once ÷ the processes torchrun
    starts on this node (LOCAL_WORLD_SIZE): parallel jobs must not oversubscribe the cores.
    `launcher`: the sweep launcher's config (train.loop.JobContext), None for a single run."""
    cpus_per_task = launcher.get("cpus_per_task") if launcher is not None else None
    if cpus_per_task:
        return int(cpus_per_task)
    cores = available_cores()
    jobs = parallel_jobs(launcher.get("n_jobs") if launcher is not None else None, cores)
    jobs *= int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return max(1, cores // jobs)


def set_threads(threads: int | str, launcher=None) -> int:
    """Set torch's intra-op threads to `threads` (the config's value: a count, or "auto" for
    `threads_per_job(launcher)`); returns the count that holds."""
    import torch  # why: normexp.cli imports this module before torch loads (OpenMP reads configure()'s choice then)

    torch.set_num_threads(threads_per_job(launcher) if threads == "auto" else int(threads))
    return torch.get_num_threads()
