"""The registries' two helpers: a class registered under its names, and a spec (a name, or
{"name": ..., **settings}) looked up with its settings checked against the class's own."""

from __future__ import annotations

import inspect
from collections.abc import Mapping

from .checks import ConfigError


def register(registry: dict, *names: str):
    """A class decorator: the class goes into `registry` under each of `names`; its `name` is
    the first (a data source's or tokenizer's name as summary.json records it)."""
    def add(cls):
        for name in names:
            registry[name] = cls
        cls.name = names[0]
        return cls
    return add


def variant(registry: dict, group: str, spec: str | Mapping) -> tuple[type, dict]:
    """(class, settings) for a spec: a name, or {"name": ..., **settings}. Settings the class
    does not take are a ConfigError naming the key."""
    spec = {"name": spec} if isinstance(spec, str) else dict(spec)
    name = spec.pop("name")
    if name not in registry:
        raise ConfigError(group, name, f"choose from {', '.join(sorted(registry))}")
    cls = registry[name]
    names = {p.name for p in inspect.signature(cls.__init__).parameters.values() if p.default is not p.empty}
    for key, value in spec.items():
        if key not in names:
            raise ConfigError(f"{group}.{key}", value, f"{group} {name} takes {', '.join(sorted(names)) or 'no settings'}")
    return cls, spec
