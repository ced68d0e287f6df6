"""placement=pre: its settings, their rules and the numbers worked out from them
(the placement itself: model/placements/pre.py)."""

from __future__ import annotations

from ...registry import register
from ..base import PLACEMENT_SETTINGS, PlacementSettings


@register(PLACEMENT_SETTINGS, "pre")
class PreLNSettings(PlacementSettings):
    """Pre-LN: no settings."""
