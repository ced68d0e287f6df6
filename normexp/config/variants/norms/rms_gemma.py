"""norm=rms_gemma: its settings and their rules
(the norm itself: model/norms/rms_gemma.py)."""

from __future__ import annotations

from ...registry import register
from ..base import NORM_SETTINGS, EpsSettings


@register(NORM_SETTINGS, "rms_gemma")
class GemmaRMSNormSettings(EpsSettings):
    """Gemma's RMSNorm's ε."""
