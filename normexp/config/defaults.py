"""Each default written once, in a shipped yaml file, and read from there by everything else
that needs it: ModelConfig (configs/train.yaml), `normexp probe` (configs/probe.yaml),
`normexp bench` (configs/bench.yaml), their dataclasses and their Typer options alike, and
each norm's, placement's and init's settings (configs/<group>/<name>.yaml, filled in by
config/registry.py's `variant`).

Reads the files through the package (normexp.configs), so it works from a wheel too; PyYAML
only (no Hydra), so the model and the command line's start-up can use it."""

from __future__ import annotations

import importlib.resources
from functools import lru_cache

import yaml

CONFIG_MODULE = "normexp.configs"  # the shipped configs/ folder, as a package (a wheel holds it too)


@lru_cache(maxsize=None)
def shipped(name: str) -> dict:
    """The shipped configs/<name>.yaml as a dict."""
    path = importlib.resources.files(CONFIG_MODULE).joinpath(*f"{name}.yaml".split("/"))  # `norm/layer`: a subfolder
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def train_default(key: str):
    """A top-level value of configs/train.yaml (`layers` -> 6)."""
    return shipped("train")[key]


def group_default(group: str) -> str:
    """The option configs/train.yaml's defaults list picks for a config group (`norm` -> layer)."""
    return next(entry[group] for entry in shipped("train")["defaults"] if isinstance(entry, dict) and group in entry)


def option_default(group: str, name: str) -> dict:
    """A config group's option as shipped, configs/<group>/<name>.yaml (`norm`, `layer` ->
    {"name": "layer", "eps": 1e-05}): a norm's, placement's or init's settings live there only."""
    return shipped(f"{group}/{name}")


def probe_default(key: str):
    """A default of `normexp probe` (configs/probe.yaml)."""
    return shipped("probe")[key]


def bench_default(key: str):
    """A default of `normexp bench` (configs/bench.yaml)."""
    return shipped("bench")[key]
