"""The one place below the command line that reads Hydra's global job state: training gets
what it needs of it as a train.loop.JobContext (`job_context`), and the job's other modules
ask here whether they run in a sweep and how the run is resumed."""

from __future__ import annotations

from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from ..config.keys import override_key
from . import sweep


def job_context(run_dir: Path):
    """train.loop.JobContext of the running Hydra job: the sweep's launcher (threads=auto),
    the keys it varies, the command that resumes it."""
    from ..train.loop import JobContext  # imports torch: only once a job trains

    hc = HydraConfig.get()
    return JobContext(launcher=hc.launcher if in_sweep() else None, swept_keys=frozenset(swept_keys()),
                      resume=hydra_resume_command(run_dir), label=sweep.job_label(hc) if in_sweep() else "")


def in_sweep() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def hydra_resume_command(run_dir: Path) -> str:
    """runs.checkpoint.resume_command with this job's overrides; in a sweep, the sweep's, Hydra's
    own among them (runs.resume.sweep_resume_overrides: from the multirun.yaml Hydra writes
    first), and its folder."""
    from ..runs.checkpoint import resume_command  # imports torch: only once a job has run

    try:
        hc = HydraConfig.get()
        if not in_sweep():
            return resume_command(run_dir, list(hc.overrides.task))
        from ..runs.resume import sweep_resume_overrides

        return resume_command(run_dir, sweep_resume_overrides(Path(hc.sweep.dir)), Path(hc.sweep.dir))
    except Exception:  # noqa: BLE001 - not inside a Hydra job, or no multirun.yaml
        return resume_command(run_dir)


def swept_keys() -> set[str]:
    """The keys this Hydra job varies: in a sweep, the swept ones (`-m placement=pre,post`, or
    an experiment's hydra.sweeper.params); in a single run, those its command line set.
    Group options count as the group (`placement`). Empty outside Hydra."""
    try:
        hc = HydraConfig.get()
    except Exception:  # noqa: BLE001 - not inside a Hydra job
        return set()
    if not in_sweep():
        return {override_key(o) for o in hc.overrides.task}
    return sweep.varied_keys(Path(hc.sweep.dir), hc.sweeper, searched=False)
