"""Up-front checks of a resolved config: every problem is one line naming the key,
the value, and what is allowed, before any data is loaded or any folder is written.

This module imports neither torch nor the data stack, so `normexp train` answers a typo in
about a second. It holds only what the typed settings cannot say of themselves. The settings
are the schema (config/run_config.py, config/model_config.py: each field names its key and its
type): the keys a run may set, the counts and the switches are checked from their fields
(config.keys.check_kinds, schema_keys), and each part's ranges by its own `check`, which this
module calls. Here: the device (is it there), the registries' names (read from the shipped
config groups, `compose.declared_names`), a group option's keys, the memory and the cache. A
data source's and a tokenizer's own rules live in its class (data/sources.py), which
data/batches.py also applies for callers that skip the command line; a norm's, placement's or
init's own settings (eps, alpha, ratio, ...) are checked by its class in model/, which owns them."""

from __future__ import annotations

import os

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ..config.checks import ConfigError, is_integer
from ..config.compose import config_groups, declared_keys, declared_names
from ..config.data_settings import OPTION_SETTINGS
from ..config.keys import check_kinds, did_you_mean, dotted, override_key, schema_keys
from ..config.model_config import ModelConfig
from ..config.run_config import RunConfig
from ..config.resources import (available_memory_bytes, batch_norm_needs, memory_parts,  # noqa: F401 - re-exported
                                 memory_problem, training_memory_bytes)
from ..data.files import cache_root
from ..runs.resume import check_creatable
from .devices import auto_device_type, cuda_available, mps_available

# Keys that moved, and where to: the old key gets one line naming the new one.
MOVED_KEYS = {"deepnorm.alpha": "placement.alpha", "deepnorm.beta": "placement.beta", "deepnorm": "placement.alpha"}


# ----------------------------------------------------------------- small checks


_UNSET = object()


def _raw(cfg, key: str):
    """The value as written (an interpolation stays `${...}`), or _UNSET."""
    node = OmegaConf.to_container(cfg, resolve=False)
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _UNSET
        node = node[part]
    return node


def _choice(key: str, value, group: str):
    valid = declared_names(group)
    if value not in valid:
        raise ConfigError(key, value, f"choose from {', '.join(valid)}")


# ------------------------------------------------------------------ the checks

def validate(cfg: DictConfig, explicit: frozenset[str] | set[str] = frozenset()) -> None:
    """Raise ConfigError for the first problem found. `explicit` holds the keys the user set
    on the command line: a default warmup longer than a short run is shortened (with a
    warning) rather than refused, but an explicit warmup > steps is an error."""
    try:
        _validate(cfg, explicit)
    except OmegaConfBaseException as e:  # a removed key (~layers), a broken ${...}, a ??? left unset
        key = e.full_key or "config"
        raw = _raw(cfg, key) if e.full_key else _UNSET
        reason = str(e).splitlines()[0]
        raise ConfigError(key, "<unset>" if raw is _UNSET else raw,
                          f"{reason}; see `normexp train --cfg job` for the keys and their defaults") from None


def _validate(cfg: DictConfig, explicit) -> None:
    check_kinds(ModelConfig, cfg)  # the counts and switches, as their fields declare them
    check_kinds(RunConfig, cfg)
    ModelConfig.from_composed(cfg).check()  # the model's rules live beside its data
    _known_keys(cfg)
    run = RunConfig.from_composed(cfg)  # the typed settings: their rules live beside them
    run.optim.check()
    run.schedule.check(warmup_given="warmup" in explicit)
    run.check()
    run.loss_spike.check()
    _device(cfg.device)
    _choice("norm", cfg.norm.name, "norm")
    _choice("placement", cfg.placement.name, "placement")
    _choice("init", cfg.init.name, "init")
    if cfg.norm.name == "batch" and cfg.batch_size * cfg.seq_len < 2:
        raise ConfigError("batch_size", cfg.batch_size, batch_norm_needs(f"seq_len={cfg.seq_len}", "batch_size·seq_len",
                                                                          "batch_size or seq_len"))
    run.log.check()
    check_tokenizer(cfg.tokenizer)
    check_data(cfg.data)


