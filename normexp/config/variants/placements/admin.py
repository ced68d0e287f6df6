"""placement=admin: its settings, their rules and the numbers worked out from them
(the placement itself: model/placements/admin.py)."""

from __future__ import annotations

from ...registry import register
from ..base import PLACEMENT_SETTINGS, PlacementSettings


@register(PLACEMENT_SETTINGS, "admin")
class AdminSettings(PlacementSettings):
    """Admin: no settings (its ω is calibrated from a profiling pass)."""
