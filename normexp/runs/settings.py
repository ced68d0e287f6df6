"""The one identity of a run's settings: every value in one canonical form (1.0 is 1, 1e-3 is
0.001), keyed by its dotted name, the execution settings left out. Duplicate seeds in the
report, a checkpoint against the run resuming it, and a resumed job against its folder's run
all compare this form."""

from __future__ import annotations

from collections.abc import Mapping

from omegaconf import DictConfig, OmegaConf

from ..config.keys import dotted
from .schema import is_execution_setting


def canonical_value(value):
    """One form per value, whatever its spelling: a whole-number float is that int (1.0 and 1,
    2e3 and 2000), other numbers stay floats (1e-3 and 0.001 are one float), lists become
    tuples of canonical values, mappings sorted dicts. bool stays bool (True is not 1 here)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        value = float(value) if isinstance(value, float) else int(value)
        if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53:
            return int(value)
        return value
    if isinstance(value, Mapping):
        return {str(k): canonical_value(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return tuple(canonical_value(v) for v in value)
    return value


def flat_settings(node, prefix: str = "") -> dict:
    """{"optim": {"eps": 1e-8}} -> {"optim.eps": 1e-08}: every leaf by its dotted key, canonical."""
    return {k: canonical_value(v) for k, v in dotted(node, prefix).items()}


def result_settings(cfg) -> dict:
    """The settings that decide what a run computes, canonical (see canonical_value): the job
    config flattened, EXECUTION_SETTINGS and the hydra node left out. The one identity of a setting:
    duplicate seeds in the report, a checkpoint against the run resuming it, and a resumed job
    against its folder's run all compare this form. `cfg`: a DictConfig or a plain dict."""
    if isinstance(cfg, DictConfig):
        try:
            cfg = OmegaConf.to_container(cfg, resolve=True)
        except Exception:  # noqa: BLE001 - interpolations that need Hydra's resolvers
            cfg = OmegaConf.to_container(cfg, resolve=False)
    return {k: v for k, v in flat_settings({k: v for k, v in cfg.items() if k != "hydra"}).items()
            if not is_execution_setting(k)}
