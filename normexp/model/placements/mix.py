"""Mix-LN: Post-LN in the first blocks, Pre-LN in the rest."""

from __future__ import annotations

from ...config.registry import register
from ...config.variants.placements.mix import MixLNSettings
from .base import PLACEMENTS, Placement


@register(PLACEMENTS, "mix")
class MixNorm(Placement):
    """Mix-LN (Li et al. 2024, "Mix-LN: Unleashing the Power of Deeper Layers by Combining
    Pre-LN and Post-LN"): Post-LN, x ← Norm(x + F(x)), in the first ⌊ρ·L⌋ blocks; Pre-LN,
    x ← x + F(Norm(x)), in the rest (ρ = ratio, 0.25 in the paper). The last block is
    Pre-LN for any ρ < 1, so the model has a final norm."""

    Settings = MixLNSettings

    def __init__(self, sublayer, make_norm, index: int, depth: int, **settings):
        super().__init__(depth, **settings)
        self.post = index < self.numbers["post_blocks"]
        self.needs_final_norm = not self.post
        self.sublayer = sublayer
        self.norm = make_norm()

    def forward(self, x, *context):
        if self.post:
            out = self.sublayer(x, *context)
            return self.norm(x + out), out
        out = self.sublayer(self.norm(x), *context)
        return x + out, out
