"""The `normexp` command line: Typer in front, Hydra behind `train`.

`normexp train ARGS...` hands ARGS to Hydra unchanged, so overrides (`layers=48`),
`-m/--multirun`, `--cfg job`, `hydra.*` keys and `experiment=...` all work. Before Hydra
creates any folder, a pre-flight composes the config and checks it, so a typo costs one
line and exit code 2, not a traceback after a minute of data loading.
"""

from __future__ import annotations

from .threads_env import configure as _configure_threads_env

_configure_threads_env()  # before anything imports torch: OpenMP reads it once, when torch loads

import os
import sys
from pathlib import Path

import typer

from .compose import CONFIG_MODULE, CONFIG_NAME, compose_config, expose_plugins, config_groups, group_options, split_hydra_args
from .signals import GRACE_SECONDS, catch_early_signals, exit_if_early_signal, release_early_signals

app = typer.Typer(
    help="Study where and how Transformers normalize: train, instrument, compare.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)

EXIT_BAD_INPUT = 2


def fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    """One line on stderr and a non-zero exit; the traceback only with HYDRA_FULL_ERROR=1."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1" and sys.exc_info()[0] is not None:
        raise
    typer.echo(f"normexp: error: {message}", err=True)
    raise SystemExit(code)


@app.callback()
def _root(ctx: typer.Context):
    """normexp: Post-LN vs Pre-LN vs DeepNorm (and more) across depth and warmup."""
    if ctx.invoked_subcommand != "train":  # only training defers Ctrl-C (see main)
        release_early_signals()


# ----------------------------------------------------------------------- train

# Flags after which no pre-flight is wanted.
_NO_PREFLIGHT = {"--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc",
                 "--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd", "--experimental-rerun"}



_HYDRA_FLAGS = {"--help", "-h", "--hydra-help", "--version", "--cfg", "-c", "--resolve", "--package", "-p",
                "--run", "-r", "--multirun", "-m", "--shell-completion", "-sc", "--config-path", "-cp",
                "--config-name", "-cn", "--config-dir", "-cd", "--experimental-rerun", "--info", "-i"}


def _check_flags(args: list[str]) -> None:
    """One line for a flag Hydra does not know (argparse would print its whole usage)."""
    for i, a in enumerate(args):
        if not a.startswith("-") or a == "-":
            continue
        flag, _, value = a.partition("=")
        if flag not in _HYDRA_FLAGS:
            fail(f"unknown option {flag}; overrides are key=value (no dashes), flags are -m/--multirun, "
                 "--cfg job, --info, --help (see `normexp train --help`)")
        if flag in ("--cfg", "-c"):
            value = value or (args[i + 1] if i + 1 < len(args) else "")
            if value not in ("job", "hydra", "all"):
                fail(f"{flag} {value}: choose --cfg job, --cfg hydra or --cfg all")


def _parse(overrides: list[str]) -> list:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        return OverridesParser.create().parse_overrides(overrides)
    except HydraException as e:
        fail(f"cannot parse the overrides: {str(e).splitlines()[0]}")


def _check_overrides(parsed: list, multirun: bool) -> list[str]:
    """Moved keys, group options, sweeps without -m; returns the first job's overrides."""
    from .config.checks import ConfigError
    from .validate import moved_key

    first = []
    for o in parsed:
        key = o.key_or_group.split("@")[0]
        # a list as a sweeper param's value (hydra.sweeper.params.seed=0,1) is a sweep of the
        # param itself, which Hydra cannot take; a quoted one ('0,1') or one value is the preset form
        if key.lstrip("+~").startswith("hydra.sweeper.params.") and o.is_sweep_override():
            swept = key.lstrip("+~")[len("hydra.sweeper.params."):]
            fail(f"{o.input_line}: give a sweep on the command line as {swept}={o.input_line.split('=', 1)[-1]} "
                 "with -m (hydra.sweeper.params is for a preset's yaml)")
        values = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.get_value_element_as_str()]
        try:
            moved_key(key, values[0])
        except ConfigError as e:
            fail(str(e))
        if key.lstrip("+~") in config_groups():
            valid = group_options(key.lstrip("+~"))
            for v in values:
                if v not in valid and v != "null":
                    fail(f"{key}={v}: unknown option; choose from {', '.join(valid)}")
        if o.is_sweep_override() and not multirun:
            fail(f"{o.input_line}: a sweep needs -m (normexp train -m {o.input_line})")
        first.append(f"{o.input_line.split('=')[0]}={values[0]}" if o.is_sweep_override() else o.input_line)
    return first


