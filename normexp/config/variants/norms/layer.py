"""norm=layer: its settings and their rules
(the norm itself: model/norms/layer.py)."""

from __future__ import annotations

from ...registry import register
from ..base import NORM_SETTINGS, EpsSettings


@register(NORM_SETTINGS, "layer")
class LayerNormSettings(EpsSettings):
    """LayerNorm's ε."""
