"""The registries' helpers: a class registered under its names, and a variant (a norm,
placement or init) built by name with its settings filled from its one yaml.

A variant's settings are the keyword-only parameters of its settings class's constructor
(config/variants/: torch-free, so the pre-flight can ask them), written without default values:
the signature says which keys exist, configs/<group>/<name>.yaml gives their values. `variant`
is the one place that joins the two: the settings a caller gives, over the yaml's."""

from __future__ import annotations

import inspect
from collections.abc import Mapping

from .checks import ConfigError, did_you_mean
from .defaults import option_default


def register(registry: dict, *names: str):
    """A class decorator: the class goes into `registry` under each of `names`; its `name` is
    the first (a data source's or tokenizer's name as summary.json records it)."""
    def add(cls):
        for name in names:
            registry[name] = cls
        cls.name = names[0]
        return cls
    return add


def setting_names(cls) -> list[str]:
    """The settings a variant class takes: its settings class's (`cls.Settings`, for a variant
    that computes: config/variants/) or its own constructor's keyword-only parameters."""
    cls = getattr(cls, "Settings", cls)
    return [p.name for p in inspect.signature(cls.__init__).parameters.values() if p.kind is p.KEYWORD_ONLY]


def variant(registry: dict, group: str, spec: str | Mapping) -> tuple[type, dict]:
    """(class, settings) for a spec: a name, or {"name": ..., **settings}. The settings the
    spec leaves out are configs/<group>/<name>.yaml's; a key the class does not take is a
    ConfigError naming it."""
    spec = {"name": spec} if isinstance(spec, str) else dict(spec)
    name = spec.pop("name")
    if name not in registry:
        raise ConfigError(group, name, f"choose from {', '.join(sorted(registry))}")
    cls = registry[name]
    names = setting_names(cls)
    for key, value in spec.items():
        if key not in names:
            hint = did_you_mean(str(key), names).replace("mean ", f"mean {group}.")
            raise ConfigError(f"{group}.{key}", value,
                              f"{hint}{group} {name} takes {', '.join(sorted(names)) or 'no settings'}")
    shipped = option_default(group, name)
    return cls, {key: spec[key] if key in spec else shipped[key] for key in names}


def build(registry: dict, group: str, spec: str | Mapping, *args, **kwargs):
    """The variant a spec names, built: cls(*args, **kwargs, **its settings) (`variant`)."""
    cls, settings = variant(registry, group, spec)
    return cls(*args, **kwargs, **settings)


def schema_drift(cls, name: str, shipped: Mapping) -> list[str]:
    """How a variant class and its yaml disagree (empty: they agree): a yaml key the class
    does not take, a setting the yaml lacks, a setting with a default value in the signature
    (a second home for its default), or a yaml whose `name` is not the registered one."""
    params = {p.name: p for p in inspect.signature(cls.__init__).parameters.values() if p.kind is p.KEYWORD_ONLY}
    keys = set(shipped) - {"name"}
    problems = [f"{name}: the yaml's key {key!r} is no keyword-only parameter of {cls.__name__}.__init__"
                for key in sorted(keys - set(params))]
    problems += [f"{name}: {cls.__name__}'s setting {key!r} is missing from the yaml" for key in sorted(set(params) - keys)]
    problems += [f"{name}: {cls.__name__}'s setting {key!r} has a default in its signature; the yaml holds it"
                 for key, p in params.items() if p.default is not p.empty]
    if shipped.get("name") != name:
        problems.append(f"{name}: the yaml's name is {shipped.get('name')!r}")
    return problems
