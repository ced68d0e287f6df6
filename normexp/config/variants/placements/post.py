"""placement=post: its settings, their rules and the numbers worked out from them
(the placement itself: model/placements/post.py)."""

from __future__ import annotations

from ...registry import register
from ..base import PLACEMENT_SETTINGS, PlacementSettings


@register(PLACEMENT_SETTINGS, "post")
class PostLNSettings(PlacementSettings):
    """Post-LN: no settings."""
