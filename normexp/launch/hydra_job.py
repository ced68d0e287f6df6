"""The Hydra job: what runs once per run (or per sweep combination), its status transitions
(running -> completed / stalled / diverged by training; interrupted, requeued or failed here),
and the one place that reads Hydra's global job state (`job_context`, `in_sweep`): below this
layer `train(cfg)` reads nothing global."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
from pathlib import Path

import typer

from ..config.compose import CONFIG_MODULE, CONFIG_NAME, expose_plugins, register_resolvers
from ..config.keys import override_key
from ..train.signals import GRACE_SECONDS, exit_if_early_signal
from . import sweep
from .exits import EXIT_BAD_INPUT, fail
from .plan import LaunchPlan
from .preflight import claim_output, preflight
from ..runs.schema import Status

def _mark_interrupted(run_dir: Path, hard_stop_signum: int | None = None) -> None:
    """Status "interrupted" in summary.json (unless the run had finished), steps_completed the
    newest checkpoint's: what a stop that could not wait for a step boundary leaves behind."""
    import logging
    import signal

    from ..runs.checkpoint import list_checkpoints
    from ..train.distributed import is_main
    from ..runs.schema import FINISHED
    from ..runs.summary import read_summary, set_status

    summary = read_summary(run_dir) or {}
    saved = list_checkpoints(run_dir)
    kept = int(saved[-1].stem.split("_")[1]) if saved else 0
    if is_main() and summary.get("status") not in FINISHED:
        set_status(run_dir, Status.INTERRUPTED, steps_completed=kept)
    if hard_stop_signum is not None:
        logging.getLogger("normexp").warning(
            "interrupted by %s: stopped at once (a second signal, or no step boundary within %.0f s); "
            "%s; resume with: %s", signal.Signals(hard_stop_signum).name, GRACE_SECONDS,
            f"the checkpoint of step {kept} is kept" if saved else "no checkpoint yet", hydra_resume_command(run_dir))


def _run_job(cfg, run_dir: Path, previous: dict | None, explicit: set, stop, hooks) -> dict:
    """Check the job against the run already in its folder (if any), keep normexp's record of
    a new run's settings, and train."""
    import logging

    from ..runs.claims import claim_folder, trained_nothing
    from ..runs.record import read_record, restore_hydra_files, write_record
    from ..runs.schema import FINISHED
    from ..runs.resume import same_settings
    from .validate import validate

    log = logging.getLogger("normexp")
    if previous is None and (run_dir / "summary.json").exists():  # a sweep's job folder: no pre-flight saw it
        from ..runs.claims import FolderTaken
        from ..runs.resume import unreadable_summary

        raise FolderTaken(f"{run_dir}: {unreadable_summary(run_dir)}")
    validate(cfg, explicit)
    existing = previous is not None and not trained_nothing(run_dir, previous)
    if existing and (cfg.resume or previous.get("status") == Status.REQUEUED):
        same_settings(run_dir, cfg)  # a sweep job's only check: the pre-flight cannot see job folders
    if existing and cfg.resume and previous.get("status") in FINISHED:  # a re-run sweep
        restore_hydra_files(run_dir)
        log.info("%s already finished (status %s): skipped", run_dir, previous["status"])
        return previous
    from ..train.distributed import is_main

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
    from ..train.loop import train  # imports torch
    from ..train.threads import current_choice

    log.info("idle OpenMP threads: %s", current_choice())  # chosen before torch loaded (train/threads.py)
    return train(cfg, run_dir, stop=stop, hooks=hooks, job=job_context(run_dir))


