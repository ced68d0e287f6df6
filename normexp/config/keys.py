"""The config's keys, read in one place: an override's key (`+norm.eps=1e-6` -> `norm.eps`)
and a nested node's leaves by dotted key (`{"optim": {"eps": 1e-8}}` -> `{"optim.eps": 1e-8}`)."""

from __future__ import annotations

from collections.abc import Mapping


def override_key(override: str) -> str:
    """The key an override sets: the text before the first `=`, without Hydra's `+`, `++`
    (add) and `~` (delete) prefixes; a bare key comes back without its prefixes."""
    return override.split("=", 1)[0].lstrip("+~")


def dotted(node, prefix: str = "") -> dict:
    """Every leaf of a nested mapping by its dotted key, values as they are (a list is a leaf)."""
    if isinstance(node, Mapping):
        out = {}
        for k, v in node.items():
            out.update(dotted(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: node}
