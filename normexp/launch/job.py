"""The Hydra job: what runs once per run (or per sweep combination), and how its end maps to
the run's status (running -> completed / stalled / diverged by training; interrupted, requeued
or failed here, through job_status.py). Below this layer `train(cfg)` reads nothing global:
hydra_state.py hands it the job's context."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from ..config.checks import ConfigError
from ..config.keys import override_key
from ..config.variants import check_settings_read
from ..runs.claims import FolderTaken, claim_folder, trained_nothing
from ..runs.record import read_record, restore_hydra_files, write_record
from ..runs.resume import same_settings, unreadable_summary
from ..runs.schema import FINISHED, Status
from ..runs.summary import read_summary, set_status
from ..train.signals import Interrupted, Preempted, StopSignals
from ..train.threads import current_choice
from . import sweep
from .console import label_console
from .exits import EXIT_BAD_INPUT, describe_error
from .hydra_state import hydra_resume_command, in_sweep, job_context
from .job_status import leave_resumable, mark_interrupted, record_failure
from .validate import validate

log = logging.getLogger("normexp")


@dataclass(frozen=True)
class PreparedJob:
    """A job checked, its folder claimed and its record kept: what trains next, with its
    JobContext (train.loop). `hydra_task(cfg, prepare_only=True)` returns it, for the packed
    launcher to train its members together (loop.train_runs)."""

    cfg: DictConfig
    run_dir: Path
    job: object


def _run_job(cfg, run_dir: Path, previous: dict | None, explicit: set, stop, hooks,
             prepare_only: bool = False) -> dict | PreparedJob:
    """Check the job against the run already in its folder (if any), keep normexp's record of
    a new run's settings, and train (or, `prepare_only`, return the PreparedJob)."""
    if previous is None and (run_dir / "summary.json").exists():  # a sweep's job folder: no pre-flight saw it
        raise FolderTaken(f"{run_dir}: {unreadable_summary(run_dir)}")
    validate(cfg, explicit)
    # the pre-flight checks some jobs of a sweep: a job with a setting nothing reads is refused here
    check_settings_read(cfg.norm, cfg.placement, cfg.qk_norm, cfg.scale_embeddings)
    existing = previous is not None and not trained_nothing(run_dir, previous)
    if existing and (cfg.resume or previous.get("status") == Status.REQUEUED):
        same_settings(run_dir, cfg)  # a sweep job's only check: the pre-flight cannot see job folders
    if existing and cfg.resume and previous.get("status") in FINISHED:  # a re-run sweep
        restore_hydra_files(run_dir)
        log.info("%s already finished (status %s): skipped", run_dir, previous["status"])
        return previous
    from ..train.distributed import is_main  # imports torch, as training does next
    from ..train.alone import train

    if is_main():  # before the job writes anything: the folder is this job's alone (or FolderTaken)
        released = claim_folder(run_dir, bool(cfg.resume) or (previous or {}).get("status") == Status.REQUEUED,
                                "hydra.sweep.dir" if in_sweep() else "hydra.run.dir", job=True)
        if released:
            log.info("normexp: %s", released)
    if existing and previous.get("status") == Status.REQUEUED:  # SLURM started the job again after a preemption
        log.info("%s was requeued by SLURM: resuming from its last checkpoint", run_dir)
        cfg.resume = True
    if is_main() and (not existing or read_record(run_dir) is None):  # under torchrun rank 0 writes
        write_record(run_dir, cfg.data)
    log.info("idle OpenMP threads: %s", current_choice())  # chosen before torch loaded (train/threads.py)
    if prepare_only:
        return PreparedJob(cfg, run_dir, job_context(run_dir))
    return train(cfg, run_dir, stop=stop, hooks=hooks, job=job_context(run_dir))


def hydra_task(cfg, hooks=None, prepare_only: bool = False) -> dict | PreparedJob | None:
    """The job Hydra runs once per run (or per sweep combination). `hooks`: see train.loop.Hooks.
    `prepare_only`: everything up to training (checks, claim, record), the PreparedJob
    returned; a refusal or failure ends the job as it ends a solo one."""
    from ..data.batches import DataError  # imports torch: the job trains next anyway

    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    multirun = hc.mode == RunMode.MULTIRUN
    if hc.job.chdir and Path.cwd() != Path(hc.runtime.cwd):
        # hydra.job.chdir=true moved into the run folder; normexp writes there by its full path
        # anyway, and relative data paths mean what the pre-flight checked: from the start folder
        os.chdir(hc.runtime.cwd)
    if multirun:
        label_console(sweep.job_label(hc))
    stop = StopSignals(on_hard_stop=lambda signum: mark_interrupted(run_dir, signum, grace=stop.grace))
    previous = read_summary(run_dir)
    try:
        with stop:
            return _run_job(cfg, run_dir, previous, {override_key(o) for o in hc.overrides.task}, stop, hooks,
                            prepare_only)
    except Preempted as e:
        # SLURM stops the job soon (time limit or preemption). The checkpoint is saved and the
        # status is "requeued" (also when the signal came before training began); submitit's
        # handler now requeues the job (the launcher resubmits the same job) and exits.
        summary = read_summary(run_dir) or {}
        if summary.get("status") != Status.REQUEUED:
            set_status(run_dir, Status.REQUEUED, requeues=summary.get("requeues", 0) + 1)
        stop.forward(e.signum)
        raise SystemExit(e.exit_code)  # only if no handler was there to requeue the job
    except Interrupted as e:
        if (read_summary(run_dir) or {}).get("status") != Status.INTERRUPTED:  # stopped before training began
            mark_interrupted(run_dir)
            log.warning("interrupted by %s before training: start again with: %s", e, hydra_resume_command(run_dir))
        if multirun and _in_boundary_slot(hc):
            # The boundary sweeper's process stops the search on the same Ctrl-C once its slots
            # return. A worker that raised here would make joblib abort the pool the slots share,
            # killing the other slot's worker mid-checkpoint (seen: one run left "running", no checkpoint).
            return read_summary(run_dir)  # status "interrupted": the search does not judge it
        raise SystemExit(e.exit_code)
    except FolderTaken as e:  # another run's folder: Hydra rewrote its .hydra/ files, nothing else is touched
        restore_hydra_files(run_dir)
        _refused(str(e), multirun)
    except (ConfigError, DataError) as e:
        if previous is not None and not trained_nothing(run_dir, previous):
            restore_hydra_files(run_dir)  # a refused command leaves the run as it was, resumable
        else:
            record_failure(run_dir, cfg, str(e))
        _refused(str(e), multirun)
    except Exception as e:  # noqa: BLE001 - a sweep must go on past one broken job
        message, code = describe_error(e)
        leave_resumable(run_dir, cfg, previous, message, code)
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        if not multirun:
            log.error("normexp: error: %s", message)
            raise SystemExit(code)
        log.error("job failed: %s (the sweep goes on)", message)
    return None


def _in_boundary_slot(hc) -> bool:
    """Whether this job runs in a joblib worker, launched by one of the boundary sweeper's slots."""
    return ("joblib" in str(hc.launcher.get("_target_", "")).lower()
            and "boundary" in str(hc.sweeper.get("_target_", "")).lower())


def _refused(message: str, multirun: bool) -> None:
    """A job its settings or its folder refuse: one line; a single run exits 2, a sweep goes on."""
    log.error("normexp: error: %s", message)
    if not multirun:
        raise SystemExit(EXIT_BAD_INPUT)
