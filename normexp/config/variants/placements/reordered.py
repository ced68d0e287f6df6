"""placement=reordered: its settings, their rules and the numbers worked out from them
(the placement itself: model/placements/reordered.py)."""

from __future__ import annotations

from ...registry import register
from ..base import PLACEMENT_SETTINGS, PlacementSettings


@register(PLACEMENT_SETTINGS, "reordered")
class ReorderedSettings(PlacementSettings):
    """OLMo 2's reordered norm: no settings."""
