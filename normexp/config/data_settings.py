"""The data's and the tokenizer's settings, typed: a dataclass per source or tokenizer whose keys
differ, each field a key of its option's yaml (configs/data/<name>.yaml, configs/tokenizer/<name>.yaml).

They are the schema of those nodes, read in one place: RunConfig.data and .tokenizer are these
(`option_settings`), the pre-flight refuses a `data.X` no field reads (launch/validate.py), and
config.keys.read_option refuses a yaml key no field reads and a field the yaml lacks. Values are
kept as written, for a source's or tokenizer's `check` (data/sources.py) to name. They live here,
beside the run's other typed settings, so that config/ reads them without importing data/, whose
sources and tokenizers take them; standard library only (with config/'s own leaves)."""

from __future__ import annotations

from dataclasses import dataclass

from .checks import ConfigError
from .compose import declared_names
from .keys import OptionSettings, plain, read_option, setting

# {group: {option name: its settings class}}: the names are those of data/sources.py's SOURCES and
# TOKENIZERS and of the shipped yaml (tests/config/test_run_config.py holds the three together)
OPTION_SETTINGS: dict[str, dict[str, type[OptionSettings]]] = {"data": {}, "tokenizer": {}}


def typed_option(group: str, *names: str):
    """A class decorator: the settings class of `group`'s options `names`."""
    def add(cls):
        for name in names:
            OPTION_SETTINGS[group][name] = cls
        return cls
    return add


def option_settings(group: str, node) -> OptionSettings:
    """The typed settings of a data (`group` "data") or tokenizer node, by the class its name picks."""
    name = node.get("name")
    if name not in OPTION_SETTINGS[group]:
        raise ConfigError(group, name, f"choose from {', '.join(declared_names(group))}")
    return read_option(OPTION_SETTINGS[group][name], group, node)


def _as_written(value, cfg):
    return plain(value)


@dataclass(frozen=True)
class SourceSettings(OptionSettings):
    name: str = setting("data.name")


@typed_option("data", "shakespeare")
@dataclass(frozen=True)
class ShakespeareSettings(SourceSettings):
    val_works: list = setting("data.val_works", read=_as_written)  # file stems of the held-out works


@typed_option("data", "text")
@dataclass(frozen=True)
class TextSettings(SourceSettings):
    files: list = setting("data.files", read=_as_written)
    val_files: list | None = setting("data.val_files", read=_as_written)
    val_fraction: float = setting("data.val_fraction")  # without val_files: the last fraction is validation


@typed_option("data", "jsonl")
@dataclass(frozen=True)
class JsonLinesSettings(TextSettings):
    text_field: str = setting("data.text_field")


@typed_option("data", "hub")
@dataclass(frozen=True)
class HubSettings(SourceSettings):
    path: str = setting("data.path")
    config: str | None = setting("data.config")
    train_split: str = setting("data.train_split")
    val_split: str = setting("data.val_split")
    text_field: str = setting("data.text_field")
    max_bytes: int | None = setting("data.max_bytes")  # the training text's cap in UTF-8 bytes (None: all)


@typed_option("tokenizer", "byte", "bpe")
@dataclass(frozen=True)
class TokenizerSettings(OptionSettings):
    name: str = setting("tokenizer.name")
    vocab_size: int = setting("tokenizer.vocab_size")
