"""The shipped config package, and composing it outside a Hydra job.

The one place that names the config package: the pre-flight check, torchrun's rank 0,
the bench and the probe all compose through `compose_config`, and the valid option names of
each group are read from the package (so the check needs no torch). Torch-free.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from .defaults import CONFIG_MODULE
from .keys import override_key

CONFIG_NAME = "train"


def _package():
    from importlib.resources import files

    return files(CONFIG_MODULE)


@lru_cache(maxsize=None)
def config_groups() -> tuple[str, ...]:
    """The config groups a user picks from (norm, placement, schedule, ...): every folder
    of the package that holds options, Hydra's own settings excepted."""
    return tuple(sorted(p.name for p in _package().iterdir()
                        if p.is_dir() and p.name != "hydra" and any(f.name.endswith(".yaml") for f in p.iterdir())))


@lru_cache(maxsize=None)
def group_options(group: str) -> tuple[str, ...]:
    """The option files of a group: what `group=...` accepts."""
    return tuple(sorted(p.name[: -len(".yaml")] for p in (_package() / group).iterdir() if p.name.endswith(".yaml")))


def preset_description(name: str) -> str | None:
    """A preset's one-line description: the comment line right after `# @package _global_` in
    configs/experiment/NAME.yaml (the convention every preset follows; tests/test_cli.py checks
    it), or None when the file has none."""
    lines = (_package() / "experiment" / f"{name}.yaml").read_text().splitlines()
    body = lines[1:] if lines and lines[0].startswith("# @package") else lines
    first = body[0] if body else ""
    text = first[1:].strip() if first.startswith("#") else ""
    return text or None


def option_config(group: str, option: str):
    """An option file of a group as written (e.g. configs/data/text.yaml), a DictConfig."""
    from omegaconf import OmegaConf

    return OmegaConf.create((_package() / group / f"{option}.yaml").read_text())


@lru_cache(maxsize=None)
def declared_names(group: str) -> tuple[str, ...]:
    """The `name:` values of a group's options: what the code's registries must accept
    (tests/test_bad_input.py checks they equal NORMS, PLACEMENTS and the data registries)."""
    from omegaconf import OmegaConf

    names = {OmegaConf.create((_package() / group / f"{o}.yaml").read_text()).get("name") for o in group_options(group)}
    return tuple(sorted(str(n) for n in names if n is not None))


@lru_cache(maxsize=None)
def declared_keys(group: str, name: str) -> tuple[str, ...]:
    """The settings a group's option named `name` declares (e.g. schedule cosine: min_lr_ratio):
    the union over the option files whose `name:` is `name`."""
    from omegaconf import OmegaConf

    keys = set()
    for o in group_options(group):
        option = OmegaConf.create((_package() / group / f"{o}.yaml").read_text())
        if option.get("name") == name:
            keys.update(str(k) for k in option if k != "name")
    return tuple(sorted(keys))


@lru_cache(maxsize=None)
def top_level_keys() -> tuple[str, ...]:
    """The dotted keys train.yaml declares outside the groups (`lr`, `optim.eps`, `log.progress`...)."""
    from omegaconf import OmegaConf

    primary = OmegaConf.to_container(OmegaConf.create((_package() / f"{CONFIG_NAME}.yaml").read_text()))
    keys = []

    def walk(node, prefix):
        for k, v in node.items():
            if isinstance(v, dict) and v:
                walk(v, f"{prefix}{k}.")
            else:
                keys.append(f"{prefix}{k}")

    walk({k: v for k, v in primary.items() if k not in ("defaults", "hydra")}, "")
    return tuple(sorted(keys))


PLUGIN_PACKAGE = "hydra_plugins.normexp_boundary_sweeper"  # hydra/sweeper=boundary


@lru_cache(maxsize=None)
def expose_plugins() -> None:
    """Make normexp's Hydra plugins findable before Hydra scans for plugins. Installed from a
    wheel they sit in site-packages/hydra_plugins, where Hydra looks anyway; installed editable
    (`pip install -e .`) the namespace holds only an import hook, which Hydra's scan (pkgutil)
    cannot list, so the plugins' real folder is added to the namespace's path."""
    import importlib.util

    import hydra_plugins

    spec = importlib.util.find_spec(PLUGIN_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return
    folder = str(Path(list(spec.submodule_search_locations)[0]).parent)
    if folder not in list(hydra_plugins.__path__):
        hydra_plugins.__path__.append(folder)


def presets_help() -> str:
    """The presets of `normexp train --help`: one line each, name and description ($ doubled:
    Hydra fills the help template in as a string.Template)."""
    names = group_options("experiment")
    width = max(map(len, names), default=0)
    lines = "\n".join(f"  {n:<{width}}  {preset_description(n) or ''}".rstrip() for n in names)
    return lines.replace("$", "$$")


def register_resolvers() -> None:
    """`${normexp_presets:}` of configs/train.yaml's help template: the presets, when the help is shown."""
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("normexp_presets", presets_help, replace=True, use_cache=False)


def compose_config(overrides=(), hydra: bool = False):
    """The config `normexp train OVERRIDES` would run (with the `hydra` node if asked, e.g. for
    hydra.run.dir). Raises Hydra's and OmegaConf's own exceptions for bad overrides."""
    from hydra import compose, initialize_config_module

    expose_plugins()
    register_resolvers()
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        return compose(config_name=CONFIG_NAME, overrides=list(overrides), return_hydra_config=hydra)


@lru_cache(maxsize=None)
def hydra_groups() -> tuple[str, ...]:
    """Hydra's own config groups (hydra/launcher, hydra/sweeper, ...) with normexp's plugins."""
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    expose_plugins()
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        return tuple(sorted(f"hydra/{g}" for g in loader.list_groups("hydra")))


def sweep_jobs(parsed: list, sweeper_params) -> list[list[str]]:
    """The override list of every job of a sweep, in Hydra's basic sweeper's order (so the
    position is the job's number): the cross product of the preset's `hydra.sweeper.params`
    first, then the command line's overrides; a key on the command line replaces the
    preset's in the preset's place. `parsed`: Hydra's parsed overrides."""
    import itertools

    from hydra.core.override_parser.overrides_parser import OverridesParser

    given = {override_key(o.key_or_group): o for o in parsed}
    preset = OverridesParser.create().parse_overrides(
        [f"{k}={v}" for k, v in (sweeper_params or {}).items() if str(k) not in given])
    preset_keys = [str(k) for k in (sweeper_params or {})]
    by_key = {override_key(o.key_or_group): o for o in preset}
    ordered = [given[k] if k in given else by_key[k] for k in preset_keys]
    ordered += [o for o in parsed if override_key(o.key_or_group) not in preset_keys]
    axes = []
    for o in ordered:
        if o.is_sweep_override():
            key = o.input_line.split("=")[0]
            axes.append([f"{key}={v}" for v in o.sweep_string_iterator()])
        else:
            axes.append([o.input_line])
    return [list(job) for job in itertools.product(*axes)]
