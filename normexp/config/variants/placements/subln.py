"""placement=subln: its settings, their rules and the numbers worked out from them
(the placement itself: model/placements/subln.py)."""

from __future__ import annotations

import math

from ...registry import register
from ..base import PLACEMENT_SETTINGS, PlacementSettings


def subln_gain(layers: int) -> float:
    """Sub-LN's init gain √(ln 2N) for a decoder-only stack of N blocks (Wang et al. 2022,
    "Foundation Transformers", §2.2; torchscale's `subln`: √(ln 3N) for encoder-decoder)."""
    return math.sqrt(math.log(2 * layers))


@register(PLACEMENT_SETTINGS, "subln")
class SubLNSettings(PlacementSettings):
    """Sub-LN: no settings; its init gain comes from the depth (subln_gain)."""

    def resolved(self, depth: int) -> dict:
        return {"gain": subln_gain(depth)}
