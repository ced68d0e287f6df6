"""The `normexp` command line: Typer in front, Hydra behind `train`.

`normexp train ARGS...` hands ARGS to Hydra unchanged, so overrides (`layers=48`),
`-m/--multirun`, `--cfg job`, `hydra.*` keys and `experiment=...` all work. Before Hydra
creates any folder, a pre-flight composes the config and checks it, so a typo costs one
line and exit code 2, not a traceback after a minute of data loading.
"""

from __future__ import annotations

import os
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


def preflight(args: list[str]) -> None:
    """Compose the config as Hydra will and check it. Sweeps are checked for syntax, group
    options and keys only: a bad value in one job must fail that job, not the sweep."""
    flags, overrides = split_hydra_args(args)
    if any(f in _NO_PREFLIGHT for f in flags):
        return
    multirun = "-m" in flags or "--multirun" in flags
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
        return
    from .validate import ConfigError, validate

    job = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
    try:
        validate(job, {o.key_or_group for o in parsed})
    except ConfigError as e:
        fail(str(e))
    explicit_dir = any(o.key_or_group == "hydra.run.dir" for o in parsed)
    if explicit_dir:
        run_dir = Path(cfg.hydra.run.dir)
        from .runfolder import read_summary

        previous = read_summary(run_dir)
        if previous is not None and not job.resume:
            fail(f"hydra.run.dir={run_dir} already holds a run (status {previous.get('status')}); "
                 "pass resume=true to continue it, or choose another folder")
        if run_dir.exists() and not os.access(run_dir, os.W_OK):
            fail(f"hydra.run.dir={run_dir}: the folder is not writable")
        parent = next((p for p in [run_dir, *run_dir.parents] if p.exists()), None)
        if parent is not None and not os.access(parent, os.W_OK):
            fail(f"hydra.run.dir={run_dir}: cannot create it ({parent} is not writable)")


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
        summary = read_summary(run_dir) or {}
        summary.update(status="failed", error=message, norm=cfg.norm.name, placement=cfg.placement.name,
                       layers=cfg.layers, d_model=cfg.d_model, warmup=cfg.warmup, lr=cfg.lr, seed=cfg.seed)
        write_summary(run_dir, summary)

    try:
        validate(cfg, {o.split("=")[0].lstrip("+~") for o in hc.overrides.task})
        return train(cfg, run_dir)
    except Interrupted as e:
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
    run_hydra(args)


def main():
    app()


if __name__ == "__main__":
    main()
