"""norm=none: its settings and their rules
(the norm itself: model/norms/none.py)."""

from __future__ import annotations

from ...registry import register
from ..base import NORM_SETTINGS, NormSettings


@register(NORM_SETTINGS, "none")
class NoNormSettings(NormSettings):
    """No norm: no settings."""

    normalizes = False  # qk_norm=true beside it would normalize nothing