def hydra_task(cfg, hooks=None) -> dict | None:
    """The job Hydra runs once per run (or per sweep combination). `hooks`: see train.loop.Hooks."""
    import logging

    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from ..data.batches import DataError
    from ..runs.claims import FolderTaken, trained_nothing
    from ..runs.record import restore_hydra_files
    from ..runs.summary import read_summary
    from ..train.signals import Interrupted, Preempted, StopSignals
    from ..config.checks import ConfigError

    log = logging.getLogger("normexp")
    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    multirun = hc.mode == RunMode.MULTIRUN
    if hc.job.chdir and Path.cwd() != Path(hc.runtime.cwd):
        # hydra.job.chdir=true moved into the run folder; normexp writes there by its full path
        # anyway, and relative data paths mean what the pre-flight checked: from the start folder
        os.chdir(hc.runtime.cwd)
    if multirun:
        _label_console(sweep.job_label(hc))
    stop = StopSignals(on_hard_stop=lambda signum: _mark_interrupted(run_dir, signum))
    previous = read_summary(run_dir)
    try:
        with stop:
            return _run_job(cfg, run_dir, previous, {override_key(o) for o in hc.overrides.task},
                            stop, hooks)
    except Preempted as e:
        # SLURM stops the job soon (time limit or preemption). The checkpoint is saved and the
        # status is "requeued" (also when the signal came before training began); submitit's
        # handler now requeues the job (the launcher resubmits the same job) and exits.
        from ..runs.summary import set_status

        summary = read_summary(run_dir) or {}
        if summary.get("status") != Status.REQUEUED:
            set_status(run_dir, Status.REQUEUED, requeues=summary.get("requeues", 0) + 1)
        stop.forward(e.signum)
        raise SystemExit(e.exit_code)  # only if no handler was there to requeue the job
    except Interrupted as e:
        if (read_summary(run_dir) or {}).get("status") != Status.INTERRUPTED:  # stopped before training began
            _mark_interrupted(run_dir)
            log.warning("interrupted by %s before training: start again with: %s", e, hydra_resume_command(run_dir))
        raise SystemExit(e.exit_code)
    except FolderTaken as e:  # another run's folder: Hydra rewrote its .hydra/ files, nothing else is touched
        restore_hydra_files(run_dir)
        log.error("normexp: error: %s", e)
        if not multirun:
            raise SystemExit(EXIT_BAD_INPUT)
    except (ConfigError, DataError) as e:
        if previous is not None and not trained_nothing(run_dir, previous):
            restore_hydra_files(run_dir)  # a refused command leaves the run as it was, resumable
        else:
            _record_failure(run_dir, cfg, str(e))
        log.error("normexp: error: %s", e)
        if not multirun:
            raise SystemExit(EXIT_BAD_INPUT)
    except Exception as e:  # noqa: BLE001 - a sweep must go on past one broken job
        from .exits import describe_error

        message, code = describe_error(e)
        _leave_resumable(run_dir, cfg, previous, message, code)
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        if not multirun:
            log.error("normexp: error: %s", message)
            raise SystemExit(code)
        log.error("job failed: %s (the sweep goes on)", message)
    return None


class _Labelled(logging.Formatter):
    """Another formatter's lines with a sweep job's label before each message."""

    def __init__(self, inner: logging.Formatter, label: str):
        super().__init__()
        self.inner, self.label = inner, label

    def format(self, record: logging.LogRecord) -> str:
        labelled = logging.makeLogRecord(record.__dict__)  # the file handler formats the record unlabelled
        labelled.msg, labelled.args = f"{self.label}  {record.getMessage()}", None
        return self.inner.format(labelled)


def _label_console(label: str) -> None:
    """A sweep job's lines on the console start with its label (`#3 placement=post`): parallel
    jobs share the terminal. Its train.log, its own, stays as it is."""
    for handler in logging.getLogger().handlers:
        if type(handler) is logging.StreamHandler:
            inner = handler.formatter.inner if isinstance(handler.formatter, _Labelled) else handler.formatter
            handler.setFormatter(_Labelled(inner or logging.Formatter(), label))  # an earlier job's label replaced


def _leave_resumable(run_dir: Path, cfg, previous: dict | None, message: str, code: int) -> None:
    """What a job that raised leaves behind. A run that had trained (in this process, or an
    interrupted run being resumed) stays resumable: stopped by its environment (exit 2: a full
    disk, a read-only folder) it is "interrupted" at its newest checkpoint; a run refused
    before it trained again keeps its status. Only a run that trained nothing is "failed"."""
    from ..runs.claims import trained_nothing
    from ..runs.record import restore_hydra_files
    from ..runs.summary import read_summary, write_summary

    try:
        now = read_summary(run_dir) or {}
        if now.get("status") == Status.RUNNING and code == EXIT_BAD_INPUT:
            _mark_interrupted(run_dir)
            write_summary(run_dir, {**read_summary(run_dir), "error": message})
        elif now.get("status") != Status.RUNNING and previous is not None and not trained_nothing(run_dir, previous):
            restore_hydra_files(run_dir)
        else:
            _record_failure(run_dir, cfg, message)
    except OSError:  # the disk that stopped the job may refuse this write too: the message still goes out
        pass


