"""LayerNorm Scaling: Pre-LN with the norm's output scaled by 1/√(block's 1-based index)."""

from __future__ import annotations

import math

from ...config.registry import register
from ...config.variants.placements.lns import LayerNormScalingSettings
from .base import PLACEMENTS, Placement


@register(PLACEMENTS, "lns")
class LayerNormScaling(Placement):
    """LayerNorm Scaling (Sun et al. 2025, "The Curse of Depth in Large Language Models";
    lmsdss/LayerNorm-Scaling): Pre-LN with the norm's output scaled down by the square root
    of the block's depth, x ← x + F(Norm(x)/√ℓ), ℓ = index + 1 the 1-based block index, on
    both sublayers. It damps the growth of the Pre-LN stream's variance with depth that
    leaves the deeper blocks close to the identity. The model adds a final Norm as Pre-LN
    does. Its authors report that a depth-scaled init (gpt2's 1/√(2L), mitchell's) weakens
    it; the default xavier has none."""

    Settings = LayerNormScalingSettings

    def __init__(self, sublayer, make_norm, index: int, depth: int):
        super().__init__(depth)
        self.norm = make_norm()
        self.sublayer = sublayer
        self.scale = 1.0 / math.sqrt(index + 1)

    def forward(self, x, *context):
        out = self.sublayer(self.norm(x) * self.scale, *context)
        return x + out, out
