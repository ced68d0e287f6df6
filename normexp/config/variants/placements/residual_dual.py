"""placement=residual_dual: its settings, their rules and the numbers worked out from them
(the placement itself: model/placements/residual_dual.py)."""

from __future__ import annotations

from ...registry import register
from ..base import PLACEMENT_SETTINGS, PlacementSettings


@register(PLACEMENT_SETTINGS, "residual_dual")
class ResiDualSettings(PlacementSettings):
    """ResiDual: no settings."""
