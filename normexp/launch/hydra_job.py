"""The Hydra job: what runs once per run (or per sweep combination), its status transitions
(running -> completed / stalled / diverged by training; interrupted, requeued or failed here),
and the one place that reads Hydra's global job state (`job_context`, `in_sweep`): below this
layer `train(cfg)` reads nothing global."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path

import typer

from ..config.compose import CONFIG_MODULE, CONFIG_NAME, expose_plugins, split_hydra_args
from ..config.keys import override_key
from ..train.signals import GRACE_SECONDS, exit_if_early_signal
from .exits import EXIT_BAD_INPUT, fail
from .preflight import claim_output, preflight
from ..runs.schema import Status

def _mark_interrupted(run_dir: Path, hard_stop_signum: int | None = None) -> None:
    """Status "interrupted" in summary.json (unless the run had finished), steps_completed the
    newest checkpoint's: what a stop that could not wait for a step boundary leaves behind."""
    import logging
    import signal

    from ..runs.checkpoint import list_checkpoints
    from ..train.distributed import is_main
    from ..runs.folder import FINISHED, read_summary, set_status

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

    from ..runs.folder import FINISHED, claim_folder, read_record, restore_hydra_files, trained_nothing, write_record
    from ..runs.resume import same_settings
    from .validate import validate

    log = logging.getLogger("normexp")
    if previous is None and (run_dir / "summary.json").exists():  # a sweep's job folder: no pre-flight saw it
        from ..runs.folder import FolderTaken
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
    from ..runs.folder import FolderTaken, read_summary, restore_hydra_files, trained_nothing
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
        from ..runs.folder import set_status

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


def _leave_resumable(run_dir: Path, cfg, previous: dict | None, message: str, code: int) -> None:
    """What a job that raised leaves behind. A run that had trained (in this process, or an
    interrupted run being resumed) stays resumable: stopped by its environment (exit 2: a full
    disk, a read-only folder) it is "interrupted" at its newest checkpoint; a run refused
    before it trained again keeps its status. Only a run that trained nothing is "failed"."""
    from ..runs.folder import read_summary, restore_hydra_files, trained_nothing, write_summary

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
    from ..runs.folder import set_status, summary_record

    if not is_main():  # under torchrun only rank 0 writes into the run folder
        return
    try:
        base = summary_record(cfg)
    except Exception:  # noqa: BLE001 - the config itself may be what is broken
        base = {}
    set_status(run_dir, Status.FAILED, base, error=message)


class _StartRefused(BaseException):
    """The machine refused a write while Hydra set a run's folder up (a full disk when it
    writes .hydra/config.yaml). A BaseException, so that it passes Hydra's own report of
    errors (a traceback and exit 1) on its way to run_hydra, which says it in one line."""

    def __init__(self, error: OSError, run_dir: Path):
        super().__init__(str(error))
        self.error, self.run_dir = error, run_dir


def _undo_start(run_dir: Path) -> bool:
    """Leave the folder as it was before this command: a run already there (being resumed)
    gets its own .hydra files back; a new run's folder loses what Hydra and the claim put in
    it (the folder itself too, if the claim made it). True when a run is there to resume."""
    import contextlib
    import logging
    import shutil

    from ..runs.folder import CLAIM, holds_own_claim, read_record, read_summary, restore_hydra_files
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


def run_hydra(args: list[str], hooks=None) -> list | None:
    """Hydra's main with `args` as its command line; each job runs `hydra_task`. Returns a
    sweep's job results (Hydra's JobReturn objects), None for a single run. Hydra's methods are
    wrapped for the length of the call (`_hydra_wrapped`)."""
    import hydra

    def task(cfg):
        return hydra_task(cfg, hooks)

    expose_plugins()  # hydra/sweeper=boundary, also from an editable install
    main = hydra.main(version_base="1.3", config_path=f"pkg://{CONFIG_MODULE}", config_name=CONFIG_NAME)(task)
    flags, overrides = split_hydra_args(args)
    saved, results = sys.argv, []
    # flags first: Hydra's argparse refuses a flag (-m, --cfg job) after the overrides
    # the shell completion script Hydra prints registers itself for sys.argv[0]'s name: the
    # `normexp` command (its query comes back through cli._completion_for_train)
    completion = any(f.split("=")[0] in ("-sc", "--shell-completion") for f in flags)
    sys.argv = ["normexp" if completion else "normexp train", *flags, *overrides]
    from ..runs.folder import new_launch

    new_launch()
    try:
        with _hydra_wrapped(results):
            main()
    except _StartRefused as e:
        from .exits import folder_refusal

        fail(folder_refusal(e.error, "hydra.run.dir", e.run_dir, resumable=_undo_start(e.run_dir)))
    finally:
        sys.argv = saved
    return results if any(f in ("-m", "--multirun") for f in flags) else None