def _record_failure(run_dir: Path, cfg, message: str) -> None:
    """Status "failed" and the one-line error in summary.json: the run's own summary if it got
    that far, else the config's hyperparameters (as far as they read)."""
    from ..train.distributed import is_main
    from ..runs.summary import set_status, summary_record

    if not is_main():  # under torchrun only rank 0 writes into the run folder
        return
    try:
        base = summary_record(cfg)
    except Exception:  # noqa: BLE001 - the config itself may be what is broken
        base = {}
    set_status(run_dir, Status.FAILED, base, error=message)


def _undo_start(run_dir: Path) -> bool:
    """Leave the folder as it was before this command: a run already there (being resumed)
    gets its own .hydra files back; a new run's folder loses what Hydra and the claim put in
    it (the folder itself too, if the claim made it). True when a run is there to resume."""
    import contextlib
    import logging
    import shutil

    from ..runs.claims import CLAIM, holds_own_claim
    from ..runs.record import read_record, restore_hydra_files
    from ..runs.summary import read_summary
    from .preflight import made_by_claim

    run_dir = Path(run_dir)
    existing = read_record(run_dir) is not None or read_summary(run_dir) is not None or any(
        run_dir.glob("checkpoints/step_*.pt")) or any(run_dir.glob("events.out.tfevents*"))
    with contextlib.suppress(OSError):
        if existing:
            restore_hydra_files(run_dir)
        else:
            for handler in logging.getLogger().handlers:  # Hydra's train.log handler: closed before removing
                if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).parent == run_dir:
                    handler.close()
            shutil.rmtree(run_dir / ".hydra", ignore_errors=True)
            (run_dir / "train.log").unlink(missing_ok=True)
        if holds_own_claim(run_dir):
            (run_dir / CLAIM).unlink()
        for folder in made_by_claim():
            folder.rmdir()
    return existing


def run_hydra(plan: LaunchPlan, hooks=None) -> sweep.SweepOutcome | None:
    """Hydra's main with the plan's command line; each job runs `hydra_task`. Returns a sweep's
    outcome (its jobs' results, delivered by sweep.SweepCallback), None for a single run.
    What normexp adds to Hydra's own output goes through public means: `--help` fills the
    presets in through a resolver of its template, `--cfg` gets the numbers behind "auto"
    from its printed text (_annotate_auto), and a refused write of a run's .hydra files is
    one line (sweep.StartRefused, raised by the callback's on_run_start)."""
    import hydra

    def task(cfg):
        return hydra_task(cfg, hooks)

    expose_plugins()  # hydra/sweeper=boundary, also from an editable install
    register_resolvers()  # ${normexp_presets:} of the help template
    main = hydra.main(version_base="1.3", config_path=f"pkg://{CONFIG_MODULE}", config_name=CONFIG_NAME)(task)
    saved = sys.argv
    # the shell completion script Hydra prints registers itself for sys.argv[0]'s name: the
    # `normexp` command (its query comes back through cli._completion_for_train)
    sys.argv = ["normexp" if plan.completion else "normexp train", *plan.args]
    from ..runs.claims import new_launch

    new_launch()
    sweep.start_launch()
    # `--cfg job`/`all` of normexp's own config (another --config-name composes another config)
    shown = io.StringIO() if plan.cfg in ("job", "all") and not plan.has_flag(
        "--package", "-p", "--config-name", "-cn", "--config-dir", "-cd", "--config-path", "-cp") else None
    try:
        with contextlib.redirect_stdout(shown) if shown is not None else contextlib.nullcontext():
            main()
    except sweep.StartRefused as e:
        from .exits import folder_refusal

        fail(folder_refusal(e.error, "hydra.run.dir", e.run_dir, resumable=_undo_start(e.run_dir)))
    finally:
        sys.argv = saved
        sweep.stop_watching()
        if shown is not None:
            sys.stdout.write(_annotate_auto(shown.getvalue(), lambda: _compose_shown(plan)))
    return sweep.finished_sweep() if plan.multirun else None


def _compose_shown(plan: LaunchPlan):
    """The job config `--cfg` displays, composed as Hydra composed it for the display."""
    from ..config.compose import compose_config

    return compose_config(list(plan.overrides))


def _annotate_auto(text: str, compose) -> str:
    """`--cfg job`: each "auto" setting gets a comment with the value the run will use
    (config.auto_notes.auto_notes: DeepNorm's α = (2N)^(1/4) at the run's depth, the device, the
    threads, the evaluation and profile cadence, ...). The text is otherwise Hydra's: the config
    as the run saves it."""
    from ..config.auto_notes import auto_notes
    from ..config.compose import annotate

    try:
        cfg = compose()  # the job's config, as Hydra composed it for the display
        if "auto" not in text:
            return text
        notes = auto_notes(cfg)
    except Exception:  # noqa: BLE001 - the pre-flight refused bad settings already; never block the display
        return text
    return annotate(text, notes)


