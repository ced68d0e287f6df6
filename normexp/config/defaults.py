"""Each default written once, in a shipped yaml file, and read from there by everything else
that needs it: ModelConfig (configs/train.yaml), `normexp probe` (configs/probe.yaml) and
`normexp bench` (configs/bench.yaml), their dataclasses and their Typer options alike.

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
    return yaml.safe_load((importlib.resources.files(CONFIG_MODULE) / f"{name}.yaml").read_text(encoding="utf-8"))


def train_default(key: str):
    """A top-level value of configs/train.yaml (`layers` -> 6)."""
    return shipped("train")[key]


def group_default(group: str) -> str:
    """The option configs/train.yaml's defaults list picks for a config group (`norm` -> layer)."""
    return next(entry[group] for entry in shipped("train")["defaults"] if isinstance(entry, dict) and group in entry)


def probe_default(key: str):
    """A default of `normexp probe` (configs/probe.yaml)."""
    return shipped("probe")[key]


def bench_default(key: str):
    """A default of `normexp bench` (configs/bench.yaml)."""
    return shipped("bench")[key]
