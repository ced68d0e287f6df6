"""The `normexp` command line: Typer in front, Hydra behind `train`.

`normexp train ARGS...` hands ARGS to Hydra unchanged, so overrides (`layers=48`),
`-m/--multirun`, `--cfg job`, `hydra.*` keys and `experiment=...` all work. Before Hydra
creates any folder, a pre-flight composes the config and checks it, so a typo costs one
line and exit code 2, not a traceback after a minute of data loading.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

import typer

app = typer.Typer(
    help="Study where and how Transformers normalize: train, instrument, compare.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)

CONFIG_MODULE = "normexp.configs"
EXIT_BAD_INPUT = 2


def fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    """One line on stderr and a non-zero exit; the traceback only with HYDRA_FULL_ERROR=1."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1" and sys.exc_info()[0] is not None:
        raise
    typer.echo(f"normexp: error: {message}", err=True)
    raise SystemExit(code)


@app.callback()
def _root():
    """normexp: Post-LN vs Pre-LN vs DeepNorm (and more) across depth and warmup."""


# ----------------------------------------------------------------------- train

# Hydra flags that take a value, and flags after which no pre-flight is wanted.
_FLAGS_WITH_VALUE = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
                     "--config-dir", "-cd", "--experimental-rerun", "--info", "-i"}
_NO_PREFLIGHT = {"--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc",
                 "--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd", "--experimental-rerun"}


def split_hydra_args(args: list[str]) -> tuple[list[str], list[str]]:
    """(flags, overrides) from the raw argument list."""
    flags, overrides, i = [], [], 0
    while i < len(args):
        a = args[i]
        if a.startswith("-"):
            flags.append(a)
            if a in _FLAGS_WITH_VALUE and i + 1 < len(args) and "=" not in args[i + 1]:
                flags.append(args[i + 1])
                i += 1
        else:
            overrides.append(a)
        i += 1
    return flags, overrides


def _group_options(group: str) -> list[str]:
    from importlib.resources import files

    folder = files(CONFIG_MODULE) / group
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


GROUPS = ("norm", "placement", "schedule", "data", "tokenizer", "experiment")

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


def preflight(args: list[str]) -> None:
    """Compose the config as Hydra will and check it. Sweeps are checked for syntax, group
    options and keys only: a bad value in one job must fail that job, not the sweep."""
    flags, overrides = split_hydra_args(args)
    _check_flags(args)
    if any(f in _NO_PREFLIGHT for f in flags):
        return
    multirun = "-m" in flags or "--multirun" in flags
    if multirun and any(f in ("--cfg", "-c") for f in flags):
        fail("--cfg shows the config of one run: drop -m (or use --cfg with a single value per key)")
    from hydra import compose, initialize_config_module
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as e:
        fail(f"cannot parse the overrides: {str(e).splitlines()[0]}")
    first = []
    for o in parsed:
        key = o.key_or_group.split("@")[0]
        values = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.get_value_element_as_str()]
        if key.lstrip("+~") in GROUPS:
            valid = _group_options(key.lstrip("+~"))
            for v in values:
                if v not in valid and v != "null":
                    fail(f"{key}={v}: unknown option; choose from {', '.join(valid)}")
        if o.is_sweep_override() and not multirun:
            fail(f"{o.input_line}: a sweep needs -m (normexp train -m {o.input_line})")
        first.append(f"{o.input_line.split('=')[0]}={values[0]}" if o.is_sweep_override() else o.input_line)
    try:
        with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
            cfg = compose(config_name="train", overrides=first, return_hydra_config=True)
    except (HydraException, OmegaConfBaseException) as e:
        msg = " ".join(str(e).split())
        if "Could not override" in msg or "Key '" in msg:
            msg += " (add new keys with +key=value; see `normexp train --cfg job` for the keys)"
        fail(msg)
    if multirun:
        from .distributed import launcher_problem  # imports torch: only sweeps need it
        if launcher_problem(cfg.hydra.launcher):
            fail(launcher_problem(cfg.hydra.launcher))
    from .validate import ConfigError, check_output_folder, validate

    explicit = {o.key_or_group for o in parsed}
    try:
        if not multirun:  # a sweep checks each job's values in the job, so one bad job fails alone
            validate(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), explicit)
        nothing_to_do = check_output_folder(cfg, multirun, explicit)
    except ConfigError as e:
        fail(str(e))
    if nothing_to_do:  # resume=true on a finished run: say so, write nothing
        typer.echo(f"normexp: {nothing_to_do}", err=True)
        raise SystemExit(0)


