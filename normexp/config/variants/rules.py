"""What the pre-flight asks of a run's norm, placement and init, answered by their settings
classes alone (no torch, no model built)."""

from __future__ import annotations

from collections.abc import Mapping

from ..checks import ConfigError
from ..defaults import group_default, train_default
from ..registry import variant
from .base import SETTINGS


def settings_of(group: str, spec: str | Mapping):
    """The settings object of a group's variant (`norm`, `placement` or `init`) for a spec (a
    name, or {"name": ..., **settings}; the yaml's values for those left out): a bad value is a
    ConfigError naming its key."""
    cls, settings = variant(SETTINGS[group], group, spec)
    return cls(**settings)


def check_settings(norm: str | Mapping, placement: str | Mapping, init: str | Mapping, layers: int) -> None:
    """Check the norm's, placement's and init's settings, and work out the placement's numbers
    for `layers` blocks: a bad setting raises ConfigError naming its key, before any data is
    loaded or any model built."""
    settings_of("norm", norm)
    settings_of("placement", placement).resolved(layers)
    settings_of("init", init)


def resolved_settings(norm: str | Mapping, placement: str | Mapping, layers: int) -> dict:
    """{"norm": {...}, "placement": {...}}: the settings a model of `layers` blocks uses ("auto"
    worked out, as GPT.settings() reports them): what `--cfg job` shows beside "auto"."""
    return {"norm": settings_of("norm", norm).resolved(), "placement": settings_of("placement", placement).resolved(layers)}


def check_settings_read(norm: str | Mapping, placement: str | Mapping, qk_norm: bool, scale_embeddings: bool) -> None:
    """Refuse a model setting that nothing of this run reads, set to other than its default: it
    would train the same run as the default under another name (and a sweep over it, several
    folders of one run). What is read comes from the classes' declarations: the placement's
    `reads` and the norm's `normalizes` (base.py). The norm type is read where the placement
    builds norms, or through QK-norm when that is on."""
    norm_cls, norm_settings = variant(SETTINGS["norm"], "norm", norm)
    placement_cls, _ = variant(SETTINGS["placement"], "placement", placement)
    where = f"placement={_name(placement)}"
    unread = {"qk_norm": (f"{where} does not read it" if "qk_norm" not in placement_cls.reads else
                          None if norm_cls.normalizes else f"norm={_name(norm)} normalizes nothing"),
              "scale_embeddings": None if "scale_embeddings" in placement_cls.reads else f"{where} does not read it"}
    for key, value in (("qk_norm", qk_norm), ("scale_embeddings", scale_embeddings)):
        default = train_default(key)
        if unread[key] and value != default:
            raise ConfigError(key, str(value).lower(), f"{unread[key]}, so it would train the same run as "
                              f"{key}={str(default).lower()}; drop it (in a sweep, give these settings a sweep of their own)")
    norm_read = "norm" in placement_cls.reads or (unread["qk_norm"] is None and qk_norm is True)
    default_norm = group_default("norm")
    default_cls, default_settings = variant(SETTINGS["norm"], "norm", default_norm)
    if not norm_read and (norm_cls, norm_settings) != (default_cls, default_settings):
        key, value = "norm", _name(norm)
        if norm_cls is default_cls:  # the default norm with other settings: name the first that differs
            key = next(f"norm.{k}" for k in sorted(norm_settings) if norm_settings[k] != default_settings[k])
            value = norm_settings[key.split(".", 1)[1]]
        raise ConfigError(key, value, f"{where} builds no norm (nor QK-norm here), so every norm trains the same "
                          f"run as the default norm={default_norm}; leave norm out with {where} (a sweep over norms: "
                          f"give {_name(placement)} a sweep of its own)")


def pack_refusal(placement: str, norm: str, compiled: bool) -> str | None:
    """Why a run of this placement, norm and compile setting cannot be one member of a pack, in a
    few words; None if it can. The one rule: the launcher asks it of a job's config, model/packed.py's
    `packable` of a built model. A placement or norm says so itself, by its settings class's `unpackable` (the
    reason: its model-level half is not the standard one, or its forward mixes members in ways the
    pack does not reproduce; tests/train/test_packs.py checks every other one against solo runs)."""
    for group, name in (("placement", placement), ("norm", norm)):
        if (why := getattr(SETTINGS[group].get(name), "unpackable", None)) is not None:
            return f"{group}={name}: {why}"
    if compiled:
        return "compile=true: the pack runs its own (eager) forward"
    return None


def _name(spec: str | Mapping) -> str:
    """A registry name, or a config node's `name`."""
    return spec if isinstance(spec, str) else spec.get("name")
