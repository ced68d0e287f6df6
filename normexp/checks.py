"""ConfigError and the small value checks that validate.py and the registries' own checks
(corpora.py's sources and tokenizers) share: a module of its own, so neither imports the other."""

from __future__ import annotations

import math

from omegaconf import ListConfig


class ConfigError(Exception):
    """A bad setting; str(e) is a single line: `key=value: what is allowed`."""

    def __init__(self, key: str, value, allowed: str):
        self.key, self.value = key, value
        shown = value if not isinstance(value, (list, ListConfig)) else "[" + ",".join(map(str, value)) + "]"
        super().__init__(" ".join(f"{key}={shown}: {allowed}".split()))


def is_number(v) -> bool:
    """A finite real number: nan and inf pass `> 0`-style tests one way or the other, so a
    range check alone would let them through (lr=inf trains and "diverges" at step 0)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def is_integer(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