class _StopSignal(BaseException):
    """SIGINT/SIGTERM outside train()'s step loop. A BaseException, like KeyboardInterrupt,
    so that no `except Exception` in the data or model code swallows it."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


@contextlib.contextmanager
def _interrupt_before_training():
    """SIGINT/SIGTERM while the job loads data or builds the model (before train()'s own
    SignalGuard takes over, and again after it hands back) stop the job at once."""

    def stop(signum, frame):
        raise _StopSignal(signum)

    old = {}
    for s in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
            old[s] = signal.signal(s, stop)
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _record_early_interrupt(run_dir: Path, e, log) -> None:
    """One line saying how to go on, and status "interrupted" unless the run finished."""
    from .checkpoint import list_checkpoints, resume_command
    from .distributed import is_main
    from .runfolder import read_summary, write_summary

    summary = read_summary(run_dir) or {}
    saved = list_checkpoints(run_dir)
    if is_main() and summary.get("status") in (None, "running"):  # steps kept = the newest checkpoint's
        kept = int(saved[-1].stem.split("_")[1]) if saved else 0
        write_summary(run_dir, {**summary, "status": "interrupted", "steps_completed": kept})
    how = "resume" if saved else "no checkpoint yet; start again"
    log.warning("interrupted by %s before training or while saving: %s with: %s", e, how, resume_command(run_dir))


def hydra_task(cfg) -> dict | None:
    """The job Hydra runs once per run (or per sweep combination)."""
    import logging

    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from .data import DataError
    from .runfolder import read_summary, write_summary
    from .train import Interrupted, train
    from .validate import ConfigError, validate

    log = logging.getLogger("normexp")
    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    multirun = hc.mode == RunMode.MULTIRUN

    def record_failure(message: str) -> None:
        from .distributed import is_main
        if not is_main():  # under torchrun only rank 0 writes into the run folder
            return
        summary = read_summary(run_dir) or {}
        summary.update(status="failed", error=message, norm=cfg.norm.name, placement=cfg.placement.name,
                       layers=cfg.layers, d_model=cfg.d_model, warmup=cfg.warmup, lr=cfg.lr, seed=cfg.seed)
        write_summary(run_dir, summary)

    try:
        with _interrupt_before_training():
            validate(cfg, {o.split("=")[0].lstrip("+~") for o in hc.overrides.task})
            previous = read_summary(run_dir) or {}
            if cfg.resume and previous.get("status") in ("completed", "diverged"):  # a re-run sweep
                log.info("%s already finished (status %s): skipped", run_dir, previous["status"])
                return previous
            return train(cfg, run_dir)
    except Interrupted as e:  # train() saved a checkpoint and said how to resume
        raise SystemExit(128 + e.signum)
    except _StopSignal as e:  # train() did not get to save and explain
        _record_early_interrupt(run_dir, e, log)
        raise SystemExit(128 + e.signum)
    except (ConfigError, DataError) as e:
        record_failure(str(e))
        log.error("normexp: error: %s", e)
        if not multirun:
            raise SystemExit(EXIT_BAD_INPUT)
    except Exception as e:  # noqa: BLE001 - a sweep must go on past one broken job
        message = f"{type(e).__name__}: {e}".splitlines()[0]
        record_failure(message)
        if not multirun or os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        log.exception("job failed: %s (the sweep goes on)", message)
    return None


def run_hydra(args: list[str]) -> None:
    import hydra

    main = hydra.main(version_base="1.3", config_path=f"pkg://{CONFIG_MODULE}", config_name="train")(hydra_task)
    saved = sys.argv
    sys.argv = ["normexp train", *args]
    try:
        main()
    finally:
        sys.argv = saved


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
def train(ctx: typer.Context):
    """Train one model, or a sweep with -m. Arguments are Hydra overrides: `normexp train
    norm=rms placement=pre layers=48`, `normexp train -m placement=pre,post warmup=0,500`.
    `normexp train --help` lists the config groups and their options."""
    args = list(ctx.args)
    preflight(args)
    from . import distributed
    if distributed.launched_by_torchrun():  # one run, several processes: see distributed.py
        if any(a in ("-m", "--multirun") for a in args):
            fail("torchrun trains one run on several processes; drop -m (start one torchrun per run)")
        args = distributed.join_run(args)
    try:
        run_hydra(args)
    finally:
        distributed.cleanup()


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

    from .probe import ProbeError, ProbeSettings, format_table, parse_list, probe_tokens, run_probe, write_outputs

    try:
        settings = ProbeSettings(
            placements=parse_list(placements or ("post,pre,sandwich" if encoder_decoder else "post,pre,deepnorm,sandwich"),
                                  str, "--placements"),
            depths=parse_list(depths, int, "--depths"), encoder_decoder=encoder_decoder,
            seeds=seeds, batches=batches, norm=norm, d_model=d_model, heads=heads, seq_len=seq_len,
            batch_size=batch_size, threads=threads)
        settings.check()
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


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
def bench(ctx: typer.Context):
    """Time training steps on this machine: normexp vs a hand-written GPT, MFU, instrument
    overhead; `--all` adds torch.compile, parallel sweeps and start-up. `normexp bench --help`."""
    from .bench import run  # imports torch: only when benchmarking

    run(list(ctx.args))


def main():
    app()


if __name__ == "__main__":
    main()
