"""placement=depth_mup: its settings, their rules and the numbers worked out from them
(the placement itself: model/placements/depth_mup.py)."""

from __future__ import annotations

from ...checks import is_float32, is_integer, require
from ...registry import register
from ..base import PLACEMENT_SETTINGS, PlacementSettings


@register(PLACEMENT_SETTINGS, "depth_mup")
class DepthMuPSettings(PlacementSettings):
    """Depth-μP's exponent α in [0.5, 1] and base depth L₀; for a depth L, with m = L/L₀, the
    branch scale m^-α, the blocks' lr scale m^(α−1) and Adam-ε scale m^-α."""

    def __init__(self, *, exponent: float, base_depth: int):
        require(is_float32(exponent) and 0.5 <= exponent <= 1, "placement.exponent", exponent,
                "must be a number in [0.5, 1] (0.5 = Depth-μP, 1 = CompleteP)")
        require(is_integer(base_depth) and base_depth >= 1, "placement.base_depth", base_depth,
                "must be a whole number of blocks >= 1 (the depth the lr was tuned at)")
        self.exponent, self.base_depth = float(exponent), base_depth

    def resolved(self, depth: int) -> dict:
        ratio = depth / self.base_depth
        return {"exponent": self.exponent, "base_depth": self.base_depth, "branch_scale": ratio ** -self.exponent,
                "lr_scale": ratio ** (self.exponent - 1), "eps_scale": ratio ** -self.exponent}