@contextlib.contextmanager
def _hydra_wrapped(results: list):
    """Hydra's methods, wrapped while the block runs, put back after: the sweep's results are
    kept in `results` (hydra.main drops them; they count the failed jobs, any launcher),
    `--help` gets the presets' descriptions (_presets_help), `--cfg` the numbers behind "auto"
    (_annotate_auto), and a refused write of its .hydra files becomes one line (_StartRefused).
    These are Hydra's internals (hydra._internal.hydra.Hydra, hydra.core.utils._save_config):
    the one place that touches them."""
    import hydra.core.utils as hydra_utils
    from hydra._internal.hydra import Hydra

    multirun, get_help, show_cfg, save_config = Hydra.multirun, Hydra.get_help, Hydra.show_cfg, hydra_utils._save_config

    def keep_results(self, *a, **kw):
        batches = multirun(self, *a, **kw)
        results.extend(r for batch in batches or [] for r in batch)
        return batches

    def with_presets(self, *a, **kw):  # `normexp train --help`: each preset with its one-line description
        return get_help(self, *a, **kw).replace("$PRESETS", _presets_help())

    def with_resolved(self, config_name, overrides, cfg_type, package, resolve=False):
        shown = io.StringIO()
        with contextlib.redirect_stdout(shown):
            show_cfg(self, config_name, overrides, cfg_type, package, resolve)
        text = shown.getvalue()
        if cfg_type in ("job", "all") and package is None:
            from hydra.types import RunMode

            text = _annotate_auto(text, lambda: self.compose_config(config_name, overrides, run_mode=RunMode.RUN))
        sys.stdout.write(text)

    def saving(config, filename, output_dir):  # Hydra's .hydra/*.yaml, written before the job starts
        try:
            save_config(config, filename, output_dir)
        except OSError as e:
            from .exits import environment_refusal

            if environment_refusal(e) is None or in_sweep():
                raise
            raise _StartRefused(e, Path(output_dir).parent) from None

    Hydra.multirun, Hydra.get_help, Hydra.show_cfg, hydra_utils._save_config = (keep_results, with_presets,
                                                                                with_resolved, saving)
    try:
        yield
    finally:
        Hydra.multirun, Hydra.get_help, Hydra.show_cfg, hydra_utils._save_config = (multirun, get_help, show_cfg,
                                                                                    save_config)


def _annotate_auto(text: str, compose) -> str:
    """`--cfg job`: each "auto" setting of the norm and the placement (placement.alpha: auto) gets
    a comment with the number the run will use (DeepNorm's α = (2N)^(1/4) at the run's depth),
    as the model works it out. The text is otherwise Hydra's: the config as the run saves it."""
    import re

    try:
        cfg = compose()  # the job's config, as Hydra composed it for the display
        groups = ("norm", "placement")
        if not any(v == "auto" for g in groups for v in cfg[g].values()):
            return text
        from ..model.gpt import resolved_settings  # imports torch: only when there is an "auto" to show

        values = resolved_settings(cfg.norm, cfg.placement, cfg.layers)
    except Exception:  # noqa: BLE001 - the pre-flight refused bad settings already; never block the display
        return text
    lines, section = [], None
    for line in text.splitlines():
        top = re.match(r"^(\w+):", line)
        section = top[1] if top else section
        setting = re.match(r"^  (\w+): auto$", line)
        if setting and section in values and setting[1] in values[section]:
            line += f"  # {values[section][setting[1]]:.6g} for layers={cfg.layers}: what the run uses"
        lines.append(line)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def _presets_help() -> str:
    """The presets of `normexp train --help`: one line each, name and description."""
    from ..config.compose import group_options, preset_description

    names = group_options("experiment")
    width = max(map(len, names), default=0)
    return "\n".join(f"  {n:<{width}}  {preset_description(n) or ''}".rstrip() for n in names)


def _sweep_outcome(results: list) -> None:
    """Exit 1 when every job of a sweep failed; say how many failed either way."""
    failed = [r for r in results if r.status.name != "COMPLETED" or r._return_value is None]
    if not results or not failed:
        return
    if len(failed) == len(results):
        fail(f"all {len(results)} jobs of the sweep failed (each job's error is above and in its train.log)", code=1)
    typer.echo(f"normexp: {len(failed)} of {len(results)} jobs of the sweep failed (each job's error is above and "
               "in its train.log)", err=True)


def run_train(args: list[str], hooks=None) -> None:
    """`normexp train ARGS`: the pre-flight check, torchrun's process group if any, the output
    folder's claim, then Hydra."""
    cfg = preflight(args)
    exit_if_early_signal()  # a Ctrl-C during the pre-flight: stop before Hydra makes a folder
    from ..train import distributed
    from . import launchers
    from ..config.checks import ConfigError

    if launchers.launched_by_torchrun():  # one run, several processes: see distributed.py
        if any(a in ("-m", "--multirun") for a in args):
            fail("torchrun trains one run on several processes; drop -m (start one torchrun per run)")
        try:
            args = launchers.join_run(args)
        except ConfigError as e:
            if distributed.is_main():
                fail(str(e))
            raise SystemExit(EXIT_BAD_INPUT)
    if cfg is not None and distributed.is_main():  # under torchrun rank 0 claims (join_run pinned the folder)
        args = claim_output(args, cfg)
    try:
        results = run_hydra(args, hooks)
    finally:
        distributed.cleanup()
    _sweep_outcome(results or [])


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
                      resume=hydra_resume_command(run_dir))


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

        sweep = OmegaConf.load(Path(hc.sweep.dir) / "multirun.yaml")
        return resume_command(run_dir, list(sweep.hydra.overrides.task), Path(hc.sweep.dir))
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
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    try:
        typed = OmegaConf.load(Path(hc.sweep.dir) / "multirun.yaml").hydra.overrides.task
        parsed = OverridesParser.create().parse_overrides([str(o) for o in typed])
    except Exception:  # noqa: BLE001 - no readable multirun.yaml
        parsed = []
    return {override_key(o.input_line) for o in parsed if o.is_sweep_override()} | {
        str(k) for k in (hc.sweeper.get("params") or {})}