def _compose(job: list[str], hydra: bool = False, sweep: bool = False):
    """The config of one job, or one line naming the override Hydra could not apply."""
    import re

    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        return compose_config(job, hydra=hydra)
    except (HydraException, OmegaConfBaseException) as e:
        msg = " ".join(str(e).split())
        missing = re.search(r"Could not override '([^']+)'", msg)
        if missing:
            given = next((o for o in job if o.split("=")[0].lstrip("+~") == missing[1]), missing[1])
            key = missing[1].split(".")[0]
            chosen = next((o for o in job if o.split("=")[0] == key), None)  # e.g. placement=pre
            where = f" of {chosen}" if chosen and key in config_groups() else ""
            swept = "; a setting of only some swept options needs a sweep of its own" if sweep and where else ""
            fail(f"{given}: no such setting{where}{swept}; see `normexp train --cfg job` for the keys")
        if "Key '" in msg:
            msg += " (add new keys with +key=value; see `normexp train --cfg job` for the keys)"
        fail(msg)


def check_job(job, explicit) -> None:
    """Everything about one job's settings that needs no data: validate.py's rules, then the
    norm's and placement's own (their classes, so this imports torch)."""
    from .validate import validate

    validate(job, explicit)
    from .config.registry import variant
    from .model import INITS, check_settings

    check_settings(job.norm, job.placement, job.layers)
    init_cls, init_settings = variant(INITS, "init", job.init)  # settings the init does not take,
    init_cls(job.d_model, job.layers, **init_settings)  # and bad values (found at model build otherwise)
    from .validate import check_memory

    check_memory(job)


# a sweep larger than this is checked on an evenly spread sample of its jobs (~50 ms each)
MAX_CHECKED_JOBS = 200


