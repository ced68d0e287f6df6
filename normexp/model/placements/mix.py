"""Mix-LN: Post-LN in the first blocks, Pre-LN in the rest."""

from __future__ import annotations

import math

from ...config.checks import is_float32, require
from ...config.registry import register
from .base import PLACEMENTS, Placement


@register(PLACEMENTS, "mix")
class MixNorm(Placement):
    """Mix-LN (Li et al. 2024, "Mix-LN: Unleashing the Power of Deeper Layers by Combining
    Pre-LN and Post-LN"): Post-LN, x ← Norm(x + F(x)), in the first ⌊ρ·L⌋ blocks; Pre-LN,
    x ← x + F(Norm(x)), in the rest (ρ = ratio, 0.25 in the paper). The last block is
    Pre-LN for any ρ < 1, so the model has a final norm."""

    def __init__(self, sublayer, make_norm, index: int, depth: int, *, ratio: float):
        super().__init__()
        require(is_float32(ratio) and 0 <= ratio < 1,
               "placement.ratio", ratio, "must be a number in [0, 1)")
        # ⌊ρ·L⌋ of the decimal the user wrote: 0.58·50 is 28.999999999999996 in floating point, 29 blocks
        self.ratio, self.post_blocks = ratio, math.floor(round(ratio * depth, 9))
        self.post = index < self.post_blocks
        self.needs_final_norm = not self.post
        self.sublayer = sublayer
        self.norm = make_norm()

    def forward(self, x, *context):
        if self.post:
            out = self.sublayer(x, *context)
            return self.norm(x + out), out
        out = self.sublayer(self.norm(x), *context)
        return x + out, out

    def resolved(self) -> dict:
        return {"ratio": self.ratio, "post_blocks": self.post_blocks}
