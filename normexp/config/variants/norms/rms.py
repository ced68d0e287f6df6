"""norm=rms: its settings and their rules
(the norm itself: model/norms/rms.py)."""

from __future__ import annotations

from ...registry import register
from ..base import NORM_SETTINGS, EpsSettings


@register(NORM_SETTINGS, "rms")
class RMSNormSettings(EpsSettings):
    """RMSNorm's ε."""
