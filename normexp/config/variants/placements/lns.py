"""placement=lns: its settings, their rules and the numbers worked out from them
(the placement itself: model/placements/lns.py)."""

from __future__ import annotations

from ...registry import register
from ..base import PLACEMENT_SETTINGS, PlacementSettings


@register(PLACEMENT_SETTINGS, "lns")
class LayerNormScalingSettings(PlacementSettings):
    """LayerNorm Scaling: no settings (its 1/√ℓ scale is the block's position's)."""
