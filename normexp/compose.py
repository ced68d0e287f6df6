"""The shipped config package, and composing it outside a Hydra job.

The one place that names the config package: the pre-flight check, torchrun's rank 0,
the bench and the probe all compose through `compose_config`, and the valid option names of
each group are read from the package (so the check needs no torch). Torch-free.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

CONFIG_MODULE = "normexp.configs"
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


def compose_config(overrides=(), hydra: bool = False):
    """The config `normexp train OVERRIDES` would run (with the `hydra` node if asked, e.g. for
    hydra.run.dir). Raises Hydra's and OmegaConf's own exceptions for bad overrides."""
    from hydra import compose, initialize_config_module

    expose_plugins()

    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        return compose(config_name=CONFIG_NAME, overrides=list(overrides), return_hydra_config=hydra)


# Hydra flags that take a value.
_FLAGS_WITH_VALUE = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
                     "--config-dir", "-cd", "--experimental-rerun", "--info", "-i"}


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


def sweep_jobs(parsed: list, sweeper_params) -> list[list[str]]:
    """The override list of every job of a sweep, as Hydra's basic sweeper forms them: the
    cross product of the command line's sweeps and the preset's `hydra.sweeper.params`
    (a key on the command line replaces the preset's). `parsed`: Hydra's parsed overrides."""
    import itertools

    from hydra.core.override_parser.overrides_parser import OverridesParser

    given = {o.key_or_group.lstrip("+~") for o in parsed}
    extra = [f"{k}={v}" for k, v in (sweeper_params or {}).items() if str(k) not in given]
    axes = []
    for o in [*parsed, *OverridesParser.create().parse_overrides(extra)]:
        if o.is_sweep_override():
            key = o.input_line.split("=")[0]
            axes.append([f"{key}={v}" for v in o.sweep_string_iterator()])
        else:
            axes.append([o.input_line])
    return [list(job) for job in itertools.product(*axes)]


def job_folder_name(job: list[str], dirname) -> str:
    """The folder name Hydra gives a sweep job with these overrides (hydra.job.override_dirname:
    the overrides but `dirname.exclude_keys`, sorted, joined). `dirname`: the config's
    hydra.job.config.override_dirname."""
    from hydra._internal.config_loader_impl import get_overrides_dirname
    from hydra.core.override_parser.overrides_parser import OverridesParser

    task = [o for o in job if not o.lstrip("+~").startswith("hydra.") and not o.lstrip("+~").startswith("hydra/")]
    return get_overrides_dirname(OverridesParser.create().parse_overrides(task), exclude_keys=list(dirname.exclude_keys),
                                 item_sep=dirname.item_sep, kv_sep=dirname.kv_sep)


def _check_one_value_twice(jobs: list[list[str]]) -> None:
    """Refuse a sweep with two jobs of one setting spelled two ways (grad_clip=1,1.0; lr=1e-3,0.001):
    their folder names differ, but they are one run twice (values compared canonically, as
    runfolder.canonical_value: the form duplicate detection and the resume checks use)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from .checks import ConfigError
    from .runfolder import canonical_value, is_run_setting

    parser, seen = OverridesParser.create(), {}
    for job in jobs:
        values = {}
        for o in parser.parse_overrides([o for o in job if not o.lstrip("+~").startswith("hydra")]):
            key = o.key_or_group.lstrip("+~")
            if not is_run_setting(key):
                values[key] = (o.input_line, repr(canonical_value(o.value())))
        identity = tuple(sorted((k, v) for k, (_, v) in values.items()))
        if identity in seen:
            first = seen[identity]
            key = next((k for k in sorted(values) if values[k][0] != first[k][0]), None)
            if key is None:  # the same overrides twice (a preset's list and the command line's)
                raise ConfigError("-m", " ".join(job), "this job comes twice in the sweep; give each value once")
            spellings = ",".join(v[key][0].split("=", 1)[1] for v in (first, values))
            raise ConfigError(key, spellings, "one value spelled two ways, so two jobs of this sweep would be one run "
                              "twice (in two folders); give each value once")
        seen[identity] = values


def check_job_folders(cfg, jobs: list[list[str]]) -> None:
    """Refuse a sweep two of whose jobs would get one folder (raises ConfigError): a swept key
    that job folder names leave out (train.yaml's exclude_keys: paths, presets, the run
    settings). Every key that changes a run's result is either in the names or refused here;
    behind this, each job claims its folder, so a collision can never merge two jobs."""
    from omegaconf import OmegaConf

    from .checks import ConfigError
    from .runfolder import is_run_setting

    _check_one_value_twice(jobs)
    if OmegaConf.to_container(cfg.hydra.sweep, resolve=False).get("subdir") != "${hydra.job.override_dirname}":
        return  # a subdir of the user's own: the job claims still refuse a shared folder
    dirname = cfg.hydra.job.config.override_dirname
    seen: dict[str, list[str]] = {}
    for job in jobs:
        name = job_folder_name(job, dirname)
        if name not in seen:
            seen[name] = job
            continue
        first, second = (dict(o.split("=", 1) for o in j if "=" in o) for j in (seen[name], job))
        key = next((k for k in sorted(set(first) | set(second)) if first.get(k) != second.get(k)), "hydra.sweep.subdir")
        values = f"{first.get(key, '<unset>')},{second.get(key, '<unset>')}"
        if is_run_setting(key.lstrip("+~")):
            why = (f"{key} does not change what a run computes, so these jobs are one run twice, in one folder; "
                   "give it one value")
        else:
            why = (f"job folder names leave {key} out (hydra.job.config.override_dirname.exclude_keys), so two jobs "
                   f"would share the folder {name or '(the sweep folder)'}; sweep it with one sweep per value, "
                   "each with its own hydra.sweep.dir")
        raise ConfigError(key, values, why)
