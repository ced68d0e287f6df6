"""Up-front checks of a resolved config: every problem is one line naming the key,
the value, and what is allowed, before any data is loaded or any folder is written.

This module imports neither torch nor the data stack, so `normexp train` answers a typo in
about a second. Every rule lives once: the run's own, the optimizer's, the schedule's (warmup),
the logging's and the loss-spike rule's beside their data, in config/run_config.py's typed
settings, whose `check` this module calls; the model's shape and the generic ones (integer
counts, switches, the device, the registries' names) here; a data source's and a tokenizer's own rules live
in its class (data/sources.py), which data/batches.py also applies for callers that skip the command line. The valid norm/placement/data/tokenizer names are
read from the shipped config groups (`compose.declared_names`). A norm's or placement's own
settings (eps, alpha, ratio, ...) are checked by its class in model/, which owns them.
"""

from __future__ import annotations

import os

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ..config.checks import ConfigError, is_integer
from ..config.compose import config_groups, declared_keys, declared_names, top_level_keys
from ..config.keys import did_you_mean, dotted, override_key
from ..config.model_config import ModelConfig
from ..config.run_config import RunConfig
from ..config.resources import (available_memory_bytes, batch_norm_needs, memory_parts,  # noqa: F401 - re-exported
                                 memory_problem, training_memory_bytes)
from ..data.files import cache_root
from ..runs.resume import check_creatable

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


def _positive_int(cfg, key):
    v = OmegaConf.select(cfg, key, default=_UNSET, throw_on_missing=True)
    if v is _UNSET:
        raise ConfigError(key, "<unset>", "every run needs it; see `normexp train --cfg job` for the default")
    if not is_integer(v) or v <= 0:
        raise ConfigError(key, v, "must be a positive integer")


def _boolean(cfg, key):
    v = OmegaConf.select(cfg, key, default=False)
    if not isinstance(v, bool):
        raise ConfigError(key, v, "must be true or false")


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
    for key in ("layers", "d_model", "heads", "mlp_ratio", "seq_len", "batch_size", "steps",
                "log_every", "eval_every", "eval_batches"):
        _positive_int(cfg, key)
    ModelConfig.from_composed(cfg).check()  # the model's rules live beside its data
    _known_keys(cfg)
    run = RunConfig.from_composed(cfg)  # the typed settings: their rules live beside them
    run.optim.check()
    run.schedule.check(warmup_given="warmup" in explicit)
    run.check()
    _positive_int(cfg, "loss_spike.window")
    _positive_int(cfg, "loss_spike.min_points")
    run.loss_spike.check()
    _device(cfg.device)
    _choice("norm", cfg.norm.name, "norm")
    _choice("placement", cfg.placement.name, "placement")
    _choice("init", cfg.init.name, "init")
    if cfg.norm.name == "batch" and cfg.batch_size * cfg.seq_len < 2:
        raise ConfigError("batch_size", cfg.batch_size, batch_norm_needs(f"seq_len={cfg.seq_len}", "batch_size·seq_len",
                                                                          "batch_size or seq_len"))
    _positive_int(cfg, "keep_checkpoints")
    _positive_int(cfg, "log.model_update_every")
    for key in ("resume", "compile", "log.histograms", "log.model_update", "log.extra_signals", "qk_norm",
                "scale_embeddings"):
        _boolean(cfg, key)
    run.log.check()
    check_tokenizer(cfg.tokenizer)
    check_data(cfg.data)


# groups whose settings the variant classes in model/ check (config.registry.variant names the key)
_CLASS_CHECKED = ("norm", "placement", "init")


def _known_keys(cfg) -> None:
    """Every key must be one train.yaml or the chosen group option declares: `+lrr=0.5` or
    `schedule=constant +schedule.min_lr_ratio=0.5` would otherwise run without a word."""
    allowed = set(top_level_keys())
    groups = set(config_groups())
    for key, value in dotted(OmegaConf.to_container(cfg, resolve=False)).items():
        group, _, setting = key.partition(".")
        if group in _CLASS_CHECKED or (group in groups and setting == "name"):
            continue
        if group in groups and isinstance(cfg.get(group), DictConfig):
            name = cfg[group].get("name")
            if setting.split(".")[0] not in declared_keys(group, name):
                takes = ", ".join(declared_keys(group, name)) or "no settings"
                hint = did_you_mean(setting, declared_keys(group, name)).replace("mean ", f"mean {group}.")
                raise ConfigError(key, value, f"{hint}{group} {name} takes {takes}")
        elif key not in allowed:
            hint = did_you_mean(key, allowed)
            raise ConfigError(key, value, f"unknown setting; {hint}see `normexp train --cfg job` for the keys")


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
        import torch  # only for this question: the usual path stays torch-free

        if not torch.cuda.is_available():
            raise ConfigError("device", device, "no CUDA device is available here; use device=auto or device=cpu")
    if device == "mps":
        import torch

        if not torch.backends.mps.is_available():
            raise ConfigError("device", device, "no Apple MPS device is available here; use device=auto or device=cpu")


def check_launcher(launcher) -> None:
    """Launcher settings the launcher itself would refuse with a traceback mid-sweep."""
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
        import torch

        if torch.cuda.is_available() or torch.backends.mps.is_available():
            return False
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