# groups whose settings the variant classes in model/ check (config.registry.variant names the key)
_CLASS_CHECKED = ("norm", "placement", "init")


def _known_keys(cfg) -> None:
    """Every key must be one a typed setting reads (the schema: config.keys.schema_keys) or the
    chosen group option takes (`_option_keys`): `+lrr=0.5`, `data=text +data.shufle=1` or
    `schedule=constant +schedule.min_lr_ratio=0.5` would otherwise run without a word."""
    allowed = set(schema_keys(ModelConfig, RunConfig))
    groups = set(config_groups())
    for key, value in dotted(OmegaConf.to_container(cfg, resolve=False)).items():
        group, _, setting = key.partition(".")
        if group in _CLASS_CHECKED or (group in groups and setting == "name"):
            continue
        if group in groups and isinstance(cfg.get(group), DictConfig):
            name = cfg[group].get("name")
            takes = _option_keys(group, name)
            if setting.split(".")[0] not in takes:
                hint = did_you_mean(setting, takes).replace("mean ", f"mean {group}.")
                raise ConfigError(key, value, f"{hint}{group} {name} takes {', '.join(takes) or 'no settings'}")
        elif key not in allowed:
            hint = did_you_mean(key, allowed)
            raise ConfigError(key, value, f"unknown setting; {hint}see `normexp train --cfg job` for the keys")


def _option_keys(group: str, name) -> tuple[str, ...]:
    """The settings a group's option takes, but its name: a data source's or a tokenizer's, the
    fields of its settings class (config/data_settings.py); a schedule's, what its yaml declares."""
    if group not in OPTION_SETTINGS:
        return declared_keys(group, name)
    if name not in OPTION_SETTINGS[group]:
        raise ConfigError(group, name, f"choose from {', '.join(declared_names(group))}")
    keys = (key.partition(".")[2] for key in schema_keys(OPTION_SETTINGS[group][name]))
    return tuple(sorted(key for key in keys if key != "name"))


def moved_key(key: str, value) -> None:
    """A key that moved (deepnorm.alpha → placement.alpha): one line naming the new key."""
    key = override_key(key)
    if key in MOVED_KEYS:
        raise ConfigError(key, value, f"DeepNorm's constants are settings of the placement now: "
                          f"placement=deepnorm {MOVED_KEYS[key]}={value}")


def check_cache() -> None:
    """The cache folder ($NORMEXP_CACHE or its default) must be a writable folder or creatable."""
    check_creatable("NORMEXP_CACHE" if os.environ.get("NORMEXP_CACHE") else "cache folder", cache_root())


def _device(device) -> None:
    if device not in ("auto", "cpu", "cuda", "mps") and not str(device).startswith("cuda:"):
        raise ConfigError("device", device, "choose auto, cpu, cuda, cuda:N or mps")
    if str(device).startswith("cuda"):
        if not cuda_available():  # torch only where an NVIDIA driver is (devices.py)
            raise ConfigError("device", device, "no CUDA device is available here; use device=auto or device=cpu")
    if device == "mps":
        if not mps_available():
            raise ConfigError("device", device, "no Apple MPS device is available here; use device=auto or device=cpu")


def check_launcher(launcher) -> None:
    """Launcher settings the launcher itself would refuse with a traceback mid-sweep: a
    `_target_` that names no installed Hydra launcher (hydra.launcher._target_=builtins.print, a
    custom yaml's typo: Hydra refuses it only after the sweep started, in a traceback), and n_jobs."""
    from hydra.core.plugins import Plugins
    from hydra.plugins.launcher import Launcher

    from ..config.compose import expose_plugins

    target = str(launcher.get("_target_")) if launcher is not None else "None"
    expose_plugins()  # normexp's own plugins, findable as in a run
    installed = sorted(f"{c.__module__}.{c.__name__}" for c in Plugins.instance().discover(Launcher))
    if target not in installed:
        raise ConfigError("hydra.launcher._target_", target, "names no installed Hydra launcher; pick one with "
                          f"hydra/launcher=NAME (`normexp train --hydra-help` lists them), or a _target_ of: "
                          f"{', '.join(installed)}")
    n_jobs = launcher.get("n_jobs") if launcher is not None else None
    if n_jobs is not None and (not is_integer(n_jobs) or n_jobs == 0):
        raise ConfigError("hydra.launcher.n_jobs", n_jobs, "must be a positive number of parallel jobs, "
                          "or -1 (one per core), -2 (all but one), ...")


