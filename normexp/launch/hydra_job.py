"""`normexp train`: the command line parsed once, the pre-flight, torchrun's process group,
the output folder's claim, then Hydra's main running each job (job.py). Around Hydra: the
`--cfg` display (shown_config.py), a start refused before the run's .hydra files are written,
and the sweep's closing lines (sweep.end_of_sweep)."""

from __future__ import annotations

import contextlib
import logging
import shutil
import sys
from pathlib import Path

import hydra

from ..config.checks import ConfigError
from ..config.compose import CONFIG_MODULE, CONFIG_NAME, expose_plugins, register_resolvers
from ..runs.claims import CLAIM, holds_own_claim, new_launch
from ..runs.record import read_record, restore_hydra_files
from ..runs.summary import read_summary
from ..train.signals import exit_if_early_signal
from . import sweep
from .exits import EXIT_BAD_INPUT, fail, folder_refusal
from .job import hydra_task
from .plan import LaunchPlan
from .preflight import claim_output, made_by_claim, preflight
from .shown_config import annotated_cfg


def _undo_start(run_dir: Path) -> bool:
    """Leave the folder as it was before this command: a run already there (being resumed)
    gets its own .hydra files back; a new run's folder loses what Hydra and the claim put in
    it (the folder itself too, if the claim made it). True when a run is there to resume."""
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
    from its printed text (shown_config.annotated_cfg), and a refused write of a run's .hydra
    files is one line (sweep.StartRefused, raised by the callback's on_run_start)."""

    def task(cfg):
        return hydra_task(cfg, hooks)

    expose_plugins()  # hydra/sweeper=boundary, also from an editable install
    register_resolvers()  # ${normexp_presets:} of the help template
    main = hydra.main(version_base="1.3", config_path=f"pkg://{CONFIG_MODULE}", config_name=CONFIG_NAME)(task)
    saved = sys.argv
    # the shell completion script Hydra prints registers itself for sys.argv[0]'s name: the
    # `normexp` command (its query comes back through cli._completion_for_train)
    sys.argv = ["normexp" if plan.completion else "normexp train", *plan.args]
    new_launch()
    sweep.start_launch()
    try:
        with annotated_cfg(plan):
            main()
    except sweep.StartRefused as e:
        fail(folder_refusal(e.error, "hydra.run.dir", e.run_dir, resumable=_undo_start(e.run_dir)))
    finally:
        sys.argv = saved
        sweep.stop_watching()
    return sweep.finished_sweep() if plan.multirun else None


def run_train(args: list[str], hooks=None) -> None:
    """`normexp train ARGS`: the command line parsed once (LaunchPlan), the pre-flight check,
    torchrun's process group if any, the output folder's claim, then Hydra."""
    plan = LaunchPlan.parse(args)
    plan, cfg = preflight(plan)
    exit_if_early_signal()  # a Ctrl-C during the pre-flight: stop before Hydra makes a folder
    if plan.completion or plan.cfg is not None or plan.has_flag("--help", "-h", "--hydra-help", "--info", "-i"):
        run_hydra(plan)  # Hydra's answer alone: nothing trains, so torch (seconds to import) stays unloaded
        return
    from ..train import distributed  # imports torch: only for a command that trains
    from . import launchers

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
        distributed.leave_together()
    finally:
        distributed.cleanup()
    sweep.end_of_sweep(outcome)