def _check_sweep(parsed: list, sweeper_params, explicit) -> None:
    """Compose every job of the sweep (a job Hydra cannot compose would stop the whole sweep
    midway) and check its settings: if every job would fail, refuse the sweep; a value that
    is bad in only some jobs fails just those jobs when they run."""
    from .compose import sweep_jobs
    from .config.checks import ConfigError

    jobs = sweep_jobs(parsed, sweeper_params)
    sample = jobs if len(jobs) <= MAX_CHECKED_JOBS else jobs[:: -(-len(jobs) // MAX_CHECKED_JOBS)]
    errors = []
    for job in sample:
        exit_if_early_signal()
        try:
            check_job(_compose(job, sweep=True), explicit)
        except ConfigError as e:
            errors.append(str(e))
    if errors and len(errors) == len(sample):
        fail(f"{errors[0]} (every one of the {len(jobs)} jobs of the sweep would fail)")
    if errors:
        typer.echo(f"normexp: warning: {len(errors)} of {len(sample)} jobs will fail: {errors[0]}", err=True)


def _check_boundary_search(sweeper, parsed: list) -> None:
    """hydra/sweeper=boundary: its own settings, and the searched key not swept as well."""
    from .boundary import check_settings

    problem = check_settings(sweeper.key, sweeper.lower, sweeper.upper, sweeper.ratio, sweeper.initial_points)
    if problem:
        fail(problem)
    swept = {o.key_or_group for o in parsed if o.is_sweep_override()} | set((sweeper.get("params") or {}).keys())
    if sweeper.key in swept:
        fail(f"{sweeper.key}: the boundary sweeper searches it between hydra.sweeper.lower={sweeper.lower} and "
             f"hydra.sweeper.upper={sweeper.upper}; drop the list of {sweeper.key} values")


def preflight(args: list[str]):
    """Compose the config as Hydra will and check it before any folder is written: one run
    fully; a sweep job by job (see _check_sweep). Returns the composed config (with its hydra
    node) of a command that will train, else None."""
    flags, overrides = split_hydra_args(args)
    _check_flags(args)
    if any(f in _NO_PREFLIGHT for f in flags):
        return None
    multirun = "-m" in flags or "--multirun" in flags
    show = any(f in ("--cfg", "-c") for f in flags)
    if multirun and show:
        fail("--cfg shows the config of one run: drop -m (or use --cfg with a single value per key)")
    from omegaconf import OmegaConf

    from .compose import sweep_jobs
    from .runfolder import check_job_folders
    from .config.checks import ConfigError
    from .validate import check_cache, check_output_folder

    parsed = _parse(overrides)
    cfg = _compose(_check_overrides(parsed, multirun), hydra=True)
    sweeper_params = OmegaConf.select(cfg, "hydra.sweeper.params")
    if sweeper_params and not multirun and not show:  # a preset that is a sweep
        preset = next((o for o in overrides if o.startswith("experiment=")), "the preset")
        fail(f"{preset}: a sweep over {', '.join(map(str, sweeper_params))}; add -m "
             f"(normexp train -m {' '.join(overrides)})")
    if multirun and "boundary_sweeper" in str(OmegaConf.select(cfg, "hydra.sweeper._target_")):
        _check_boundary_search(cfg.hydra.sweeper, parsed)
    if multirun:
        from .distributed import launcher_problem  # imports torch: only sweeps need it
        if launcher_problem(cfg.hydra.launcher):
            fail(launcher_problem(cfg.hydra.launcher))
        from .validate import check_launcher
        try:
            check_launcher(cfg.hydra.launcher)
        except ConfigError as e:
            fail(str(e))
    explicit = {o.key_or_group for o in parsed}
    try:
        if multirun:
            _check_sweep(parsed, sweeper_params, explicit)
        else:
            check_job(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), explicit)
        check_cache()
        if multirun:
            check_job_folders(cfg, sweep_jobs(parsed, sweeper_params))
        nothing_to_do = check_output_folder(cfg, multirun, explicit)
    except ConfigError as e:
        fail(str(e))
    if nothing_to_do:  # resume=true on a finished run: say so, write nothing
        typer.echo(f"normexp: {nothing_to_do}", err=True)
        raise SystemExit(0)
    return None if show else cfg


def claim_output(args: list[str], cfg) -> list[str]:
    """Claim the folder this command writes into before Hydra writes anything (runfolder's
    claims), and pin it in the arguments: Hydra would resolve the default `${now:...}` name
    again, maybe in the next second. A single run claims its run folder; a new sweep its
    sweep folder (each job then claims its own job folder). One line and exit 2 when the
    folder belongs to another run."""
    from omegaconf import OmegaConf

    from .runfolder import FolderTaken, claim_default_folder, claim_folder, claim_sweep_folder

    flags, overrides = split_hydra_args(args)
    multirun = "-m" in flags or "--multirun" in flags
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    given = {o.split("=", 1)[0].lstrip("+~"): o for o in overrides}
    folder = Path(str(OmegaConf.select(cfg, key)))
    if key in given:  # as given (torchrun's join_run pins rank 0's folder after the pre-flight composed its own)
        from hydra.core.override_parser.overrides_parser import OverridesParser

        value = str(OverridesParser.create().parse_override(given[key]).value())
        folder = folder if "${" in value else Path(value)
    resume = OmegaConf.select(cfg, "resume") is True
    try:
        if key not in given and not resume:
            folder = claim_default_folder(folder, key)
        elif not multirun:
            claim_folder(folder, resume, key)
        elif not resume:
            claim_sweep_folder(folder)
    except FolderTaken as e:
        fail(str(e))
    quote = '"' if "'" in str(folder) else "'"  # a quoted value keeps `,` or `=` in a path literal
    return [a for a in args if a.split("=", 1)[0] != key] + [f"{key}={quote}{folder}{quote}"]


def _mark_interrupted(run_dir: Path, hard_stop_signum: int | None = None) -> None:
    """Status "interrupted" in summary.json (unless the run had finished), steps_completed the
    newest checkpoint's: what a stop that could not wait for a step boundary leaves behind."""
    import logging
    import signal

    from .checkpoint import list_checkpoints, resume_command
    from .distributed import is_main
    from .runfolder import FINISHED, read_summary, write_summary

    summary = read_summary(run_dir) or {}
    saved = list_checkpoints(run_dir)
    kept = int(saved[-1].stem.split("_")[1]) if saved else 0
    if is_main() and summary.get("status") not in FINISHED:
        write_summary(run_dir, {**summary, "status": "interrupted", "steps_completed": kept})
    if hard_stop_signum is not None:
        logging.getLogger("normexp").warning(
            "interrupted by %s: stopped at once (a second signal, or no step boundary within %.0f s); "
            "%s; resume with: %s", signal.Signals(hard_stop_signum).name, GRACE_SECONDS,
            f"the checkpoint of step {kept} is kept" if saved else "no checkpoint yet", resume_command(run_dir))


def _run_job(cfg, run_dir: Path, previous: dict | None, explicit: set, stop, hooks) -> dict:
    """Check the job against the run already in its folder (if any), keep normexp's record of
    a new run's settings, and train."""
    import logging

    from .runfolder import FINISHED, claim_folder, read_record, restore_hydra_files, trained_nothing, write_record
    from .validate import same_settings, validate

    log = logging.getLogger("normexp")
    validate(cfg, explicit)
    existing = previous is not None and not trained_nothing(run_dir, previous)
    if existing and (cfg.resume or previous.get("status") == "requeued"):
        same_settings(run_dir, cfg)  # a sweep job's only check: the pre-flight cannot see job folders
    if existing and cfg.resume and previous.get("status") in FINISHED:  # a re-run sweep
        restore_hydra_files(run_dir)
        log.info("%s already finished (status %s): skipped", run_dir, previous["status"])
        return previous
    from .distributed import is_main

    if is_main():  # before the job writes anything: the folder is this job's alone (or FolderTaken)
        claim_folder(run_dir, bool(cfg.resume) or (previous or {}).get("status") == "requeued",
                     "hydra.sweep.dir" if _in_sweep() else "hydra.run.dir")
    if existing and previous.get("status") == "requeued":  # SLURM started the job again after a preemption
        log.info("%s was requeued by SLURM: resuming from its last checkpoint", run_dir)
        cfg.resume = True
    if is_main() and (not existing or read_record(run_dir) is None):  # under torchrun rank 0 writes
        write_record(run_dir, cfg.data)
    from .train import train  # imports torch

    return train(cfg, run_dir, stop=stop, hooks=hooks)


def _in_sweep() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.get().mode == RunMode.MULTIRUN


def hydra_task(cfg, hooks=None) -> dict | None:
    """The job Hydra runs once per run (or per sweep combination). `hooks`: see train.Hooks."""
    import logging

    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from .data import DataError
    from .runfolder import FolderTaken, read_summary, restore_hydra_files, trained_nothing
    from .signals import Interrupted, Preempted, StopSignals
    from .config.checks import ConfigError

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
            return _run_job(cfg, run_dir, previous, {o.split("=")[0].lstrip("+~") for o in hc.overrides.task},
                            stop, hooks)
    except Preempted as e:
        # SLURM stops the job soon (time limit or preemption). The checkpoint is saved and the
        # status is "requeued" (also when the signal came before training began); submitit's
        # handler now requeues the job (the launcher resubmits the same job) and exits.
        from .runfolder import write_summary

        summary = read_summary(run_dir) or {}
        if summary.get("status") != "requeued":
            write_summary(run_dir, {**summary, "status": "requeued", "requeues": summary.get("requeues", 0) + 1})
        stop.forward(e.signum)
        raise SystemExit(e.exit_code)  # only if no handler was there to requeue the job
    except Interrupted as e:
        if (read_summary(run_dir) or {}).get("status") != "interrupted":  # stopped before training began
            _mark_interrupted(run_dir)
            from .checkpoint import resume_command
            log.warning("interrupted by %s before training: start again with: %s", e, resume_command(run_dir))
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
        from .config.checks import describe_error

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
    from .runfolder import read_summary, restore_hydra_files, trained_nothing, write_summary

    try:
        now = read_summary(run_dir) or {}
        if now.get("status") == "running" and code == EXIT_BAD_INPUT:
            _mark_interrupted(run_dir)
            write_summary(run_dir, {**read_summary(run_dir), "error": message})
        elif now.get("status") != "running" and previous is not None and not trained_nothing(run_dir, previous):
            restore_hydra_files(run_dir)
        else:
            _record_failure(run_dir, cfg, message)
    except OSError:  # the disk that stopped the job may refuse this write too: the message still goes out
        pass


def _record_failure(run_dir: Path, cfg, message: str) -> None:
    """Status "failed" and the one-line error in summary.json: the run's own summary if it got
    that far, else the config's hyperparameters (as far as they read)."""
    from .distributed import is_main
    from .runfolder import read_summary, summary_record, write_summary

    if not is_main():  # under torchrun only rank 0 writes into the run folder
        return
    try:
        base = summary_record(cfg)
    except Exception:  # noqa: BLE001 - the config itself may be what is broken
        base = {}
    write_summary(run_dir, {**base, **(read_summary(run_dir) or {}), "status": "failed", "error": message})


def run_hydra(args: list[str], hooks=None) -> list | None:
    """Hydra's main with `args` as its command line; each job runs `hydra_task`. Returns a
    sweep's job results (Hydra's JobReturn objects), None for a single run."""
    import hydra
    from hydra._internal.hydra import Hydra

    def task(cfg):
        return hydra_task(cfg, hooks)

    expose_plugins()  # hydra/sweeper=boundary, also from an editable install
    main = hydra.main(version_base="1.3", config_path=f"pkg://{CONFIG_MODULE}", config_name=CONFIG_NAME)(task)
    flags, overrides = split_hydra_args(args)
    saved, results = sys.argv, []
    # flags first: Hydra's argparse refuses a flag (-m, --cfg job) after the overrides
    sys.argv = ["normexp train", *flags, *overrides]
    # hydra.main drops the sweep's results; keep them to count the failed jobs (any launcher)
    multirun = Hydra.multirun

    def keep_results(self, *a, **kw):
        batches = multirun(self, *a, **kw)
        results.extend(r for batch in batches or [] for r in batch)
        return batches

    Hydra.multirun = keep_results
    try:
        main()
    finally:
        sys.argv, Hydra.multirun = saved, multirun
    return results if any(f in ("-m", "--multirun") for f in flags) else None


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
    from . import distributed
    from .config.checks import ConfigError

    if distributed.launched_by_torchrun():  # one run, several processes: see distributed.py
        if any(a in ("-m", "--multirun") for a in args):
            fail("torchrun trains one run on several processes; drop -m (start one torchrun per run)")
        try:
            args = distributed.join_run(args)
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


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
def train(ctx: typer.Context):
    """Train one model, or a sweep with -m. Arguments are Hydra overrides: `normexp train
    norm=rms placement=pre layers=48`, `normexp train -m placement=pre,post warmup=0,500`.
    `normexp train --help` lists the config groups and their options."""
    run_train(list(ctx.args))


@app.command()
def report(
    path: Path = typer.Argument(..., help="A sweep folder, one run folder, or any folder holding run folders."),
    out: Path = typer.Option(None, "--out", help="Where to write runs.csv, report.md and the PNGs (default: PATH)."),
):
    """Compare runs: a table (also runs.csv and report.md) and figures, read from each run's
    summary.json, .hydra config and TensorBoard events. Works while runs are still going."""
    from .report import ReportError, make_report

    try:
        make_report(path, out)
    except ReportError as e:
        fail(str(e))


@app.command()
def probe(
    # the defaults repeat probe.DEFAULT_PLACEMENTS/DEPTHS: importing probe here would import torch at start-up
    placements: str = typer.Option(None, help="Comma-separated placements [default: post,pre,deepnorm,sandwich; "
                                                "with --encoder-decoder post,pre,sandwich]."),
    depths: str = typer.Option("6,12,24,48", help="Comma-separated block counts."),
    # 6 seeds × 1 batch: the spread between seeds is 3-5x that between batches (same cost as 3 × 2)
    seeds: int = typer.Option(6, help="Seeds 0..N-1 (a fresh init per seed)."),
    batches: int = typer.Option(1, help="Batches per model; the values are averaged over them."),
    norm: str = typer.Option("layer", help="Norm type (layer, rms, batch, dyt, none)."),
    d_model: int = typer.Option(64, "--d-model"),
    heads: int = typer.Option(4),
    seq_len: int = typer.Option(64, "--seq-len"),
    batch_size: int = typer.Option(8, "--batch-size"),
    threads: int = typer.Option(1, help="CPU threads (1 is fastest for these small models)."),
    data_file: Path = typer.Option(None, "--data-file", help="A UTF-8 text file instead of the default corpus."),
    out: Path = typer.Option(None, "--out", help="Output folder (default: runs/probe/<date>/<time>)."),
    encoder_decoder: bool = typer.Option(
        False, "--encoder-decoder",
        help="Probe the decoder of an encoder-decoder Transformer (the model of Xiong et al.'s Fig. 3) "
             "instead of the decoder-only LM."),
):
    """Gradient and activation scale per layer at initialisation, without training
    (Xiong et al. 2020, §3 and Fig. 3): table, probe.json and figures."""
    import time as _time

    from .probe import (ProbeError, ProbeSettings, check_out_dir, format_table, parse_list, probe_tokens, run_probe,
                        write_outputs)

    try:
        settings = ProbeSettings(
            placements=parse_list(placements or ("post,pre,sandwich" if encoder_decoder else "post,pre,deepnorm,sandwich"),
                                  str, "--placements"),
            depths=parse_list(depths, int, "--depths"), encoder_decoder=encoder_decoder,
            seeds=seeds, batches=batches, norm=norm, d_model=d_model, heads=heads, seq_len=seq_len,
            batch_size=batch_size, threads=threads)
        settings.check()
        check_out_dir(out)  # before anything is computed
        if data_file is not None and not data_file.is_file():
            fail(f"--data-file {data_file}: no such file; give a UTF-8 text file")
        start = _time.perf_counter()
        tokens, vocab_size, description = probe_tokens(data_file)
        typer.echo(f"probe: {description}", err=True)
        records = run_probe(settings, tokens, vocab_size)
        out_dir = out if out is not None else Path("runs/probe") / _time.strftime("%Y-%m-%d/%H-%M-%S")
        written = write_outputs(records, out_dir)
    except ProbeError as e:
        fail(str(e))
    except OSError as e:
        fail(f"cannot write the probe's outputs ({e.strerror}: {e.filename}); choose another --out")
    typer.echo(format_table(records))
    typer.echo(f"\nwrote {', '.join(str(p) for p in written)} ({_time.perf_counter() - start:.1f} s)")


class _OneLineUsage(typer.core.TyperCommand):
    """A bad option value is one line and exit 2, like the command's other errors (not a usage box)."""

    # click's UsageError as typer raises it (newer typer vendors click: `import click` may be another class)
    _usage_error = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")

    def _one_line(self, ctx, call):
        try:
            return call()
        except self._usage_error as e:
            fail(f"{e.format_message().rstrip('.')}; `normexp {ctx.info_name} --help` lists the options")

    def parse_args(self, ctx, args):  # unknown options, missing values
        return self._one_line(ctx, lambda: super(_OneLineUsage, self).parse_args(ctx, args))

    def invoke(self, ctx):  # values that do not convert (typer converts them when it calls the command)
        return self._one_line(ctx, lambda: super(_OneLineUsage, self).invoke(ctx))


@app.command(cls=_OneLineUsage)
def bench(
    # the defaults repeat bench.suite.BenchOptions': importing it here would import torch at start-up
    only: str = typer.Option("A,B,C", help="Shapes to run, from A,B,C,deep and --shape names "
                                           "(deep = 1000 DeepNorm blocks × 32 wide: slow, not in the default)."),
    shape: list[str] = typer.Option([], "--shape", metavar="NAME=LxD,SEQ,BATCH",
                                    help="An extra shape, e.g. tiny=2x32,32,4 (add its NAME to --only); repeatable."),
    instruments: str = typer.Option("B,C", help="Shapes whose instrument overhead is measured."),
    steps: int = typer.Option(32, help="Steps per timed run."),
    rounds: int = typer.Option(3, help="Interleaved rounds (each figure is the best round)."),
    peak_size: int = typer.Option(4096, "--peak-size", help="n of the n×n fp32 matmul that measures the peak."),
    threads: int = typer.Option(None, help="Torch threads (default: the cores this process may use)."),
    compile: bool = typer.Option(False, "--compile", help="Also time normexp with compile=true."),
    sweep: bool = typer.Option(False, "--sweep", help="Also compare parallel 1-thread jobs with sequential jobs."),
    sweep_shape: str = typer.Option("B", "--sweep-shape", metavar="NAME", help="The shape of the sweep comparison."),
    sweep_steps: int = typer.Option(150, "--sweep-steps", help="Steps per job of the CLI sweep comparison."),
    startup: bool = typer.Option(False, "--startup", help="Also time `normexp train` from launch to step 0."),
    profiles: bool = typer.Option(False, "--profiles", help="Also time the depth-profile images."),
    all_: bool = typer.Option(False, "--all", help="--compile --sweep --startup --profiles."),
    json: Path = typer.Option(Path("bench.json"), "--json", help="Where to write the results."),
):
    """Time training steps on this machine: normexp vs a hand-written GPT, MFU, instrument
    overhead, model build and TensorBoard bytes per logging step; `--all` adds torch.compile,
    parallel sweeps, start-up and the depth-profile images."""
    from .bench import BenchError
    from .bench.suite import BenchOptions, run, write_report  # imports torch: only when benchmarking

    opts = BenchOptions(only=only, shape=list(shape), instruments=instruments, steps=steps, rounds=rounds,
                        peak_size=peak_size, threads=threads, compile=compile, sweep=sweep, sweep_shape=sweep_shape,
                        sweep_steps=sweep_steps, startup=startup, profiles=profiles, all=all_, json=json)
    try:
        report, text = run(opts)
        typer.echo(text)
        write_report(report, opts.json)
    except BenchError as e:
        fail(str(e))
    typer.echo(f"wrote {opts.json}", err=True)


def _utf8_mode() -> None:
    """Under a non-UTF-8 locale (LANG=C, LC_ALL=C) Python reads and writes text files and
    paths as ASCII, and the shipped configs hold non-ASCII text: run in Python's UTF-8 mode
    instead (re-executed with PYTHONUTF8=1, which joblib workers and torchrun ranks inherit)."""
    if sys.flags.utf8_mode:
        return
    import locale

    if locale.getpreferredencoding(False).lower().replace("-", "") != "utf8":
        os.environ["PYTHONUTF8"] = "1"
        os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


def main():
    _utf8_mode()
    # first thing, before typer dispatches and hydra/torch are imported: a Ctrl-C during start-up
    # is remembered and acted on at a safe point, never raised halfway through an import
    catch_early_signals()
    try:
        app()
    except Exception as e:  # noqa: BLE001 - the one top-level mapping: one line, exit 2 or 1
        from .config.checks import describe_error

        message, code = describe_error(e)
        fail(message, code)


if __name__ == "__main__":
    main()