def check_tokenizer(tok) -> None:
    """The tokenizer's own rules (its class in data/sources.py)."""
    from ..data.sources import tokenizer_for

    _choice("tokenizer", tok.get("name"), "tokenizer")
    tokenizer_for(tok).check()


def check_data(data) -> None:
    """The data source's own rules (its class in data/sources.py)."""
    from ..data.sources import source_for

    _choice("data", data.get("name"), "data")
    source_for(data).check()


def _on_cpu(device) -> bool:
    """The memory check is for the CPU: a GPU's memory is its own."""
    if str(device).startswith(("cuda", "mps")):
        return False
    if device == "auto":
        return auto_device_type() == "cpu"
    return True


def check_memory(cfg, available: int | None = None) -> None:
    """Refuse, before training, a run that needs more memory than this machine has free (on
    the CPU), rather than be killed by the OOM killer mid-set-up."""
    if not _on_cpu(cfg.device):
        return
    problem = memory_problem(cfg, available)
    if problem:
        key = "layers" if "cannot make it fit" in problem else "batch_size"
        raise ConfigError(key, cfg[key], problem)


# ------------------------------------------------- a preset's group beside its plain keys

# groups of `# @package _global_` options a user adjusts with plain keys by design: a preset is
# a starting point (experiment=lr_sensitivity layers=4), and its name never labels a job folder
_ADJUSTABLE_GROUPS = ("experiment",)


def option_settings(group: str, option: str) -> dict[str, str]:
    """What a group option sets outside its own group, read from its yaml: {dotted key: value},
    a group it overrides in its defaults as {group: option} (arm/completep:
    {"placement": "depth_mup", "placement.exponent": "1"}). Empty for an option packaged under
    its group (norm/rms sets norm.*, nothing else)."""
    from importlib.resources import files

    from ..config.defaults import CONFIG_MODULE

    text = (files(CONFIG_MODULE) / group / f"{option}.yaml").read_text()
    if not text.lstrip().startswith("# @package _global_"):
        return {}
    raw = OmegaConf.to_container(OmegaConf.create(text), resolve=False) or {}
    out = {}
    for entry in raw.pop("defaults", None) or []:
        if isinstance(entry, dict):
            for k, v in entry.items():
                target = str(k).split()[-1].lstrip("/")  # "override /placement" -> placement
                if target in config_groups():
                    out[target] = str(v)
    out.update({k: str(v) for k, v in dotted(raw).items()})
    return out


def _overlaps(key: str, setting: str) -> bool:
    """Whether a plain key and a key an option sets name the same thing (placement and
    placement.exponent do: choosing a placement resets its settings)."""
    return key == setting or key.startswith(setting + ".") or setting.startswith(key + ".")


def _values(override) -> list[str]:
    return [str(v) for v in override.sweep_string_iterator()] if override.is_sweep_override() else \
        [str(override.get_value_element_as_str())]


