"""The config's keys, read in one place: an override's key (`+norm.eps=1e-6` -> `norm.eps`)
and a nested node's leaves by dotted key (`{"optim": {"eps": 1e-8}}` -> `{"optim.eps": 1e-8}`)."""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableSequence

from .checks import did_you_mean


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