def _sweep_outcome(outcome: sweep.SweepOutcome | None) -> None:
    """The sweep's closing line (how many jobs, their statuses, `normexp report <folder>`);
    exit 1 when every job of a sweep failed; say how many failed either way."""
    if outcome is None or not outcome.results:
        return
    typer.echo(sweep.closing_line(outcome), err=True)
    results = outcome.results
    failed = [r for r in results if not r.ok]
    if not failed:
        return
    if len(failed) == len(results):
        fail(f"all {len(results)} jobs of the sweep failed (each job's error is above and in its train.log)", code=1)
    typer.echo(f"normexp: {len(failed)} of {len(results)} jobs of the sweep failed (each job's error is above and "
               "in its train.log)", err=True)


def run_train(args: list[str], hooks=None) -> None:
    """`normexp train ARGS`: the command line parsed once (LaunchPlan), the pre-flight check,
    torchrun's process group if any, the output folder's claim, then Hydra."""
    plan = LaunchPlan.parse(args)
    plan, cfg = preflight(plan)
    exit_if_early_signal()  # a Ctrl-C during the pre-flight: stop before Hydra makes a folder
    if plan.completion or plan.has_flag("--help", "-h", "--hydra-help", "--info", "-i"):
        run_hydra(plan)  # Hydra's answer alone: nothing trains, so torch (seconds to import) stays unloaded
        return
    from ..train import distributed
    from . import launchers
    from ..config.checks import ConfigError

    if launchers.launched_by_torchrun():  # one run, several processes: see distributed.py
        if plan.multirun:
            fail("torchrun trains one run on several processes; drop -m (start one torchrun per run)")
        try:
            plan = launchers.join_run(plan)
        except ConfigError as e:
            if distributed.is_main():
                fail(str(e))
            raise SystemExit(EXIT_BAD_INPUT)
    if cfg is not None and distributed.is_main():  # under torchrun rank 0 claims (join_run pinned the folder)
        plan = claim_output(plan, cfg)
    try:
        outcome = run_hydra(plan, hooks)
    finally:
        distributed.cleanup()
    _sweep_outcome(outcome)


# ------------------------------------------------------------- Hydra's job state
# The one place below the command line that reads Hydra's global state; training gets what
# it needs of it as a JobContext.


def job_context(run_dir: Path):
    """train.loop.JobContext of the running Hydra job: the sweep's launcher (threads=auto),
    the keys it varies, the command that resumes it."""
    from hydra.core.hydra_config import HydraConfig

    from ..train.loop import JobContext

    hc = HydraConfig.get()
    return JobContext(launcher=hc.launcher if in_sweep() else None, swept_keys=frozenset(swept_keys()),
                      resume=hydra_resume_command(run_dir), label=sweep.job_label(hc) if in_sweep() else "")


def in_sweep() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def hydra_resume_command(run_dir: Path) -> str:
    """runs.checkpoint.resume_command with this job's overrides; in a sweep, the sweep's
    (read from the multirun.yaml Hydra writes first) and its folder."""
    from ..runs.checkpoint import resume_command

    try:
        from hydra.core.hydra_config import HydraConfig

        hc = HydraConfig.get()
        if not in_sweep():
            return resume_command(run_dir, list(hc.overrides.task))
        from omegaconf import OmegaConf

        started = OmegaConf.load(Path(hc.sweep.dir) / "multirun.yaml")
        return resume_command(run_dir, list(started.hydra.overrides.task), Path(hc.sweep.dir))
    except Exception:  # noqa: BLE001 - not inside a Hydra job, or no multirun.yaml
        return resume_command(run_dir)


def swept_keys() -> set[str]:
    """The keys this Hydra job varies: in a sweep, the swept ones (`-m placement=pre,post`, or
    an experiment's hydra.sweeper.params); in a single run, those its command line set.
    Group options count as the group (`placement`). Empty outside Hydra."""
    try:
        from hydra.core.hydra_config import HydraConfig

        hc = HydraConfig.get()
    except Exception:  # noqa: BLE001 - not inside a Hydra job
        return set()
    if not in_sweep():
        return {override_key(o) for o in hc.overrides.task}
    return sweep.varied_keys(Path(hc.sweep.dir), hc.sweeper, searched=False)
