"""placement=sandwich: its settings, their rules and the numbers worked out from them
(the placement itself: model/placements/sandwich.py)."""

from __future__ import annotations

from ...registry import register
from ..base import PLACEMENT_SETTINGS, PlacementSettings


@register(PLACEMENT_SETTINGS, "sandwich", "peri")
class SandwichSettings(PlacementSettings):
    """Sandwich-LN / Peri-LN: no settings."""
