"""norm=scale: its settings and their rules
(the norm itself: model/norms/scale.py)."""

from __future__ import annotations

from ...registry import register
from ..base import NORM_SETTINGS, EpsSettings


@register(NORM_SETTINGS, "scale")
class ScaleNormSettings(EpsSettings):
    """ScaleNorm's ε (the smallest norm it divides by)."""
