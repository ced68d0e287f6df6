"""placement=mix: its settings, their rules and the numbers worked out from them
(the placement itself: model/placements/mix.py)."""

from __future__ import annotations

import math

from ...checks import is_float32, require
from ...registry import register
from ..base import PLACEMENT_SETTINGS, PlacementSettings


@register(PLACEMENT_SETTINGS, "mix")
class MixLNSettings(PlacementSettings):
    """Mix-LN's ratio ρ of Post-LN blocks, in [0, 1): the first ⌊ρ·L⌋ blocks are Post-LN."""

    def __init__(self, *, ratio: float):
        require(is_float32(ratio) and 0 <= ratio < 1, "placement.ratio", ratio, "must be a number in [0, 1)")
        self.ratio = ratio

    def resolved(self, depth: int) -> dict:
        # ⌊ρ·L⌋ of the decimal the user wrote: 0.58·50 is 28.999999999999996 in floating point, 29 blocks
        return {"ratio": self.ratio, "post_blocks": math.floor(round(self.ratio * depth, 9))}
