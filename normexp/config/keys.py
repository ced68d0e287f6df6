"""The config's keys, read in one place: an override's key (`+norm.eps=1e-6` -> `norm.eps`),
a nested node's leaves by dotted key (`{"optim": {"eps": 1e-8}}` -> `{"optim.eps": 1e-8}`), and
the typed settings' schema: each dataclass field names its key (`setting`), and one reader
builds the settings from a composed config (`read_settings`)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, MutableSequence
from dataclasses import field, fields, is_dataclass
from typing import get_type_hints

from .checks import ConfigError, did_you_mean, is_integer


def override_key(override: str) -> str:
    """The key an override sets: the text before the first `=`, without Hydra's `+`, `++`
    (add) and `~` (delete) prefixes; a bare key comes back without its prefixes."""
    return override.split("=", 1)[0].lstrip("+~")


# characters a Hydra override value may hold unquoted and still read back as the same string
# (a path: the `/` keeps it from reading as a number, a bool or null)
_BARE_PATH = re.compile(r"[A-Za-z0-9_./:+@%-]+(?: +[A-Za-z0-9_./:+@%-]+)*")


def hydra_quoted(value: str) -> str:
    """`value` written as a Hydra override value that reads back as exactly `value` once Hydra
    and OmegaConf have parsed it (`hydra.run.dir=` + this): a folder named by its overrides
    holds `=` and `,`, which Hydra parses unquoted. Quoted per Hydra's grammar: in a quoted
    value a run of backslashes before a quote (escaped or closing) is halved, other
    backslashes are literal; `${` is escaped as OmegaConf reads it (`\\${`), so a folder name is
    never interpolated."""
    if "/" in value and _BARE_PATH.fullmatch(value):
        return value
    text = re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", value)
    quote = '"' if '"' not in text else "'"
    text = re.sub(rf"(\\*)({quote}|\Z)", lambda m: m.group(1) * 2 + ("\\" + m.group(2) if m.group(2) else ""), text)
    return f"{quote}{text}{quote}"


def spaced_override(overrides) -> str | None:
    """The one-line hint for an override the shell split at spaces around its `=` (`layers = 6`,
    `layers= 6`, `layers =6`: Hydra then reads `layers` alone), or None. Checked before Hydra
    parses, whose own error (`Error parsing override 'layers'`) names no cause."""
    args = list(overrides)
    for i, arg in enumerate(args):
        after = args[i + 1] if i + 1 < len(args) else None
        before = args[i - 1] if i else None
        if "=" not in arg and after is not None and after.startswith("="):  # layers = 6, layers =6
            value = after[1:] or (args[i + 2] if after == "=" and i + 2 < len(args) else "")
            written = " ".join(args[i:i + (3 if after == "=" else 2)])
        elif arg.endswith("=") and arg != "=" and after is not None and "=" not in after and (
                before is None or not before.endswith("=")):  # layers= 6
            value, written = after, f"{arg} {after}"
            arg = arg[:-1]
        else:
            continue
        return (f"'{written}': no spaces around `=` in an override (the shell splits there); "
                f"write {arg}={value}")
    return None


# Hydra's folder-naming exclude list: normexp records it on a sweep's command line (launch/
# folder_names.py), where it holds every execution and path key (~900 characters)
DIRNAME_EXCLUDE_KEYS = "hydra.job.config.override_dirname.exclude_keys"


def shown_command(args: list[str]) -> str:
    """A command's arguments as a line to show (shell-quoted), the recorded folder-naming
    exclude list as its count: the line stays readable; the command run keeps the list."""
    def shown(arg: str) -> str:
        if override_key(arg) != DIRNAME_EXCLUDE_KEYS:
            return arg
        keys = arg.split("=", 1)[1].strip("[]").split(",")
        return f"{DIRNAME_EXCLUDE_KEYS}=[…{len(keys)} keys, as recorded…]"
    import shlex

    return shlex.join(shown(a) for a in args)


def dotted(node, prefix: str = "") -> dict:
    """Every leaf of a nested mapping by its dotted key, values as they are (a list is a leaf)."""
    if isinstance(node, Mapping):
        out = {}
        for k, v in node.items():
            out.update(dotted(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: node}


def suggest_key(key: str, keys, groups=()) -> str:
    """did_you_mean for a dotted key no config declares: its first part against the top-level
    names (`placment.alpha` -> placement.alpha), else the whole key against the keys below
    that name (`placement.alhpa` -> placement.alpha). `keys`: the config's dotted leaves;
    `groups`: config groups, which count as top-level names (`placment=pre` -> placement)."""
    keys = list(keys)
    head, dot, rest = key.partition(".")
    heads = {k.split(".")[0] for k in keys} | set(groups)
    if head not in heads:
        hint = did_you_mean(head, heads)
        return hint.replace("? ", f"{dot}{rest}? ") if hint else ""
    return did_you_mean(key, [k for k in keys if k.startswith(f"{head}.")])


def plain(node):
    """A config node as plain data, values resolved: a mapping (a DictConfig too) becomes a
    dict, a list (a ListConfig too) a list, anything else stays as it is."""
    if isinstance(node, Mapping):
        return {k: plain(v) for k, v in node.items()}
    if isinstance(node, MutableSequence):
        return [plain(v) for v in node]
    return node



# ------------------------------------------------------------ the typed settings' schema
# Each field of the typed settings (run_config.py, model_config.py) names its key in train.yaml
# (`setting`): one reader builds them all (`read_settings`), one check holds the kinds of value
# the fields declare (`check_kinds`), and the keys a run may set are the fields' (`schema_keys`).
# train.yaml holds each default, the fields each key and its type.

POSITIVE = "a positive integer"  # a field's `rule`: a count of at least 1
_ABSENT = object()


def setting(key: str | None, *, read=None, rule: str | None = None, absent=_ABSENT, **field_args):
    """A dataclass field read from the composed config's dotted `key` (None: the whole config),
    through `read(value, cfg)` if given, as written otherwise (so a check names what the user
    wrote); `rule`: POSITIVE for a count; `absent`: the value where the key is not there."""
    return field(metadata={"key": key, "read": read, "rule": rule, "absent": absent}, **field_args)


def _select(cfg, key: str, absent=_ABSENT):
    """The value at a dotted key of a mapping (a DictConfig too); KeyError where there is none
    and no `absent` value."""
    node = cfg
    try:
        for part in key.split("."):
            node = node[part]
    except (KeyError, AttributeError):  # OmegaConf's ConfigKeyError is a KeyError
        if absent is _ABSENT:
            raise KeyError(key) from None
        return absent
    return node


def _parts(cls) -> list:
    """(field, its type, its metadata) of a settings dataclass, nested ones as their type."""
    hints = get_type_hints(cls)
    return [(f, hints[f.name], f.metadata) for f in fields(cls)]


def read_settings(cls, cfg, **given):
    """`cls` (a dataclass of `setting` fields) from a composed config (a DictConfig, or the same
    as plain data): each field from its key, a field whose type is such a dataclass read the
    same way, a field without a key left to its default; `given` fields as given."""
    values = {}
    for f, kind, meta in _parts(cls):
        if f.name in given:
            continue
        if "key" not in meta:
            if is_dataclass(kind):
                values[f.name] = read_settings(kind, cfg)
            continue
        value = cfg if meta["key"] is None else _select(cfg, meta["key"], meta["absent"])
        values[f.name] = meta["read"](value, cfg) if meta["read"] else value
    return cls(**values, **given)


class Settings:
    """A dataclass of `setting` fields: `from_composed` reads it off a composed config."""

    @classmethod
    def from_composed(cls, cfg, **given):
        """The settings of a composed config (a DictConfig, or plain data), each field from its key."""
        return read_settings(cls, cfg, **given)


class OptionSettings(Settings, Mapping):
    """The settings of a group's option (a data source, a tokenizer): each field `setting("data.files")`
    of its group's node, and the whole a read-only mapping of that node as written ({"name": ...,
    "files": [...]}), so what took the node as a dict (data.batches.load_corpus) takes these."""

    def _field_names(self) -> dict[str, str]:
        """{the node's key: its field's name}."""
        return {meta["key"].partition(".")[2]: f.name for f, _, meta in _parts(type(self))}

    def __getitem__(self, key: str):
        names = self._field_names()
        if key not in names:
            raise KeyError(key)
        return getattr(self, names[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self._field_names())

    def __len__(self) -> int:
        return len(self._field_names())


def read_option(cls, group: str, node):
    """`cls` (an OptionSettings) from its group's node: a key of the node no field reads, or a
    field whose key the node lacks, is a one-line ConfigError naming the option's yaml (the
    schema and the yaml cannot drift apart unseen)."""
    node = plain(node)
    read = {key.partition(".")[2] for key in schema_keys(cls)}
    where = f"configs/{group}/{node.get('name')}.yaml"
    for key in sorted(set(node) - read):
        raise ConfigError(f"{group}.{key}", node[key], f"no field of {cls.__name__} reads it; add one or drop it from {where}")
    for key in sorted(read - set(node)):
        raise ConfigError(f"{group}.{key}", "<unset>", f"{cls.__name__} reads it; declare it in {where}")
    return read_settings(cls, {group: node})


def schema_keys(*classes) -> tuple[str, ...]:
    """The dotted keys the settings dataclasses read (a group's node as its name: `schedule`)."""
    keys = set()
    for cls in classes:
        for _, kind, meta in _parts(cls):
            if meta.get("key"):
                keys.add(meta["key"])
            elif "key" not in meta and is_dataclass(kind):
                keys.update(schema_keys(kind))
    return tuple(sorted(keys))


def check_kinds(cls, cfg) -> None:
    """The kinds of value the fields declare, on the composed config as written: a POSITIVE
    count must be a positive integer (and there), a `bool` field true or false. One ConfigError."""
    for f, kind, meta in _parts(cls):
        if "key" not in meta:
            if is_dataclass(kind):
                check_kinds(kind, cfg)
            continue
        if meta["rule"] == POSITIVE:
            try:
                value = _select(cfg, meta["key"])
            except KeyError:
                raise ConfigError(meta["key"], "<unset>",
                                  "every run needs it; see `normexp train --cfg job` for the default") from None
            if not is_integer(value) or value <= 0:
                raise ConfigError(meta["key"], value, "must be a positive integer")
        elif kind is bool and not isinstance(value := _select(cfg, meta["key"], False), bool):
            raise ConfigError(meta["key"], value, "must be true or false")