def preset_group_conflict(parsed: list, cfg) -> str | None:
    """One line when a preset's group (arm, width: options that set plain keys, see
    option_settings) and a plain key that sets the same thing are both given (arm=pre,sandwich
    placement=post; width=w64 d_model=32): the plain key wins in every job, so folders, TensorBoard
    runs and console labels would name a setting that never trained. None if there is none.
    `parsed`: the command line's overrides; `cfg`: the composed config with its hydra node (the
    preset's sweep of the group, or its default option, count too)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    given = {override_key(o.key_or_group): o for o in parsed}
    params = OmegaConf.select(cfg, "hydra.sweeper.params") or {}
    choices = OmegaConf.select(cfg, "hydra.runtime.choices") or {}
    for group in config_groups():
        if group in _ADJUSTABLE_GROUPS:
            continue
        if group in given:
            options, source = _values(given[group]), given[group].input_line
        elif group in params:
            swept = OverridesParser.create().parse_override(f"{group}={params[group]}")
            options = _values(swept)
            source = f"{given['experiment'].input_line if 'experiment' in given else 'the preset'}'s sweep " \
                     f"{group}={params[group]}"
        elif choices.get(group):
            options, source = [str(choices[group])], f"{group}={choices[group]} (the preset's)"
        else:
            continue
        sets = {o: option_settings(group, o) for o in options}
        for key, o in given.items():
            if key == group or key in _ADJUSTABLE_GROUPS or key.startswith("hydra"):
                continue
            hit = sorted({s for settings in sets.values() for s in settings if _overlaps(key, s)})
            if not hit:
                continue
            every = {s for settings in sets.values() for s in settings}
            plain = [p for k, p in given.items() if k != group and any(_overlaps(k, s) for s in every)]
            wanted = {override_key(p.input_line): _values(p) for p in plain}
            # the label to name: one whose option sets something else than the plain key gives
            mislabelled = [opt for opt, settings in sets.items()
                           if any(_overlaps(key, s) and (s != key or [settings[s]] != wanted[key]) for s in settings)]
            labelled = (mislabelled or [opt for opt, st in sets.items() if any(_overlaps(key, s) for s in st)])[0]
            matches = [opt for opt in group_options_of(group)
                       if all(len(v) == 1 and option_settings(group, opt).get(k) == v[0] for k, v in wanted.items())]
            fix = (f"drop {' '.join(p.input_line for p in plain)} (or give {group}={','.join(matches)} alone: "
                   f"it sets {_describe(option_settings(group, matches[0]))})" if matches else
                   f"drop {' '.join(p.input_line for p in plain)}, or choose the {group} options that set what you "
                   f"want (configs/{group}/)")
            return (f"{o.input_line}: {source} sets {', '.join(hit)} too, so the job labelled {group}={labelled} "
                    f"would train {o.input_line} ({group}={labelled} is {_describe(sets[labelled])}); "
                    f"give one of the two: {fix}")
    return None


def group_options_of(group: str) -> tuple[str, ...]:
    from ..config.compose import group_options

    return group_options(group)


def _describe(settings: dict[str, str]) -> str:
    """{"placement": "depth_mup", "placement.exponent": "1"} -> "placement=depth_mup placement.exponent=1"."""
    return " ".join(f"{k}={v}" for k, v in settings.items())


def group_outside_its_preset(group: str, option: str) -> str | None:
    """Why `group=option` does not compose without its preset (arm=post alone: the arm group is
    in no config's defaults but the depth_transfer preset's), and the fix; None for a group the
    primary config has."""
    from importlib.resources import files

    from ..config.compose import group_options
    from ..config.defaults import CONFIG_MODULE

    if group not in config_groups() or group in _ADJUSTABLE_GROUPS:
        return None
    presets = [p for p in group_options("experiment")
               if any(isinstance(e, str) and e.lstrip("/").split(":")[0].strip() == group
                      or isinstance(e, dict) and any(str(k).lstrip("/") == group for k in e)
                      for e in _defaults_of((files(CONFIG_MODULE) / "experiment" / f"{p}.yaml").read_text()))]
    if not presets:
        return None
    names = " and ".join(presets)
    same = _describe(option_settings(group, option)) if option in group_options(group) else ""
    without = f"give {same} (or +{group}={option})" if same else f"add the group with +{group}={option}"
    return (f"{group}={option}: {group} is a group of the {names} preset{'s' * (len(presets) > 1)} "
            f"(normexp train -m experiment={presets[0]} {group}={option}); without the preset, {without}")


def _defaults_of(text: str) -> list:
    """A config file's defaults list as plain data (`- /arm: pre` -> {"/arm": "pre"})."""
    return (OmegaConf.to_container(OmegaConf.create(text)) or {}).get("defaults") or []
