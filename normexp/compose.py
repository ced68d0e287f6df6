"""The shipped config package, and composing it outside a Hydra job.

The one place that names the config package: the pre-flight check, torchrun's rank 0,
the bench and the probe all compose through `compose_config`, and the valid option names of
each group are read from the package (so the check needs no torch). Torch-free.
"""

from __future__ import annotations

from functools import lru_cache

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


@lru_cache(maxsize=None)
def declared_names(group: str) -> tuple[str, ...]:
    """The `name:` values of a group's options: what the code's registries must accept
    (tests/test_bad_input.py checks they equal NORMS, PLACEMENTS and the data registries)."""
    from omegaconf import OmegaConf

    names = {OmegaConf.create((_package() / group / f"{o}.yaml").read_text()).get("name") for o in group_options(group)}
    return tuple(sorted(str(n) for n in names if n is not None))


def compose_config(overrides=(), hydra: bool = False):
    """The config `normexp train OVERRIDES` would run (with the `hydra` node if asked, e.g. for
    hydra.run.dir). Raises Hydra's and OmegaConf's own exceptions for bad overrides."""
    from hydra import compose, initialize_config_module

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
