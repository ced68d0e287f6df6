"""The one ConfigError and the small value checks that every layer shares: validate.py's
rules, the model's norms, placements and inits, the data sources and tokenizers. Standard
library only, so the model imports it without Hydra or OmegaConf."""

from __future__ import annotations

import math
from collections.abc import MutableSequence


class ConfigError(Exception):
    """A bad setting; str(e) is a single line: `key=value: what is allowed`."""

    def __init__(self, key: str, value, allowed: str):
        self.key, self.value = key, value
        # a list or an OmegaConf ListConfig (both mutable sequences) as the user wrote it
        shown = value if not isinstance(value, MutableSequence) else "[" + ",".join(map(str, value)) + "]"
        super().__init__(" ".join(f"{key}={shown}: {allowed}".split()))


def is_number(v) -> bool:
    """A finite real number: nan and inf pass `> 0`-style tests one way or the other, so a
    range check alone would let them through (lr=inf trains and "diverges" at step 0)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def is_integer(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# the largest float32: a setting beyond it becomes inf in the model's float32 tensors
FLOAT32_MAX = 3.4028234663852886e38


def is_float32(v) -> bool:
    """A real number the model's float32 tensors can hold (nan, inf and 1e308 cannot)."""
    return is_number(v) and abs(v) <= FLOAT32_MAX


def is_positive_float32(v) -> bool:
    return is_float32(v) and v > 0


def require(ok: bool, key: str, value, allowed: str) -> None:
    """ConfigError(key, value, allowed) unless ok: a variant's check of its own setting."""
    if not ok:
        raise ConfigError(key, value, allowed)


def did_you_mean(word: str, candidates) -> str:
    """"did you mean X? " for the candidate closest to a misspelled `word` (difflib's
    ratio >= 0.6), or "" when none is close. Case does not count: `RMS` finds rms (a candidate
    equal to it but for case first, else the closest with both lowercased)."""
    import difflib

    by_lower = {}
    for c in sorted(set(candidates)):
        by_lower.setdefault(str(c).lower(), c)
    if word.lower() in by_lower:
        return f"did you mean {by_lower[word.lower()]}? "
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1)
    return f"did you mean {by_lower[close[0]]}? " if close else ""

