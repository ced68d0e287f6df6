"""What a job that stopped leaves in its run folder's summary.json: "interrupted" at its newest
checkpoint (a stop that could not wait for a step boundary), "failed" with its one-line error
(a run that trained nothing), or the run as it was (a refused resume). Training itself writes
running, completed, stalled and diverged."""

from __future__ import annotations

import logging
import signal
from pathlib import Path

from ..runs.claims import trained_nothing
from ..runs.record import restore_hydra_files
from ..runs.schema import FINISHED, Status
from ..runs.summary import read_summary, set_status, summary_record, write_summary
from ..train.signals import GRACE_SECONDS
from .exits import EXIT_BAD_INPUT


def _is_main() -> bool:
    """Under torchrun only rank 0 writes into the run folder."""
    from ..train.distributed import is_main  # imports torch: only once a job stops

    return is_main()


def mark_interrupted(run_dir: Path, hard_stop_signum: int | None = None, grace: float = 0) -> None:
    """Status "interrupted" in summary.json (unless the run had finished), steps_completed the
    newest checkpoint's: what a stop that could not wait for a step boundary leaves behind.
    `grace`: the wait the stop signals allowed (StopSignals.grace), for the line; GRACE_SECONDS
    at least. The line says `normexp resume FOLDER` (the sweep's folder for a sweep's job)."""
    from ..runs.checkpoint import list_checkpoints, resume_folder_command  # imports torch

    summary = read_summary(run_dir) or {}
    saved = list_checkpoints(run_dir)
    kept = int(saved[-1].stem.split("_")[1]) if saved else 0
    if _is_main() and summary.get("status") not in FINISHED:
        set_status(run_dir, Status.INTERRUPTED, steps_completed=kept)
    if hard_stop_signum is not None:
        logging.getLogger("normexp").warning(
            "interrupted by %s: stopped at once (a second signal, or no step boundary within %.0f s); "
            "%s; resume with: %s", signal.Signals(hard_stop_signum).name, max(grace, GRACE_SECONDS),
            f"the checkpoint of step {kept} is kept" if saved else "no checkpoint yet", resume_folder_command(run_dir))


def leave_resumable(run_dir: Path, cfg, previous: dict | None, message: str, code: int) -> None:
    """What a job that raised leaves behind. A run that had trained (in this process, or an
    interrupted run being resumed) stays resumable: stopped by its environment (exit 2: a full
    disk, a read-only folder) it is "interrupted" at its newest checkpoint; a run refused
    before it trained again keeps its status. Only a run that trained nothing is "failed"."""
    try:
        now = read_summary(run_dir) or {}
        if now.get("status") == Status.RUNNING and code == EXIT_BAD_INPUT:
            mark_interrupted(run_dir)
            write_summary(run_dir, {**read_summary(run_dir), "error": message})
        elif now.get("status") != Status.RUNNING and previous is not None and not trained_nothing(run_dir, previous):
            restore_hydra_files(run_dir)
        else:
            record_failure(run_dir, cfg, message)
    except OSError:  # the disk that stopped the job may refuse this write too: the message still goes out
        pass


def record_failure(run_dir: Path, cfg, message: str) -> None:
    """Status "failed" and the one-line error in summary.json: the run's own summary if it got
    that far, else the config's hyperparameters (as far as they read)."""
    if not _is_main():
        return
    try:
        base = summary_record(cfg)
    except Exception:  # noqa: BLE001 - the config itself may be what is broken
        base = {}
    set_status(run_dir, Status.FAILED, base, error=message)
