"""The `normexp` command line: Typer commands only (parse, call, map errors to exit codes).

`normexp train ARGS...` hands ARGS to Hydra unchanged, so overrides (`layers=48`),
`-m/--multirun`, `--cfg job`, `hydra.*` keys and `experiment=...` all work; the pre-flight
and the Hydra job are launch/'s (plan.py parses the arguments once; preflight.py, hydra_job.py, job.py, sweep.py).
"""

from __future__ import annotations

from .train.threads import configure as _configure_threads_env

_configure_threads_env()  # before anything imports torch: OpenMP reads it once, when torch loads

import os
import sys
from pathlib import Path

import typer

from .config.defaults import bench_default, probe_default
from .launch.exits import fail
from .train.signals import catch_early_signals, release_early_signals

app = typer.Typer(
    help="Study where and how Transformers normalize: train, instrument, compare.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    # plain click help: typer's rich panels show flags as `--help <bool>` (typer 0.29 with click 8.5)
    # and keep a docstring's line breaks, cutting examples mid-line; click rewraps paragraphs
    rich_markup_mode=None,
)


def version_line() -> str:
    """`normexp X.Y.Z` from the installed package's metadata (pyproject.toml's version)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"normexp {version('normexp')}"
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "normexp (version unknown: not installed; pip install -e .)"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(version_line())
        raise typer.Exit()



@app.callback()
def _root(ctx: typer.Context,
          version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                       help="Print normexp's version and exit.")):
    """normexp: Post-LN vs Pre-LN vs DeepNorm (and more) across depth and warmup."""
    if ctx.invoked_subcommand not in ("train", "resume"):  # only training defers Ctrl-C (see main)
        release_early_signals()


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
    short_help="Train one model, or a sweep with -m; `normexp train --help` lists the settings and presets.",
)
def train(ctx: typer.Context):
    """Train one model, or a sweep with -m. Arguments are Hydra overrides: `normexp train
    norm=rms placement=pre layers=48`, `normexp train -m placement=pre,post warmup=0,500`.
    `normexp train --help` lists the config groups and their options."""
    run_train_command(list(ctx.args))


def run_train_command(args: list[str]) -> None:
    """`normexp train ARGS` (main() calls it directly: typer's parsing of the command line
    imports pydantic, a third of a second that a TAB or `--help` should not wait for)."""
    if "--version" in args:  # Hydra's own --version would print only "Hydra 1.3.8"
        import hydra

        typer.echo(f"{version_line()} (Hydra {hydra.__version__})")
        return
    if any(a in ("--help", "-h") for a in args) and "--hydra-help" not in args:
        from .config.compose import train_help
        from .launch.plan import split_args

        typer.echo(train_help(split_args(args)[1]))  # Hydra's own help lists the groups in ~1 s
        return
    from .launch.hydra_job import run_train

    run_train(args)


@app.command(short_help="Continue a stopped run or sweep from its folder, with the settings it began with.")
def resume(folder: Path = typer.Argument(..., help="A run's folder (runs/<date>/<time>) or a sweep's "
                                                    "(runs/multirun/<date>/<time>).")):
    """Continue a run (or every unfinished job of a sweep) from its newest checkpoint, with the
    overrides it was started with: `normexp resume runs/2026-11-25/10-00-00` is `normexp train
    <its overrides> resume=true hydra.run.dir=runs/2026-11-25/10-00-00`."""
    from .config.checks import ConfigError
    from .launch.hydra_job import run_train
    from .runs.resume import resume_arguments

    if not folder.expanduser().exists():  # a typo is not "a folder that holds no run"
        fail(f"{folder}: does not exist; give a run's folder (runs/<date>/<time>) or a sweep's "
             "(runs/multirun/<date>/<time>)")
    try:
        args = resume_arguments(folder)
    except ConfigError as e:
        fail(str(e))
    from .config.keys import shown_command

    typer.echo(f"normexp: resuming with: normexp train {shown_command(args)}", err=True)
    run_train(args)


@app.command(short_help="Compare runs: a table, runs.csv, report.md and figures.")
def report(
    path: Path = typer.Argument(..., help="A sweep folder, one run folder, or any folder holding run folders."),
    out: Path = typer.Option(None, "--out", help="Where to write runs.csv, report.md and the PNGs (default: PATH)."),
):
    """Compare runs: a table (also runs.csv and report.md) and figures, read from each run's
    summary.json, .hydra config and TensorBoard events. Works while runs are still going."""
    from .analysis.report import ReportError, make_report

    try:
        make_report(path, out)
    except ReportError as e:
        fail(str(e))


@app.command(short_help="Gradient and activation scale per layer at initialisation, without training.")
def probe(
    # the defaults are configs/probe.yaml's (read without importing torch at start-up)
    placements: str = typer.Option(None, help="Comma-separated placements [default: "
                                                f"{','.join(probe_default('placements'))}; with --encoder-decoder "
                                                f"{','.join(probe_default('encoder_decoder_placements'))}]."),
    depths: str = typer.Option(",".join(map(str, probe_default("depths"))), help="Comma-separated block counts."),
    seeds: int = typer.Option(probe_default("seeds"), help="Seeds 0..N-1 (a fresh init per seed)."),
    batches: int = typer.Option(probe_default("batches"), help="Batches per model; the values are averaged over them."),
    norm: str = typer.Option(probe_default("norm"), help="Norm type (layer, rms, batch, dyt, scale, none)."),
    d_model: int = typer.Option(probe_default("d_model"), "--d-model"),
    heads: int = typer.Option(probe_default("heads")),
    seq_len: int = typer.Option(probe_default("seq_len"), "--seq-len"),
    batch_size: int = typer.Option(probe_default("batch_size"), "--batch-size"),
    threads: int = typer.Option(probe_default("threads"), help="CPU threads (1 is fastest for these small models)."),
    data_file: Path = typer.Option(None, "--data-file", help="A UTF-8 text file instead of the default corpus."),
    out: Path = typer.Option(None, "--out", help="Output folder (default: runs/probe/<date>/<time>)."),
    encoder_decoder: bool = typer.Option(
        probe_default("encoder_decoder"), "--encoder-decoder",
        help="Probe the decoder of an encoder-decoder Transformer (the model of Xiong et al.'s Fig. 3) "
             "instead of the decoder-only LM."),
):
    """Gradient and activation scale per layer at initialisation, without training
    (Xiong et al. 2020, §3 and Fig. 3): table, probe.json and figures."""
    import time as _time

    from .analysis.probe import format_table, write_outputs
    from .train.probe import ProbeError, ProbeSettings, check_out_dir, parse_list, probe_tokens, run_probe

    try:
        settings = ProbeSettings(
            placements=parse_list(placements or ",".join(
                probe_default("encoder_decoder_placements" if encoder_decoder else "placements")), str, "--placements"),
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


@app.command(cls=_OneLineUsage, short_help="Time training steps on this machine: throughput, MFU, overheads.")
def bench(
    # the defaults are configs/bench.yaml's (read without importing torch at start-up)
    only: str = typer.Option(bench_default("only"), help="Shapes to run, from A,B,C,deep and --shape names "
                                           "(deep = 1000 DeepNorm blocks × 32 wide: slow, not in the default)."),
    shape: list[str] = typer.Option([], "--shape", metavar="NAME=LxD,SEQ,BATCH",
                                    help="An extra shape, e.g. tiny=2x32,32,4 (add its NAME to --only); repeatable."),
    instruments: str = typer.Option(bench_default("instruments"), help="Shapes whose instrument overhead is measured."),
    steps: int = typer.Option(bench_default("steps"), help="Steps per timed run."),
    rounds: int = typer.Option(bench_default("rounds"), help="Interleaved rounds (each figure is the best round)."),
    peak_size: int = typer.Option(bench_default("peak_size"), "--peak-size", help="n of the n×n fp32 matmul that measures the peak."),
    threads: int = typer.Option(bench_default("threads"), help="Torch threads (default: the cores this process may use)."),
    compile: bool = typer.Option(False, "--compile", help="Also time normexp with compile=true."),
    sweep: bool = typer.Option(False, "--sweep", help="Also compare parallel 1-thread jobs with sequential jobs."),
    sweep_shape: str = typer.Option(bench_default("sweep_shape"), "--sweep-shape", metavar="NAME", help="The shape of the sweep comparison."),
    sweep_steps: int = typer.Option(bench_default("sweep_steps"), "--sweep-steps", help="Steps per job of the CLI sweep comparison."),
    startup: bool = typer.Option(False, "--startup", help="Also time `normexp train` from launch to step 0."),
    profiles: bool = typer.Option(False, "--profiles", help="Also time the depth-profile images."),
    packs: bool = typer.Option(False, "--packs", help="Also time packs: one model alone against K of its shape trained as one (docs/speed.md#packs)."),
    all_: bool = typer.Option(False, "--all", help="--compile --sweep --startup --profiles --packs."),
    json: Path = typer.Option(Path(bench_default("json")), "--json", help="Where to write the results."),
    quick: bool = typer.Option(False, "--quick", help="Under a minute: the default model only, the fewest steps, "
                               "one round (--only C --instruments none --steps 6 --rounds 1 --peak-size 1024)."),
):
    """Time training steps on this machine: normexp vs a hand-written GPT, MFU, instrument
    overhead, model build and TensorBoard bytes per logging step; `--all` adds torch.compile,
    parallel sweeps, start-up, the depth-profile images and packs."""
    from .bench import BenchError
    from .bench.suite import BenchOptions, run, write_report  # imports torch: only when benchmarking

    opts = BenchOptions(only=only, shape=list(shape), instruments=instruments, steps=steps, rounds=rounds,
                        peak_size=peak_size, threads=threads, compile=compile, sweep=sweep, sweep_shape=sweep_shape,
                        sweep_steps=sweep_steps, startup=startup, profiles=profiles, packs=packs, all=all_, json=json,
                        quick=quick)
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


_COMPLETION_FLAGS = ("-sc", "--shell-completion")


def _completion_for_train() -> None:
    """Hydra's shell completion through this command line. The script that
    `normexp train -sc install=bash` prints asks `normexp -sc query=bash` for the words that
    complete COMP_LINE (the whole line typed, `normexp train placement=de`): that query goes
    to train, with COMP_LINE as Hydra reads it (the app name, then the overrides). On the
    command's own word (`normexp tr`), the commands are the completions."""
    if len(sys.argv) < 2 or sys.argv[1].split("=")[0] not in _COMPLETION_FLAGS:
        return
    line = os.environ.get("COMP_LINE")
    if line is not None and any(a.startswith("query=") for a in sys.argv[1:]):
        words = line.split()
        if len(words) < 2 or words[1] != "train":  # still typing the command's name
            typed = words[1] if len(words) > 1 and not line.endswith(" ") else ""
            names = [c.name or c.callback.__name__ for c in app.registered_commands]
            print(" ".join(n for n in names if n.startswith(typed)))
            raise SystemExit(0)
        os.environ["COMP_LINE"] = " ".join([words[0], *words[2:]]) + (" " if line.endswith(" ") else "")
    sys.argv[1:1] = ["train"]


def main():
    _utf8_mode()
    _completion_for_train()
    # first thing, before typer dispatches and hydra/torch are imported: a Ctrl-C during start-up
    # is remembered and acted on at a safe point, never raised halfway through an import
    catch_early_signals()
    try:
        if sys.argv[1:2] == ["train"]:  # the command that a TAB and `--help` ask: straight to it
            run_train_command(sys.argv[2:])
        else:
            app()
    except Exception as e:  # noqa: BLE001 - the one top-level mapping: one line, exit 2 or 1
        from .launch.exits import describe_error

        message, code = describe_error(e)
        fail(message, code)


if __name__ == "__main__":
    main()
